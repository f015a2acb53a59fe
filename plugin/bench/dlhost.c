/*
 * dlhost.c: the library's whole life as NCCL lives it, for LeakSanitizer: dlopen, a
 * learning communicator with a trace (init, calls, profiler events, finalize), a
 * communicator the coordinator refuses, then dlclose, as NCCL does at the end.
 *   build/asan/ncclbot-dlhost LIB TRACE_DIR COORD_ADDR
 * (COORD_ADDR: a coordinator whose token is not "wrong"). Exits 0 when it got that far.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_abi.h"

static void collective(const ncclbotProfiler_v5 *prof, void *pctx, int arm, unsigned long t) {
  static const char *const algos[] = {"TREE", "RING"};
  static const char *const protos[] = {"LL", "LL128", "SIMPLE"};
  ncclbotProfDescr_v6 d;
  memset(&d, 0, sizeof d);
  d.type = NCCLBOT_PROF_COLL;
  d.coll.func = "AllReduce";
  d.coll.datatype = "ncclFloat32";
  d.coll.count = (4u << 20) / 4;
  d.coll.nChannels = 1;
  d.coll.algo = algos[arm / 3];
  d.coll.proto = protos[arm % 3];
  void *h = NULL, *kh = NULL;
  prof->startEvent(pctx, &h, &d);
  prof->stopEvent(h);
  ncclbotProfDescr_v6 k;
  memset(&k, 0, sizeof k);
  k.type = NCCLBOT_PROF_KERNEL_CH;
  k.parentObj = h;
  k.kernelCh.pTimer = 1000;
  prof->startEvent(pctx, &kh, &k);
  ncclbotProfStateArgs_v4 a = {.kernelCh = {1000 + 20000 + t % 97}};
  prof->recordEventState(kh, NCCLBOT_PROF_STATE_KERNEL_CH_STOP, &a);
  prof->stopEvent(kh);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s LIB TRACE_DIR COORD_ADDR\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  const ncclbotTuner_v6 *tuner = dlsym(lib, "ncclTunerPlugin_v6");
  const ncclbotProfiler_v5 *prof = dlsym(lib, "ncclProfiler_v6");
  if (!tuner || !prof) return 2;

  setenv("NCCLBOT_POLICY", "ucb1", 1);
  setenv("NCCLBOT_MIN_BYTES", "0", 1);
  setenv("NCCLBOT_TRACE_DIR", argv[2], 1);
  void *pctx = NULL, *tctx = NULL;
  int mask = 0, nch = 0;
  prof->init(&pctx, 11, &mask, "dlhost", 1, 1, 0, NULL);
  tuner->init(&tctx, 11, 1, 1, NULL, NULL, NULL);
  for (unsigned long t = 0; t < 5000; t++) {
    float table[21];
    for (int i = 0; i < 21; i++) table[i] = i < 6 ? 20.0f + (float)(i % 4) : -1.0f;
    tuner->getCollInfo(tctx, 4, 4u << 20, 1, (float **)(void *)table, 7, 3, 0, &nch);
    int arm = 0;
    while (arm < 5 && table[arm] != 0.0f) arm++;
    collective(prof, pctx, arm, t);
  }
  tuner->finalize(tctx);
  prof->finalize(pctx);

  setenv("NCCLBOT_SYNC_ADDR", argv[3], 1);
  setenv("NCCLBOT_SYNC_TOKEN", "wrong", 1);
  setenv("NCCLBOT_SYNC_INIT_TIMEOUT_MS", "5000", 1);
  unsetenv("NCCLBOT_TRACE_DIR");
  pctx = tctx = NULL;
  prof->init(&pctx, 12, &mask, "dlhost", 1, 2, 0, NULL);
  tuner->init(&tctx, 12, 2, 1, NULL, NULL, NULL);
  if (tctx) return 1; /* refused: the tuner must stay inert */
  prof->finalize(pctx);

  dlclose(lib);
  puts("dlhost: done");
  return 0;
}
