/*
 * plugin.c: the exported surface. Only the versioned structs below are visible
 * (-fvisibility=hidden elsewhere); every entry point is thin and returns
 * ncclSuccess, except getCollInfo after a synchronisation failure in
 * NCCLBOT_SYNC_ON_FAILURE=fail mode (the documented way to fail a collective).
 */
#include "learn.h"
#include "log.h"
#include "nccl_abi.h"
#include "profiler.h"
#include "state.h"
#include "table.h"

#define NB_EXPORT __attribute__((visibility("default")))
#define NB_NAME "NCCL-BOT"

/* The last of a communicator's two users tears it down: the learner's part, then the
 * registry's (the files below know nothing of the ones above them). */
static void release(nb_comm *c, int tuner_side) {
  if (!nb_comm_release(c, tuner_side)) return;
  nb_learn_teardown(c);
  nb_comm_free(c);
}

/* ---- tuner ---- */

/* Which scan NCCL applies to the table we return (table.h), said once per communicator. */
static void detect_scan(const nb_comm *c, int tuner_version, ncclDebugLogger_t logfn) {
  int v = 0;
  int scan = nb_scan_detect(tuner_version, logfn, &v);
  if (c->rank > 0) return;
  const char *rule = scan == NB_SCAN_LAST ? "last minimum (ties go to the highest algorithm/protocol)"
                                          : "first minimum (ties go to the lowest algorithm/protocol)";
  if (v > 0)
    NB_INFO("NCCL %d.%d.%d, tuner v%d: NCCL takes the %s of the cost table", v / 10000,
            v / 100 % 100, v % 100, tuner_version, rule);
  else
    NB_INFO("NCCL version not readable (no ncclGetVersion beside its logger), tuner v%d: "
            "assuming NCCL takes the %s of the cost table", tuner_version, rule);
}

/* tuner_version: the struct NCCL loaded (v3 and v4 share one entry point and pass 4). */
static ncclResult_t tuner_init_common(void **ctx, uint64_t comm_id, size_t nRanks, size_t nNodes,
                                      ncclDebugLogger_t logfn, int tuner_version) {
  if (!ctx) return ncclSuccess;
  *ctx = NULL;
  nb_comm *c = nb_comm_acquire(comm_id, 1, (int)nRanks, (int)nNodes, logfn);
  if (!c) {
    NB_WARN("tuner: out of memory; staying AUTO");
    return ncclSuccess;
  }
  detect_scan(c, tuner_version, logfn);
  nb_learn_setup(c, tuner_version >= 5);
  if (c->mode == NB_MODE_INERT) {
    release(c, 1);
    return ncclSuccess;
  }
  *ctx = c;
  return ncclSuccess;
}

/* NCCL's cost model stays untouched (constants unread, unwritten): it is the prior (paper
 * section 4). v5, v6 and v7 differ only in the constants' size, so one body serves all. */
static ncclResult_t tuner_init_v7(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                  ncclDebugLogger_t logFunction,
                                  ncclbotNvlDomainInfo_v7 *nvlDomainInfo,
                                  ncclbotTunerConstants_v7 *constants) {
  (void)nvlDomainInfo;
  (void)constants;
  return tuner_init_common(ctx, commId, nRanks, nNodes, logFunction, 7);
}

static ncclResult_t tuner_init_v6(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                  ncclDebugLogger_t logFunction,
                                  ncclbotNvlDomainInfo_v5 *nvlDomainInfo,
                                  ncclbotTunerConstants_v5 *constants) {
  (void)nvlDomainInfo;
  (void)constants;
  return tuner_init_common(ctx, commId, nRanks, nNodes, logFunction, 6);
}

static ncclResult_t tuner_init_v5(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                  ncclDebugLogger_t logFunction,
                                  ncclbotNvlDomainInfo_v5 *nvlDomainInfo,
                                  ncclbotTunerConstants_v5 *constants) {
  (void)nvlDomainInfo;
  (void)constants;
  return tuner_init_common(ctx, commId, nRanks, nNodes, logFunction, 5);
}

/* v2-v4 init has no commId: a private id keeps communicators apart; learning needs v5+. */
static ncclResult_t tuner_init_v4(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                                  void **ctx) {
  static uint64_t next = 0;
  uint64_t id = 0x8000000000000000ULL | __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
  return tuner_init_common(ctx, id, nRanks, nNodes, logFunction, 4);
}

