/*
 * simhost.c: the simulated fabric's stand-in for NCCL 2.30 around the real plugin library.
 *
 * The simulator (ncclbot_sweep/sim/pluginhost.py, through ctypes) owns the latency model and
 * the nccl-tests output; this host owns what must be honest C: loading the library the way
 * NCCL does, calling it in NCCL's order from NCCL's threads, and measuring the host time
 * really spent inside the plugin's per-collective calls, so that the simulator can add it
 * to each iteration (plugin and synchronisation overhead are then the real plugin's cost,
 * not a constant). The simulated ranks share a few cores and are not coupled as a collective
 * couples real ones, so wall time alone would charge the plugin for other ranks' time
 * slices and for waits that are the simulation's: a short call is charged its wall time, a
 * long one its CPU time (span_close). Facts: docs/nccl-plugin-abi.md.
 *
 *   open      dlopen NCCL_PROFILER_PLUGIN and NCCL_TUNER_PLUGIN (one file through both gives
 *             one handle), profiler init (v6, else v5), then tuner init (v6, else v5) with
 *             commId, nRanks, nNodes, an NCCL-style logger, NVL domain info and constants;
 *   per call  getCollInfo on a copy of the 7x3 cost table, then NCCL's first-minimum scan
 *             (NCCL 2.30's: it loads tuner v6 or v5 and exports ncclGetVersion = 2.30.7, so
 *             the plugin knows which scan follows; 2.31+'s last-minimum scan and tuner v7 are
 *             not modelled, the simulator's cost model being 2.30's);
 *             the Coll event (start, stop = "enqueued") on the caller's thread; one
 *             KernelCh event per channel (start with the GPU start timer, KernelChStop
 *             state with the stop timer, stop) from a second thread, the proxy thread;
 *   close     drain the proxy thread, tuner finalize, profiler finalize, dlclose both
 *             (NCCL's order: commCleanup, then commFree).
 *
 * Thread safety: one host per process and communicator; its calls come from one thread.
 * The logger may be called from any thread (the plugin logs from the proxy thread too).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../src/nccl_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define NBH_RING 1024 /* collectives whose kernel events may wait for the proxy thread */

static const char *const k_funcs[5] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                       "AllReduce"};
/* ncclAlgoToString / ncclProtoToString spellings, as NCCL puts them in Coll descriptors. */
static const char *const k_algos[7] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN",
                                       "NVLS", "NVLS_TREE", "PAT"};
static const char *const k_protos[3] = {"LL", "LL128", "SIMPLE"};

/* What the simulator tells NCCL's side of one communicator (mirrored in pluginhost.py). */
typedef struct {
  uint64_t comm_id;
  int nranks, nnodes, rank;
  int nvl_domains, nvl_min_ranks, nvl_max_ranks;
  int log_level;            /* NCCL_DEBUG as a level: 0 none ... 3 INFO */
  const double *constants;  /* 144 doubles in ncclTunerConstants_v5 order, or NULL */
  const char *comm_name;
  int couple;               /* 1: the nranks rank processes launch each collective together */
} nbh_comm;

typedef struct {
  uint64_t calls;          /* getCollInfo calls */
  uint64_t collectives;    /* Coll events started */
  uint64_t kernel_events;  /* KernelCh events delivered by the proxy thread */
  uint64_t host_ns;        /* caller-thread ns inside plugin calls (init, calls, finalize) */
  uint64_t proxy_ns;       /* proxy-thread ns inside plugin calls */
  int tuner_version, profiler_version;
} nbh_stats;

typedef struct {
  void *parent;
  uint64_t start_ns, lat_ns;
  int nch;
} nbh_job;

/* The coupling of a communicator's rank processes (a shared page, see "coupling" below). */
typedef struct {
  uint32_t count; /* ranks arrived at the current barrier */
  uint32_t gen;   /* barriers completed: the futex word */
} nbh_shared;

typedef struct {
  void *tuner_lib, *prof_lib;
  ncclbotGetCollInfo_v4 get_coll_info;
  ncclbotTunerFinalize tuner_finalize;
  const ncclbotProfiler_v5 *prof;
  void *tctx, *pctx;
  int mask; /* NCCL's process-wide activation mask, which the profiler sets */
  int rank;
  uint64_t seq[5];
  uint64_t gpu_ns; /* the simulated GPU's %globaltimer */
  nbh_stats stats;
  pthread_t proxy;
  int proxy_started;
  pthread_mutex_t mu;
  pthread_cond_t work, space;
  nbh_job ring[NBH_RING];
  uint64_t head, tail;
  int stop;
  nbh_shared *couple; /* NULL: this process runs on its own */
  int nranks, couple_waits;
  char couple_name[64];
} nbh_host;

