/*
 * ctxtable.c: the per-communicator table of contexts (collective, nBytes).
 * Everything is allocated at init for NCCLBOT_MAX_CONTEXTS contexts: an arena of context
 * blocks, each its header line then its arms' statistics (state.h), mapped so that pages no
 * context reaches cost no memory, and an open-addressing index (linear probing, load <= 1/2).
 * Neither a lookup nor a context's first sight allocates; a repeat of the last context found
 * skips the index.
 */
#include <string.h>
#include <sys/mman.h>

#include "nccl_abi.h"
#include "state.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* A context's block: its header line, its arms' statistics and ids, in whole lines. */
static size_t block_bytes(int narms) { return (64 + (size_t)narms * (sizeof(nb_arm_stat) + 1) + 63) / 64 * 64; }

static void *map_zeroed(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

int nb_tab_init(nb_ctx_table *t, nb_ctx_fill *f, uint32_t max_contexts) {
  memset(t, 0, sizeof *t);
  memset(f, 0, sizeof *f);
  uint64_t nslots = 2;
  while (nslots < 2ULL * max_contexts) nslots *= 2;
  f->cap = max_contexts;
  f->arena_bytes = (size_t)max_contexts * block_bytes(NCCLBOT_MAX_ARMS);
  t->arena = map_zeroed(f->arena_bytes);
  t->slots = map_zeroed(nslots * sizeof *t->slots);
  t->slot_mask = (uint32_t)(nslots - 1);
  t->memo_key = UINT64_MAX;
  if (!t->arena || !t->slots) {
    nb_tab_free(t, f);
    return -1;
  }
  return 0;
}

void nb_tab_free(nb_ctx_table *t, nb_ctx_fill *f) {
  if (t->arena) munmap(t->arena, f->arena_bytes);
  if (t->slots) munmap(t->slots, ((size_t)t->slot_mask + 1) * sizeof *t->slots);
  memset(t, 0, sizeof *t);
  memset(f, 0, sizeof *f);
}

int64_t nb_tab_find(nb_ctx_table *t, uint64_t key) {
  if (!t->slots) return -1;
  if (key == t->memo_key) return t->memo_ctx;
  for (uint64_t i = mix(key) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
    uint32_t s = t->slots[i];
    if (s == 0) return -1;
    if (nb_ctx_at(t, s - 1)->key == key) {
      t->memo_key = key;
      t->memo_ctx = s - 1;
      return s - 1;
    }
  }
}

int64_t nb_tab_add(nb_ctx_table *t, nb_ctx_fill *f, uint64_t key, int narms) {
  size_t bytes = block_bytes(narms);
  if (f->nctx >= f->cap || f->used + bytes > f->arena_bytes) return -1;
  uint32_t c = (uint32_t)(f->used / 64);
  f->used += bytes;
  f->nctx++;
  nb_ctx *x = nb_ctx_at(t, c); /* fresh arena: already zero */
  x->key = key;
  x->narms = (uint8_t)narms;
  uint64_t i = mix(key) & t->slot_mask;
  while (t->slots[i]) i = (i + 1) & t->slot_mask;
  t->slots[i] = c + 1;
  return c;
}

int64_t nb_tab_next(const nb_ctx_table *t, const nb_ctx_fill *f, int64_t ci) {
  size_t next = ci < 0 ? 0 : (size_t)ci * 64 + block_bytes(nb_ctx_at(t, (uint32_t)ci)->narms);
  return next < f->used ? (int64_t)(next / 64) : -1;
}
