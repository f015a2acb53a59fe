/* sync.c: see sync.h. */
#include "sync.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

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

/* Reads until one whole message is buffered or the deadline passes; 1 = message, 0 = timeout, -1 = closed. */
static int read_msg(nb_sync *s, uint64_t deadline, nb_wire_hdr *h, const char **payload) {
  for (;;) {
    if (s->rlen >= sizeof *h) {
      memcpy(h, s->rbuf, sizeof *h);
      if (h->magic != NB_WIRE_MAGIC || h->len > NB_WIRE_MAX_PAYLOAD) return -1;
      if (s->rlen >= sizeof *h + h->len) {
        *payload = s->rbuf + sizeof *h;
        return 1;
      }
    }
    uint64_t now = nb_now_ns();
    int ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
    struct pollfd p = {s->fd, POLLIN, 0};
    int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? 0 : -1;
    ssize_t k = recv(s->fd, s->rbuf + s->rlen, sizeof s->rbuf - s->rlen, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    s->rlen += (size_t)k;
  }
}

static void consume(nb_sync *s, const nb_wire_hdr *h) {
  size_t n = sizeof *h + h->len;
  memmove(s->rbuf, s->rbuf + n, s->rlen - n);
  s->rlen -= n;
}

nb_sync *nb_sync_open(const nb_config *cfg, uint64_t comm_id, int nranks, int rank,
                      int can_learn, uint64_t fingerprint, char *why, size_t whylen) {
  nb_sync *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(why, whylen, "out of memory");
    return NULL;
  }
  s->fd = -1;
  s->m = cfg->sync_every;
  s->applied = 1;
  s->held = 1;
  for (int i = 0; i < NB_RES_RING; i++) {
    s->have[i] = -1;
    s->res[i] = malloc(s->m * sizeof(float));
    if (!s->res[i]) {
      snprintf(why, whylen, "out of memory");
      nb_sync_close(s);
      return NULL;
    }
  }
  s->fd = connect_to(cfg->sync_host, cfg->sync_port, cfg->sync_init_timeout_ms);
  if (s->fd < 0) {
    snprintf(why, whylen, "cannot connect to the coordinator at %s:%d (%s)", cfg->sync_host,
             cfg->sync_port, strerror(errno));
    nb_sync_close(s);
    return NULL;
  }
  size_t tl = strlen(cfg->sync_token);
  char buf[sizeof(nb_hello) + 256];
  nb_hello hello = {comm_id, fingerprint, (uint32_t)nranks, (uint32_t)rank, s->m,
                    (uint32_t)(can_learn != 0), (uint32_t)tl, 0};
  memcpy(buf, &hello, sizeof hello);
  memcpy(buf + sizeof hello, cfg->sync_token, tl);
  if (send_msg(s->fd, NB_MSG_HELLO, 0, 0, buf, (uint32_t)(sizeof hello + tl)) != 0) {
    snprintf(why, whylen, "cannot send HELLO to the coordinator at %s:%d", cfg->sync_host,
             cfg->sync_port);
    nb_sync_close(s);
    return NULL;
  }
  nb_wire_hdr h;
  const char *pl;
  uint64_t deadline = nb_now_ns() + (uint64_t)cfg->sync_init_timeout_ms * 1000000ULL;
  int r = read_msg(s, deadline, &h, &pl);
  if (r == 1 && h.type == NB_MSG_START) {
    consume(s, &h);
    return s;
  }
  if (r == 1 && h.type == NB_MSG_REJECT)
    snprintf(why, whylen, "the coordinator refused this communicator: %.*s", (int)h.len, pl);
  else
    snprintf(why, whylen, "no START from the coordinator at %s:%d within %u ms (%s)",
             cfg->sync_host, cfg->sync_port, cfg->sync_init_timeout_ms,
             r == 0 ? "timeout" : "connection closed or bad reply");
  nb_sync_close(s);
  return NULL;
}

int nb_sync_submit(nb_sync *s, int64_t round, uint64_t checksum, const float *lat) {
  return send_msg(s->fd, NB_MSG_SUBMIT, round, checksum, lat, s->m * (uint32_t)sizeof(float));
}

const float *nb_sync_result(const nb_sync *s, int64_t round) {
  int i = (int)(round % NB_RES_RING);
  return s->have[i] == round ? s->res[i] : NULL;
}

/* Reads messages until RESULT(round) (round >= 0) or a verdict. */
static int wait_for(nb_sync *s, int64_t round, uint32_t timeout_ms, int64_t *freeze_f, int *fail,
                    char *why, size_t whylen) {
  uint64_t deadline = nb_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
  for (;;) {
    nb_wire_hdr h;
    const char *pl;
    int r = read_msg(s, deadline, &h, &pl);
    if (r <= 0) {
      if (round >= 0)
        snprintf(why, whylen, "%s while waiting for round %lld",
                 r == 0 ? "coordinator timeout" : "coordinator connection lost", (long long)round);
      else
        snprintf(why, whylen, "%s while waiting for its verdict",
                 r == 0 ? "no answer from the coordinator" : "coordinator connection lost");
      return r == 0 ? NB_WAIT_TIMEOUT : NB_WAIT_FAIL;
    }
    if (h.type == NB_MSG_RESULT && h.len == s->m * sizeof(float)) {
      int i = (int)(h.round % NB_RES_RING);
      memcpy(s->res[i], pl, h.len);
      s->have[i] = h.round;
      if (h.round > s->held) s->held = h.round;
      consume(s, &h);
      if (h.round == round) return NB_WAIT_OK;
      continue;
    }
    if (h.type == NB_MSG_FREEZE || h.type == NB_MSG_FAIL) {
      *freeze_f = h.round;
      *fail = h.type == NB_MSG_FAIL;
      consume(s, &h);
      snprintf(why, whylen, "the coordinator %s this communicator after round %lld",
               *fail ? "failed" : "froze", (long long)h.round);
      return NB_WAIT_FREEZE;
    }
    snprintf(why, whylen, "unexpected message %u from the coordinator", h.type);
    consume(s, &h);
    return NB_WAIT_FAIL;
  }
}

int nb_sync_wait(nb_sync *s, int64_t round, uint32_t timeout_ms, int64_t *freeze_f, int *fail,
                 char *why, size_t whylen) {
  if (nb_sync_result(s, round)) return NB_WAIT_OK;
  return wait_for(s, round, timeout_ms, freeze_f, fail, why, whylen);
}

int nb_sync_verdict(nb_sync *s, uint32_t timeout_ms, int64_t *freeze_f, int *fail, char *why,
                    size_t whylen) {
  return wait_for(s, -1, timeout_ms, freeze_f, fail, why, whylen);
}

void nb_sync_send(nb_sync *s, uint32_t type, int64_t round) {
  if (s && s->fd >= 0) (void)send_msg(s->fd, type, round, 0, NULL, 0);
}

void nb_sync_close(nb_sync *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  for (int i = 0; i < NB_RES_RING; i++) free(s->res[i]);
  free(s);
}