/* ---- logger: NCCL's ncclDebugLog stand-in; records go to Python, which prefixes them ---- */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *g_log;
static size_t g_log_len, g_log_cap;
static int g_log_level = NCCL_LOG_WARN;

static void log_append(const char *text, size_t n) {
  if (g_log_len + n + 1 > g_log_cap) {
    size_t cap = g_log_cap ? g_log_cap : 4096;
    while (cap < g_log_len + n + 1) cap *= 2;
    char *grown = realloc(g_log, cap);
    if (!grown) return; /* a lost log line must not take NCCL down */
    g_log = grown;
    g_log_cap = cap;
  }
  memcpy(g_log + g_log_len, text, n);
  g_log_len += n;
  g_log[g_log_len] = '\0';
}

/* One record per message: "<level> <flags hex> <file>:<line> <message>\n". */
static void nbh_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...) {
  if (level == NCCL_LOG_ABORT) level = NCCL_LOG_WARN; /* printed like a WARN */
  if ((int)level > g_log_level || level == NCCL_LOG_NONE) return;
  char msg[2048];
  int head = snprintf(msg, sizeof msg, "%d %lx %s:%d ", (int)level, flags, file ? file : "?", line);
  if (head < 0 || (size_t)head >= sizeof msg) return;
  va_list ap;
  va_start(ap, fmt);
  int body = vsnprintf(msg + head, sizeof msg - (size_t)head, fmt, ap);
  va_end(ap);
  size_t n = body < 0 ? (size_t)head : strnlen(msg, sizeof msg - 1);
  for (size_t i = (size_t)head; i < n; i++)
    if (msg[i] == '\n') msg[i] = ' ';
  pthread_mutex_lock(&g_log_mu);
  log_append(msg, n);
  log_append("\n", 1);
  pthread_mutex_unlock(&g_log_mu);
}

/*
 * nbh_log_take: move up to cap-1 bytes of whole log records into buf (NUL-terminated).
 * Returns the bytes copied; 0 when nothing is pending. Thread-safe.
 */
EXPORT size_t nbh_log_take(char *buf, size_t cap) {
  if (!buf || cap < 2) return 0;
  pthread_mutex_lock(&g_log_mu);
  size_t n = g_log_len < cap - 1 ? g_log_len : cap - 1;
  while (n > 0 && n < g_log_len && g_log[n - 1] != '\n') n--;
  if (n == 0 && g_log_len > 0) n = cap - 1 < g_log_len ? cap - 1 : g_log_len;
  memcpy(buf, g_log, n);
  buf[n] = '\0';
  memmove(g_log, g_log + n, g_log_len - n);
  g_log_len -= n;
  pthread_mutex_unlock(&g_log_mu);
  return n;
}

/* ---- clocks ---- */

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* The caller thread's CPU time: what a plugin call costs, whatever else shares the cores. */
static uint64_t thread_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* What reading the thread clock adds to an interval (a system call, ~0.5 us on a VM): the
 * median of back-to-back readings. */
static uint64_t g_clock_cost_ns;

static void calibrate_clock(void) {
  enum { N = 257 };
  uint64_t d[N];
  for (int i = 0; i < N; i++) {
    uint64_t a = thread_ns();
    d[i] = thread_ns() - a;
  }
  qsort(d, N, sizeof *d, cmp_u64);
  g_clock_cost_ns = d[N / 2];
}

/*
 * The host time of one plugin call. A call that returns within NBH_SHORT_NS of wall time
 * ran on its CPU throughout (a time slice lost to another rank process lasts milliseconds,
 * and a warm call takes well under a microsecond):
 * it is charged its wall time, read from the cheap monotonic clock. A longer one may have
 * been preempted or have blocked for a round result (the simulated ranks are not coupled
 * the way a collective couples real ones): it is charged its CPU time instead, less the
 * thread clock's own cost. Open a span before the call, close it after.
 */
#define NBH_SHORT_NS 5000ull
typedef struct {
  uint64_t cpu, wall;
} nbh_span;