static ncclResult_t get_coll_info_v4(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                     float **collCostTable, int numAlgo, int numProto, int regBuff,
                                     int *nChannels) {
  (void)regBuff;
  (void)nChannels; /* left at 0: NCCL keeps its channel count */
  if (!ctx) return ncclSuccess;
  /* NCCL 2.31+'s symmetric-kernel scheduler asks with numPipeOps 0: its symmetric pass (all
   * -1.0) and the general pass nested in its fallback, which decides whether the symmetric
   * kernel runs; the collective's own call follows (docs/nccl-plugin-abi.md 3.10). NCCL
   * decides those: one pull per collective, and the plugin never picks the kernel kind. */
  if (numPipeOps == 0) {
    ((nb_comm *)ctx)->n_calls++;
    return ncclSuccess;
  }
  /* collCostTable is a contiguous float[numAlgo][numProto] passed as float** (reference 3.4). */
  return nb_learn_decide(ctx, collType, nBytes, (float *)(void *)collCostTable, numAlgo, numProto);
}

static ncclResult_t get_coll_info_v3(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                     float **collCostTable, int numAlgo, int numProto,
                                     int *nChannels) {
  return get_coll_info_v4(ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, 0,
                          nChannels);
}

static ncclResult_t tuner_finalize(void *ctx) {
  nb_comm *c = ctx;
  if (!c) return ncclSuccess;
  nb_learn_finalize(c);
  release(c, 1);
  return ncclSuccess;
}

NB_EXPORT const ncclbotTuner_v7 ncclTunerPlugin_v7 = {
    .name = NB_NAME,
    .init = tuner_init_v7,
    .getCollInfo = get_coll_info_v4,
    .finalize = tuner_finalize,
    .getChunkSize = NULL, /* optional: NCCL keeps its chunk size */
};

NB_EXPORT const ncclbotTuner_v6 ncclTunerPlugin_v6 = {
    .name = NB_NAME,
    .init = tuner_init_v6,
    .getCollInfo = get_coll_info_v4,
    .finalize = tuner_finalize,
    .getChunkSize = NULL, /* optional: NCCL keeps its chunk size */
};

NB_EXPORT const ncclbotTuner_v5 ncclTunerPlugin_v5 = {
    .name = NB_NAME,
    .init = tuner_init_v5,
    .getCollInfo = get_coll_info_v4,
    .finalize = tuner_finalize,
};

NB_EXPORT const ncclbotTuner_v4 ncclTunerPlugin_v4 = {
    .name = NB_NAME,
    .init = tuner_init_v4,
    .getCollInfo = get_coll_info_v4,
    .destroy = tuner_finalize,
};

NB_EXPORT const ncclbotTuner_v3 ncclTunerPlugin_v3 = {
    .name = NB_NAME,
    .init = tuner_init_v4,
    .getCollInfo = get_coll_info_v3,
    .destroy = tuner_finalize,
};

/* ---- profiler ---- */

static ncclResult_t prof_init_v5(void **context, uint64_t commId, int *eActivationMask,
                                 const char *commName, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn) {
  (void)commName;
  return nb_prof_init(context, commId, eActivationMask, nNodes, nranks, rank, logfn);
}

static ncclResult_t prof_init_v4(void **context, int *eActivationMask, const char *commName,
                                 uint64_t commHash, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn) {
  (void)commName;
  return nb_prof_init(context, commHash, eActivationMask, nNodes, nranks, rank, logfn);
}

static ncclResult_t prof_finalize(void *context) {
  if (context) release(context, 0);
  return ncclSuccess;
}

static ncclResult_t prof_start_v5(void *context, void **eHandle, void *eDescr) {
  return nb_prof_start(context, eHandle, eDescr, 5);
}

static ncclResult_t prof_start_v4(void *context, void **eHandle, void *eDescr) {
  return nb_prof_start(context, eHandle, eDescr, 4);
}

NB_EXPORT const ncclbotProfiler_v5 ncclProfiler_v6 = {
    .name = NB_NAME,
    .init = prof_init_v5,
    .startEvent = prof_start_v5,
    .stopEvent = nb_prof_stop,
    .recordEventState = nb_prof_record,
    .finalize = prof_finalize,
};

NB_EXPORT const ncclbotProfiler_v5 ncclProfiler_v5 = {
    .name = NB_NAME,
    .init = prof_init_v5,
    .startEvent = prof_start_v5,
    .stopEvent = nb_prof_stop,
    .recordEventState = nb_prof_record,
    .finalize = prof_finalize,
};

NB_EXPORT const ncclbotProfiler_v4 ncclProfiler_v4 = {
    .name = NB_NAME,
    .init = prof_init_v4,
    .startEvent = prof_start_v4,
    .stopEvent = nb_prof_stop,
    .recordEventState = nb_prof_record,
    .finalize = prof_finalize,
};
