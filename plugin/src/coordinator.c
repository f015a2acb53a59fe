/* coordinator.c: see coordinator.h. Runs as its own process (coord_main.c) or in the bench. */
#define _GNU_SOURCE
#include "coordinator.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

#define BUF_CAP (sizeof(nb_wire_hdr) + NB_WIRE_MAX_PAYLOAD)

typedef struct {
  int fd;
  int session; /* -1 until HELLO */
  int bye;     /* said BYE: a clean end, not a crash */
  int64_t next_round; /* the round this rank submits next (they come in order) */
  size_t len;
  char buf[BUF_CAP];
} client;

/* One round being merged: every rank's latencies, the maximum kept per pull. */
typedef struct {
  int64_t round;
  uint32_t submitted;
  uint64_t checksum;
  int checksum_bad;
  float *acc;
} merge;

typedef struct {
  int used;
  uint64_t comm_id, fp;
  uint32_t nranks, m;
  int joined, started;
  uint32_t seen;     /* HELLOs seen, refused ones included */
  int rejected;      /* refused: every rank of it, present or late, gets REJECT at once */
  char why[160];     /* ... with this reason */
  uint32_t nslots;   /* rounds merging at once: lag + 1 (a slot per round, by round % nslots) */
  merge *slot;
  int64_t last_completed;
  int frozen;
  uint32_t verdict;  /* NB_MSG_FREEZE or NB_MSG_FAIL, once frozen */
  int64_t freeze_f;
} session;

static client **g_cl;
static size_t g_ncl;
static session *g_ss;
static size_t g_nss;

int nb_coord_listen(const char *host, int port, int *bound_port) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0 || !res) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return -1;
  }
  freeaddrinfo(res);
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  *bound_port = ntohs(sa.sin_port);
  return fd;
}

