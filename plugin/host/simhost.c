/*
 * simhost.c: the simulated fabric's stand-in for NCCL 2.30 around the real plugin library.
 *
 * The simulator (ncclbot_sweep/sim/pluginhost.py, through ctypes) owns the latency model and
 * the nccl-tests output; this host owns what must be honest C: loading the library the way
 * NCCL does, calling it in NCCL's order from NCCL's threads, and launching asynchronously on
 * a simulated clock, as NCCL does on a GPU. Facts: docs/nccl-plugin-abi.md.
 *
 * Two clocks per rank process, in simulated nanoseconds:
 *   host    advances by the plugin's own time in its calls (the calling thread's CPU time,
 *           so that eight rank processes sharing two cores do not turn scheduling into plugin
 *           cost), by NCCL's enqueue time per launch (the fabric's constant), and by waits:
 *           a full launch queue (1,024 kernels pending), a stream synchronisation, or the
 *           plugin waiting in getCollInfo (ncclbotSimAwait below);
 *   stream  a kernel starts when the stream is free and every rank of the communicator has
 *           launched it (their launch times meet in a shared page), and ends when the
 *           collective's GPU time has passed: rank 0's draw, the same for every rank, since a
 *           collective ends together on all of them. Host time hides behind the queue as on
 *           a GPU. Each rank's kernel timers still measure its own draw (the sample).
 * A kernel's KernelCh events reach the plugin, from the proxy thread, once the host clock
 * passes its end plus the proxy's polling delay; the Coll start and stop come on the caller's
 * thread right after getCollInfo (a graph replay's from another thread, as CUDA's host
 * callback issues them). So a reward arrives as many collectives late as the host ran ahead.
 *
 *   open      dlopen NCCL_PROFILER_PLUGIN and NCCL_TUNER_PLUGIN (one file through both gives
 *             one handle), profiler init (v6, else v5), then tuner init (v6, else v5) with
 *             commId, nRanks, nNodes, an NCCL-style logger, NVL domain info and constants;
 *   choose    deliver what is due, getCollInfo on a copy of the 7x3 cost table, then NCCL's
 *             first-minimum scan (NCCL 2.30's: it loads tuner v6 or v5 and exports
 *             ncclGetVersion = 2.30.7, so the plugin knows which scan follows);
 *   played    the Coll event (start, stop = "enqueued"), NCCL's enqueue time, the launch;
 *   compute   the application's own work between collectives (a workload's compute gap): host
 *             time, then a kernel on the same stream that no profiler event reports and that
 *             starts without waiting for the other ranks;
 *   sync      cudaStreamSynchronize: the host waits for its stream;
 *   close     deliver every event, tuner finalize, profiler finalize, dlclose both.
 *
 * What this leaves out: a rank's own timer noise does not move when its collective ends (rank
 * 0's draw does, for all), the proxy thread polls with a fixed delay, NCCL's host time per
 * launch is one constant, and the coordinator answers a fixed round trip after the last
 * rank's sample arrived (the samples of a collective arrive together on every rank).
 *
 * Thread safety: one host per process and communicator; its calls come from one thread. The
 * logger may be called from any thread (the plugin logs from the proxy thread too).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../src/nccl_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define NBH_RING 4096 /* kernels a host remembers: > 2 x the launch queue (see couple_slot) */

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

/* The fabric's host-side timing (mirrored in pluginhost.py; values in ncclbot_sweep.sim.fabrics). */
typedef struct {
  int64_t enqueue_ns;  /* NCCL's host time to enqueue and launch one collective */
  int64_t events_ns;   /* from a kernel's end to its KernelCh events reaching the plugin */
  int64_t rtt_ns;      /* the coordinator's answer after the last rank's sample */
  int queue_depth;     /* kernels a stream may have pending before a launch blocks */
} nbh_timing;

typedef struct {
  uint64_t calls;          /* getCollInfo calls */
  uint64_t collectives;    /* Coll events started */
  uint64_t kernel_events;  /* KernelCh events delivered by the proxy thread */
  uint64_t host_ns;        /* caller-thread CPU ns inside plugin calls (init, calls, finalize) */
  uint64_t proxy_ns;       /* proxy-thread ns inside plugin calls */
  uint64_t waits;          /* ncclbotSimAwait calls (the plugin waited for samples) */
  int64_t wait_ns;         /* simulated ns the host spent in them */
  int tuner_version, profiler_version;
} nbh_stats;

