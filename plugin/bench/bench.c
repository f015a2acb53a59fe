/*
 * bench.c: plugin performance on this machine, called as NCCL calls it.
 *   build/ncclbot-bench [calls] [local]   ("local": skip the cold and 8-rank parts)
 * Prints one line per figure:
 *   getCollInfo: ns per call on a warm context, untraced and with NCCLBOT_TRACE_DIR set
 *     (each call timed on its own; the trace's rows are counted against the pulls)
 *   first sight: allocations while 1000 new contexts are created (should be 0)
 *   profiler: ns per collective (coll start + 4 channels x start/stop-state/stop + coll stop)
 *   cold: getCollInfo and the profiler when other work ran between two collectives and
 *     evicted the core's own caches (1 MiB written) or every cache (64 MiB written): what
 *     a rank thread that runs a framework between collectives pays (no target; the warm
 *     figures above are the plugin's own cost)
 *   sync: us per round and us per collective, 8 ranks + coordinator on loopback, m = 64
 *   allocations: malloc/calloc/realloc calls inside the timed warm loops (should be 0)
 * Links the plugin objects statically and counts allocations by interposing malloc.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordinator.h"
#include "nccl_abi.h"
#include "state.h"

extern const ncclbotTuner_v6 ncclTunerPlugin_v6;
extern const ncclbotProfiler_v5 ncclProfiler_v6;

/* ---- allocation counter (not under ASan, which owns malloc) ---- */
static long g_allocs;
#ifndef __SANITIZE_ADDRESS__
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
void *malloc(size_t n) {
  __atomic_add_fetch(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  __atomic_add_fetch(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  __atomic_add_fetch(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_realloc(p, n);
}
#endif

static uint64_t now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time. */
static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void table_init(float *t) {
  for (int i = 0; i < 21; i++) t[i] = -1.0f;
  t[0] = 31.0f; t[1] = 24.0f; t[2] = 22.0f; t[3] = 30.0f; t[4] = 21.0f; t[5] = 20.0f; t[14] = 26.0f;
}

static void one_collective(void *pctx, int arm, size_t bytes, uint64_t *clock, int nch) {
  static const char *const algos[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS",
                                      "NVLS_TREE", "PAT"};
  static const char *const protos[] = {"LL", "LL128", "SIMPLE"};
  ncclbotProfDescr_v6 d;
  memset(&d, 0, sizeof d);
  d.type = NCCLBOT_PROF_COLL;
  d.coll.func = "AllReduce";
  d.coll.datatype = "ncclFloat32";
  d.coll.count = bytes / 4;
  d.coll.nChannels = (uint8_t)nch;
  d.coll.algo = algos[arm / 3];
  d.coll.proto = protos[arm % 3];
  void *h = NULL;
  ncclProfiler_v6.startEvent(pctx, &h, &d);
  ncclProfiler_v6.stopEvent(h);
  for (int ch = 0; ch < nch; ch++) {
    ncclbotProfDescr_v6 k;
    memset(&k, 0, 40);
    k.type = NCCLBOT_PROF_KERNEL_CH;
    k.parentObj = h;
    k.kernelCh.channelId = (uint8_t)ch;
    k.kernelCh.pTimer = *clock;
    void *kh = NULL;
    ncclProfiler_v6.startEvent(pctx, &kh, &k);
    ncclbotProfStateArgs_v4 a = {.kernelCh = {*clock + 20000 + (uint64_t)ch}};
    ncclProfiler_v6.recordEventState(kh, NCCLBOT_PROF_STATE_KERNEL_CH_STOP, &a);
    ncclProfiler_v6.stopEvent(kh);
  }
  *clock += 50000;
}

/* Rows of kind "pull" in the one trace file in dir (then removes the file and dir). */
static long count_pull_rows(const char *dir) {
  DIR *d = opendir(dir);
  long rows = 0;
  struct dirent *ent;
  char path[4400], line[512];
  while (d && (ent = readdir(d))) {
    if (ent->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) rows += strncmp(line, "pull,", 5) == 0;
    if (f) fclose(f);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
  return rows;
}

/* Allocations while `n` new contexts are seen for the first time (and each played). */
static long first_sight_allocs(void *tctx, int n) {
  float base[21], t[21];
  table_init(base);
  int nch = 0;
  long a0 = g_allocs;
  for (int i = 0; i < n; i++) {
    memcpy(t, base, sizeof t);
    ncclTunerPlugin_v6.getCollInfo(tctx, 2, (8u << 20) + 4096u * (unsigned)i, 1,
                                   (float **)(void *)t, 7, 3, 0, &nch);
  }
  return g_allocs - a0;
}

/* One rank's communicator for the local figures, timed call by call. */
typedef struct {
  void *pctx, *tctx;
  uint64_t clock;
  double *ns, *pns;
  long allocs;
} local_rank;

static void lr_open(local_rank *r, uint64_t id, const char *trace_dir, long calls) {
  if (trace_dir)
    setenv("NCCLBOT_TRACE_DIR", trace_dir, 1);
  else
    unsetenv("NCCLBOT_TRACE_DIR");
  int mask = 0;
  memset(r, 0, sizeof *r);
  r->clock = 1000000;
  ncclProfiler_v6.init(&r->pctx, id, &mask, "bench", 1, 1, 0, NULL);
  ncclTunerPlugin_v6.init(&r->tctx, id, 1, 1, NULL, NULL, NULL);
  r->ns = malloc(sizeof(double) * (size_t)calls);
  r->pns = malloc(sizeof(double) * (size_t)calls);
}

/* Written right before and right after each getCollInfo: a memory trace (valgrind
 * --tool=lackey --trace-mem=yes) finds the call's accesses between the two. */
volatile int g_cold_marker;

/* One call and its collective, each timed on its own (timer overhead subtracted), as NCCL
 * interleaves them: a call drains the previous collective's sample. i < 0: warm-up. */
static void lr_step(local_rank *r, long i, double timer) {
  float t[21];
  int nch = 0;
  table_init(t);
  long a0 = g_allocs;
  uint64_t t0 = now();
  g_cold_marker = 1;
  ncclTunerPlugin_v6.getCollInfo(r->tctx, 4, 4u << 20, 1, (float **)(void *)t, 7, 3, 0, &nch);
  g_cold_marker = 2;
  uint64_t t1 = now();
  int arm = 5;
  for (int k = 0; k < 21; k++)
    if (t[k] == 0.0f) {
      arm = k;
      break;
    }
  uint64_t t2 = now();
  one_collective(r->pctx, arm, 4u << 20, &r->clock, 4);
  uint64_t t3 = now();
  if (i < 0) return;
  r->allocs += g_allocs - a0;
  r->ns[i] = (double)(t1 - t0) - timer;
  r->pns[i] = (double)(t3 - t2) - timer;
}

static void lr_close(local_rank *r) {
  ncclTunerPlugin_v6.finalize(r->tctx);
  ncclProfiler_v6.finalize(r->pctx);
  free(r->ns);
  free(r->pns);
}

/* The clock's own cost: the shortest of 1000 back-to-back readings. */
static double timer_cost(void) {
  double timer = 1e9;
  for (int i = 0; i < 1000; i++) {
    uint64_t a = now(), b = now();
    if ((double)(b - a) < timer) timer = (double)(b - a);
  }
  return timer;
}

static void warm_and_run(local_rank **r, int n, long calls) {
  for (long i = 0; i < 1000; i++) /* warm-up: context created, pull log cycled */
    for (int k = 0; k < n; k++) lr_step(r[k], -1, 0);
  double timer = timer_cost();
  for (long i = 0; i < calls; i++)
    for (int k = 0; k < n; k++) lr_step(r[k], i, timer);
  for (int k = 0; k < n; k++) {
    qsort(r[k]->ns, (size_t)calls, sizeof *r[k]->ns, cmp_d);
    qsort(r[k]->pns, (size_t)calls, sizeof *r[k]->pns, cmp_d);
  }
}

/* Other work between two collectives: one write per cache line of `mib` MiB. */
static void evict(unsigned char *buf, size_t mib) {
  for (size_t k = 0; k < mib << 20; k += 64) buf[k]++;
}

/* Medians of getCollInfo and of the profiler per collective, each step after evict(mib). */
static void bench_cold(long calls, size_t mib) {
  unsigned char *buf = calloc(mib << 20, 1);
  local_rank r;
  lr_open(&r, 45, NULL, calls > 1000 ? calls : 1000);
  local_rank *one[] = {&r};
  warm_and_run(one, 1, 1000); /* context created, log cycled */
  if (getenv("NCCLBOT_BENCH_LAYOUT")) { /* where a cold call's lines lie (for a memory trace) */
    const nb_comm *c = r.tctx;
    fprintf(stderr, "layout comm %p+%zu log %p+%zu arena %p+%zu steps %p+%zu records %p+%zu "
            "free %p+%zu cells %p+%zu\n", (const void *)c, sizeof *c, (void *)c->log,
            (size_t)(c->log_mask + 1) * sizeof *c->log, (void *)c->tab.arena, c->fill.used,
            (void *)c->steps, sizeof *c->steps, (void *)c->rec_base, (size_t)NB_NREC * NB_REC_SIZE,
            (void *)c->rec_free, (size_t)NB_NREC * sizeof *c->rec_free, (void *)c->mq.cells,
            (size_t)(c->mq.mask + 1) * sizeof *c->mq.cells);
  }
  double timer = timer_cost();
  for (long i = 0; i < calls; i++) {
    evict(buf, mib);
    lr_step(&r, i, timer);
  }
  qsort(r.ns, (size_t)calls, sizeof *r.ns, cmp_d);
  qsort(r.pns, (size_t)calls, sizeof *r.pns, cmp_d);
  printf("cold, %zu MiB written between collectives: getCollInfo median %.1f ns, profiler per "
         "collective median %.1f ns (%ld calls)\n", mib, r.ns[calls / 2], r.pns[calls / 2], calls);
  lr_close(&r);
  free(buf);
}

/*
 * getCollInfo and the profiler on one rank; then an untraced and a traced (into
 * trace_dir) communicator side by side: their calls alternate, so a loaded machine slows
 * both alike and the ratio of their medians holds.
 */
static void bench_local(long calls, const char *trace_dir) {
  setenv("NCCLBOT_POLICY", "ucb1", 0); /* NCCLBOT_POLICY=softmax build/ncclbot-bench: another policy */
  setenv("NCCLBOT_MIN_BYTES", "0", 1);
  local_rank plain, traced, paired;
  lr_open(&plain, 42, NULL, calls);
  local_rank *one[] = {&plain};
  warm_and_run(one, 1, calls);
  double *ns = plain.ns, *pns = plain.pns;
  printf("getCollInfo warm context: median %.1f ns/call (p90 %.1f, p99 %.1f; %ld calls, %s, 7 arms)\n",
         ns[calls / 2], ns[calls * 9 / 10], ns[calls * 99 / 100], calls, getenv("NCCLBOT_POLICY"));
  printf("profiler per collective: median %.1f ns (p90 %.1f; 4 channels: coll start/stop + 12 "
         "channel callbacks)\n", pns[calls / 2], pns[calls * 9 / 10]);
  printf("allocations on the hot path: %ld in %ld getCollInfo calls and collectives\n",
         plain.allocs, calls);
  nb_comm *c = plain.tctx;
  printf("  (local: %llu timed pulls, %llu rewards applied, %llu missing, %llu unmatched samples)\n",
         (unsigned long long)c->n_timed, (unsigned long long)c->n_applied,
         (unsigned long long)c->n_missing, (unsigned long long)c->n_unmatched);
  printf("allocations on first sight: %ld while 1000 new contexts were created\n",
         first_sight_allocs(plain.tctx, 1000));
  lr_close(&plain);

  lr_open(&paired, 44, NULL, calls);
  lr_open(&traced, 43, trace_dir, calls);
  unsetenv("NCCLBOT_TRACE_DIR");
  local_rank *two[] = {&paired, &traced};
  warm_and_run(two, 2, calls);
  unsigned long long pulls = ((nb_comm *)traced.tctx)->n_timed;
  double base = paired.ns[calls / 2] > 0 ? paired.ns[calls / 2] : 1.0, *tns = traced.ns;
  double ratio = tns[calls / 2] / base;
  printf("getCollInfo warm context, traced: median %.1f ns/call (p90 %.1f, p99 %.1f; %ld calls, "
         "alternating with untraced ones: median %.1f); allocations %ld; ",
         tns[calls / 2], tns[calls * 9 / 10], tns[calls * 99 / 100], calls, base, traced.allocs);
  lr_close(&paired);
  lr_close(&traced); /* the trace is complete from here on */
  printf("trace: %ld pull rows for %llu pulls\n", count_pull_rows(trace_dir), pulls);
  printf("tracing costs %.2fx the untraced median\n", ratio);
}

/* One rank of the sync benchmark: writes "round_us per_coll_us" to fd. */
static void sync_rank(int rank, int nranks, long calls, int fd, int gpu_us) {
  void *pctx = NULL, *tctx = NULL;
  int mask = 0;
  ncclProfiler_v6.init(&pctx, 77, &mask, "bench", 1, nranks, rank, NULL);
  ncclTunerPlugin_v6.init(&tctx, 77, (size_t)nranks, 1, NULL, NULL, NULL);
  if (!tctx) {
    dprintf(fd, "-1 -1\n");
    return;
  }
  float base[21], t[21];
  table_init(base);
  int nch = 0;
  uint64_t clock = 1000000;
  double *ns = malloc(sizeof(double) * (size_t)calls), round_cpu_us = 0.0;
  long allocs0 = 0;
  for (long i = 0; i < calls; i++) {
    if (i == 1000) allocs0 = g_allocs; /* contexts exist from here on */
    memcpy(t, base, sizeof t);
    size_t bytes = (size_t)(4u << 20) << (i % 8);
    /* a call that starts a round runs its boundary: its thread CPU time is the round's (the
     * plugin does not time itself; reading the thread clock is a system call) */
    nb_comm *cc = tctx;
    int starts_round = cc->head > 0 && cc->head % cc->cfg.sync_every == 0;
    uint64_t c0 = starts_round ? thread_cpu_ns() : 0;
    uint64_t t0 = now();
    ncclTunerPlugin_v6.getCollInfo(tctx, 4, bytes, 1, (float **)(void *)t, 7, 3, 0, &nch);
    ns[i] = (double)(now() - t0);
    if (starts_round) round_cpu_us += (double)(thread_cpu_ns() - c0) / 1000.0;
    int arm = 5;
    for (int k = 0; k < 21; k++)
      if (t[k] == 0.0f) {
        arm = k;
        break;
      }
    one_collective(pctx, arm, bytes, &clock, 2);
    if (gpu_us > 0) { /* the rank waits for its GPU, leaving the CPU to the others */
      struct timespec ts = {0, gpu_us * 1000L};
      nanosleep(&ts, NULL);
    }
  }
  nb_comm *c = tctx;
  double nr = c->n_rounds ? (double)c->n_rounds : 1.0;
  qsort(ns, (size_t)calls, sizeof *ns, cmp_d);
  long allocs = g_allocs - allocs0;
  dprintf(fd, "%.3f %.4f %.3f %.4f %llu %.1f %ld %.3f\n", c->sync_us_total / nr,
          c->sync_us_total / (double)calls, round_cpu_us / nr, round_cpu_us / (double)calls, (unsigned long long)c->n_rounds, ns[calls / 2],
          allocs, c->sync_wait_us_total / nr);
  free(ns);
  ncclTunerPlugin_v6.finalize(tctx);
  ncclProfiler_v6.finalize(pctx);
}

static void bench_sync(long calls, int gpu_us) {
  int port = 0, lfd = nb_coord_listen("127.0.0.1", 0, &port);
  if (lfd < 0) {
    printf("sync round: cannot listen on loopback\n");
    return;
  }
  pid_t coord = fork();
  if (coord == 0) {
    static volatile int stop = 0;
    if (!freopen("/dev/null", "w", stderr)) _exit(1); /* its notes are not bench output */
    nb_coord_serve(lfd, "bench-token", &stop);
    _exit(0);
  }
  close(lfd);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  setenv("NCCLBOT_SYNC_ADDR", addr, 1);
  setenv("NCCLBOT_SYNC_TOKEN", "bench-token", 1);
  setenv("NCCLBOT_SYNC_EVERY", "64", 1);
  int pipes[8][2];
  pid_t kids[8];
  fflush(stdout);
  for (int r = 0; r < 8; r++) {
    if (pipe(pipes[r]) != 0) return;
    kids[r] = fork();
    if (kids[r] == 0) {
      close(pipes[r][0]);
      sync_rank(r, 8, calls, pipes[r][1], gpu_us);
      exit(0); /* not _exit: leak checkers run at exit */
    }
    close(pipes[r][1]);
  }
  double rounds[8], per[8], crounds[8], cper[8], med[8], wait[8];
  unsigned long long nr = 0;
  long allocs = 0, a = 0;
  for (int r = 0; r < 8; r++) {
    char buf[256] = {0};
    ssize_t k = read(pipes[r][0], buf, sizeof buf - 1);
    (void)k;
    sscanf(buf, "%lf %lf %lf %lf %llu %lf %ld %lf", &rounds[r], &per[r], &crounds[r], &cper[r], &nr,
           &med[r], &a, &wait[r]);
    allocs += a;
    waitpid(kids[r], NULL, 0);
  }
  qsort(crounds, 8, sizeof *crounds, cmp_d);
  qsort(med, 8, sizeof *med, cmp_d);
  qsort(wait, 8, sizeof *wait, cmp_d);
  qsort(cper, 8, sizeof *cper, cmp_d);
  kill(coord, SIGKILL);
  waitpid(coord, NULL, 0);
  qsort(rounds, 8, sizeof *rounds, cmp_d);
  qsort(per, 8, sizeof *per, cmp_d);
  char what[96] = "back-to-back calls";
  if (gpu_us > 0) snprintf(what, sizeof what, "each call then sleeps %d us like a GPU wait", gpu_us);
  printf("sync round (8 ranks, m=64, loopback, %s): CPU %.1f us/round, amortised %.3f "
         "us/collective; wall %.1f us/round (%.1f of it blocked on slower ranks), amortised %.3f "
         "us/collective (median over ranks; %llu rounds, %ld calls per rank; 9 processes share %ld "
         "cores)\n",
         what, crounds[4], cper[4], rounds[4], wait[4], per[4], nr, calls,
         sysconf(_SC_NPROCESSORS_ONLN));
  printf("getCollInfo in the 8-rank job: median %.1f ns/call (median over ranks; rounds included); "
         "allocations after warm-up: %ld\n", med[4], allocs);
}

int main(int argc, char **argv) {
  long calls = argc > 1 ? atol(argv[1]) : 200000;
  unsetenv("NCCLBOT_SYNC_ADDR");
  const char *tmp = getenv("TMPDIR");
  char tdir[4096];
  snprintf(tdir, sizeof tdir, "%s/ncclbot-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(tdir)) {
    perror("mkdtemp");
    return 1;
  }
  if (argc > 2 && strcmp(argv[2], "cold") == 0) { /* under callgrind: lines a cold call touches */
    setenv("NCCLBOT_POLICY", "ucb1", 0);
    setenv("NCCLBOT_MIN_BYTES", "0", 1);
    bench_cold(calls, 32);
    return 0;
  }
  bench_local(calls, tdir);
  unsetenv("NCCLBOT_TRACE_DIR");
  if (argc > 2 && strcmp(argv[2], "local") == 0) return 0; /* e.g. under callgrind */
  bench_cold(2000, 1);
  bench_cold(1000, 64);
  bench_sync(calls / 4 > 6400 ? calls / 4 : 6400, 0);
  bench_sync(6400, 20);
  return 0;
}
