/*
 * profiler.h: collective and kernel-channel events -> per-collective latency.
 *
 * latency = max over channels of (GPU stop - GPU start) from the kernel-channel
 * timers (reference section 4.6), joined to the collective through parentObj
 * and to the tuner's context through (collective, bytes, algorithm, protocol).
 * Records live in a fixed ring per communicator (allocated at init); handles
 * are record addresses (collective) or record address + 1 + channel (channel).
 */
#ifndef NCCLBOT_PROFILER_H
#define NCCLBOT_PROFILER_H

#include "nccl_abi.h"

ncclResult_t nb_prof_init(void **context, uint64_t commId, int *eActivationMask, int nNodes,
                          int nranks, int rank, ncclDebugLogger_t logfn);
ncclResult_t nb_prof_start(void *context, void **eHandle, void *eDescr, int version);
ncclResult_t nb_prof_stop(void *eHandle);
ncclResult_t nb_prof_record(void *eHandle, int eState, void *eStateArgs);
ncclResult_t nb_prof_finalize(void *context);

#endif