static nbh_span span_open(void) {
  nbh_span s;
  s.cpu = thread_ns();
  s.wall = mono_ns();
  return s;
}

static uint64_t span_close(nbh_span s) {
  uint64_t wall = mono_ns() - s.wall;
  if (wall < NBH_SHORT_NS) return wall;
  uint64_t cpu = thread_ns() - s.cpu;
  cpu = cpu > g_clock_cost_ns ? cpu - g_clock_cost_ns : 0;
  return cpu < wall ? cpu : wall;
}

static uint64_t wall_ns(void) { return clock_ns(CLOCK_REALTIME); }

/*
 * ---- coupling: the rank processes launch each collective together ----
 *
 * A real collective cannot run until every rank has launched it, so NCCL's ranks move in
 * step. The simulated rank processes share the machine's cores and would drift apart; the
 * plugin's round boundaries would then wait for the slow ones, and those waits would pose as
 * plugin overhead. So the ranks of a communicator meet at a barrier before each collective
 * (outside the timed plugin calls, as a rank's wait inside a real collective is): a page of
 * POSIX shared memory named by the communicator and the launching process, a counter and a
 * futex word. A rank that waits 10 s (a peer died) stops coupling; the page's name is
 * removed once every rank has mapped it.
 */
#define NBH_COUPLE_TIMEOUT_S 10

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
  return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

static void couple_open(nbh_host *h, const nbh_comm *c) {
  if (!c->couple || c->nranks < 2) return;
  snprintf(h->couple_name, sizeof h->couple_name, "/ncclbot-sim-%016llx-%ld",
           (unsigned long long)c->comm_id, (long)getppid());
  int fd = shm_open(h->couple_name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return; /* uncoupled: the simulation still runs, its waits count */
  if (ftruncate(fd, 4096) == 0) { /* a fresh page is zero: a valid first barrier */
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) h->couple = p;
  }
  close(fd);
  h->nranks = c->nranks;
}

/* Every rank process of the communicator has launched this collective (or one gave up). */
static void couple_wait(nbh_host *h) {
  nbh_shared *s = h->couple;
  if (!s) return;
  uint32_t gen = __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&s->count, 1, __ATOMIC_ACQ_REL) == (uint32_t)h->nranks) {
    __atomic_store_n(&s->count, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    futex(&s->gen, FUTEX_WAKE, INT32_MAX, NULL);
  } else {
    uint64_t deadline = mono_ns() + NBH_COUPLE_TIMEOUT_S * 1000000000ull;
    while (__atomic_load_n(&s->gen, __ATOMIC_ACQUIRE) == gen) {
      struct timespec ts = {0, 100000000};
      futex(&s->gen, FUTEX_WAIT, gen, &ts);
      if (mono_ns() > deadline) { /* a peer is gone: run on alone */
        munmap(s, 4096);
        h->couple = NULL;
        return;
      }
    }
  }
  if (++h->couple_waits == 1) shm_unlink(h->couple_name); /* every rank has it mapped now */
}

/* ---- the proxy thread: kernel-channel events, as NCCL's proxy progress thread sends them ---- */

/* The KernelCh events of one collective; returns the ns spent inside the profiler's calls. */
static uint64_t deliver(nbh_host *h, const nbh_job *job) {
  uint64_t spent = 0;
  for (int ch = 0; ch < job->nch; ch++) {
    /* Channel 0 spans the whole collective; the others finish a little earlier, so the
     * maximum over channels of stop - start is exactly the served latency. */
    uint64_t dur = ch == 0 ? job->lat_ns : job->lat_ns - job->lat_ns / 16;
    ncclbotProfDescr_v6 d;
    memset(&d, 0, sizeof d);
    d.type = NCCLBOT_PROF_KERNEL_CH;
    d.parentObj = job->parent;
    d.rank = h->rank;
    d.kernelCh.channelId = (uint8_t)ch;
    d.kernelCh.pTimer = job->start_ns;
    ncclbotProfStateArgs_v4 stop;
    memset(&stop, 0, sizeof stop);
    stop.kernelCh.pTimer = job->start_ns + dur;
    void *eh = NULL;
    uint64_t t0 = mono_ns();
    h->prof->startEvent(h->pctx, &eh, &d);
    if (eh) {
      h->prof->recordEventState(eh, NCCLBOT_PROF_STATE_KERNEL_CH_STOP, &stop);
      h->prof->stopEvent(eh);
    }
    spent += mono_ns() - t0;
  }
  return spent;
}

