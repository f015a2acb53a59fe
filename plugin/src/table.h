/*
 * table.h: NCCL's cost table after the tuner returns: which arm NCCL takes from it, how we
 * force ours into it, and which version of that rule the running NCCL applies.
 *
 * Two scan orders exist (docs/nccl-plugin-abi.md section 3.5):
 *   NB_SCAN_FIRST  NCCL <= 2.30: algorithms 0..6, protocols 0..2, -1.0 and negatives skipped,
 *                  strict minimum: a tie goes to the lowest (algo, proto);
 *   NB_SCAN_LAST   NCCL >= 2.31 (src/tuning/tuning.cc): the candidates are the arms NCCL's
 *                  model found valid (a -1.0 cell is none of them), walked from the highest
 *                  (algo, proto) down, strict minimum with no sign check: a tie goes to the
 *                  highest index, and a negative value written over a valid cell would win.
 * nb_force_arm is right under both; nb_auto_arm (policy.h) applies the running one.
 *
 * Which order runs is a fact of the process (NCCL loads one tuner per process), set at each
 * tuner init from NCCL's version (ncclGetVersion of the library that handed us its logger)
 * or, when that cannot be read, from the tuner version NCCL loaded us through (v7 exists
 * from NCCL 2.32.6 on; v6 also serves 2.30-2.32.5, and then we assume 2.30's order).
 *
 * Thread safety: the order is one process-wide int (atomic); the table functions are pure.
 * Nothing here allocates; nb_scan_detect (init only) may take the dynamic loader's lock.
 */
#ifndef NCCLBOT_TABLE_H
#define NCCLBOT_TABLE_H

#include "nccl_abi.h"

enum { NB_SCAN_FIRST = 0, NB_SCAN_LAST = 1 };

/* NCCL 2.31.0 as ncclGetVersion codes it (major * 10000 + minor * 100 + patch). */
#define NB_NCCL_VERSION_LAST_SCAN 23100

/*
 * nb_force_arm: make NCCL take `arm` (id algo * 3 + proto) under either scan order.
 *   In/out: if the arm's cell exists and is available (policy.h), it becomes 0.0 and every
 *     other available cell equal to 0 becomes FLT_MIN, so 0.0 is the unique minimum; nothing
 *     else changes. No cell is ever made negative, and an unavailable cell is never written.
 */
void nb_force_arm(float *table, int numAlgo, int numProto, int arm);

/* NCCL's pick on a table under a given order: an arm id, or NB_NO_ARM when nothing is
 * available or the pick lies outside our 7 x 3 arms (a later NCCL's new algorithm). */
int nb_scan_pick(const float *table, int numAlgo, int numProto, int scan);

/* 1 when no cell is available: NCCL 2.31+'s symmetric-kernel pass hands such tables (all
 * -1.0) to getCollInfo; they say nothing about the collective and must change nothing. */
int nb_table_unavailable(const float *table, int numAlgo, int numProto);

/*
 * nb_scan_detect: at tuner init, find which order the running NCCL applies and make it the
 * process's (nb_scan_order). tuner_version is the struct NCCL loaded (3-7); logfn NCCL's
 * logger. *nccl_version gets ncclGetVersion's code, or 0 when it cannot be read.
 *   Thread safety: any init thread; the value is the same for every communicator.
 */
int nb_scan_detect(int tuner_version, ncclDebugLogger_t logfn, int *nccl_version);

/* The process's scan order (NB_SCAN_FIRST until a tuner init detected one). */
int nb_scan_order(void);

#endif
