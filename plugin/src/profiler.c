/*
 * profiler.c: see profiler.h.
 * Threads: collective start runs on the user thread; kernel-channel start,
 * state and stop on the proxy thread. The two meet through atomics on the
 * record (live, stops, bad, maxdur, stopped); a finished record is pushed into
 * the communicator's lock-free queue for the tuner. No allocation or lock after
 * init. Samples that cannot be trusted (zero, missing or backwards timers, a
 * record reused before all its channels reported) are dropped and counted.
 */
#include "profiler.h"

#include <string.h>

#include "log.h"
#include "state.h"

ncclResult_t nb_prof_init(void **context, uint64_t commId, int *eActivationMask, int nNodes,
                          int nranks, int rank, ncclDebugLogger_t logfn) {
  if (!context) return ncclSuccess;
  *context = NULL;
  nb_log_set(logfn);
  nb_comm *c = nb_comm_acquire(commId, 0);
  if (!c) {
    NB_WARN("profiler: out of memory; no measurements for communicator %016llx",
            (unsigned long long)commId);
    return ncclSuccess;
  }
  nb_registry_lock();
  c->rank = rank;
  c->nranks = nranks;
  c->nnodes = nNodes;
  nb_registry_unlock();
  if (eActivationMask)
    __atomic_or_fetch(eActivationMask, NCCLBOT_PROF_COLL | NCCLBOT_PROF_KERNEL_CH,
                      __ATOMIC_RELAXED);
  *context = c;
  return ncclSuccess;
}

/* ncclFunc name -> collective index (profiler names are ncclFuncToString spellings). */
static int coll_index(const char *f) {
  if (!f) return -1;
  switch (f[0]) {
    case 'B': return strcmp(f, "Broadcast") == 0 ? 0 : -1;
    case 'R':
      if (strcmp(f, "Reduce") == 0) return 1;
      return strcmp(f, "ReduceScatter") == 0 ? 3 : -1;
    case 'A':
      if (strcmp(f, "AllReduce") == 0) return 4;
      return strcmp(f, "AllGather") == 0 ? 2 : -1;
    default: return -1;
  }
}

/* "ncclFloat32" -> 4 and the like; 0 when unknown. */
static size_t type_size(const char *t) {
  if (!t || strncmp(t, "ncclFloat8", 10) == 0) return t ? 1 : 0;
  size_t n = strlen(t);
  if (n >= 2 && strcmp(t + n - 2, "64") == 0) return 8;
  if (n >= 2 && strcmp(t + n - 2, "32") == 0) return 4;
  if (n >= 2 && strcmp(t + n - 2, "16") == 0) return 2;
  if (n >= 1 && t[n - 1] == '8') return 1;
  if (strcmp(t, "ncclChar") == 0) return 1;
  if (strcmp(t, "ncclInt") == 0 || strcmp(t, "ncclFloat") == 0) return 4;
  if (strcmp(t, "ncclHalf") == 0) return 2;
  if (strcmp(t, "ncclDouble") == 0) return 8;
  return 0;
}

/* ncclAlgoToString / ncclProtoToString spellings -> arm id, 255 unknown. */
static int arm_index(const char *algo, const char *proto) {
  static const char *const algos[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN",
                                      "NVLS", "NVLS_TREE", "PAT"};
  static const char *const protos[] = {"LL", "LL128", "SIMPLE"};
  if (!algo || !proto) return 255;
  int a = -1, p = -1;
  for (int i = 0; i < 7 && a < 0; i++)
    if (strcmp(algo, algos[i]) == 0) a = i;
  for (int i = 0; i < 3 && p < 0; i++)
    if (strcmp(proto, protos[i]) == 0) p = i;
  return a < 0 || p < 0 ? 255 : a * 3 + p;
}

static nb_rec *rec_at(nb_comm *c, uint64_t i) {
  return (nb_rec *)(c->rec_base + (i % NB_NREC) * NB_REC_SIZE);
}

static void push(nb_comm *c, nb_rec *r, float lat_us) {
  nb_meas m = {r->key, lat_us, r->arm};
  if (lat_us < 0) __atomic_add_fetch(&c->n_prof_dropped, 1, __ATOMIC_RELAXED);
  if (nb_mq_push(&c->mq, &m) != 0) __atomic_add_fetch(&c->n_queue_full, 1, __ATOMIC_RELAXED);
}

