/*
 * profiler.c: see profiler.h.
 * Threads: collective start runs on the user thread; kernel-channel start,
 * state and stop on the proxy thread. The two meet through atomics on the
 * record (live, gen, stops, bad, maxdur, stopped); a finished record is pushed
 * into the communicator's lock-free queue for the tuner. No allocation or lock
 * after init.
 *
 * Attribution. A collective start runs on the user thread right after the
 * getCollInfo call that chose its arm, so it binds its record to that pull's log
 * index (the oldest unbound pending pull of the same context and arm among the
 * last NB_BIND_WINDOW); the sample carries the index back and the tuner accepts
 * it only for that pull, still pending. A record is reused NB_NREC collectives
 * later; every handle carries the record's generation in its top byte, so a
 * late event for an earlier use of the record is ignored. What cannot be
 * matched (no bound pull, a reused record, bad timers) is dropped and counted.
 * A record comes back for reuse when the tuner takes its sample (nb_prof_reclaim): free
 * records are reused last-freed first, so a GPU that keeps up touches a few warm ones;
 * with none free (more than NB_NREC outstanding) the oldest use is taken over and dropped.
 */
#include "profiler.h"

#include <pthread.h>
#include <string.h>

#include "names.h"
#include "log.h"
#include "state.h"

#define NB_BIND_WINDOW 256 /* pulls a collective start looks back over (a large group) */
#define NB_ADDR_MASK ((1ULL << NB_GEN_SHIFT) - 1)

ncclResult_t nb_prof_init(void **context, uint64_t commId, int *eActivationMask, int nNodes,
                          int nranks, int rank, ncclDebugLogger_t logfn) {
  if (!context) return ncclSuccess;
  *context = NULL;
  nb_comm *c = nb_comm_acquire(commId, 0, nranks, nNodes, logfn);
  if (!c) {
    NB_WARN("profiler: out of memory; no measurements for communicator %016llx",
            (unsigned long long)commId);
    return ncclSuccess;
  }
  nb_registry_lock();
  c->rank = rank;
  nb_registry_unlock();
  if (eActivationMask)
    __atomic_or_fetch(eActivationMask, NCCLBOT_PROF_COLL | NCCLBOT_PROF_KERNEL_CH,
                      __ATOMIC_RELAXED);
  *context = c;
  return ncclSuccess;
}

static nb_rec *rec_at(nb_comm *c, uint64_t i) {
  return (nb_rec *)(c->rec_base + (i % NB_NREC) * NB_REC_SIZE);
}

/* User thread: the most recently freed record, or (none free) the next in ring order. */
static nb_rec *take_record(nb_comm *c) {
  if (c->rec_nfree) return rec_at(c, c->rec_free[--c->rec_nfree]);
  return rec_at(c, c->rec_steal++);
}

void nb_prof_reclaim(nb_comm *c, const nb_meas *m) {
  nb_rec *r = rec_at(c, m->rec);
  if ((__atomic_load_n(&r->gen, __ATOMIC_RELAXED) & 255) == m->gen && c->rec_nfree < NB_NREC)
    c->rec_free[c->rec_nfree++] = m->rec; /* not taken over since: free again */
}

static void *handle_of(nb_rec *r, uint32_t gen, unsigned sub) {
  return (void *)(((uintptr_t)(gen & 255) << NB_GEN_SHIFT) | ((uintptr_t)r + sub));
}

/* The record a handle names if it is still the same use of it (generation), else NULL. */
static nb_rec *current(uintptr_t h) {
  nb_rec *r = (nb_rec *)(h & NB_ADDR_MASK & ~(uintptr_t)255);
  uint32_t gen = __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE);
  return (gen & 255) == h >> NB_GEN_SHIFT ? r : NULL;
}

/* User thread: the log index of the pull this collective measures, or -1 (untimed call). A
 * pull retired before its Coll start came (voided) still takes it, so that the start cannot
 * bind a later pull of the same context and arm; its sample is then discarded. */
