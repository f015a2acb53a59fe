/*
 * state.h: per-communicator state shared by the tuner and the profiler.
 *
 * One nb_comm per commId (= NCCL's comm->commHash, given to both inits), kept in
 * a process-wide registry with a reference per plugin side. Ownership:
 *   - comm_id, nranks, nnodes: set once by the first init (either side) under the
 *     registry lock (comm.c), constant afterwards; rank: the profiler init, same lock;
 *   - tuner fields (contexts, pull log, sync): user thread only;
 *   - profiler records: coll start on the user thread (which binds the record to its
 *     pull in the log), kernel-channel events on the proxy thread, joined through
 *     atomics; a record's fields are read by the proxy before it releases `live`;
 *   - mq: the only channel from the profiler to the tuner;
 *   - trace: rows handed from the user thread to the trace writer thread (trace.c).
 */
#ifndef NCCLBOT_STATE_H
#define NCCLBOT_STATE_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "mqueue.h"
#include "names.h"
#include "nccl_abi.h"
#include "policy.h"

/* ---- contexts ---- */

#define NB_CTX_PASS 0x1 /* nothing to learn (one arm, zero cost, over the cap): NCCL decides */

/*
 * One context, laid out by access: this header (one cache line) and, from the next line on,
 * its arms' statistics and then its arm ids (nb_ctx_stats, nb_ctx_ids), in one block of the
 * table's arena. A call reads the header and the arms it chooses among, and writes the header
 * and the arm it plays: no other line. Arm ids are NCCL's (algo * 3 + proto), in NCCL's scan
 * order.
 */
typedef struct {
  uint64_t key;      /* collective << 58 | nBytes */
  double mu_min;     /* reward scale (paper Eq. 1) */
  uint32_t pulls;    /* timed pulls issued */
  uint32_t n_rewarded, n_missing; /* pulls applied with a reward, and without */
  uint32_t sel_mask; /* last decision: availability mask it was made for ... */
  uint8_t sel_idx;   /* ... and its arm index; valid while sel_ok (statistics unchanged) */
  uint8_t sel_ok;
  uint8_t narms;
  uint8_t flags;
  uint8_t auto_arm;  /* NCCL's choice at first sight */
  uint8_t auto_idx;  /* ... as an index into the context's arms (NB_NO_ARM: not among them) */
  nb_policy_state pol; /* draw counter and policy memory (policy.h) */
} nb_ctx;

_Static_assert(sizeof(nb_ctx) <= 64, "a context's header is one cache line");

#define NB_KEY(coll, bytes) (((uint64_t)(coll) << 58) | ((uint64_t)(bytes) & ((1ULL << 58) - 1)))
#define NB_KEY_COLL(k) ((int)((k) >> 58))
#define NB_KEY_BYTES(k) ((k) & ((1ULL << 58) - 1))

/* The statistics of a context's arms, right after its header, and its arm ids after them. */
static inline nb_arm_stat *nb_ctx_stats(nb_ctx *x) { return (nb_arm_stat *)(void *)(x + 1); }
static inline const nb_arm_stat *nb_ctx_cstats(const nb_ctx *x) {
  return (const nb_arm_stat *)(const void *)(x + 1);
}
static inline uint8_t *nb_ctx_ids(const nb_ctx *x) {
  return (uint8_t *)(void *)((nb_arm_stat *)(void *)(uintptr_t)(x + 1) + x->narms);
}

/*
 * Allocated once at init for cfg.max_contexts contexts (ctxtable.c): an arena of context
 * blocks (mapped, so the pages no context reaches cost no memory) and an open-addressing
 * index; no allocation after. A context is named by its block's offset in lines (u32).
 */
typedef struct {
  unsigned char *arena;
  uint32_t *slots; /* open addressing: context + 1, 0 = empty */
  uint32_t slot_mask;
  uint32_t memo_ctx; /* the last context found (a repeat skips the index) ... */
  uint64_t memo_key; /* ... and its key (UINT64_MAX: none, no key has all bits set) */
} nb_ctx_table;

/* What only a context's first sight reads: how full the arena is. */
typedef struct {
  size_t arena_bytes, used;  /* bytes mapped, bytes given to contexts */
  uint32_t nctx, cap;
} nb_ctx_fill;

static inline nb_ctx *nb_ctx_at(const nb_ctx_table *t, uint32_t ci) {
  return (nb_ctx *)(void *)(t->arena + (size_t)ci * 64);
}

/* ---- pull log: one entry per timed pull, in call order (identical on all ranks) ---- */

enum { NB_PULL_PENDING = 0, NB_PULL_HAVE = 1, NB_PULL_MISSING = 2, NB_PULL_APPLIED = 3 };

/* Why a pull has no local sample (nb_pull.why, counted at finalize and in the trace). */
enum {
  NB_DROP_NONE = 0,
  NB_DROP_TIMER,      /* the profiler saw a zero, missing or backwards timer, or too few channels */
  NB_DROP_LOST,       /* its kernel events never came (retired after NCCLBOT_SAMPLE_TIMEOUT_MS) */
  NB_DROP_UNLAUNCHED, /* no Coll start by the time its round was needed (open group, graph capture) */
  NB_DROP_OVERRUN,    /* one rank: more than half the log of later pulls went by without it */
  NB_DROP_MERGED,     /* this rank had it, another rank did not: the merged round has none */
  NB_DROP_COUNT
};

