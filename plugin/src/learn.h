/*
 * learn.h: the tuner side of one communicator: mode choice at init, the
 * getCollInfo decision, reward matching, rounds and finalize.
 * Thread safety: user (enqueue) thread only, except where noted.
 */
#ifndef NCCLBOT_LEARN_H
#define NCCLBOT_LEARN_H

#include "nccl_abi.h"
#include "state.h"

/* Tuner init for one communicator; always leaves c usable (mode INERT on any problem). */
void nb_learn_setup(nb_comm *c, size_t nranks, size_t nnodes, int have_comm_id);

/* getCollInfo body; returns ncclSuccess except after a synchronisation failure in fail mode. */
ncclResult_t nb_learn_decide(nb_comm *c, int coll, size_t nBytes, float *table, int numAlgo,
                             int numProto);

/* Tuner finalize: save state, flush the trace, leave the coordinator. */
void nb_learn_finalize(nb_comm *c);

/* Free everything the tuner side allocated (called by the last registry release). */
void nb_learn_teardown(nb_comm *c);

/* Names used in traces, state files and static tables. */
const char *nb_coll_name(int coll);
int nb_coll_from_name(const char *s);
void nb_arm_name(int arm, char *out, size_t cap);
int nb_arm_from_name(const char *s); /* "Ring/LL128" (case-insensitive); -1 unknown */

#endif
