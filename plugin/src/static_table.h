/*
 * static_table.h: NCCLBOT_POLICY=static. A CSV exported from a sweep maps a
 * context to an arm:
 *     collective,nodes,ranks,size_bytes,arm
 *     AllReduce,4,32,1048576,Ring/LL128
 * '#' starts a comment; nodes/ranks may be '*'; arm may be AUTO. A call uses the
 * row of its collective and shape with the largest size_bytes <= nBytes (exact
 * shape before '*', then file order). Loaded and pre-filtered for the
 * communicator's shape at init; lookups are a binary search.
 */
#ifndef NCCLBOT_STATIC_TABLE_H
#define NCCLBOT_STATIC_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct nb_static nb_static;

nb_static *nb_static_load(const char *path, int nranks, int nnodes, char *why, size_t whylen);
int nb_static_lookup(const nb_static *t, int coll, uint64_t nbytes); /* NB_NO_ARM = AUTO */
void nb_static_free(nb_static *t);

#endif