static void *proxy_main(void *arg) {
  nbh_host *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (h->head == h->tail && !h->stop) pthread_cond_wait(&h->work, &h->mu);
    if (h->head == h->tail) break; /* stopping, and everything is delivered */
    nbh_job job = h->ring[h->tail % NBH_RING];
    pthread_mutex_unlock(&h->mu);
    uint64_t spent = deliver(h, &job);
    pthread_mutex_lock(&h->mu); /* the proxy's counters are read under the same lock */
    h->stats.proxy_ns += spent;
    h->stats.kernel_events += (uint64_t)job.nch;
    h->tail++;
    pthread_cond_signal(&h->space);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static void proxy_stop(nbh_host *h) {
  if (!h->proxy_started) return;
  pthread_mutex_lock(&h->mu);
  h->stop = 1;
  pthread_cond_signal(&h->work);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->proxy, NULL);
  h->proxy_started = 0;
}

/* ---- loading and init ---- */

static void fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t len, const char *fmt, ...) {
  if (!err || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

static int open_profiler(nbh_host *h, const char *path, const nbh_comm *c, char *err, size_t len) {
  h->prof_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h->prof_lib) {
    const char *why = dlerror();
    fail(err, len, "cannot load NCCL_PROFILER_PLUGIN %s: %s", path, why ? why : "?");
    return -1;
  }
  h->prof = dlsym(h->prof_lib, "ncclProfiler_v6");
  h->stats.profiler_version = 6;
  if (!h->prof) {
    h->prof = dlsym(h->prof_lib, "ncclProfiler_v5");
    h->stats.profiler_version = 5;
  }
  if (!h->prof) {
    fail(err, len, "%s exports neither ncclProfiler_v6 nor ncclProfiler_v5", path);
    return -1;
  }
  uint64_t t0 = mono_ns();
  ncclResult_t rc = h->prof->init(&h->pctx, c->comm_id, &h->mask, c->comm_name, c->nnodes,
                                  c->nranks, c->rank, nbh_logger);
  h->stats.host_ns += mono_ns() - t0;
  if (rc != ncclSuccess) { /* NCCL: "Profiler init failed ... Continue without profiler" */
    nbh_logger(NCCL_LOG_INFO, NCCL_INIT, "simhost.c", __LINE__,
               "Profiler init failed with error '%d': Continue without profiler", (int)rc);
    h->prof = NULL;
    h->pctx = NULL;
    h->stats.profiler_version = 0;
  }
  return 0;
}

static int open_tuner(nbh_host *h, const char *path, const nbh_comm *c, char *err, size_t len) {
  h->tuner_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h->tuner_lib) {
    const char *why = dlerror();
    fail(err, len, "cannot load NCCL_TUNER_PLUGIN %s: %s", path, why ? why : "?");
    return -1;
  }
  ncclbotTunerInit_v5 init = NULL;
  const ncclbotTuner_v6 *v6 = dlsym(h->tuner_lib, "ncclTunerPlugin_v6");
  if (v6) {
    init = v6->init;
    h->get_coll_info = v6->getCollInfo;
    h->tuner_finalize = v6->finalize;
    h->stats.tuner_version = 6;
  } else {
    const ncclbotTuner_v5 *v5 = dlsym(h->tuner_lib, "ncclTunerPlugin_v5");
    if (!v5) {
      fail(err, len, "%s exports neither ncclTunerPlugin_v6 nor ncclTunerPlugin_v5", path);
      return -1;
    }
    init = v5->init;
    h->get_coll_info = v5->getCollInfo;
    h->tuner_finalize = v5->finalize;
    h->stats.tuner_version = 5;
  }
  nbh_logger(NCCL_LOG_INFO, NCCL_INIT | NCCL_TUNING, "simhost.c", __LINE__,
             "TUNER/Plugin: Using %s (v%d)", path, h->stats.tuner_version);
  ncclbotNvlDomainInfo_v5 nvl = {c->nvl_domains, c->nvl_min_ranks, c->nvl_max_ranks};
  ncclbotTunerConstants_v5 constants;
  memset(&constants, 0, sizeof constants);
  if (c->constants) memcpy(&constants, c->constants, sizeof constants);
  uint64_t t0 = mono_ns();
  ncclResult_t rc = init(&h->tctx, c->comm_id, (size_t)c->nranks, (size_t)c->nnodes, nbh_logger,
                         &nvl, &constants);
  h->stats.host_ns += mono_ns() - t0;
  if (rc != ncclSuccess) { /* NCCLCHECK around tuner init: the communicator fails */
    fail(err, len, "tuner init of %s failed with error %d", path, (int)rc);
    h->get_coll_info = NULL;
    return -1;
  }
  return 0;
}

