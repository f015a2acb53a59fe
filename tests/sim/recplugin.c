/*
 * recplugin.c: a recording tuner+profiler plugin for the plugin-host tests (not a product file).
 * Every callback appends one line to $REC_LOG: what was called, from which thread, with what.
 * REC_SPIN_US makes getCollInfo compute that long (thread CPU time: host time must show it),
 * REC_BLOCK_US makes it sleep that long (a wait the simulated host does not charge); REC_FORCE=<arm>
 * writes 0.0 into that entry; REC_FAIL_INIT=1 fails tuner init, REC_FAIL_CALL=1 every
 * getCollInfo. -DREC_V5_ONLY exports
 * ncclTunerPlugin_v5 only.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*logger_t)(int, unsigned long, const char *, int, const char *, ...);
static logger_t g_log;

static void rec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void rec(const char *fmt, ...) {
  const char *path = getenv("REC_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "tid=%ld ", (long)syscall(SYS_gettid));
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int t_init(void **ctx, uint64_t comm, size_t nranks, size_t nnodes, logger_t log, void *nvl,
                  void *constants) {
  const int *d = nvl;
  const double *c = constants;
  g_log = log;
  rec("tinit comm=%llx nranks=%zu nnodes=%zu nvl=%d,%d,%d base0=%g", (unsigned long long)comm, nranks,
      nnodes, d[0], d[1], d[2], c[0]);
  if (log) log(3, 0x40, "recplugin.c", __LINE__, "rec tuner up for %zu ranks", nranks);
  if (getenv("REC_FAIL_INIT")) return 2;
  *ctx = (void *)0x1;
  return 0;
}

static int t_get(void *ctx, int coll, size_t nbytes, int pipe, float **table, int na, int np, int reg,
                 int *nch) {
  (void)ctx, (void)pipe, (void)reg, (void)nch;
  float (*t)[3] = (float (*)[3])table;
  rec("gci coll=%d bytes=%zu na=%d np=%d ring_simple=%g", coll, nbytes, na, np, t[1][2]);
  const char *spin_us = getenv("REC_SPIN_US");
  if (spin_us) {
    uint64_t until = cpu_ns() + 1000ull * (uint64_t)atoll(spin_us);
    while (cpu_ns() < until) {
    }
  }
  const char *block_us = getenv("REC_BLOCK_US");
  if (block_us) usleep((useconds_t)atoll(block_us));
  if (getenv("REC_FAIL_CALL")) return 2; /* ncclSystemError: NCCL fails the collective */
  const char *force = getenv("REC_FORCE");
  if (force) {
    int arm = atoi(force);
    if (t[arm / 3][arm % 3] != -1.0f) t[arm / 3][arm % 3] = 0.0f;
  }
  return 0;
}

static int t_fin(void *ctx) {
  rec("tfin ctx=%p", ctx);
  return 0;
}

typedef struct {
  const char *name;
  void *init, *get, *fin, *chunk;
} tuner6;

#ifndef REC_V5_ONLY
EXPORT const tuner6 ncclTunerPlugin_v6 = {"rec", (void *)t_init, (void *)t_get, (void *)t_fin, NULL};
#endif
EXPORT const struct {
  const char *name;
  void *init, *get, *fin;
} ncclTunerPlugin_v5 = {"rec", (void *)t_init, (void *)t_get, (void *)t_fin};

/* ---- profiler ---- */

typedef struct {
  uint64_t type;
  void *parent;
  int rank;
  union {
    struct {
      uint64_t seq;
      const char *func;
      const void *send;
      void *recv;
      size_t count;
      int root;
      const char *dtype;
      uint8_t nch, nwarps;
      const char *algo, *proto;
    } coll;
    struct {
      uint8_t ch;
      uint64_t timer;
    } kch;
    unsigned char pad[88];
  };
} descr;

static int g_handles[1 << 16];
static int g_next;

static int p_init(void **ctx, uint64_t comm, int *mask, const char *name, int nnodes, int nranks, int rank,
                  logger_t log) {
  (void)log;
  rec("pinit comm=%llx name=%s nnodes=%d nranks=%d rank=%d", (unsigned long long)comm, name, nnodes, nranks,
      rank);
  *mask = (1 << 1) | (1 << 6);
  *ctx = (void *)0x2;
  return 0;
}

static int p_start(void *ctx, void **h, void *d_) {
  (void)ctx;
  descr *d = d_;
  int id = g_next++ & 0xffff;
  *h = &g_handles[id];
  if (d->type == (1 << 1))
    rec("pstart coll h=%d seq=%llu func=%s count=%zu dtype=%s nch=%d algo=%s proto=%s", id,
        (unsigned long long)d->coll.seq, d->coll.func, d->coll.count, d->coll.dtype, d->coll.nch, d->coll.algo,
        d->coll.proto);
  else
    rec("pstart kch h=%d parent=%d ch=%d start=%llu", id, (int)((int *)d->parent - g_handles), d->kch.ch,
        (unsigned long long)d->kch.timer);
  return 0;
}

static int p_stop(void *h) {
  rec("pstop h=%d", (int)((int *)h - g_handles));
  return 0;
}

static int p_record(void *h, int state, void *args) {
  rec("record h=%d state=%d stop=%llu", (int)((int *)h - g_handles), state,
      (unsigned long long)*(uint64_t *)args);
  return 0;
}

static int p_fin(void *ctx) {
  rec("pfin ctx=%p", ctx);
  return 0;
}

EXPORT const struct {
  const char *name;
  void *init, *start, *stop, *record, *fin;
} ncclProfiler_v6 = {"rec", (void *)p_init, (void *)p_start, (void *)p_stop, (void *)p_record, (void *)p_fin};
