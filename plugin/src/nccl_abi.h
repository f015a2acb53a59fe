/*
 * nccl_abi.h: our own declarations of the NCCL tuner and profiler plugin ABI.
 *
 * Written from the facts in docs/nccl-plugin-abi.md (sections 2-4);
 * no NCCL header is copied. Only the members this plugin reads are named; the
 * rest of each union is padding so that sizes and offsets match NCCL 2.27-2.32.
 * The _Static_asserts at the bottom pin the layouts the reference gives.
 */
#ifndef NCCLBOT_NCCL_ABI_H
#define NCCLBOT_NCCL_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

#define NCCL_INIT 0x1UL
#define NCCL_TUNING 0x40UL
#define NCCL_ENV 0x80UL
#define NCCL_PROFILE 0x4000UL

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags,
                                  const char *file, int line, const char *fmt, ...);

/* ncclFunc_t values 0-4 are the collectives with cost tables. */
typedef int ncclFunc_t;
#define NCCLBOT_NUM_COLLS 5

#define NCCLBOT_NUM_ALGOS 7  /* Tree Ring CollNetDirect CollNetChain NVLS NVLSTree PAT */
#define NCCLBOT_NUM_PROTOS 3 /* LL LL128 Simple */
#define NCCLBOT_MAX_ARMS (NCCLBOT_NUM_ALGOS * NCCLBOT_NUM_PROTOS)

/* ---- tuner (v5/v6/v7; v3/v4 entry points are shims) ---- */

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclbotNvlDomainInfo_v5;

typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
} ncclbotTunerConstants_v5;

/* v7 (NCCL 2.32.6+): the same members, the five per-compute-capability arrays grow a fifth
 * row (Rubin); the NVLink domain info is v5's. */
typedef ncclbotNvlDomainInfo_v5 ncclbotNvlDomainInfo_v7;

typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[5][3];
  double perChMaxRingLL128Bws[5][3];
  double perChMaxTreeLL128Bws[5][3];
  double perChMaxTreeBws[5][3];
  double perChMaxNVLSTreeBws[5][3];
} ncclbotTunerConstants_v7;

typedef ncclResult_t (*ncclbotTunerInit_v7)(void **ctx, uint64_t commId, size_t nRanks,
                                            size_t nNodes, ncclDebugLogger_t logFunction,
                                            ncclbotNvlDomainInfo_v7 *nvlDomainInfo,
                                            ncclbotTunerConstants_v7 *constants);
typedef ncclResult_t (*ncclbotTunerInit_v5)(void **ctx, uint64_t commId, size_t nRanks,
                                            size_t nNodes, ncclDebugLogger_t logFunction,
                                            ncclbotNvlDomainInfo_v5 *nvlDomainInfo,
                                            ncclbotTunerConstants_v5 *constants);
typedef ncclResult_t (*ncclbotGetCollInfo_v4)(void *ctx, ncclFunc_t collType, size_t nBytes,
                                              int numPipeOps, float **collCostTable,
                                              int numAlgo, int numProto, int regBuff,
                                              int *nChannels);
typedef ncclResult_t (*ncclbotGetCollInfo_v3)(void *ctx, ncclFunc_t collType, size_t nBytes,
                                              int numPipeOps, float **collCostTable,
                                              int numAlgo, int numProto, int *nChannels);
typedef ncclResult_t (*ncclbotTunerFinalize)(void *ctx);
typedef ncclResult_t (*ncclbotGetChunkSize_v6)(void *ctx, ncclFunc_t collType, size_t nBytes,
                                               int algo, int proto, int nChannels,
                                               size_t *chunkSize);
typedef ncclResult_t (*ncclbotTunerInit_v2)(size_t nRanks, size_t nNodes,
                                            ncclDebugLogger_t logFunction, void **ctx);

typedef struct {
  const char *name;
  ncclbotTunerInit_v7 init;
  ncclbotGetCollInfo_v4 getCollInfo;
  ncclbotTunerFinalize finalize;
  ncclbotGetChunkSize_v6 getChunkSize;
} ncclbotTuner_v7;

typedef struct {
  const char *name;
  ncclbotTunerInit_v5 init;
  ncclbotGetCollInfo_v4 getCollInfo;
  ncclbotTunerFinalize finalize;
  ncclbotGetChunkSize_v6 getChunkSize;
} ncclbotTuner_v6;

typedef struct {
  const char *name;
  ncclbotTunerInit_v5 init;
  ncclbotGetCollInfo_v4 getCollInfo;
  ncclbotTunerFinalize finalize;
} ncclbotTuner_v5;

typedef struct {
  const char *name;
  ncclbotTunerInit_v2 init;
  ncclbotGetCollInfo_v4 getCollInfo;
  ncclbotTunerFinalize destroy;
} ncclbotTuner_v4;

typedef struct {
  const char *name;
  ncclbotTunerInit_v2 init;
  ncclbotGetCollInfo_v3 getCollInfo;
  ncclbotTunerFinalize destroy;
} ncclbotTuner_v3;

/* ---- profiler (v4, v5, v6) ---- */

