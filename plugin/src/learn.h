/*
 * learn.h: the tuner side of one communicator: mode choice at init, the
 * getCollInfo decision, reward matching, rounds and finalize.
 * Thread safety: user (enqueue) thread only, except where noted.
 */
#ifndef NCCLBOT_LEARN_H
#define NCCLBOT_LEARN_H

#include "nccl_abi.h"
#include "state.h"

/*
 * nb_learn_setup: tuner init of one communicator (reads NCCLBOT_*, loads tables and
 * state, connects to the coordinator, opens the trace).
 *   Thread safety: the communicator's init thread; blocks up to NCCLBOT_SYNC_TIMEOUT_MS
 *     while the coordinator gathers every rank.
 *   In/out: c->mode is set; INERT (with one WARN) on any problem.
 *   Preconditions: c acquired for the tuner side; the profiler init (if any) already ran.
 */
void nb_learn_setup(nb_comm *c, int have_comm_id);

/*
 * nb_learn_decide: the body of getCollInfo.
 *   Thread safety: the communicator's user (enqueue) thread only.
 *   In/out: table is NCCL's float[numAlgo][numProto]; at most the chosen cell becomes 0.0
 *     and other zero cells FLT_MIN (table.h: right under either scan order); unavailable
 *     cells are never written; a table with no available cell changes nothing.
 *   Returns: ncclSuccess, or ncclSystemError after a synchronisation failure in fail mode.
 *   Preconditions: nb_learn_setup ran; no allocation once the context exists.
 */
ncclResult_t nb_learn_decide(nb_comm *c, int coll, size_t nBytes, float *table, int numAlgo,
                             int numProto);

/*
 * nb_learn_finalize: tuner finalize: save state (rank 0), flush and close the trace,
 * say BYE to the coordinator, log the counters.
 *   Thread safety: the communicator's thread; the profiler may still deliver samples.
 */
void nb_learn_finalize(nb_comm *c);

/* nb_learn_teardown: free what the tuner side allocated (last registry release only). */
void nb_learn_teardown(nb_comm *c);

/* Names used in traces, state files and static tables. */
const char *nb_coll_name(int coll);
int nb_coll_from_name(const char *s);
void nb_arm_name(int arm, char *out, size_t cap);
int nb_arm_from_name(const char *s); /* "Ring/LL128" (case-insensitive); -1 unknown */

/* Profiler descriptor spellings ("AllReduce", "ncclFloat32", "RING", "LL128"): collective
 * index or -1, datatype size or 0, arm id or NB_NO_ARM. No allocation. `memo` (one per
 * communicator, used by its user thread only) remembers the last string each field
 * matched: NCCL passes the same literals call after call, so a repeat costs one strncmp
 * against the remembered name instead of a walk through the table. */
int nb_prof_coll(const char *func, nb_name_memo *memo);
size_t nb_prof_type_size(const char *datatype, nb_name_memo *memo);
int nb_prof_arm(const char *algo, const char *proto, nb_name_memo *algo_memo,
                nb_name_memo *proto_memo);

#endif
