/* trace.c: see trace.h. */
#include "trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "names.h"
#include "log.h"

#define NB_TRACE_HEADER                                                                    \
  "kind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,auto_arm,policy," \
  "latency_us,reward,round,sync_us,reward_lag,samples,reason\n"
#define NB_TRACE_ROWS (1u << 15)
#define NB_TRACE_WAKE (NB_TRACE_ROWS / 4) /* rows between wake-ups of the writer */
#define NB_TRACE_PERIOD_MS 50            /* the writer also wakes this often */

enum { NB_ROW_PULL = 0, NB_ROW_SYNC = 1, NB_ROW_SAMPLES = 2 };

/* The reason column of `samples` rows, by NB_DROP_* (NB_DROP_NONE: applied with a reward). */
static const char *const k_reasons[NB_DROP_COUNT] = {"used", "bad_timer", "lost", "unlaunched",
                                                     "overrun", "merged"};

typedef struct {
  uint64_t stamp; /* stamp() when the row was made; the writer turns it into wall-clock ns */
  uint64_t key;
  int64_t round;
  double value; /* pull: merged reward (<0 none); sync: wall time in us; samples: count */
  float lat_us;
  uint32_t pull_no;
  uint32_t lag; /* pull: reward_lag (with has_lat) */
  uint8_t kind, arm, auto_arm, has_lat;
} nb_trace_row;

struct nb_tracer {
  FILE *f;
  nb_trace_row *rows;
  uint64_t head __attribute__((aligned(64))); /* written by the user thread (atomic) */
  uint64_t tail_seen; /* user thread: the writer's tail when last looked at */
  uint64_t tail __attribute__((aligned(64))); /* written by the writer (atomic) */
  int stop;      /* under mu */
  pthread_mutex_t mu;
  pthread_cond_t work;  /* writer: rows or stop */
  pthread_cond_t space; /* user thread: the ring has room */
  pthread_t thread;
  const nb_comm *c;
  uint64_t cal_stamp, cal_ns; /* writer: the last (stamp, wall ns) pair it took ... */
  double ns_per_stamp;        /* ... and the rate between the last two, 0 while unknown */
};

static unsigned long long wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/*
 * A row's time costs the user thread one cycle-counter read where there is one (x86),
 * not a wall-clock read (tens of ns); the writer converts stamps to wall-clock ns by
 * interpolating between the (stamp, wall ns) pairs it takes at each drain.
 */
#if defined(__x86_64__) || defined(__i386__)
#define NB_STAMP_IS_WALL 0
static inline uint64_t stamp(void) { return __builtin_ia32_rdtsc(); }
#else
#define NB_STAMP_IS_WALL 1
static inline uint64_t stamp(void) { return wall_ns(); }
#endif

static uint64_t row_ns(const nb_tracer *t, uint64_t st, uint64_t now) {
  if (NB_STAMP_IS_WALL) return st;
  if (t->ns_per_stamp <= 0.0) return now;
  return t->cal_ns + (uint64_t)((double)(int64_t)(st - t->cal_stamp) * t->ns_per_stamp);
}

static void write_row(FILE *f, const nb_comm *c, const nb_trace_row *r, uint64_t t_ns) {
  static const char *const kinds[] = {"pull", "sync", "samples"};
  fprintf(f, "%s,%llu,%016llx,%d,%d,%d,", kinds[r->kind], (unsigned long long)t_ns,
          (unsigned long long)c->comm_id, c->rank, c->nranks, c->nnodes);
  if (r->kind == NB_ROW_SYNC) {
    fprintf(f, ",,,,,,,,%lld,%.3f,,,\n", (long long)r->round, r->value);
    return;
  }
  if (r->kind == NB_ROW_SAMPLES) {
    fprintf(f, ",,,,,%s,,,,,,%.0f,%s\n", nb_policy_name(c->cfg.policy), r->value,
            k_reasons[r->round]);
    return;
  }
  char arm[32], auto_arm[32];
  nb_arm_name(r->arm, arm, sizeof arm);
  nb_arm_name(r->auto_arm == 255 ? -1 : r->auto_arm, auto_arm, sizeof auto_arm);
  fprintf(f, "%s,%llu,%u,%s,%s,%s,", nb_coll_name(NB_KEY_COLL(r->key)),
          (unsigned long long)NB_KEY_BYTES(r->key), r->pull_no, arm, auto_arm,
          nb_policy_name(c->cfg.policy));
  if (r->has_lat)
    fprintf(f, "%.3f,", r->lat_us);
  else
    fputc(',', f);
  if (r->value >= 0.0)
    fprintf(f, "%.9g,", r->value);
  else
    fputc(',', f);
  if (r->round >= 0)
    fprintf(f, "%lld,,", (long long)r->round);
  else
    fputs(",,", f);
  if (r->has_lat)
    fprintf(f, "%u,,\n", r->lag);
  else
    fputs(",,\n", f);
}

