/*
 * persist.h: durable per-context statistics. At finalize, rank 0 writes
 * <NCCLBOT_STATE_DIR>/ncclbot-state-n<nnodes>-r<nranks>.csv (atomically, through a
 * temporary file); the next run with the same communicator shape loads it as
 * its warm start. Every rank must read the same file (a shared folder): the
 * file's hash goes into the fingerprint the coordinator checks.
 */
#ifndef NCCLBOT_PERSIST_H
#define NCCLBOT_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_abi.h"
#include "policy.h"
#include "state.h"

typedef struct {
  uint64_t key;
  double mu_min;
  int narms;
  uint8_t arm[NCCLBOT_MAX_ARMS];
  nb_arm_stat stat[NCCLBOT_MAX_ARMS];
} nb_saved_ctx;

nb_saved *nb_saved_load(const nb_config *cfg, int nranks, int nnodes, uint64_t *hash, char *why,
                        size_t whylen);
const nb_saved_ctx *nb_saved_find(const nb_saved *s, uint64_t key);
void nb_saved_free(nb_saved *s);
int nb_state_save(const nb_comm *c, char *why, size_t whylen);

#endif
