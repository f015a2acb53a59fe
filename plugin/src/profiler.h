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
#include "state.h"

/*
 * nb_prof_init: registers the communicator (rank, shape) and asks for Coll|KernelCh events.
 *   Thread safety: init thread; takes the registry lock.  Returns: always ncclSuccess
 *   (a NULL *context means no measurements).
 */
ncclResult_t nb_prof_init(void **context, uint64_t commId, int *eActivationMask, int nNodes,
                          int nranks, int rank, ncclDebugLogger_t logfn);
/*
 * nb_prof_start: Coll (user thread) takes the next record of the ring; KernelCh (proxy
 * thread) stores its start timer under a parent that must be one of our records.
 *   Out: *eHandle = record, record + 1 + channel, or NULL (event not tracked).
 *   version: 4 reads an 8-bit descriptor type, 5+ a 64-bit one.  Returns: ncclSuccess.
 */
ncclResult_t nb_prof_start(void *context, void **eHandle, void *eDescr, int version);
/* nb_prof_stop: a channel's stop; the last one pushes the sample. Lock-free; ncclSuccess. */
ncclResult_t nb_prof_stop(void *eHandle);
/* nb_prof_record: KernelChStop carries the GPU stop timer. Lock-free; ncclSuccess. */
ncclResult_t nb_prof_record(void *eHandle, int eState, void *eStateArgs);
/* nb_prof_reclaim: the tuner took m's sample (user thread): its record may be reused. */
void nb_prof_reclaim(nb_comm *c, const nb_meas *m);

#endif