EXPORT int nbh_close(nbh_host *h, uint64_t *host_ns, nbh_stats *final);

/*
 * nbh_open: load the plugin(s) and initialise one communicator, profiler first.
 * tuner_path/profiler_path may be NULL (that plugin is not loaded). Returns NULL with the
 * reason in err when NCCL's init would fail (library missing, no symbol, tuner init error).
 */
EXPORT nbh_host *nbh_open(const char *tuner_path, const char *profiler_path, const nbh_comm *c,
                          char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  g_log_level = c->log_level;
  nbh_host *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->rank = c->rank;
  h->gpu_ns = wall_ns();
  calibrate_clock();
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->work, NULL);
  pthread_cond_init(&h->space, NULL);
  couple_open(h, c);
  if ((profiler_path && open_profiler(h, profiler_path, c, err, errlen) != 0) ||
      (tuner_path && open_tuner(h, tuner_path, c, err, errlen) != 0)) {
    nbh_close(h, NULL, NULL);
    return NULL;
  }
  if (h->prof) {
    if (pthread_create(&h->proxy, NULL, proxy_main, h) != 0) {
      fail(err, errlen, "cannot start the proxy thread");
      nbh_close(h, NULL, NULL);
      return NULL;
    }
    h->proxy_started = 1;
  }
  return h;
}

/* NCCL's version as the plugin may read it (ncclGetVersion of the library holding the
 * logger, plugin/src/table.c): the NCCL this host stands in for. */
EXPORT ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  *version = 23007; /* 2.30.7 */
  return ncclSuccess;
}

/* NCCL's selection after the tuner (reference 3.5): first entry >= 0 strictly below the best. */
static int first_minimum(float table[7][3]) {
  int best = -1;
  float best_v = 3.402823466e38f;
  for (int a = 0; a < 7; a++)
    for (int p = 0; p < 3; p++) {
      float v = table[a][p];
      if (v == -1.0f) continue;
      if (v >= 0.0f && v < best_v) best = a * 3 + p, best_v = v;
    }
  return best;
}

/*
 * nbh_choose: one collective's algorithm and protocol. table: 21 floats [algo][proto], -1
 * unavailable (not modified). *arm = algo*3+proto, or -1 when nothing is available. *nch =
 * the tuner's channel request (0 = NCCL decides). *host_ns += host ns of getCollInfo (span_close).
 * Returns getCollInfo's result (non-zero fails the collective, as NCCLCHECK does).
 */
EXPORT int nbh_choose(nbh_host *h, int coll, uint64_t nbytes, const float *table, int *arm,
                      int *nch, uint64_t *host_ns) {
  float copy[7][3];
  memcpy(copy, table, sizeof copy);
  int channels = 0;
  ncclResult_t rc = ncclSuccess;
  couple_wait(h);
  if (h->get_coll_info && h->tctx) {
    nbh_span sp = span_open();
    rc = h->get_coll_info(h->tctx, coll, (size_t)nbytes, 1, (float **)copy, 7, 3, 0, &channels);
    uint64_t dt = span_close(sp);
    h->stats.host_ns += dt;
    if (host_ns) *host_ns += dt;
  }
  h->stats.calls++;
  *arm = rc == ncclSuccess ? first_minimum(copy) : -1;
  *nch = channels;
  return (int)rc;
}

/*
 * nbh_played: the profiler events of one collective that ran `arm` on `nch` channels and
 * took lat_us on the GPU. The Coll event starts and stops here; its kernel-channel events
 * go to the proxy thread (this waits only when NBH_RING collectives are still undelivered).
 * count and dtype are the Coll descriptor's (per-rank count, "ncclFloat32"). *host_ns += host
 * ns of startEvent/stopEvent (span_close). The simulated GPU clock advances by the latency plus that.
 */