typedef struct {
  uint32_t ctx;
  uint32_t pull_no; /* per-context pull index */
  float lat_us;     /* local latency once known */
  uint32_t launch;  /* collectives this rank had launched at the call, itself included */
  uint32_t lag;     /* reward_lag: collectives launched after it before its sample came */
  uint32_t bind;    /* 1 + ordinal of the Coll start that took it (nb_comm.n_bound); 0 unbound */
  uint8_t arm;      /* arena-independent arm id */
  uint8_t arm_idx;  /* index within the context's arms */
  uint8_t auto_arm;
  uint8_t state;
  uint8_t why;      /* NB_DROP_* once it is known to have no local sample */
  uint8_t voided;   /* retired unlaunched: a later Coll start for it is taken and discarded */
} nb_pull;

/* ---- profiler records ---- */

#define NB_MAX_CH 64
#define NB_REC_SIZE 768 /* multiple of 256: record handles have 8 clear low bits */
/* Collectives whose kernel events may still be outstanding: twice the 1,024 a GPU far
 * behind its host can queue, so a record is never reused while its events can come. */
#define NB_NREC 2048 /* (at most 65,536: record indices are 16-bit) */
#define NB_GEN_SHIFT 56 /* handles carry the record's generation in their top byte */

struct nb_comm;
typedef struct {
  struct nb_comm *comm; /* owner, constant */
  uint32_t live;     /* 1 while the collective's channels are outstanding (atomic) */
  uint32_t stops;    /* kernel-channel stops seen (atomic) */
  uint32_t bad;      /* a zero, missing or backwards timer (atomic) */
  uint32_t gen;      /* bumped at each reuse; handles carry its low byte (atomic) */
  uint8_t nch;
  uint8_t arm;
  uint64_t key;
  uint64_t pull;     /* log index of the pull this collective measures */
  uint64_t maxdur;   /* max over channels of stop - start, ns (atomic) */
  uint64_t stopped;  /* bitmask of channels whose stop state arrived (atomic) */
  uint64_t start[NB_MAX_CH];
} nb_rec;

_Static_assert(sizeof(nb_rec) <= NB_REC_SIZE, "record fits its slot");

/* ---- synchronisation client (sync.c) ---- */

#define NB_OUT_RING 8 /* messages the user thread hands the sync thread */

/*
 * Shared by the user thread and the communicator's sync thread, which alone touches the
 * socket after START. The sync thread publishes each RESULT (its slot, then `have` with
 * release), a verdict (`verdict_round`, then `verdict` with release) or a lost connection
 * (`lost_why`, then `lost`); the user thread reads them with acquire loads and blocks on
 * `cv` only when what it needs has not arrived. Fields below "user thread" are its own.
 */
typedef struct {
  int fd, efd; /* socket; eventfd that wakes the sync thread for the outbox or a stop */
  uint32_t m;
  uint32_t nres;  /* result slots: results r .. r+lag may be held before r is applied */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop; /* under mu */
  int64_t *have; /* [nres] submission held in each slot, -1 none (atomic) */
  float **res;   /* [nres] merged max latency per pull, <0 missing */
  int verdict;   /* 0, NB_MSG_FREEZE or NB_MSG_FAIL (atomic) */
  int64_t verdict_round;
  int lost;      /* the connection failed (atomic); lost_why says how */
  char lost_why[160];
  struct {
    uint32_t type;
    int64_t round;
    uint64_t a;
    uint32_t len;
  } out_hdr[NB_OUT_RING];
  float *out[NB_OUT_RING];
  uint64_t out_head, out_tail; /* user thread pushes at head, sync thread pops at tail (atomic) */
  char rbuf[65536];            /* sync thread's receive buffer */
  size_t rlen;
  /* user thread */
  int64_t applied;   /* last submission applied, -1 none */
  int64_t stop_at;   /* boundary at which the coordinator's verdict takes effect, -1 none */
  int stop_fail;     /* ... and it fails the communicator (fail mode, FAIL verdict) */
  int frozen;
  int confirmed;     /* result 0 is held: every rank started (until then: AUTO) */
  int auto_only;     /* lost the coordinator without its verdict: NCCL decides */
  int64_t submitted; /* last round submitted, -1 none */
  int64_t closed;    /* last round whose pulls all were issued, -1 none */
  uint32_t open_pending; /* pulls of round submitted+1 still without a local sample */
  uint64_t waits;    /* boundaries that had to block for a result */
} nb_sync;

typedef enum {
  NB_MODE_INERT = 0, /* AUTO: NCCL's choice stands */
  NB_MODE_STATIC,
  NB_MODE_LEARN_LOCAL, /* one rank: rewards applied as they arrive */
  NB_MODE_LEARN_SYNC,  /* several ranks: rewards applied in synchronised rounds */
} nb_mode;


