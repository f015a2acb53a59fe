/*
 * sync.h: the rank side of the coordinator protocol (wire.h).
 *
 * nb_sync_open blocks on the init thread until START; from then on a sync thread of the
 * communicator owns the socket: it sends what the user thread hands it and publishes
 * every RESULT, verdict or lost connection as it arrives, so the user thread's
 * getCollInfo never touches the network. The user thread reads the last agreed state
 * from memory; it blocks (nb_sync_wait) only when the result its schedule needs has not
 * arrived yet. No allocation after nb_sync_open.
 */
#ifndef NCCLBOT_SYNC_H
#define NCCLBOT_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

enum { NB_WAIT_OK = 0, NB_WAIT_FREEZE = 1, NB_WAIT_FAIL = -1, NB_WAIT_TIMEOUT = -2 };

/*
 * nb_sync_open: connect (retrying while refused), HELLO with token, fingerprint and lag, wait
 * for START, start the sync thread. Thread safety: init thread. Returns: the client, or
 * NULL with why filled (REJECT reason, timeout, connection error). Allocates; nothing
 * after it does.
 */
nb_sync *nb_sync_open(const nb_config *cfg, uint64_t comm_id, int nranks, int rank,
                      int can_learn, uint64_t fingerprint, char *why, size_t whylen);
/*
 * nb_sync_refuse: tell the coordinator that this rank cannot learn and why (an invalid
 * setting), so that it refuses the communicator at once and every rank stays AUTO with the
 * reason instead of waiting for its init timeout. Init thread; waits at most timeout_ms to
 * connect. Returns 0 when the HELLO was sent.
 */
int nb_sync_refuse(const nb_config *cfg, uint64_t comm_id, int nranks, int rank, const char *why,
                   uint32_t timeout_ms);
/* nb_sync_submit: hand this rank's m latencies of round `round` to the sync thread.
 * User thread; copies lat. Waits only while NB_OUT_RING messages are unsent. */
void nb_sync_submit(nb_sync *s, int64_t round, uint64_t checksum, const float *lat);
/*
 * nb_sync_wait: until RESULT(round) is held. Returns NB_WAIT_OK, NB_WAIT_FREEZE (a verdict:
 * *freeze_f = L, *fail = 1 for FAIL), NB_WAIT_TIMEOUT or NB_WAIT_FAIL (lost connection or
 * protocol error); why filled unless OK. A result published before a verdict is always
 * seen first. User thread.
 */
int nb_sync_wait(nb_sync *s, int64_t round, uint32_t timeout_ms, int64_t *freeze_f, int *fail,
                 char *why, size_t whylen);
/* nb_sync_verdict: until the coordinator's FREEZE or FAIL. Returns NB_WAIT_FREEZE (with
 * *freeze_f, *fail) or NB_WAIT_FAIL/NB_WAIT_TIMEOUT (why). */
int nb_sync_verdict(nb_sync *s, uint32_t timeout_ms, int64_t *freeze_f, int *fail, char *why,
                    size_t whylen);
/* nb_sync_polled_verdict: a verdict already published (no wait): 1 with *freeze_f, *fail. */
int nb_sync_polled_verdict(nb_sync *s, int64_t *freeze_f, int *fail);
/* nb_sync_send: a header-only message (FREEZE, FAIL, BYE); errors are ignored. */
void nb_sync_send(nb_sync *s, uint32_t type, int64_t round);
/* nb_sync_close: stop the sync thread after it sent what it holds; close; free. */
void nb_sync_close(nb_sync *s);
/* nb_sync_result: the merged latencies of a held submission, or NULL. User thread. */
const float *nb_sync_result(const nb_sync *s, int64_t round);

#endif