EXPORT void nbh_played(nbh_host *h, int coll, uint64_t count, const char *dtype, int arm, int nch,
                       double lat_us, uint64_t *host_ns) {
  uint64_t lat_ns = lat_us > 0.0 ? (uint64_t)(lat_us * 1000.0 + 0.5) : 1;
  uint64_t start = h->gpu_ns, spent = 0;
  if (h->prof && (h->mask & (NCCLBOT_PROF_COLL | NCCLBOT_PROF_KERNEL_CH)) && coll >= 0 && coll < 5 &&
      arm >= 0 && arm < 21) {
    ncclbotProfDescr_v6 d;
    memset(&d, 0, sizeof d);
    d.type = NCCLBOT_PROF_COLL;
    d.rank = h->rank;
    d.coll.seqNumber = h->seq[coll]++;
    d.coll.func = k_funcs[coll];
    d.coll.count = (size_t)count;
    d.coll.root = 0;
    d.coll.datatype = dtype;
    d.coll.nChannels = (uint8_t)(nch > 0 ? nch : 1);
    d.coll.nWarps = 16;
    d.coll.algo = k_algos[arm / 3];
    d.coll.proto = k_protos[arm % 3];
    void *eh = NULL;
    nbh_span sp = span_open();
    h->prof->startEvent(h->pctx, &eh, &d);
    if (eh) h->prof->stopEvent(eh); /* "enqueued" */
    spent = span_close(sp);
    h->stats.collectives++;
    if (eh && (h->mask & NCCLBOT_PROF_KERNEL_CH) && h->proxy_started) {
      pthread_mutex_lock(&h->mu);
      while (h->head - h->tail >= NBH_RING) pthread_cond_wait(&h->space, &h->mu);
      h->ring[h->head % NBH_RING] = (nbh_job){eh, start, lat_ns, d.coll.nChannels};
      h->head++;
      pthread_cond_signal(&h->work);
      pthread_mutex_unlock(&h->mu);
    }
  }
  h->stats.host_ns += spent;
  if (host_ns) *host_ns += spent;
  h->gpu_ns = start + lat_ns + spent;
}

/*
 * nbh_sync: what cudaStreamSynchronize is to nccl-tests at the end of a timed loop: returns
 * once the proxy thread has delivered the kernel events of every collective played so far.
 * Caller's thread; not counted as plugin time (it is the GPU's).
 */
EXPORT void nbh_sync(nbh_host *h) {
  if (!h->proxy_started) return;
  pthread_mutex_lock(&h->mu);
  while (h->head != h->tail) pthread_cond_wait(&h->space, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

/* nbh_stats_get: counters so far (the proxy's are final after nbh_close). Caller's thread. */
EXPORT void nbh_stats_get(nbh_host *h, nbh_stats *out) {
  pthread_mutex_lock(&h->mu);
  *out = h->stats;
  pthread_mutex_unlock(&h->mu);
}

/*
 * nbh_close: finalize in NCCL's order: the proxy thread delivers what it holds and stops,
 * then tuner finalize, then profiler finalize, then both libraries are dlclosed. *host_ns
 * receives the ns inside the two finalize calls and *final the last counters (either may be
 * NULL). Returns the tuner finalize's result. Frees h.
 */
EXPORT int nbh_close(nbh_host *h, uint64_t *host_ns, nbh_stats *final) {
  if (!h) return 0;
  proxy_stop(h);
  ncclResult_t rc = ncclSuccess;
  uint64_t t0 = mono_ns();
  if (h->tuner_finalize && h->get_coll_info) rc = h->tuner_finalize(h->tctx);
  if (h->prof && h->pctx) h->prof->finalize(h->pctx);
  uint64_t dt = mono_ns() - t0;
  h->stats.host_ns += dt;
  if (host_ns) *host_ns = dt;
  if (final) *final = h->stats;
  if (h->tuner_lib) dlclose(h->tuner_lib);
  if (h->prof_lib) dlclose(h->prof_lib);
  pthread_cond_destroy(&h->work);
  pthread_cond_destroy(&h->space);
  pthread_mutex_destroy(&h->mu);
  if (h->couple) munmap(h->couple, 4096);
  if (h->couple_name[0] && h->couple_waits == 0) shm_unlink(h->couple_name);
  free(h);
  return (int)rc;
}
