/*
 * ctxtable.c: the per-communicator hash table of contexts (collective, nBytes).
 * Contexts are created on first sight (warm-up), so growth allocates; lookups of
 * a warm context never do. Open addressing with linear probing, load <= 1/2.
 */
#include <stdlib.h>
#include <string.h>

#include "state.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int nb_tab_init(nb_ctx_table *t) {
  memset(t, 0, sizeof *t);
  t->cap = 64;
  t->ctx = malloc(t->cap * sizeof *t->ctx);
  t->slots = calloc(128, sizeof *t->slots);
  t->slot_mask = 127;
  t->arm_cap = 512;
  t->arm_id = malloc(t->arm_cap);
  t->stat = malloc(t->arm_cap * sizeof *t->stat);
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

static int rehash(nb_ctx_table *t) {
  uint32_t nmask = t->slot_mask * 2 + 1;
  uint32_t *ns = calloc((size_t)nmask + 1, sizeof *ns);
  if (!ns) return -1;
  for (uint32_t c = 0; c < t->nctx; c++) {
    uint64_t i = mix(t->ctx[c].key) & nmask;
    while (ns[i]) i = (i + 1) & nmask;
    ns[i] = c + 1;
  }
  free(t->slots);
  t->slots = ns;
  t->slot_mask = nmask;
  return 0;
}

/* Adds a context with room for narms arms; returns its index or -1 (out of memory). */
int64_t nb_tab_add(nb_ctx_table *t, uint64_t key, int narms) {
  if (t->nctx == t->cap) {
    nb_ctx *n = realloc(t->ctx, (size_t)t->cap * 2 * sizeof *n);
    if (!n) return -1;
    t->ctx = n;
    t->cap *= 2;
  }
  while (t->narm + (uint32_t)narms > t->arm_cap) {
    uint8_t *ni = realloc(t->arm_id, (size_t)t->arm_cap * 2);
    if (!ni) return -1;
    t->arm_id = ni;
    nb_arm_stat *ns = realloc(t->stat, (size_t)t->arm_cap * 2 * sizeof *ns);
    if (!ns) return -1;
    t->stat = ns;
    t->arm_cap *= 2;
  }
  if ((uint64_t)(t->nctx + 1) * 2 > (uint64_t)t->slot_mask + 1 && rehash(t) != 0) return -1;
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
