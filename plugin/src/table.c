/*
 * table.c: see table.h. Facts: docs/nccl-plugin-abi.md section 3.5 (NCCL <= 2.30:
 * topoGetAlgoInfo in src/enqueue.cc; NCCL >= 2.31: ncclTuningCompute and
 * ncclTuningSelectBestTuning in src/tuning/tuning.cc).
 */
#include "table.h"

#include <float.h>

#include "log.h"
#include "policy.h"

static int g_scan = NB_SCAN_FIRST;

int nb_scan_order(void) { return __atomic_load_n(&g_scan, __ATOMIC_RELAXED); }

/* Cell of arm id `arm` in a numAlgo x numProto table, or -1 when the table has none. */
static int cell_of(int arm, int numAlgo, int numProto) {
  int a = arm / NCCLBOT_NUM_PROTOS, p = arm % NCCLBOT_NUM_PROTOS;
  if (arm < 0 || a >= numAlgo || p >= numProto) return -1;
  return a * numProto + p;
}

void nb_force_arm(float *table, int numAlgo, int numProto, int arm) {
  int target = cell_of(arm, numAlgo, numProto);
  if (target < 0 || !nb_cost_available(table[target])) return;
  int ncell = numAlgo * numProto, zeros = 0;
  for (int i = 0; i < ncell; i++) zeros |= table[i] == 0.0f; /* rarely any: read before writing */
  if (zeros)
    for (int i = 0; i < ncell; i++) /* both directions: any other 0 could tie with ours */
      if (table[i] == 0.0f) table[i] = FLT_MIN; /* an available cell <= 0 is exactly 0 (or -0) */
  table[target] = 0.0f;
}

int nb_scan_pick(const float *table, int numAlgo, int numProto, int scan) {
  int ncell = numAlgo > 0 && numProto > 0 ? numAlgo * numProto : 0;
  int best = -1;
  float best_v = FLT_MAX;
  for (int k = 0; k < ncell; k++) {
    int i = scan == NB_SCAN_LAST ? ncell - 1 - k : k;
    float v = table[i];
    if (nb_cost_available(v) && v < best_v) {
      best_v = v;
      best = i;
    }
  }
  if (best < 0) return NB_NO_ARM;
  int a = best / numProto, p = best % numProto;
  if (a >= NCCLBOT_NUM_ALGOS || p >= NCCLBOT_NUM_PROTOS) return NB_NO_ARM;
  return a * NCCLBOT_NUM_PROTOS + p;
}

int nb_auto_arm(const float *table, int numAlgo, int numProto) {
  return nb_scan_pick(table, numAlgo, numProto, nb_scan_order());
}

int nb_table_unavailable(const float *table, int numAlgo, int numProto) {
  int ncell = numAlgo * numProto;
  for (int i = 0; i < ncell; i++)
    if (nb_cost_available(table[i])) return 0;
  return 1;
}

/* ncclGetVersion of the library that holds NCCL's logger (the logger NCCL passes to init is
 * its own ncclDebugLog, src/tuning/tuning.cc ncclTuningInit); 0 when it cannot be read (a
 * static NCCL, a test host). */
static int nccl_version_of(ncclDebugLogger_t logfn) {
  ncclResult_t (*get)(int *) = NULL;
  *(void **)&get = nb_logger_symbol(logfn, "ncclGetVersion");
  int version = 0;
  if (!get || get(&version) != ncclSuccess || version < 0) version = 0;
  return version;
}

int nb_scan_detect(int tuner_version, ncclDebugLogger_t logfn, int *nccl_version) {
  int v = nccl_version_of(logfn);
  int scan = v > 0 ? (v >= NB_NCCL_VERSION_LAST_SCAN ? NB_SCAN_LAST : NB_SCAN_FIRST)
                   : (tuner_version >= 7 ? NB_SCAN_LAST : NB_SCAN_FIRST);
  __atomic_store_n(&g_scan, scan, __ATOMIC_RELAXED);
  if (nccl_version) *nccl_version = v;
  return scan;
}
