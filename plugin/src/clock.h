/*
 * clock.h: the monotonic clock every waiting part reads (rounds, timeouts, the trace). The
 * bottom of the plugin's files: it includes nothing of ours.
 */
#ifndef NCCLBOT_CLOCK_H
#define NCCLBOT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t nb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#endif
