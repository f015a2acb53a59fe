/*
 * lag.c: a GPU far behind its host, driven as NCCL drives the plugin: the user thread
 * calls getCollInfo and starts each collective; a second thread (NCCL's proxy thread)
 * delivers the kernel-channel events of collective t only once the host has issued
 * t + LAG. Collective t's GPU time is unique (10 us + t ns), so the trace shows which
 * collective each pull was credited with.
 *   build/ncclbot-lag CALLS LAG TRACE_DIR
 * Prints "lag LAG: P pull rows, M measured, W wrong, U unmatched samples, D profiler
 * drops" and exits 1 when a pull got another collective's latency (W > 0).
 * Built with the plugin's objects; `make tsan` builds it under ThreadSanitizer.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_abi.h"
#include "state.h"

extern const ncclbotTuner_v6 ncclTunerPlugin_v6;
extern const ncclbotProfiler_v5 ncclProfiler_v6;

#define NCTX 5
#define NCH 2

typedef struct {
  void *h;
  long t;
} item;

static item *g_items;
static long g_issued, g_delivered, g_calls, g_lag; /* atomics */
static void *g_pctx;

static uint64_t lat_ns(long t) { return 10000 + (uint64_t)t; }
static size_t bytes_of(long k) { return (size_t)(1u << 20) << k; }

static void *proxy(void *arg) {
  (void)arg;
  for (long t = 0; t < g_calls; t++) {
    while (__atomic_load_n(&g_issued, __ATOMIC_ACQUIRE) <= (t + g_lag < g_calls ? t + g_lag : g_calls - 1))
      sched_yield();
    item it = g_items[t];
    if (it.h) {
      for (int ch = 0; ch < NCH; ch++) {
        ncclbotProfDescr_v6 k;
        memset(&k, 0, sizeof k);
        k.type = NCCLBOT_PROF_KERNEL_CH;
        k.parentObj = it.h;
        k.kernelCh.channelId = (uint8_t)ch;
        k.kernelCh.pTimer = 1000000;
        void *kh = NULL;
        ncclProfiler_v6.startEvent(g_pctx, &kh, &k);
        ncclbotProfStateArgs_v4 a = {.kernelCh = {1000000 + (ch ? lat_ns(t) - 7 : lat_ns(t))}};
        ncclProfiler_v6.recordEventState(kh, NCCLBOT_PROF_STATE_KERNEL_CH_STOP, &a);
        ncclProfiler_v6.stopEvent(kh);
      }
    }
    __atomic_store_n(&g_delivered, t + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void host(void *tctx) {
  static const char *const algos[] = {"TREE", "RING"};
  static const char *const protos[] = {"LL", "LL128", "SIMPLE"};
  int nch = 0;
  for (long t = 0; t < g_calls; t++) {
    while (t - __atomic_load_n(&g_delivered, __ATOMIC_ACQUIRE) > g_lag + 8) sched_yield();
    long k = t % NCTX;
    float table[21];
    for (int i = 0; i < 21; i++) table[i] = -1.0f;
    for (int a = 0; a < 6; a++) table[a] = 20.0f + (float)((a * 7 + k * 3) % 11);
    ncclTunerPlugin_v6.getCollInfo(tctx, 4, bytes_of(k), 1, (float **)(void *)table, 7, 3, 0, &nch);
    int arm = -1;
    for (int a = 0; a < 6 && arm < 0; a++)
      if (table[a] == 0.0f) arm = a;
    ncclbotProfDescr_v6 d;
    memset(&d, 0, sizeof d);
    d.type = NCCLBOT_PROF_COLL;
    d.coll.func = "AllReduce";
    d.coll.datatype = "ncclFloat32";
    d.coll.count = bytes_of(k) / 4;
    d.coll.nChannels = NCH;
    d.coll.algo = algos[arm / 3];
    d.coll.proto = protos[arm % 3];
    void *h = NULL;
    ncclProfiler_v6.startEvent(g_pctx, &h, &d);
    ncclProfiler_v6.stopEvent(h);
    g_items[t] = (item){h, t};
    __atomic_store_n(&g_issued, t + 1, __ATOMIC_RELEASE);
  }
}

/* Checks every pull row of the trace in dir against the collective it stands for. */
static int check(const char *dir, unsigned long long unmatched, unsigned long long drops) {
  char path[4200], line[512];
  snprintf(path, sizeof path, "%s/ncclbot-%016llx-r0.csv", dir, 0x1a6ULL);
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("no trace at %s\n", path);
    return 1;
  }
  long rows = 0, measured = 0, wrong = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "pull,", 5) != 0) continue;
    char *col[16];
    int n = 0;
    for (char *p = line, *q; n < 16 && p; p = q) {
      q = strchr(p, ',');
      if (q) *q++ = '\0';
      col[n++] = p;
    }
    if (n < 13) continue;
    rows++;
    if (!col[12][0]) continue;
    measured++;
    unsigned long long size = strtoull(col[7], NULL, 10);
    long k = 0;
    while (k < NCTX && bytes_of(k) != size) k++;
    long t = strtol(col[8], NULL, 10) * NCTX + k;
    long got = (long)(strtod(col[12], NULL) * 1000.0 + 0.5);
    if (got != (long)lat_ns(t)) wrong++;
  }
  fclose(f);
  printf("lag %ld: %ld pull rows, %ld measured, %ld wrong, %llu unmatched samples, %llu profiler "
         "drops\n", g_lag, rows, measured, wrong, unmatched, drops);
  return wrong > 0 || rows != g_calls;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s CALLS LAG TRACE_DIR\n", argv[0]);
    return 2;
  }
  g_calls = atol(argv[1]);
  g_lag = atol(argv[2]);
  setenv("NCCLBOT_POLICY", "ucb1", 1);
  setenv("NCCLBOT_UCB_ALPHA", "0.5", 1);
  setenv("NCCLBOT_MIN_BYTES", "0", 1);
  setenv("NCCLBOT_TRACE_DIR", argv[3], 1);
  unsetenv("NCCLBOT_SYNC_ADDR");
  g_items = calloc((size_t)g_calls, sizeof *g_items);
  void *tctx = NULL;
  int mask = 0;
  ncclProfiler_v6.init(&g_pctx, 0x1a6, &mask, "lag", 1, 1, 0, NULL);
  ncclTunerPlugin_v6.init(&tctx, 0x1a6, 1, 1, NULL, NULL, NULL);
  if (!tctx || !g_items) return 2;
  pthread_t th;
  pthread_create(&th, NULL, proxy, NULL);
  host(tctx);
  pthread_join(th, NULL);
  nb_comm *c = tctx;
  unsigned long long unmatched = c->n_unmatched;
  unsigned long long drops = __atomic_load_n(&c->n_prof_dropped, __ATOMIC_RELAXED);
  ncclTunerPlugin_v6.finalize(tctx);
  ncclProfiler_v6.finalize(g_pctx);
  free(g_items);
  return check(argv[3], unmatched, drops);
}
