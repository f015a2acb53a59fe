/*
 * ctxtable.c: the per-communicator hash table of contexts (collective, nBytes).
 * Everything is allocated at init for NCCLBOT_MAX_CONTEXTS contexts (calloc: pages
 * the table never reaches cost no memory), so neither a lookup nor a context's first
 * sight allocates. Open addressing with linear probing, load <= 1/2.
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_abi.h"
#include "state.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int nb_tab_init(nb_ctx_table *t, uint32_t max_contexts) {
  memset(t, 0, sizeof *t);
  uint64_t nslots = 2;
  while (nslots < 2ULL * max_contexts) nslots *= 2;
  t->cap = max_contexts;
  t->ctx = calloc(max_contexts, sizeof *t->ctx);
  t->slots = calloc(nslots, sizeof *t->slots);
  t->slot_mask = (uint32_t)(nslots - 1);
  t->arm_cap = max_contexts * (uint32_t)NCCLBOT_MAX_ARMS;
  t->arm_id = calloc(t->arm_cap, 1);
  t->stat = calloc(t->arm_cap, sizeof *t->stat);
  if (!t->ctx || !t->slots || !t->arm_id || !t->stat) {
    nb_tab_free(t);
    return -1;
  }
  return 0;
}

void nb_tab_free(nb_ctx_table *t) {
  free(t->ctx);
  free(t->slots);
  free(t->arm_id);
  free(t->stat);
  memset(t, 0, sizeof *t);
}

int64_t nb_tab_find(const nb_ctx_table *t, uint64_t key) {
  if (!t->slots) return -1;
  for (uint64_t i = mix(key) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
    uint32_t s = t->slots[i];
    if (s == 0) return -1;
    if (t->ctx[s - 1].key == key) return s - 1;
  }
}

/* Adds a context with room for narms arms; returns its index or -1 (table full). */
int64_t nb_tab_add(nb_ctx_table *t, uint64_t key, int narms) {
  if (t->nctx >= t->cap || t->narm + (uint32_t)narms > t->arm_cap) return -1;
  uint32_t c = t->nctx++;
  memset(&t->ctx[c], 0, sizeof t->ctx[c]);
  t->ctx[c].key = key;
  t->ctx[c].arm_off = t->narm;
  t->ctx[c].narms = (uint8_t)narms;
  t->narm += (uint32_t)narms;
  uint64_t i = mix(key) & t->slot_mask;
  while (t->slots[i]) i = (i + 1) & t->slot_mask;
  t->slots[i] = c + 1;
  return c;
}