typedef struct {
  void *parent;        /* the plugin's Coll handle; NULL: no kernel events */
  int64_t launch;      /* host clock at the launch */
  int64_t lat;         /* this rank's GPU time (its kernel timers measure it) */
  int64_t start, end;  /* stream: once known (end: start + rank 0's GPU time) */
  double lat_us;       /* as served (the iteration time adds the idle before the start) */
  int nch;
  int first;           /* first launch after a stream synchronisation */
  int solo;            /* the application's compute kernel: starts without the other ranks */
} nbh_kernel;

/* One (kernel slot, rank) of the shared page: when the rank launched it, and its draw. */
typedef struct {
  int64_t launch, lat;
  uint64_t seq; /* kernel index + 1 once both are written (release) */
  uint64_t pad;
} nbh_slot;

typedef struct {
  uint32_t mapped; /* ranks that mapped the page (the name is removed once all have) */
  uint32_t pad;
  nbh_slot slot[];  /* [NBH_RING][nranks] */
} nbh_shared;

typedef struct nbh_host {
  void *tuner_lib, *prof_lib;
  ncclbotGetCollInfo_v4 get_coll_info;
  ncclbotTunerFinalize tuner_finalize;
  const ncclbotProfiler_v5 *prof;
  void *tctx, *pctx;
  int mask; /* NCCL's process-wide activation mask, which the profiler sets */
  int rank, nranks;
  uint64_t comm_id;
  uint64_t seq[5];
  int64_t epoch_ns; /* %globaltimer at simulated time 0 (wall clock at open) */
  nbh_timing timing;
  nbh_stats stats;
  /* clocks and kernels (caller's thread) */
  int64_t clock;
  nbh_kernel ring[NBH_RING];
  uint64_t launched, known, delivered; /* kernels launched / with start and end / delivered */
  int synced; /* no launch since the last stream synchronisation */
  uint64_t nbound;                 /* Coll starts the plugin took (its bind ordinals) ... */
  uint64_t bound_kernel[NBH_RING]; /* ... and their kernels, by ordinal */
  /* inside one getCollInfo: what ncclbotSimAwait advanced */
  int in_call, awaited;
  int64_t await_clock;
  uint64_t await_cpu;
  /* proxy thread: delivers kernels [delivered, deliver_to) and KernelCh events of replays */
  pthread_t proxy;
  int proxy_started;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  uint64_t deliver_to, delivered_by_proxy;
  const ncclbotProfDescr_v6 *replay_coll; /* a replay's Coll event for the proxy to issue */
  void *replay_handle;
  int stop;
  /* coupling of the rank processes */
  nbh_shared *couple;
  size_t couple_bytes;
  char couple_name[64];
  struct nbh_host *next_host; /* the process's hosts, for ncclbotSimAwait */
} nbh_host;

static pthread_mutex_t g_hosts_mu = PTHREAD_MUTEX_INITIALIZER;
static nbh_host *g_hosts;

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

/* ---- real clocks: what the plugin's calls cost ---- */

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

/* CPU ns since `since` (a thread_ns reading), less the thread clock's own cost. */
static uint64_t cpu_since(uint64_t since) {
  uint64_t d = thread_ns() - since;
  return d > g_clock_cost_ns ? d - g_clock_cost_ns : 0;
}

static int64_t wall_ns(void) { return (int64_t)clock_ns(CLOCK_REALTIME); }

/*
 * ---- coupling: the rank processes' launches meet in one shared page ----
 *
 * A kernel cannot start until every rank of the communicator has launched it. Each rank
 * process writes, per kernel, when it launched it and its GPU time into a page of POSIX
 * shared memory named by the communicator and the launching process. A rank that needs a
 * peer's launch waits (real time) until the peer wrote it: the slowest rank never waits
 * (every peer launched more than it), so no wait is circular. A slot is reused NBH_RING
 * kernels later, which no peer can still need: launching kernel k + NBH_RING needs kernel
 * k + NBH_RING - 1024 ended, so every rank launched past k + 3,000. A peer silent for 10 s
 * is gone: this rank runs on alone.
 */
