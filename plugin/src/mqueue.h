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

typedef struct __attribute__((packed)) {
  uint64_t key;   /* context key: collective << 58 | bytes */
  uint64_t pull;  /* log index of the pull the collective was bound to at its start */
  float lat_us;   /* < 0: the sample was dropped (bad or missing timers) */
  uint32_t launched; /* collectives the rank had launched when the sample arrived */
  uint8_t arm;
  uint8_t gen;    /* the record's generation (low byte) ... */
  uint16_t rec;   /* ... and index: the tuner hands the record back for reuse */
} nb_meas;

/* Half a cache line: a pop reads one line. The sequence number is the low 32 bits of the
 * position it stands for (compared with wrap-around; capacity below 2^31). */
typedef struct {
  uint32_t seq;
  nb_meas m;
} nb_mq_cell;

_Static_assert(sizeof(nb_mq_cell) == 32, "two cells per cache line");

typedef struct {
  /* the consumer's line (the tuner's thread): one line per pop besides the cell */
  nb_mq_cell *cells;
  uint64_t mask;
  uint64_t tail;
  /* the producers' line (the proxy thread), with its own copy of cells and mask so that a
   * push never reads the line a pop writes */
  nb_mq_cell *pcells __attribute__((aligned(64)));
  uint64_t pmask;
  uint64_t head;
  uint32_t pushes; /* bumped after each push: the futex word */
  uint32_t sleepers; /* a consumer sleeps (or is about to) on `pushes` */
} nb_mq;

static inline int nb_mq_init(nb_mq *q, uint64_t cap_pow2) {
  q->cells = aligned_alloc(64, cap_pow2 * sizeof *q->cells);
  if (!q->cells) return -1;
  for (uint64_t i = 0; i < cap_pow2; i++) q->cells[i].seq = (uint32_t)i;
  q->mask = q->pmask = cap_pow2 - 1;
  q->pcells = q->cells;
  q->head = q->tail = 0;
  q->pushes = q->sleepers = 0;
  return 0;
}

static inline void nb_mq_free(nb_mq *q) {
  free(q->cells);
  q->cells = q->pcells = NULL;
}

static inline int nb_mq_push(nb_mq *q, const nb_meas *m) {
  uint64_t pos = __atomic_load_n(&q->head, __ATOMIC_RELAXED);
  for (;;) {
    nb_mq_cell *c = &q->pcells[pos & q->pmask];
    uint32_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    int32_t dif = (int32_t)(seq - (uint32_t)pos);
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->head, &pos, pos + 1, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
        c->m = *m;
        __atomic_store_n(&c->seq, (uint32_t)(pos + 1), __ATOMIC_RELEASE);
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
    uint32_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    int32_t dif = (int32_t)(seq - (uint32_t)(pos + 1));
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->tail, &pos, pos + 1, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
        *out = c->m;
        __atomic_store_n(&c->seq, (uint32_t)(pos + q->mask + 1), __ATOMIC_RELEASE);
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
  return __atomic_load_n(&q->cells[pos & q->mask].seq, __ATOMIC_ACQUIRE) == (uint32_t)(pos + 1);
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