typedef struct nb_static nb_static;

/* A host that simulates the GPU (ncclbot-sweep's simulated fabric) exports this beside its
 * logger; NCCL does not. The plugin calls it when getCollInfo must wait: for the kernel events
 * of the Coll start with this ordinal and those before it (merged 0), or for every rank's, and
 * the coordinator's answer (merged 1). The host advances its simulated clock and delivers, on
 * its proxy thread, every event due by then before it returns. */
typedef void (*nb_sim_await_fn)(uint64_t comm_id, int rank, uint32_t ordinal, int merged);
typedef struct nb_saved nb_saved;
typedef struct nb_tracer nb_tracer;

typedef struct nb_comm {
  /* Laid out by access: the first lines hold what every getCollInfo reads or writes (mode and
   * positions, the log, the context table, the free records, the hot counters), then the
   * queue's consumer line and the configuration, whose first two lines are its hot fields;
   * the rest is read at init, at a round boundary, at finalize or by the profiler. */
  nb_mode mode;
  int failed;        /* abort mode after a synchronisation failure */
  uint64_t n_calls;
  uint64_t launched; /* collectives this rank launched (user thread writes, profiler reads: atomic) */
  uint64_t head;     /* timed pulls issued */
  uint64_t match_lo; /* oldest entry that may still be pending */
  uint64_t applied;  /* next entry to apply (local mode) */
  uint64_t claim;    /* profiler: next log entry a collective start may bind */
  uint64_t newest_sample; /* 1 + the newest log index a sample arrived for (user thread) */

  nb_pull *log;
  uint64_t log_mask;
  nb_steps *steps; /* clipped-SGD steps of the configuration (policy.h) */
  nb_sync *sync;
  nb_tracer *trace;
  uintptr_t user_thread; /* the thread of the last getCollInfo: Coll starts from another thread
                          * (CUDA graph replays' host callbacks) are not ours to bind (atomic) */
  nb_sim_await_fn sim_await; /* a simulated GPU's clock (learn.c), NULL under NCCL */
  uint32_t n_bound;  /* Coll starts that took a pull (the ordinal nb_pull.bind carries) */
  uint32_t rec_nfree;

  nb_ctx_table tab;
  /* profiler: records in use, and a stack of free ones (user thread), so that a GPU that
   * keeps up reuses a few warm records; when none is free the oldest use is taken over */
  unsigned char *rec_base;
  uint16_t *rec_free;
  uint64_t n_timed, n_applied; /* counters (tuner thread) */

  nb_mq mq;
  nb_config cfg;

  uint64_t comm_id;
  int tuner_refs, prof_refs;
  int rank; /* from the profiler init; -1 unknown */
  int nranks, nnodes;
  int warned_drops; /* the "most samples dropped" WARN was given */
  char fail_why[256];
  float *sub_buf; /* sync_every latencies of the round being sent */
  nb_static *stat_tab;
  nb_saved *saved;
  nb_name_memo prof_func, prof_type, prof_algo, prof_proto; /* user thread (names.c) */

  nb_ctx_fill fill;
  uint64_t rec_steal;
  /* counters (tuner thread unless noted) */
  uint64_t n_missing, n_unmatched, n_rounds, n_over_cap;
  uint64_t n_drops[NB_DROP_COUNT]; /* pulls applied without a reward, by reason */
  uint64_t n_waits;        /* boundaries that waited for this rank's own samples */
  double wait_own_us_total; /* wall time those waits took */
  uint64_t n_prof_dropped; /* profiler thread, atomic */
  uint64_t n_queue_full;   /* profiler thread, atomic */
  double sync_us_total;     /* wall time in round boundaries */
  double sync_wait_us_total; /* wall time blocked waiting for a round's result */
} nb_comm;

/* registry (comm.c): the first acquire of a communicator sets its shape, every acquire
 * the logger, both under the registry lock. A release returns 1 for the last user, who then
 * tears the communicator down (the learner's part, then nb_comm_free): the registry frees
 * only what it allocated, so it knows nothing above it. */
nb_comm *nb_comm_acquire(uint64_t comm_id, int tuner_side, int nranks, int nnodes,
                         ncclDebugLogger_t logfn);
int nb_comm_release(nb_comm *c, int tuner_side);
void nb_comm_free(nb_comm *c);
void nb_registry_lock(void);
void nb_registry_unlock(void);

/* context table (ctxtable.c) */
int nb_tab_init(nb_ctx_table *t, nb_ctx_fill *f, uint32_t max_contexts);
void nb_tab_free(nb_ctx_table *t, nb_ctx_fill *f);
int64_t nb_tab_find(nb_ctx_table *t, uint64_t key);
/* Adds a context of `narms` arms; its handle, or -1 when the table is full. */
int64_t nb_tab_add(nb_ctx_table *t, nb_ctx_fill *f, uint64_t key, int narms);
/* The context after `ci` in creation order (the arena is walked block by block), or -1. */
int64_t nb_tab_next(const nb_ctx_table *t, const nb_ctx_fill *f, int64_t ci);

#endif