/* Writes the rows queued so far (writer thread, or the closer after the writer ended). */
static uint64_t drain(nb_tracer *t) {
  uint64_t tail = t->tail, head = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
  uint64_t st = stamp(), now = wall_ns();
  if (st - t->cal_stamp > 1000000 && now > t->cal_ns) /* a rate over at least 1M ticks */
    t->ns_per_stamp = (double)(now - t->cal_ns) / (double)(st - t->cal_stamp);
  for (uint64_t i = tail; i < head; i++) {
    const nb_trace_row *r = &t->rows[i % NB_TRACE_ROWS];
    write_row(t->f, t->c, r, row_ns(t, r->stamp, now));
  }
  t->cal_stamp = st;
  t->cal_ns = now;
  if (head != tail) {
    __atomic_store_n(&t->tail, head, __ATOMIC_RELEASE);
    fflush(t->f);
  }
  return head - tail;
}

static void *writer(void *arg) {
  nb_tracer *t = arg;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    int stop = t->stop;
    pthread_mutex_unlock(&t->mu);
    drain(t);
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->space);
    if (stop) break;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += NB_TRACE_PERIOD_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    if (!t->stop) pthread_cond_timedwait(&t->work, &t->mu, &ts);
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

static void wake(nb_tracer *t) {
  pthread_mutex_lock(&t->mu);
  pthread_cond_signal(&t->work);
  pthread_mutex_unlock(&t->mu);
}

void nb_trace_open(nb_comm *c) {
  if (c->rank < 0) {
    NB_WARN("NCCLBOT_TRACE_DIR is set but this rank is unknown (profiler not loaded); no trace");
    return;
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/ncclbot-%016llx-r%d.csv", c->cfg.trace_dir,
           (unsigned long long)c->comm_id, c->rank);
  nb_tracer *t = aligned_alloc(64, (sizeof *t + 63) / 64 * 64);
  if (t) memset(t, 0, sizeof *t);
  if (t) t->rows = malloc(NB_TRACE_ROWS * sizeof *t->rows);
  if (t && t->rows) t->f = fopen(path, "w");
  if (!t || !t->rows || !t->f) {
    NB_WARN("cannot write the trace %s; continuing without it", path);
    if (t) free(t->rows);
    free(t);
    return;
  }
  fputs("# ncclbot-trace v2\n" NB_TRACE_HEADER, t->f);
  t->c = c;
  t->cal_stamp = stamp();
  t->cal_ns = wall_ns();
  pthread_mutex_init(&t->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->work, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&t->space, NULL);
  if (pthread_create(&t->thread, NULL, writer, t) != 0) {
    NB_WARN("cannot start the trace writer for %s; continuing without a trace", path);
    fclose(t->f);
    free(t->rows);
    free(t);
    return;
  }
  c->trace = t;
}

/* The next free row (waits for the writer when the ring is full: no row is dropped). */
static nb_trace_row *next_row(nb_tracer *t) {
  uint64_t h = t->head;
  if (h - t->tail_seen >= NB_TRACE_ROWS &&
      h - (t->tail_seen = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE)) >= NB_TRACE_ROWS) {
    pthread_mutex_lock(&t->mu);
    while (h - __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE) >= NB_TRACE_ROWS) {
      pthread_cond_signal(&t->work);
      pthread_cond_wait(&t->space, &t->mu);
    }
    t->tail_seen = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&t->mu);
  }
  nb_trace_row *r = &t->rows[h % NB_TRACE_ROWS];
  r->stamp = stamp();
  return r;
}

static void commit(nb_tracer *t) {
  uint64_t h = t->head + 1;
  __atomic_store_n(&t->head, h, __ATOMIC_RELEASE);
  if (h % NB_TRACE_WAKE == 0) wake(t);
}

void nb_trace_pull(nb_comm *c, const nb_pull *e, const nb_ctx *x, double reward, int64_t round) {
  nb_tracer *t = c->trace;
  nb_trace_row *r = next_row(t);
  r->kind = NB_ROW_PULL;
  r->key = x->key;
  r->pull_no = e->pull_no;
  r->arm = e->arm;
  r->auto_arm = e->auto_arm;
  r->has_lat = e->state == NB_PULL_HAVE;
  r->lat_us = e->lat_us;
  r->lag = e->lag;
  r->value = reward;
  r->round = round;
  commit(t);
}

void nb_trace_sync(nb_comm *c, int64_t round, double sync_us) {
  nb_tracer *t = c->trace;
  nb_trace_row *r = next_row(t);
  r->kind = NB_ROW_SYNC;
  r->round = round;
  r->value = sync_us;
  commit(t);
}

void nb_trace_samples(nb_comm *c) {
  nb_tracer *t = c->trace;
  for (int why = 0; why < NB_DROP_COUNT; why++) {
    uint64_t n = why == NB_DROP_NONE ? c->n_applied : c->n_drops[why];
    if (!n && why != NB_DROP_NONE) continue;
    nb_trace_row *r = next_row(t);
    r->kind = NB_ROW_SAMPLES;
    r->round = why;
    r->value = (double)n;
    commit(t);
  }
}

void nb_trace_close(nb_comm *c) {
  nb_tracer *t = c->trace;
  if (!t) return;
  c->trace = NULL;
  pthread_mutex_lock(&t->mu);
  t->stop = 1;
  pthread_cond_signal(&t->work);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  drain(t); /* rows queued after the writer's last look */
  fclose(t->f);
  pthread_cond_destroy(&t->work);
  pthread_cond_destroy(&t->space);
  pthread_mutex_destroy(&t->mu);
  free(t->rows);
  free(t);
}
