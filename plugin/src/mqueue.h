/*
 * mqueue.h: bounded lock-free multi-producer multi-consumer queue of
 * measurements (profiler/proxy thread -> tuner/user thread). Fixed capacity,
 * allocated at init; push on a full queue fails (the caller counts a drop).
 * Sequence-numbered cells (D. Vyukov's bounded MPMC design). A consumer that must
 * wait for a measurement sleeps on a futex (nb_mq_wait); a push wakes it only when
 * one announced itself, so the common push pays one atomic add and one load.
 */
#ifndef NCCLBOT_MQUEUE_H
#define NCCLBOT_MQUEUE_H

#include <linux/futex.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  uint64_t key;   /* context key: collective << 58 | bytes */
  uint64_t pull;  /* log index of the pull the collective was bound to at its start */
  float lat_us;   /* < 0: the sample was dropped (bad or missing timers) */
  uint8_t arm;
  uint8_t gen;    /* the record's generation (low byte) ... */
  uint16_t rec;   /* ... and index: the tuner hands the record back for reuse */
  uint32_t launched; /* collectives the rank had launched when the sample arrived */
} nb_meas;

typedef struct {
  uint64_t seq;
  nb_meas m;
} nb_mq_cell;

typedef struct {
  nb_mq_cell *cells;
  uint64_t mask;
  uint64_t head __attribute__((aligned(64))); /* producers */
  uint64_t tail __attribute__((aligned(64))); /* consumers */
  uint32_t pushes __attribute__((aligned(64))); /* bumped after each push: the futex word */
  uint32_t sleepers; /* a consumer sleeps (or is about to) on `pushes` */
} nb_mq;

static inline int nb_mq_init(nb_mq *q, uint64_t cap_pow2) {
  q->cells = calloc(cap_pow2, sizeof *q->cells);
  if (!q->cells) return -1;
  for (uint64_t i = 0; i < cap_pow2; i++) q->cells[i].seq = i;
  q->mask = cap_pow2 - 1;
  q->head = q->tail = 0;
  q->pushes = q->sleepers = 0;
  return 0;
}

static inline void nb_mq_free(nb_mq *q) {
  free(q->cells);
  q->cells = NULL;
}

static inline int nb_mq_push(nb_mq *q, const nb_meas *m) {
  uint64_t pos = __atomic_load_n(&q->head, __ATOMIC_RELAXED);
  for (;;) {
    nb_mq_cell *c = &q->cells[pos & q->mask];
    uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    int64_t dif = (int64_t)seq - (int64_t)pos;
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->head, &pos, pos + 1, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
        c->m = *m;
        __atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&q->pushes, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&q->sleepers, __ATOMIC_SEQ_CST))
          syscall(SYS_futex, &q->pushes, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        return 0;
      }
    } else if (dif < 0) {
      return -1; /* full */
    } else {
      pos = __atomic_load_n(&q->head, __ATOMIC_RELAXED);
    }
  }
}

static inline int nb_mq_pop(nb_mq *q, nb_meas *out) {
  uint64_t pos = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);
  for (;;) {
    nb_mq_cell *c = &q->cells[pos & q->mask];
    uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    int64_t dif = (int64_t)seq - (int64_t)(pos + 1);
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->tail, &pos, pos + 1, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
        *out = c->m;
        __atomic_store_n(&c->seq, pos + q->mask + 1, __ATOMIC_RELEASE);
        return 0;
      }
    } else if (dif < 0) {
      return -1; /* empty */
    } else {
      pos = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);
    }
  }
}

/* 1 when a pop would find a measurement (consumer side). */
static inline int nb_mq_ready(nb_mq *q) {
  uint64_t pos = __atomic_load_n(&q->tail, __ATOMIC_RELAXED);
  return __atomic_load_n(&q->cells[pos & q->mask].seq, __ATOMIC_ACQUIRE) == pos + 1;
}

/* Sleep until a measurement is queued or timeout_us passes (one consumer). The sleeper is
 * announced before `pushes` is read, and a push bumps `pushes` before it looks for a
 * sleeper, so a push either is seen before sleeping or wakes the sleep (both seq_cst). */
static inline void nb_mq_wait(nb_mq *q, uint64_t timeout_us) {
  __atomic_store_n(&q->sleepers, 1, __ATOMIC_SEQ_CST);
  uint32_t seen = __atomic_load_n(&q->pushes, __ATOMIC_SEQ_CST);
  if (!nb_mq_ready(q)) {
    struct timespec ts = {(time_t)(timeout_us / 1000000), (long)(timeout_us % 1000000) * 1000};
    syscall(SYS_futex, &q->pushes, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
  }
  __atomic_store_n(&q->sleepers, 0, __ATOMIC_RELAXED);
}

#endif