static void start_coll(nb_comm *c, void **eHandle, const ncclbotProfDescr_v6 *d) {
  int coll = coll_index(d->coll.func);
  size_t ts = type_size(d->coll.datatype);
  int arm = arm_index(d->coll.algo, d->coll.proto);
  unsigned nch = d->coll.nChannels;
  if (coll < 0 || ts == 0 || arm == 255 || nch == 0 || nch > NB_MAX_CH) return;
  size_t bytes = d->coll.count * ts;
  if (coll == 2 || coll == 3) bytes *= (size_t)(c->nranks > 0 ? c->nranks : 1); /* full buffer */
  nb_rec *r = rec_at(c, c->rec_head++);
  uint32_t one = 1;
  if (__atomic_compare_exchange_n(&r->live, &one, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    __atomic_add_fetch(&c->n_prof_dropped, 1, __ATOMIC_RELAXED); /* channels never all reported */
  r->key = NB_KEY(coll, bytes);
  r->arm = (uint8_t)arm;
  r->nch = (uint8_t)nch;
  __atomic_store_n(&r->stops, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->bad, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->maxdur, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->stopped, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&r->live, 1, __ATOMIC_RELEASE);
  *eHandle = r;
}

/* The parent must be one of this communicator's records (PXN parents from other processes are not). */
static nb_rec *own_record(nb_comm *c, const void *p) {
  uintptr_t base = (uintptr_t)c->rec_base, x = (uintptr_t)p;
  if (x < base || x >= base + (uintptr_t)NB_NREC * NB_REC_SIZE || (x - base) % NB_REC_SIZE)
    return NULL;
  return (nb_rec *)p;
}

static void start_channel(nb_comm *c, void **eHandle, const ncclbotProfDescr_v6 *d) {
  nb_rec *r = own_record(c, d->parentObj);
  if (!r || !__atomic_load_n(&r->live, __ATOMIC_ACQUIRE)) return;
  unsigned ch = d->kernelCh.channelId;
  if (ch >= NB_MAX_CH) {
    __atomic_store_n(&r->bad, 1, __ATOMIC_RELAXED);
    return;
  }
  r->start[ch] = d->kernelCh.pTimer;
  *eHandle = (char *)r + 1 + ch;
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

static nb_rec *channel_handle(void *h, unsigned *ch) {
  uintptr_t x = (uintptr_t)h;
  if (!x || (x & 255) == 0) return NULL; /* NULL or a collective handle */
  *ch = (unsigned)(x & 255) - 1;
  return (nb_rec *)(x & ~(uintptr_t)255);
}

ncclResult_t nb_prof_record(void *eHandle, int eState, void *eStateArgs) {
  unsigned ch;
  nb_rec *r = channel_handle(eHandle, &ch);
  if (!r || eState != NCCLBOT_PROF_STATE_KERNEL_CH_STOP || ch >= NB_MAX_CH) return ncclSuccess;
  uint64_t stop = eStateArgs ? ((ncclbotProfStateArgs_v4 *)eStateArgs)->kernelCh.pTimer : 0;
  uint64_t start = r->start[ch];
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
  if (!r || ch >= NB_MAX_CH) return ncclSuccess; /* collective stop only means "enqueued" */
  if (!(__atomic_load_n(&r->stopped, __ATOMIC_RELAXED) >> ch & 1))
    __atomic_store_n(&r->bad, 1, __ATOMIC_RELAXED); /* stop event without its stop timer */
  uint32_t n = __atomic_add_fetch(&r->stops, 1, __ATOMIC_ACQ_REL);
  if (n != r->nch) return ncclSuccess;
  uint32_t one = 1;
  if (!__atomic_compare_exchange_n(&r->live, &one, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return ncclSuccess; /* already recycled by the user thread */
  uint64_t d = __atomic_load_n(&r->maxdur, __ATOMIC_RELAXED);
  int all = __builtin_popcountll(__atomic_load_n(&r->stopped, __ATOMIC_RELAXED)) == r->nch;
  int bad = __atomic_load_n(&r->bad, __ATOMIC_RELAXED) || d == 0 || !all; /* e.g. a duplicate stop */
  push(r->comm, r, bad ? -1.0f : (float)((double)d / 1000.0));
  return ncclSuccess;
}

ncclResult_t nb_prof_finalize(void *context) {
  nb_comm *c = context;
  if (c) nb_comm_release(c, 0);
  return ncclSuccess;
}
