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

#endif