#define NCCLBOT_PROF_COLL (1 << 1)
#define NCCLBOT_PROF_KERNEL_CH (1 << 6)
#define NCCLBOT_PROF_STATE_KERNEL_CH_STOP 22

/* Members of the descriptor union that we read (v4-v6 share these offsets). */
typedef struct {
  uint64_t seqNumber;  /* union + 0  (offset 24) */
  const char *func;    /* offset 32 */
  const void *sendBuff;
  void *recvBuff;
  size_t count;        /* offset 56 */
  int root;
  const char *datatype; /* offset 72 */
  uint8_t nChannels;    /* offset 80 */
  uint8_t nWarps;
  const char *algo;     /* offset 88 */
  const char *proto;    /* offset 96 */
} ncclbotCollDescr;

typedef struct {
  uint8_t channelId; /* offset 24 */
  uint64_t pTimer;   /* offset 32: GPU %globaltimer at channel start, ns */
} ncclbotKernelChDescr;

typedef struct {
  uint64_t type; /* uint8_t in v4: read it through ncclbot_descr_type() */
  void *parentObj;
  int rank;
  union {
    ncclbotCollDescr coll;
    ncclbotKernelChDescr kernelCh;
    unsigned char pad_[88];
  };
} ncclbotProfDescr_v6; /* also v5; v4 is a prefix of 104 bytes with an 8-bit type */

typedef union {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void *data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} ncclbotProfStateArgs_v4;

typedef ncclResult_t (*ncclbotProfInit_v5)(void **context, uint64_t commId, int *eActivationMask,
                                           const char *commName, int nNodes, int nranks,
                                           int rank, ncclDebugLogger_t logfn);
typedef ncclResult_t (*ncclbotProfInit_v4)(void **context, int *eActivationMask,
                                           const char *commName, uint64_t commHash, int nNodes,
                                           int nranks, int rank, ncclDebugLogger_t logfn);
typedef ncclResult_t (*ncclbotProfStart)(void *context, void **eHandle, void *eDescr);
typedef ncclResult_t (*ncclbotProfStop)(void *eHandle);
typedef ncclResult_t (*ncclbotProfRecord)(void *eHandle, int eState, void *eStateArgs);
typedef ncclResult_t (*ncclbotProfFinalize)(void *context);

typedef struct {
  const char *name;
  ncclbotProfInit_v5 init;
  ncclbotProfStart startEvent;
  ncclbotProfStop stopEvent;
  ncclbotProfRecord recordEventState;
  ncclbotProfFinalize finalize;
} ncclbotProfiler_v5;

typedef struct {
  const char *name;
  ncclbotProfInit_v4 init;
  ncclbotProfStart startEvent;
  ncclbotProfStop stopEvent;
  ncclbotProfRecord recordEventState;
  ncclbotProfFinalize finalize;
} ncclbotProfiler_v4;

_Static_assert(sizeof(ncclbotNvlDomainInfo_v5) == 12, "nvlDomainInfo is 12 bytes");
_Static_assert(sizeof(ncclbotTunerConstants_v5) == 1152, "tuner constants v5 are 144 doubles");
_Static_assert(sizeof(ncclbotTunerConstants_v7) == 159 * 8, "tuner constants v7 are 159 doubles");
_Static_assert(offsetof(ncclbotTunerConstants_v7, llMaxBws) == 84 * 8, "v7: latencies, then bandwidths");
_Static_assert(sizeof(ncclbotTuner_v7) == 40, "tuner v7 struct is name + 4 functions");
_Static_assert(sizeof(ncclbotTuner_v6) == 40, "tuner v6 struct is name + 4 functions");
_Static_assert(sizeof(ncclbotTuner_v5) == 32, "tuner v5 struct is name + 3 functions");
_Static_assert(sizeof(ncclbotProfiler_v5) == 48, "profiler struct is 6 pointers");
_Static_assert(offsetof(ncclbotProfDescr_v6, parentObj) == 8, "parentObj at 8");
_Static_assert(offsetof(ncclbotProfDescr_v6, rank) == 16, "rank at 16");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll) == 24, "union at 24");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.seqNumber) == 24, "seqNumber at 24");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.func) == 32, "func at 32");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.count) == 56, "count at 56");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.datatype) == 72, "datatype at 72");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.nChannels) == 80, "nChannels at 80");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.algo) == 88, "algo at 88");
_Static_assert(offsetof(ncclbotProfDescr_v6, coll.proto) == 96, "proto at 96");
_Static_assert(offsetof(ncclbotProfDescr_v6, kernelCh.pTimer) == 32, "kernelCh.pTimer at 32");
_Static_assert(sizeof(ncclbotProfDescr_v6) == 112, "v5/v6 descriptor is 112 bytes");
_Static_assert(sizeof(ncclbotProfStateArgs_v4) == 8, "state args are 8 bytes");

/* v4 descriptors carry an 8-bit type at offset 0; v5+ a 64-bit one. */
static inline uint64_t ncclbot_descr_type(const void *descr, int version) {
  if (version <= 4) return *(const uint8_t *)descr;
  return *(const uint64_t *)descr;
}

#endif