static int64_t bind_pull(nb_comm *c, uint64_t key, int arm) {
  if (!c->log) return -1;
  uint64_t lo = c->head > NB_BIND_WINDOW ? c->head - NB_BIND_WINDOW : 0;
  if (c->claim < lo) c->claim = lo;
  for (uint64_t i = c->claim; i < c->head; i++) {
    nb_pull *e = &c->log[i & c->log_mask];
    if (!e->bind && (e->state == NB_PULL_PENDING || e->voided) && e->arm == arm &&
        nb_ctx_at(&c->tab, e->ctx)->key == key) {
      if (++c->n_bound == 0) c->n_bound = 1; /* 0 means unbound */
      e->bind = c->n_bound;
      c->claim = i + 1; /* pulls before it had no collective start: they stay unbound */
      return e->voided ? -1 : (int64_t)i;
    }
  }
  return -1;
}

static void start_coll(nb_comm *c, void **eHandle, const ncclbotProfDescr_v6 *d) {
  if (!c->log || c->claim >= c->head) return; /* no pull waits for its collective: below the gate */
  /* A Coll start comes on the thread that launched the collective, right after its
   * getCollInfo, except from a CUDA host callback: a graph replay (no getCollInfo, no pull)
   * or a launch queued behind one. Those are not bound, and the log stays this thread's. */
  if ((uintptr_t)pthread_self() != __atomic_load_n(&c->user_thread, __ATOMIC_RELAXED)) return;
  int coll = nb_prof_coll(d->coll.func, &c->prof_func);
  size_t ts = nb_prof_type_size(d->coll.datatype, &c->prof_type);
  int arm = nb_prof_arm(d->coll.algo, d->coll.proto, &c->prof_algo, &c->prof_proto);
  unsigned nch = d->coll.nChannels;
  if (coll < 0 || ts == 0 || arm == NB_NO_ARM || nch == 0 || nch > NB_MAX_CH) return;
  size_t bytes = d->coll.count * ts;
  if (coll == 2 || coll == 3) bytes *= (size_t)(c->nranks > 0 ? c->nranks : 1); /* full buffer */
  uint64_t key = NB_KEY(coll, bytes);
  int64_t pull = bind_pull(c, key, arm);
  if (pull < 0) return; /* not a timed pull: nothing to measure */
  nb_rec *r = take_record(c);
  uint32_t one = 1; /* (a plain load first: within NB_NREC the record is long finished) */
  if (__atomic_load_n(&r->live, __ATOMIC_ACQUIRE) &&
      __atomic_compare_exchange_n(&r->live, &one, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    __atomic_add_fetch(&c->n_prof_dropped, 1, __ATOMIC_RELAXED); /* channels never all reported */
  uint32_t gen = __atomic_load_n(&r->gen, __ATOMIC_RELAXED) + 1; /* only this thread writes it */
  __atomic_store_n(&r->gen, gen, __ATOMIC_RELEASE);
  r->key = key;
  r->arm = (uint8_t)arm;
  r->nch = (uint8_t)nch;
  r->pull = (uint64_t)pull;
  __atomic_store_n(&r->stops, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->bad, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->maxdur, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->stopped, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->live, 1, __ATOMIC_RELEASE);
  *eHandle = handle_of(r, gen, 0);
}

/* The parent must be a current use of one of this communicator's records (PXN parents
 * from other processes, and late events of an earlier use, are not). */
static nb_rec *own_record(nb_comm *c, const void *p) {
  uintptr_t base = (uintptr_t)c->rec_base, x = (uintptr_t)p & NB_ADDR_MASK;
  if (x < base || x >= base + (uintptr_t)NB_NREC * NB_REC_SIZE || (x - base) % NB_REC_SIZE)
    return NULL;
  return current((uintptr_t)p);
}

static void start_channel(nb_comm *c, void **eHandle, const ncclbotProfDescr_v6 *d) {
  nb_rec *r = own_record(c, d->parentObj);
  if (!r || !__atomic_load_n(&r->live, __ATOMIC_ACQUIRE)) return;
  unsigned ch = d->kernelCh.channelId;
  if (ch >= NB_MAX_CH) {
    __atomic_store_n(&r->bad, 1, __ATOMIC_RELAXED);
    return;
  }
  __atomic_store_n(&r->start[ch], d->kernelCh.pTimer, __ATOMIC_RELAXED);
  *eHandle = (char *)d->parentObj + 1 + ch;
}

ncclResult_t nb_prof_start(void *context, void **eHandle, void *eDescr, int version) {
  if (!eHandle) return ncclSuccess;
  *eHandle = NULL;
  nb_comm *c = context;
  if (!c || !eDescr) return ncclSuccess;
  uint64_t type = ncclbot_descr_type(eDescr, version);
  if (type == NCCLBOT_PROF_COLL)
    start_coll(c, eHandle, eDescr);
  else if (type == NCCLBOT_PROF_KERNEL_CH)
    start_channel(c, eHandle, eDescr);
  return ncclSuccess;
}

/* A channel handle's current record and channel, or NULL (collective handle, stale use). */
static nb_rec *channel_handle(void *h, unsigned *ch) {
  uintptr_t x = (uintptr_t)h;
  if (!x || (x & 255) == 0) return NULL; /* NULL or a collective handle */
  *ch = (unsigned)(x & 255) - 1;
  return *ch < NB_MAX_CH ? current(x) : NULL;
}

ncclResult_t nb_prof_record(void *eHandle, int eState, void *eStateArgs) {
  unsigned ch;
  if (eState != NCCLBOT_PROF_STATE_KERNEL_CH_STOP) return ncclSuccess;
  nb_rec *r = channel_handle(eHandle, &ch);
  if (!r) return ncclSuccess;
  uint64_t stop = eStateArgs ? ((ncclbotProfStateArgs_v4 *)eStateArgs)->kernelCh.pTimer : 0;
  uint64_t start = __atomic_load_n(&r->start[ch], __ATOMIC_RELAXED);
  __atomic_or_fetch(&r->stopped, 1ULL << ch, __ATOMIC_RELAXED);
  if (stop == 0 || start == 0 || stop < start) {
    __atomic_store_n(&r->bad, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
  }
  uint64_t d = stop - start, cur = __atomic_load_n(&r->maxdur, __ATOMIC_RELAXED);
  while (d > cur &&
         !__atomic_compare_exchange_n(&r->maxdur, &cur, d, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return ncclSuccess;
}

ncclResult_t nb_prof_stop(void *eHandle) {
  unsigned ch;
  nb_rec *r = channel_handle(eHandle, &ch);
  if (!r) return ncclSuccess; /* collective stop only means "enqueued" */
  if (!(__atomic_load_n(&r->stopped, __ATOMIC_RELAXED) >> ch & 1))
    __atomic_store_n(&r->bad, 1, __ATOMIC_RELAXED); /* stop event without its stop timer */
  uint32_t n = __atomic_add_fetch(&r->stops, 1, __ATOMIC_ACQ_REL);
  if (n != r->nch) return ncclSuccess;
  /* Read everything before releasing the record: the user thread may reuse it after. */
  uint64_t d = __atomic_load_n(&r->maxdur, __ATOMIC_RELAXED);
  int all = __builtin_popcountll(__atomic_load_n(&r->stopped, __ATOMIC_RELAXED)) == r->nch;
  int bad = __atomic_load_n(&r->bad, __ATOMIC_RELAXED) || d == 0 || !all; /* e.g. a duplicate stop */
  nb_comm *c = r->comm;
  nb_meas m = {.key = r->key, .pull = r->pull, .lat_us = bad ? -1.0f : (float)((double)d / 1000.0),
               .launched = (uint32_t)__atomic_load_n(&c->launched, __ATOMIC_RELAXED), .arm = r->arm,
               .gen = (uint8_t)(__atomic_load_n(&r->gen, __ATOMIC_RELAXED) & 255),
               .rec = (uint16_t)(((unsigned char *)r - c->rec_base) / NB_REC_SIZE)};
  uint32_t one = 1;
  if (!__atomic_compare_exchange_n(&r->live, &one, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return ncclSuccess; /* already recycled by the user thread */
  if (bad) __atomic_add_fetch(&c->n_prof_dropped, 1, __ATOMIC_RELAXED);
  if (nb_mq_push(&c->mq, &m) != 0) __atomic_add_fetch(&c->n_queue_full, 1, __ATOMIC_RELAXED);
  return ncclSuccess;
}