static void send_msg(int fd, uint32_t type, int64_t round, const void *pl, uint32_t len) {
  nb_wire_hdr h = {NB_WIRE_MAGIC, type, round, 0, len, NB_WIRE_VERSION};
  char out[sizeof h + NB_WIRE_MAX_PAYLOAD];
  memcpy(out, &h, sizeof h);
  if (len) memcpy(out + sizeof h, pl, len);
  size_t n = sizeof h + len, off = 0;
  while (off < n) {
    ssize_t k = send(fd, out + off, n - off, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return; /* the poll loop notices the dead client */
    off += (size_t)k;
  }
}

static void to_session(int s, uint32_t type, int64_t round, const void *pl, uint32_t len) {
  for (size_t i = 0; i < g_ncl; i++)
    if (g_cl[i]->session == s) send_msg(g_cl[i]->fd, type, round, pl, len);
}

/*
 * Stops a started communicator after its last completed round L (the verdict: every rank
 * acts at boundary L+lag+2, which none can have passed: that boundary needs round L+1). FREEZE: after a clean leave or when
 * a freeze-mode rank asks; FAIL: a crash, a fail-mode rank's timeout, diverging pulls.
 */
static void stop_session(int s, uint32_t verdict) {
  session *ss = &g_ss[s];
  if (!ss->started || ss->frozen) return;
  ss->frozen = 1;
  ss->verdict = verdict;
  ss->freeze_f = ss->last_completed;
  fprintf(stderr, "ncclbot-coordinator: communicator %016llx %s at round %lld\n",
          (unsigned long long)ss->comm_id, verdict == NB_MSG_FAIL ? "failed" : "frozen",
          (long long)ss->freeze_f);
  to_session(s, verdict, ss->freeze_f, NULL, 0);
}

/* Refuses a communicator that has not started: every rank joined so far, and every later
 * one, gets REJECT at once instead of waiting for its init timeout. */
static void reject_session(int s, const char *why) {
  session *ss = &g_ss[s];
  if (ss->rejected) return;
  ss->rejected = 1;
  snprintf(ss->why, sizeof ss->why, "%s", why);
  fprintf(stderr, "ncclbot-coordinator: communicator %016llx refused: %s\n",
          (unsigned long long)ss->comm_id, why);
  to_session(s, NB_MSG_REJECT, 0, ss->why, (uint32_t)strlen(ss->why));
}

static int token_ok(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  unsigned char diff = alen != blen;
  for (size_t i = 0; i < alen; i++) diff |= (unsigned char)(a[i] ^ b[i % (blen ? blen : 1)]);
  return diff == 0;
}

static void free_session(session *ss) {
  for (uint32_t k = 0; ss->slot && k < ss->nslots; k++) free(ss->slot[k].acc);
  free(ss->slot);
  memset(ss, 0, sizeof *ss);
}

static int find_session(const nb_hello *h) {
  for (size_t i = 0; i < g_nss; i++)
    if (g_ss[i].used && g_ss[i].comm_id == h->comm_id && !g_ss[i].started) return (int)i;
  size_t i = 0;
  while (i < g_nss && g_ss[i].used) i++;
  if (i == g_nss) {
    session *n = realloc(g_ss, (g_nss + 1) * sizeof *n);
    if (!n) return -1;
    g_ss = n;
    g_nss++;
  }
  memset(&g_ss[i], 0, sizeof g_ss[i]);
  g_ss[i].used = 1;
  g_ss[i].comm_id = h->comm_id;
  g_ss[i].fp = h->fingerprint;
  g_ss[i].nranks = h->nranks;
  g_ss[i].m = h->m;
  g_ss[i].last_completed = -1;
  g_ss[i].nslots = h->lag + 1;
  g_ss[i].slot = calloc(g_ss[i].nslots, sizeof(merge));
  int ok = g_ss[i].slot != NULL;
  for (uint32_t k = 0; ok && k < g_ss[i].nslots; k++)
    ok = (g_ss[i].slot[k].acc = calloc(h->m, sizeof(float))) != NULL;
  if (!ok) free_session(&g_ss[i]);
  return ok ? (int)i : -1;
}

/* Returns -1 to drop the client. */
static int on_hello(client *c, const nb_wire_hdr *h, const char *pl, const char *token) {
  if (c->session >= 0 || h->len < sizeof(nb_hello)) return -1;
  nb_hello hello;
  memcpy(&hello, pl, sizeof hello);
  if (hello.m == 0 || hello.m > 4096 || hello.nranks == 0 || hello.lag == 0 || hello.lag > 64)
    return -1;
  int bad_token = (uint64_t)hello.token_len + hello.why_len != h->len - sizeof hello ||
                  !token_ok(pl + sizeof hello, hello.token_len, token);
  int s = find_session(&hello);
  if (s < 0) return -1;
  session *ss = &g_ss[s];
  c->session = s;
  ss->seen++;
  if (bad_token) {
    const char *r = "bad token (NCCLBOT_SYNC_TOKEN differs from the coordinator's)";
    send_msg(c->fd, NB_MSG_REJECT, 0, r, (uint32_t)strlen(r));
    reject_session(s, "a rank presented a bad token (NCCLBOT_SYNC_TOKEN differs between ranks)");
    return -1;
  }
  char why[160];
  if (!hello.can_learn) {
    snprintf(why, sizeof why, "rank %u cannot learn: %.*s", hello.rank, (int)hello.why_len,
             pl + sizeof hello + hello.token_len);
    reject_session(s, why);
  } else if (hello.fingerprint != ss->fp || hello.m != ss->m || hello.nranks != ss->nranks ||
             hello.lag + 1 != ss->nslots) {
    snprintf(why, sizeof why,
             "rank %u's NCCLBOT_* settings or saved state differ from those of the ranks before it",
             hello.rank);
    reject_session(s, why);
  }
  if (ss->rejected) {
    send_msg(c->fd, NB_MSG_REJECT, 0, ss->why, (uint32_t)strlen(ss->why));
    return -1;
  }
  if (++ss->joined < (int)ss->nranks) return 0;
  ss->started = 1;
  to_session(s, NB_MSG_START, 0, NULL, 0);
  return 0;
}

static void on_submit(client *c, const nb_wire_hdr *h, const char *pl) {
  if (c->session < 0) return;
  session *ss = &g_ss[c->session];
  if (ss->frozen) {
    send_msg(c->fd, ss->verdict, ss->freeze_f, NULL, 0);
    return;
  }
  if (h->len != ss->m * sizeof(float)) return;
  merge *mg = &ss->slot[(uint64_t)h->round % ss->nslots];
  if (h->round != c->next_round || (mg->submitted > 0 && mg->round != h->round)) {
    fprintf(stderr, "ncclbot-coordinator: a rank sent round %lld out of order\n", (long long)h->round);
    stop_session(c->session, NB_MSG_FAIL);
    return;
  }
  c->next_round++;
  const float *lat = (const float *)(const void *)pl;
  if (mg->submitted == 0) {
    mg->round = h->round;
    mg->checksum = h->a;
    mg->checksum_bad = 0;
    memcpy(mg->acc, lat, h->len);
  } else {
    if (h->a != mg->checksum) mg->checksum_bad = 1;
    for (uint32_t i = 0; i < ss->m; i++) {
      float a = mg->acc[i], b;
      memcpy(&b, pl + i * sizeof(float), sizeof b);
      mg->acc[i] = (a < 0 || b < 0 || a != a || b != b) ? -1.0f : (a > b ? a : b);
    }
  }
  if (++mg->submitted < ss->nranks) return;
  mg->submitted = 0;
  if (mg->checksum_bad) {
    fprintf(stderr, "ncclbot-coordinator: ranks logged different pulls in round %lld\n",
            (long long)mg->round);
    stop_session(c->session, NB_MSG_FAIL);
    return;
  }
  ss->last_completed = mg->round;
  to_session(c->session, NB_MSG_RESULT, mg->round, mg->acc, h->len);
}

static void drop_client(size_t i) {
  client *c = g_cl[i];
  int s = c->session, bye = c->bye;
  close(c->fd);
  free(c);
  g_cl[i] = g_cl[--g_ncl];
  if (s < 0) return;
  int left = 0;
  for (size_t k = 0; k < g_ncl; k++) left += g_cl[k]->session == s;
  session *ss = &g_ss[s];
  if (left == 0 && (!ss->rejected || ss->seen >= ss->nranks)) {
    free_session(ss);
    return;
  }
  if (ss->rejected) return;
  if (ss->started) /* a rank left: the others cannot complete rounds */
    stop_session(s, bye ? NB_MSG_FREEZE : NB_MSG_FAIL);
  else
    ss->joined--;
}

/* Handles every whole message buffered for client i; returns -1 to drop it. */
static int on_readable(client *c, const char *token) {
  ssize_t k = recv(c->fd, c->buf + c->len, BUF_CAP - c->len, 0);
  if (k <= 0) return (k < 0 && errno == EINTR) ? 0 : -1;
  c->len += (size_t)k;
  while (c->len >= sizeof(nb_wire_hdr)) {
    nb_wire_hdr h;
    memcpy(&h, c->buf, sizeof h);
    if (h.magic != NB_WIRE_MAGIC || h.version != NB_WIRE_VERSION || h.len > NB_WIRE_MAX_PAYLOAD)
      return -1;
    if (c->len < sizeof h + h.len) break;
    const char *pl = c->buf + sizeof h;
    int rc = 0;
    switch (h.type) {
      case NB_MSG_HELLO: rc = on_hello(c, &h, pl, token); break;
      case NB_MSG_SUBMIT: on_submit(c, &h, pl); break;
      case NB_MSG_FREEZE: /* a rank timed out: its round does not matter, L decides */
      case NB_MSG_FAIL:
        if (c->session >= 0) stop_session(c->session, h.type);
        break;
      case NB_MSG_BYE:
        c->bye = 1;
        rc = -1;
        break;
      default: rc = -1;
    }
    if (rc < 0) return -1;
    size_t n = sizeof h + h.len;
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
  }
  return 0;
}

int nb_coord_serve(int lfd, const char *token, volatile int *stop) {
  struct pollfd *pf = NULL;
  while (!*stop) {
    struct pollfd *npf = realloc(pf, (g_ncl + 1) * sizeof *pf);
    if (!npf) break;
    pf = npf;
    pf[0] = (struct pollfd){lfd, POLLIN, 0};
    for (size_t i = 0; i < g_ncl; i++) pf[i + 1] = (struct pollfd){g_cl[i]->fd, POLLIN, 0};
    int r = poll(pf, g_ncl + 1, 200);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    size_t n = g_ncl;
    for (size_t i = n; i-- > 0;)
      if (pf[i + 1].revents && on_readable(g_cl[i], token) < 0) drop_client(i);
    if (pf[0].revents & POLLIN) {
      int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      client **ncl = fd >= 0 ? realloc(g_cl, (g_ncl + 1) * sizeof *ncl) : NULL;
      client *c = ncl ? calloc(1, sizeof *c) : NULL;
      if (ncl) g_cl = ncl;
      if (c) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->session = -1;
        g_cl[g_ncl++] = c;
      } else if (fd >= 0) {
        close(fd);
      }
    }
  }
  free(pf);
  return 0;
}