#define NBH_COUPLE_TIMEOUT_S 10

static nbh_slot *couple_slot(nbh_host *h, uint64_t k, int rank) {
  return &h->couple->slot[(k % NBH_RING) * (uint64_t)h->nranks + (uint64_t)rank];
}

static void couple_open(nbh_host *h, const nbh_comm *c) {
  if (!c->couple || c->nranks < 2) return;
  snprintf(h->couple_name, sizeof h->couple_name, "/ncclbot-sim-%016llx-%ld",
           (unsigned long long)c->comm_id, (long)getppid());
  h->couple_bytes = sizeof(nbh_shared) + (size_t)NBH_RING * (size_t)c->nranks * sizeof(nbh_slot);
  int fd = shm_open(h->couple_name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return; /* uncoupled: the simulation still runs, each rank on its own launches */
  if (ftruncate(fd, (off_t)h->couple_bytes) == 0) { /* fresh pages are zero: nothing written */
    void *p = mmap(NULL, h->couple_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) h->couple = p;
  }
  close(fd);
  if (h->couple && __atomic_add_fetch(&h->couple->mapped, 1, __ATOMIC_ACQ_REL) == (uint32_t)c->nranks)
    shm_unlink(h->couple_name); /* every rank has it mapped now */
}

/* Waits until every rank wrote kernel k; the latest launch over ranks, and rank 0's draw. */
static void couple_read(nbh_host *h, uint64_t k, int64_t *launch, int64_t *lat0) {
  for (int r = 0; h->couple && r < h->nranks; r++) {
    if (r == h->rank) continue;
    nbh_slot *s = couple_slot(h, k, r);
    uint64_t deadline = 0;
    for (int spins = 0; __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != k + 1; spins++) {
      if (spins < 64) continue;
      if (!deadline) deadline = mono_ns() + NBH_COUPLE_TIMEOUT_S * 1000000000ull;
      if (mono_ns() > deadline) {
        nbh_logger(NCCL_LOG_WARN, NCCL_INIT, "simhost.c", __LINE__,
                   "NCCLBOT-SIM: no launch from a peer rank process for %d s; this rank runs on alone",
                   NBH_COUPLE_TIMEOUT_S);
        munmap(h->couple, h->couple_bytes);
        h->couple = NULL;
        return;
      }
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
    if (s->launch > *launch) *launch = s->launch;
    if (r == 0) *lat0 = s->lat;
  }
}

static void couple_write(nbh_host *h, uint64_t k, int64_t launch, int64_t lat) {
  if (!h->couple) return;
  nbh_slot *s = couple_slot(h, k, h->rank);
  s->launch = launch;
  s->lat = lat;
  __atomic_store_n(&s->seq, k + 1, __ATOMIC_RELEASE);
}

/* ---- the stream ---- */

static nbh_kernel *kernel(nbh_host *h, uint64_t k) { return &h->ring[k % NBH_RING]; }

/* Start and end of every kernel up to k (each waits for every rank's launch of it). */
static void know(nbh_host *h, uint64_t k) {
  for (; h->known <= k && h->known < h->launched; h->known++) {
    nbh_kernel *q = kernel(h, h->known);
    int64_t free_at = h->known ? kernel(h, h->known - 1)->end : 0;
    int64_t launched = q->launch, span = q->lat;
    if (!q->solo) couple_read(h, h->known, &launched, &span);
    q->start = launched > free_at ? launched : free_at;
    q->end = q->start + span;
  }
}

/* When kernel k's events reach the plugin. */
static int64_t arrival(nbh_host *h, uint64_t k) {
  know(h, k);
  return kernel(h, k)->end + h->timing.events_ns;
}

/* ---- the proxy thread: kernel-channel events, as NCCL's proxy progress thread sends them ---- */

/* The KernelCh events of one kernel; returns the ns spent inside the profiler's calls. */
static uint64_t deliver_kernel(nbh_host *h, const nbh_kernel *q) {
  uint64_t spent = 0;
  for (int ch = 0; ch < q->nch; ch++) {
    /* Channel 0 spans the whole kernel; the others finish a little earlier, so the maximum
     * over channels of stop - start is exactly the served latency. */
    int64_t dur = ch == 0 ? q->lat : q->lat - q->lat / 16;
    ncclbotProfDescr_v6 d;
    memset(&d, 0, sizeof d);
    d.type = NCCLBOT_PROF_KERNEL_CH;
    d.parentObj = q->parent;
    d.rank = h->rank;
    d.kernelCh.channelId = (uint8_t)ch;
    d.kernelCh.pTimer = (uint64_t)(h->epoch_ns + q->start);
    ncclbotProfStateArgs_v4 stop;
    memset(&stop, 0, sizeof stop);
    stop.kernelCh.pTimer = (uint64_t)(h->epoch_ns + q->start + dur);
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
    while (h->delivered_by_proxy == h->deliver_to && !h->replay_coll && !h->stop)
      pthread_cond_wait(&h->work, &h->mu);
    if (h->replay_coll) { /* a graph replay's Coll event, as CUDA's host callback thread issues it */
      const ncclbotProfDescr_v6 *d = h->replay_coll;
      pthread_mutex_unlock(&h->mu);
      void *eh = NULL;
      h->prof->startEvent(h->pctx, &eh, (void *)d);
      if (eh) h->prof->stopEvent(eh);
      pthread_mutex_lock(&h->mu);
      h->replay_handle = eh;
      h->replay_coll = NULL;
      pthread_cond_broadcast(&h->done);
      continue;
    }
    if (h->delivered_by_proxy == h->deliver_to) break; /* stopping, and everything is delivered */
    nbh_kernel q = *kernel(h, h->delivered_by_proxy);
    pthread_mutex_unlock(&h->mu);
    uint64_t spent = q.parent ? deliver_kernel(h, &q) : 0;
    pthread_mutex_lock(&h->mu); /* the proxy's counters are read under the same lock */
    h->stats.proxy_ns += spent;
    h->stats.kernel_events += q.parent ? (uint64_t)q.nch : 0;
    h->delivered_by_proxy++;
    pthread_cond_broadcast(&h->done);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* The proxy delivers kernels [delivered, upto); returns once it has (the caller's clock says
 * they are due, so the plugin must have them before it goes on). */
static void deliver_through(nbh_host *h, uint64_t upto) {
  if (upto <= h->delivered) return;
  if (!h->proxy_started) {
    h->delivered = upto;
    return;
  }
  pthread_mutex_lock(&h->mu);
  h->deliver_to = upto;
  pthread_cond_signal(&h->work);
  while (h->delivered_by_proxy < upto) pthread_cond_wait(&h->done, &h->mu);
  pthread_mutex_unlock(&h->mu);
  h->delivered = upto;
}

/* Deliver every kernel whose events are due at host time t. A kernel whose start this rank
 * alone already puts too late (peers can only delay it) needs no peer's launch. */
static void deliver_due(nbh_host *h, int64_t t) {
  uint64_t k = h->delivered;
  int64_t free_at = k ? kernel(h, k - 1)->end : 0; /* delivered kernels are known */
  for (; k < h->launched; k++) {
    nbh_kernel *q = kernel(h, k);
    if (k >= h->known) {
      int64_t start = q->launch > free_at ? q->launch : free_at;
      if (start + h->timing.events_ns > t) break;
      know(h, k);
    }
    if (q->end + h->timing.events_ns > t) break;
    free_at = q->end;
  }
  deliver_through(h, k);
}

static void proxy_stop(nbh_host *h) {
  if (!h->proxy_started) return;
  pthread_mutex_lock(&h->mu);
  h->stop = 1;
  h->deliver_to = h->launched;
  pthread_cond_signal(&h->work);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->proxy, NULL);
  h->proxy_started = 0;
  h->delivered = h->launched;
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
  uint64_t t0 = thread_ns();
  ncclResult_t rc = h->prof->init(&h->pctx, c->comm_id, &h->mask, c->comm_name, c->nnodes,
                                  c->nranks, c->rank, nbh_logger);
  h->stats.host_ns += cpu_since(t0);
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
  uint64_t t0 = thread_ns();
  ncclResult_t rc = init(&h->tctx, c->comm_id, (size_t)c->nranks, (size_t)c->nnodes, nbh_logger,
                         &nvl, &constants);
  h->stats.host_ns += cpu_since(t0);
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
                          const nbh_timing *timing, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  g_log_level = c->log_level;
  nbh_host *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->rank = c->rank;
  h->nranks = c->nranks;
  h->comm_id = c->comm_id;
  h->timing = *timing;
  if (h->timing.queue_depth < 1 || h->timing.queue_depth > NBH_RING / 4) h->timing.queue_depth = 1024;
  h->epoch_ns = wall_ns();
  h->synced = 1;
  calibrate_clock();
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->work, NULL);
  pthread_cond_init(&h->done, NULL);
  couple_open(h, c);
  pthread_mutex_lock(&g_hosts_mu); /* before the inits: the plugin may look for it from there on */
  h->next_host = g_hosts;
  g_hosts = h;
  pthread_mutex_unlock(&g_hosts_mu);
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

/*
 * ncclbotSimAwait: the plugin waits in getCollInfo (plugin/src/state.h): for the kernel events
 * of its Coll start `ordinal` and all before it (merged 0), or also for every rank's and the
 * coordinator's merge of them (merged 1). The host's clock moves to when that happens, and
 * every kernel due by then is delivered before this returns. Caller: the plugin, on the
 * thread inside nbh_choose; NCCL exports no such function.
 */
EXPORT void ncclbotSimAwait(uint64_t comm_id, int rank, uint32_t ordinal, int merged) {
  uint64_t t0 = thread_ns();
  nbh_host *h;
  pthread_mutex_lock(&g_hosts_mu);
  for (h = g_hosts; h && !(h->comm_id == comm_id && h->rank == rank); h = h->next_host) {
  }
  pthread_mutex_unlock(&g_hosts_mu);
  if (!h || !h->in_call || ordinal == 0 || ordinal > h->nbound || h->nbound - ordinal >= NBH_RING) return;
  uint64_t k = h->bound_kernel[ordinal % NBH_RING];
  int64_t t = arrival(h, k) + (merged ? h->timing.rtt_ns : 0); /* every rank's events come together */
  if (t > h->await_clock) h->await_clock = t;
  h->awaited = 1;
  h->stats.waits++;
  deliver_due(h, h->await_clock);
  h->await_cpu += cpu_since(t0);
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
 * nbh_choose: one collective's algorithm and protocol, at the host's clock: first every kernel
 * event due by now is delivered. table: 21 floats [algo][proto], -1 unavailable (not
 * modified). *arm = algo*3+proto, or -1 when nothing is available. *nch = the tuner's channel
 * request (0 = NCCL decides). *host_ns += the plugin's CPU time in getCollInfo; the clock
 * advances by it, and to the end of any wait ncclbotSimAwait stood for. Returns getCollInfo's
 * result (non-zero fails the collective, as NCCLCHECK does).
 */
EXPORT int nbh_choose(nbh_host *h, int coll, uint64_t nbytes, const float *table, int *arm,
                      int *nch, uint64_t *host_ns) {
  float copy[7][3];
  memcpy(copy, table, sizeof copy);
  int channels = 0;
  ncclResult_t rc = ncclSuccess;
  deliver_due(h, h->clock);
  if (h->get_coll_info && h->tctx) {
    h->in_call = 1;
    h->awaited = 0;
    h->await_clock = h->clock;
    h->await_cpu = 0;
    uint64_t t0 = thread_ns();
    rc = h->get_coll_info(h->tctx, coll, (size_t)nbytes, 1, (float **)copy, 7, 3, 0, &channels);
    uint64_t cpu = cpu_since(t0);
    h->in_call = 0;
    cpu = cpu > h->await_cpu ? cpu - h->await_cpu : 0;
    h->stats.host_ns += cpu;
    if (host_ns) *host_ns += cpu;
    h->clock += (int64_t)cpu;
    if (h->awaited && h->await_clock > h->clock) {
      h->stats.wait_ns += h->await_clock - h->clock;
      h->clock = h->await_clock;
    }
  }
  h->stats.calls++;
  *arm = rc == ncclSuccess ? first_minimum(copy) : -1;
  *nch = channels;
  return (int)rc;
}

/* A full launch queue: the host waits until the oldest pending kernel ends. */
static void wait_for_queue(nbh_host *h) {
  uint64_t depth = (uint64_t)h->timing.queue_depth;
  if (h->launched < depth) return;
  uint64_t k = h->launched - depth;
  know(h, k);
  if (kernel(h, k)->end > h->clock) h->clock = kernel(h, k)->end;
  deliver_due(h, h->clock);
}

/* The Coll event of a graph replay, from the proxy thread (CUDA's host callback runs it). */
static void *replay_coll_event(nbh_host *h, const ncclbotProfDescr_v6 *d) {
  pthread_mutex_lock(&h->mu);
  h->replay_coll = d;
  pthread_cond_signal(&h->work);
  while (h->replay_coll) pthread_cond_wait(&h->done, &h->mu);
  void *eh = h->replay_handle;
  pthread_mutex_unlock(&h->mu);
  return eh;
}

/*
 * nbh_played: one collective that runs `arm` on `nch` channels for lat_us of GPU time. Its Coll
 * event starts and stops here (replay 1: a CUDA graph's replay, whose Coll event CUDA's host
 * callback thread issues: the proxy thread here), NCCL enqueues it (the fabric's enqueue time)
 * and launches it; a launch with the queue full waits for the oldest kernel. count and dtype
 * are the Coll descriptor's (per-rank count, "ncclFloat32"). *host_ns += the plugin's CPU time
 * in the Coll event. Returns the kernel's index (nbh_times).
 */
EXPORT uint64_t nbh_played(nbh_host *h, int coll, uint64_t count, const char *dtype, int arm, int nch,
                           double lat_us, int replay, uint64_t *host_ns) {
  void *eh = NULL;
  uint64_t spent = 0;
  int channels = nch > 0 ? nch : 1;
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
    d.coll.nChannels = (uint8_t)channels;
    d.coll.nWarps = 16;
    d.coll.algo = k_algos[arm / 3];
    d.coll.proto = k_protos[arm % 3];
    if (replay && h->proxy_started) {
      eh = replay_coll_event(h, &d);
    } else {
      uint64_t t0 = thread_ns();
      h->prof->startEvent(h->pctx, &eh, &d);
      if (eh) h->prof->stopEvent(eh); /* "enqueued" */
      spent = cpu_since(t0);
    }
    h->stats.collectives++;
  }
  h->stats.host_ns += spent;
  if (host_ns) *host_ns += spent;
  h->clock += (int64_t)spent + h->timing.enqueue_ns;
  wait_for_queue(h);
  uint64_t k = h->launched;
  nbh_kernel *q = kernel(h, k);
  memset(q, 0, sizeof *q);
  q->parent = (h->mask & NCCLBOT_PROF_KERNEL_CH) && h->proxy_started ? eh : NULL;
  q->launch = h->clock;
  q->lat_us = lat_us > 0.0 ? lat_us : 0.001;
  q->lat = lat_us > 0.0 ? (int64_t)(lat_us * 1000.0 + 0.5) : 1;
  q->nch = channels;
  q->first = h->synced;
  if (eh && !replay) { /* the plugin took this collective as a pull: remember its kernel */
    h->nbound++;
    h->bound_kernel[h->nbound % NBH_RING] = k;
  }
  couple_write(h, k, q->launch, q->lat);
  h->launched++;
  h->synced = 0;
  return k;
}

/*
 * nbh_compute: the application's own work between two collectives. The host is busy for host_ns
 * (the framework's CPU time, its kernel launches included), delivering the events due meanwhile;
 * then, when gpu_ns > 0, one kernel of gpu_ns runs on the stream after whatever is queued there.
 * It is no collective: no profiler event reports it, and it starts without waiting for the
 * other ranks (it still takes a kernel index, so every rank's indices stay aligned as long as
 * every rank runs the same program). Returns its kernel index, or UINT64_MAX without one.
 * Caller's thread.
 */
EXPORT uint64_t nbh_compute(nbh_host *h, int64_t host_ns, int64_t gpu_ns) {
  if (host_ns > 0) h->clock += host_ns;
  deliver_due(h, h->clock);
  if (gpu_ns <= 0) return UINT64_MAX;
  wait_for_queue(h);
  uint64_t k = h->launched;
  nbh_kernel *q = kernel(h, k);
  memset(q, 0, sizeof *q);
  q->launch = h->clock;
  q->lat = gpu_ns;
  q->lat_us = (double)gpu_ns / 1000.0;
  q->nch = 1;
  q->first = h->synced;
  q->solo = 1;
  h->launched++;
  h->synced = 0;
  return k;
}

/*
 * nbh_sync: cudaStreamSynchronize at the end of nccl-tests' loop (and after each iteration
 * with -z 1): the host clock moves to the end of this rank's last kernel; the events due by
 * then are delivered. Caller's thread.
 */
EXPORT void nbh_sync(nbh_host *h) {
  if (h->launched) {
    know(h, h->launched - 1);
    int64_t end = kernel(h, h->launched - 1)->end;
    if (end > h->clock) h->clock = end;
  }
  deliver_due(h, h->clock);
  h->synced = 1;
}

/*
 * nbh_times: the iteration times of kernels [first, first + n) as CUDA events on the stream
 * measure them (us): the served latency plus the time the stream sat idle before the kernel
 * started, waiting for a launch (none for the first kernel after a synchronisation: nccl-tests
 * starts its timer with the loop). Known for every kernel up to the last synchronisation.
 * Returns 0, or -1 when a kernel is not known (or forgotten: more than the ring ago).
 */
EXPORT int nbh_times(nbh_host *h, uint64_t first, uint64_t n, double *out_us, double *idle_us) {
  if (first + n > h->known || h->launched - first > NBH_RING) return -1;
  for (uint64_t i = 0; i < n; i++) {
    const nbh_kernel *q = kernel(h, first + i);
    double idle = 0.0;
    if (!q->first && first + i > 0) {
      int64_t free_at = kernel(h, first + i - 1)->end;
      idle = q->start > free_at ? (double)(q->start - free_at) / 1000.0 : 0.0;
    }
    out_us[i] = q->lat_us + idle;
    if (idle_us) idle_us[i] = idle;
  }
  return 0;
}

/* nbh_clock: the host clock (simulated ns since open). */
EXPORT int64_t nbh_clock(nbh_host *h) { return h->clock; }

/* nbh_stats_get: counters so far (the proxy's are final after nbh_close). Caller's thread. */
EXPORT void nbh_stats_get(nbh_host *h, nbh_stats *out) {
  pthread_mutex_lock(&h->mu);
  *out = h->stats;
  pthread_mutex_unlock(&h->mu);
}

/*
 * nbh_close: finalize in NCCL's order: the proxy thread delivers every kernel's events and
 * stops, then tuner finalize, then profiler finalize, then both libraries are dlclosed.
 * *host_ns receives the ns inside the two finalize calls and *final the last counters (either
 * may be NULL). Returns the tuner finalize's result. Frees h.
 */
EXPORT int nbh_close(nbh_host *h, uint64_t *host_ns, nbh_stats *final) {
  if (!h) return 0;
  if (h->launched) know(h, h->launched - 1);
  proxy_stop(h);
  ncclResult_t rc = ncclSuccess;
  uint64_t t0 = thread_ns();
  if (h->tuner_finalize && h->get_coll_info) rc = h->tuner_finalize(h->tctx);
  if (h->prof && h->pctx) h->prof->finalize(h->pctx);
  uint64_t dt = cpu_since(t0);
  h->stats.host_ns += dt;
  if (host_ns) *host_ns = dt;
  if (final) *final = h->stats;
  pthread_mutex_lock(&g_hosts_mu);
  for (nbh_host **p = &g_hosts; *p; p = &(*p)->next_host)
    if (*p == h) {
      *p = h->next_host;
      break;
    }
  pthread_mutex_unlock(&g_hosts_mu);
  if (h->tuner_lib) dlclose(h->tuner_lib);
  if (h->prof_lib) dlclose(h->prof_lib);
  pthread_cond_destroy(&h->work);
  pthread_cond_destroy(&h->done);
  pthread_mutex_destroy(&h->mu);
  if (h->couple) {
    if (__atomic_load_n(&h->couple->mapped, __ATOMIC_ACQUIRE) < (uint32_t)h->nranks)
      shm_unlink(h->couple_name); /* a peer never came: nobody else will remove it */
    munmap(h->couple, h->couple_bytes);
  }
  free(h);
  return (int)rc;
}
