/*
 * names.h: NCCL's spellings of collectives, algorithms, protocols and datatypes, both ways
 * (names.c). Below everything that prints or parses them; includes nothing of ours.
 */
#ifndef NCCLBOT_NAMES_H
#define NCCLBOT_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* The last descriptor string a profiler field matched (names.c): its address and entry. */
typedef struct {
  const char *ptr;
  uint32_t idx;
} nb_name_memo;

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
