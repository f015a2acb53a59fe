/*
 * sync.h: the rank side of the coordinator protocol (wire.h). Blocking calls
 * with explicit timeouts; used on the user thread at init and at round
 * boundaries only. No allocation after nb_sync_open.
 */
#ifndef NCCLBOT_SYNC_H
#define NCCLBOT_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

enum { NB_WAIT_OK = 0, NB_WAIT_FREEZE = 1, NB_WAIT_FAIL = -1 };

/* Connect, say HELLO and wait for START. Returns NULL with a reason in why. */
nb_sync *nb_sync_open(const nb_config *cfg, uint64_t comm_id, int nranks, int rank,
                      int can_learn, uint64_t fingerprint, char *why, size_t whylen);
int nb_sync_submit(nb_sync *s, int64_t round, uint64_t checksum, const float *lat);
/* Wait for RESULT(round); on FREEZE stores f. */
int nb_sync_wait(nb_sync *s, int64_t round, uint32_t timeout_ms, int64_t *freeze_f, char *why,
                 size_t whylen);
void nb_sync_send(nb_sync *s, uint32_t type, int64_t round);
void nb_sync_close(nb_sync *s);
const float *nb_sync_result(const nb_sync *s, int64_t round);

#endif
