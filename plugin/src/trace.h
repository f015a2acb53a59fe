/*
 * trace.h: the per-rank CSV trace of ARCHITECTURE section 8
 * (<NCCLBOT_TRACE_DIR>/ncclbot-<comm_id 16 hex>-r<rank>.csv, "# ncclbot-trace v1").
 * Rows are written at round boundaries into a large stdio buffer, so file I/O
 * happens at sync rounds or finalize, never per collective.
 */
#ifndef NCCLBOT_TRACE_H
#define NCCLBOT_TRACE_H

#include "state.h"

void nb_trace_open(nb_comm *c);
void nb_trace_pull(nb_comm *c, const nb_pull *e, const nb_ctx *x, double reward, int64_t round);
void nb_trace_sync(nb_comm *c, int64_t round, double sync_us);
void nb_trace_close(nb_comm *c);

#endif
