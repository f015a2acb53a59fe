/*
 * trace.h: the per-rank CSV trace of docs/architecture.md section 8
 * (<NCCLBOT_TRACE_DIR>/ncclbot-<comm_id 16 hex>-r<rank>.csv, "# ncclbot-trace v2": v1's
 * columns, then reward_lag, samples and reason).
 *
 * Off the hot path: a row is a fixed-size binary record copied into a ring allocated
 * at open; a writer thread per traced communicator formats and writes the rows. No
 * row is ever dropped: a full ring makes the user thread wait for the writer (it
 * holds 32,768 rows and the writer is woken every 8,192, so this does not happen at
 * the rates NCCL calls). Everything reaches the file at close (finalize).
 * Thread safety: open, pull, sync and close on the communicator's user thread.
 */
#ifndef NCCLBOT_TRACE_H
#define NCCLBOT_TRACE_H

#include "state.h"

/* Opens the file and starts the writer; on failure one WARN and no trace (c->trace NULL). */
void nb_trace_open(nb_comm *c);
/* A pull row: e's local latency (when measured), the merged reward (<0: none), the round
 * it was merged in (<0: local mode). No allocation, no I/O. */
void nb_trace_pull(nb_comm *c, const nb_pull *e, const nb_ctx *x, double reward, int64_t round);
/* A sync row: one round's wall time in us. No allocation, no I/O. */
void nb_trace_sync(nb_comm *c, int64_t round, double sync_us);
/* The `samples` rows at finalize: pulls applied with a reward (reason "used") and without,
 * one row per reason that occurred. */
void nb_trace_samples(nb_comm *c);
/* Writes every row still queued, stops the writer and closes the file. Idempotent. */
void nb_trace_close(nb_comm *c);

#endif
