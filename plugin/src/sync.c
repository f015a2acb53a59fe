/* sync.c: see sync.h. */
#define _GNU_SOURCE
#include "clock.h"
#include "sync.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wire.h"

#define LOAD(p) __atomic_load_n(p, __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELEASE)

static int send_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int send_msg(int fd, uint32_t type, int64_t round, uint64_t a, const void *payload,
                    uint32_t len) {
  nb_wire_hdr h = {NB_WIRE_MAGIC, type, round, a, len, NB_WIRE_VERSION};
  if (send_all(fd, &h, sizeof h) != 0) return -1;
  return len ? send_all(fd, payload, len) : 0;
}

static int connect_to(const char *host, int port, uint32_t timeout_ms) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0 || !res) return -1;
  int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return -1;
  }
  /* Retry while the coordinator is starting, up to the timeout. */
  uint64_t deadline = nb_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
  while (connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    if (nb_now_ns() > deadline || (errno != ECONNREFUSED && errno != EINTR)) {
      close(fd);
      freeaddrinfo(res);
      return -1;
    }
    close(fd);
    fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    usleep(20000);
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

/* One whole message buffered in s->rbuf: 1 (header and payload set), 0 (not yet), -1 (bad). */
static int buffered_msg(nb_sync *s, nb_wire_hdr *h, const char **payload) {
  if (s->rlen < sizeof *h) return 0;
  memcpy(h, s->rbuf, sizeof *h);
  if (h->magic != NB_WIRE_MAGIC || h->len > NB_WIRE_MAX_PAYLOAD) return -1;
  if (s->rlen < sizeof *h + h->len) return 0;
  *payload = s->rbuf + sizeof *h;
  return 1;
}

static int recv_some(nb_sync *s, int timeout_ms) {
  struct pollfd p = {s->fd, POLLIN, 0};
  int r = poll(&p, 1, timeout_ms);
  if (r < 0 && errno == EINTR) return 0;
  if (r <= 0) return r;
  ssize_t k = recv(s->fd, s->rbuf + s->rlen, sizeof s->rbuf - s->rlen, 0);
  if (k < 0 && errno == EINTR) return 0;
  if (k <= 0) return -1;
  s->rlen += (size_t)k;
  return 1;
}

static void consume(nb_sync *s, const nb_wire_hdr *h) {
  size_t n = sizeof *h + h->len;
  memmove(s->rbuf, s->rbuf + n, s->rlen - n);
  s->rlen -= n;
}

/* ---------- the sync thread ---------- */

static void publish_lost(nb_sync *s, const char *why) {
  if (LOAD(&s->lost)) return;
  pthread_mutex_lock(&s->mu);
  snprintf(s->lost_why, sizeof s->lost_why, "%s", why);
  STORE(&s->lost, 1);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Handles one received message; -1 on a protocol error. */
static int on_message(nb_sync *s, const nb_wire_hdr *h, const char *pl) {
  if (h->type == NB_MSG_RESULT && h->len == s->m * sizeof(float) && h->round >= 0) {
    uint32_t i = (uint32_t)(h->round % s->nres);
    memcpy(s->res[i], pl, h->len);
    pthread_mutex_lock(&s->mu);
    STORE(&s->have[i], h->round);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  if (h->type == NB_MSG_FREEZE || h->type == NB_MSG_FAIL) {
    pthread_mutex_lock(&s->mu);
    if (!LOAD(&s->verdict)) {
      s->verdict_round = h->round;
      STORE(&s->verdict, (int)h->type);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  return -1;
}

/* Sends what the user thread queued; returns -1 when the socket failed. */
static int flush_outbox(nb_sync *s) {
  uint64_t head = LOAD(&s->out_head);
  int rc = 0;
  while (s->out_tail < head) {
    uint32_t i = (uint32_t)(s->out_tail % NB_OUT_RING);
    if (rc == 0 && !LOAD(&s->lost) &&
        send_msg(s->fd, s->out_hdr[i].type, s->out_hdr[i].round, s->out_hdr[i].a, s->out[i],
                 s->out_hdr[i].len) != 0)
      rc = -1;
    pthread_mutex_lock(&s->mu);
    STORE(&s->out_tail, s->out_tail + 1);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
  return rc;
}

static void *sync_main(void *arg) {
  nb_sync *s = arg;
  for (;;) {
    struct pollfd p[2] = {{s->efd, POLLIN, 0}, {LOAD(&s->lost) ? -1 : s->fd, POLLIN, 0}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno != EINTR) break;
    if (p[0].revents & POLLIN) {
      uint64_t n;
      if (read(s->efd, &n, sizeof n) < 0 && errno != EAGAIN && errno != EINTR) break;
    }
    if (flush_outbox(s) != 0) publish_lost(s, "coordinator connection lost while sending");
    pthread_mutex_lock(&s->mu);
    int stopping = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stopping) break;
    if (!(p[1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (recv_some(s, 0) < 0) {
      publish_lost(s, "coordinator connection lost");
      continue;
    }
    nb_wire_hdr h;
    const char *pl;
    int k;
    while ((k = buffered_msg(s, &h, &pl)) == 1) {
      int bad = on_message(s, &h, pl);
      consume(s, &h);
      if (bad) {
        char why[96];
        snprintf(why, sizeof why, "unexpected message %u from the coordinator", h.type);
        publish_lost(s, why);
        break;
      }
    }
    if (k < 0) publish_lost(s, "garbled message from the coordinator");
  }
  flush_outbox(s);
  return NULL;
}

/* ---------- opening and closing ---------- */

static nb_sync *alloc_sync(const nb_config *cfg) {
  nb_sync *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->fd = s->efd = -1;
  s->m = cfg->sync_every;
  s->nres = cfg->sync_lag + 2;
  s->applied = s->stop_at = s->submitted = s->closed = -1;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&s->mu, NULL);
  s->have = malloc(s->nres * sizeof *s->have);
  s->res = calloc(s->nres, sizeof *s->res);
  int ok = s->have && s->res;
  for (uint32_t i = 0; ok && i < s->nres; i++) {
    s->have[i] = -1;
    ok = (s->res[i] = malloc(s->m * sizeof(float))) != NULL;
  }
  for (int i = 0; ok && i < NB_OUT_RING; i++) ok = (s->out[i] = malloc(s->m * sizeof(float))) != NULL;
  if (!ok) {
    nb_sync_close(s);
    return NULL;
  }
  return s;
}

/* HELLO: header fields, the token, and (can_learn 0) why. */
static int send_hello(int fd, const nb_config *cfg, uint64_t comm_id, int nranks, int rank,
                      int can_learn, uint64_t fingerprint, const char *refusal) {
  size_t tl = strlen(cfg->sync_token), wl = refusal ? strnlen(refusal, 1024) : 0;
  char buf[sizeof(nb_hello) + 256 + 1024];
  nb_hello hello = {comm_id, fingerprint, (uint32_t)nranks, (uint32_t)rank, cfg->sync_every,
                    (uint32_t)(can_learn != 0), (uint32_t)tl, cfg->sync_lag, (uint32_t)wl, 0};
  memcpy(buf, &hello, sizeof hello);
  memcpy(buf + sizeof hello, cfg->sync_token, tl);
  if (wl) memcpy(buf + sizeof hello + tl, refusal, wl);
  return send_msg(fd, NB_MSG_HELLO, 0, 0, buf, (uint32_t)(sizeof hello + tl + wl));
}

int nb_sync_refuse(const nb_config *cfg, uint64_t comm_id, int nranks, int rank, const char *why,
                   uint32_t timeout_ms) {
  int fd = connect_to(cfg->sync_host, cfg->sync_port, timeout_ms);
  if (fd < 0) return -1;
  int rc = send_hello(fd, cfg, comm_id, nranks, rank < 0 ? 0 : rank, 0, 0, why);
  close(fd);
  return rc;
}

nb_sync *nb_sync_open(const nb_config *cfg, uint64_t comm_id, int nranks, int rank,
                      int can_learn, uint64_t fingerprint, char *why, size_t whylen) {
  nb_sync *s = alloc_sync(cfg);
  if (!s) {
    snprintf(why, whylen, "out of memory");
    return NULL;
  }
  s->fd = connect_to(cfg->sync_host, cfg->sync_port, cfg->sync_init_timeout_ms);
  if (s->fd < 0) {
    snprintf(why, whylen, "cannot connect to the coordinator at %s:%d (%s)", cfg->sync_host,
             cfg->sync_port, strerror(errno));
    nb_sync_close(s);
    return NULL;
  }
  const char *no_profiler = "learning needs the profiler: NCCL_PROFILER_PLUGIN is not this library";
  if (send_hello(s->fd, cfg, comm_id, nranks, rank, can_learn, fingerprint,
                 can_learn ? NULL : no_profiler) != 0) {
    snprintf(why, whylen, "cannot send HELLO to the coordinator at %s:%d", cfg->sync_host,
             cfg->sync_port);
    nb_sync_close(s);
    return NULL;
  }
  nb_wire_hdr h;
  const char *pl;
  uint64_t deadline = nb_now_ns() + (uint64_t)cfg->sync_init_timeout_ms * 1000000ULL;
  int r;
  while ((r = buffered_msg(s, &h, &pl)) == 0) {
    uint64_t now = nb_now_ns();
    if (now >= deadline) break;
    int got = recv_some(s, (int)((deadline - now + 999999) / 1000000));
    if (got < 0) {
      r = -1;
      break;
    }
  }
  if (r == 1 && h.type == NB_MSG_START) {
    consume(s, &h);
    s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->efd >= 0 && pthread_create(&s->thread, NULL, sync_main, s) == 0) {
      s->thread_started = 1;
      return s;
    }
    snprintf(why, whylen, "cannot start the synchronisation thread");
  } else if (r == 1 && h.type == NB_MSG_REJECT) {
    snprintf(why, whylen, "the coordinator refused this communicator: %.*s", (int)h.len, pl);
  } else {
    snprintf(why, whylen, "no START from the coordinator at %s:%d within %u ms (%s)",
             cfg->sync_host, cfg->sync_port, cfg->sync_init_timeout_ms,
             r == 0 ? "timeout" : "connection closed or bad reply");
  }
  nb_sync_close(s);
  return NULL;
}

static void wake(nb_sync *s) {
  uint64_t one = 1;
  if (s->efd >= 0 && write(s->efd, &one, sizeof one) < 0) { /* a full counter still wakes it */
  }
}

static struct timespec deadline_in(uint32_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static void push(nb_sync *s, uint32_t type, int64_t round, uint64_t a, const float *lat) {
  if (!s->thread_started || LOAD(&s->lost)) return;
  if (s->out_head - LOAD(&s->out_tail) >= NB_OUT_RING) { /* the sync thread is stuck sending */
    struct timespec ts = deadline_in(1000);
    pthread_mutex_lock(&s->mu);
    while (s->out_head - LOAD(&s->out_tail) >= NB_OUT_RING && !LOAD(&s->lost))
      if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&s->mu);
    if (s->out_head - LOAD(&s->out_tail) >= NB_OUT_RING) return; /* the next wait times out */
  }
  uint32_t i = (uint32_t)(s->out_head % NB_OUT_RING);
  s->out_hdr[i].type = type;
  s->out_hdr[i].round = round;
  s->out_hdr[i].a = a;
  s->out_hdr[i].len = lat ? s->m * (uint32_t)sizeof(float) : 0;
  if (lat) memcpy(s->out[i], lat, s->m * sizeof(float));
  STORE(&s->out_head, s->out_head + 1);
  wake(s);
}

void nb_sync_submit(nb_sync *s, int64_t round, uint64_t checksum, const float *lat) {
  push(s, NB_MSG_SUBMIT, round, checksum, lat);
}

void nb_sync_send(nb_sync *s, uint32_t type, int64_t round) {
  if (s) push(s, type, round, 0, NULL);
}

void nb_sync_close(nb_sync *s) {
  if (!s) return;
  if (s->thread_started) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    wake(s);
    pthread_join(s->thread, NULL);
  }
  if (s->fd >= 0) close(s->fd);
  if (s->efd >= 0) close(s->efd);
  for (uint32_t i = 0; s->res && i < s->nres; i++) free(s->res[i]);
  for (int i = 0; i < NB_OUT_RING; i++) free(s->out[i]);
  free(s->res);
  free(s->have);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* ---------- the user thread's view ---------- */

const float *nb_sync_result(const nb_sync *s, int64_t round) {
  if (round < 0) return NULL;
  uint32_t i = (uint32_t)(round % s->nres);
  return LOAD(&s->have[i]) == round ? s->res[i] : NULL;
}

int nb_sync_polled_verdict(nb_sync *s, int64_t *freeze_f, int *fail) {
  int v = LOAD(&s->verdict);
  if (!v) return 0;
  *freeze_f = s->verdict_round;
  *fail = v == NB_MSG_FAIL;
  return 1;
}

/* What the user thread waits for: RESULT(round) (round >= 0) or a verdict. */
static int ready(nb_sync *s, int64_t round, int64_t *freeze_f, int *fail) {
  if (round >= 0 && nb_sync_result(s, round)) return NB_WAIT_OK;
  if (nb_sync_polled_verdict(s, freeze_f, fail)) /* a result published before it is seen */
    return round >= 0 && nb_sync_result(s, round) ? NB_WAIT_OK : NB_WAIT_FREEZE;
  if (LOAD(&s->lost)) return NB_WAIT_FAIL;
  return NB_WAIT_TIMEOUT;
}

static int wait_for(nb_sync *s, int64_t round, uint32_t timeout_ms, int64_t *freeze_f, int *fail,
                    char *why, size_t whylen) {
  int r = ready(s, round, freeze_f, fail);
  if (r == NB_WAIT_TIMEOUT) {
    struct timespec ts = deadline_in(timeout_ms);
    pthread_mutex_lock(&s->mu);
    while ((r = ready(s, round, freeze_f, fail)) == NB_WAIT_TIMEOUT)
      if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) {
        r = ready(s, round, freeze_f, fail);
        break;
      }
    pthread_mutex_unlock(&s->mu);
  }
  if (r == NB_WAIT_FREEZE)
    snprintf(why, whylen, "the coordinator %s this communicator after round %lld",
             *fail ? "failed" : "froze", (long long)*freeze_f);
  else if (r == NB_WAIT_FAIL)
    snprintf(why, whylen, "%s%s", s->lost_why,
             round >= 0 ? " while waiting for a round's result" : " while waiting for its verdict");
  else if (r == NB_WAIT_TIMEOUT && round >= 0)
    snprintf(why, whylen, "coordinator timeout while waiting for round %lld", (long long)round);
  else if (r == NB_WAIT_TIMEOUT)
    snprintf(why, whylen, "no answer from the coordinator while waiting for its verdict");
  return r;
}

int nb_sync_wait(nb_sync *s, int64_t round, uint32_t timeout_ms, int64_t *freeze_f, int *fail,
                 char *why, size_t whylen) {
  if (nb_sync_result(s, round)) return NB_WAIT_OK;
  s->waits++;
  return wait_for(s, round, timeout_ms, freeze_f, fail, why, whylen);
}

int nb_sync_verdict(nb_sync *s, uint32_t timeout_ms, int64_t *freeze_f, int *fail, char *why,
                    size_t whylen) {
  return wait_for(s, -1, timeout_ms, freeze_f, fail, why, whylen);
}
