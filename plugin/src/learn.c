/*
 * learn.c: the per-communicator decision loop (paper Algorithm 1, Appendix F).
 *
 * Rank consistency. Every decision is a deterministic function of statistics that all
 * ranks hold identically. Timed pulls are logged in call order (the same on every
 * rank); round r is pulls [r*m, (r+1)*m). With lag A (NCCLBOT_SYNC_LAG):
 *   - a rank sends round r (its local latencies; pulls without a sample go as missing, each
 *     with its reason) once every one of them has its outcome: the sample arrived, or it
 *     never can (lost, bad timers, never launched). No sample is dropped for arriving late;
 *     the sync thread does the sending (sync.c), never the collective's call;
 *   - the coordinator merges per pull the maximum latency over ranks (missing if any rank
 *     misses it) and sends the result to every rank, where the sync thread publishes it;
 *   - at boundary b (the call that starts round b) a rank applies the result of round
 *     b-1-A. When its own round b-1-A is not sent yet, it first waits for those samples
 *     (kernels it and every rank launched before boundary b-A, so no rank can be waiting
 *     on it: no deadlock), then for the result, normally already in memory.
 * So a reward reaches the statistics between m and (A+1)*m pulls after its call, on every
 * rank at the same call, and a host runs at most (A+1)*m timed collectives ahead of its
 * GPU's reported samples (NCCL launches asynchronously: a sample arrives when the GPU has
 * run the collective, however far the host ran ahead meanwhile).
 *
 * Stopping. Boundary b needs result b-1-A, so when the coordinator has completed round L
 * (and no later one) no rank can pass boundary L+2+A, and every rank can reach it (results
 * up to L were sent to all). The coordinator's verdict FREEZE(L) or FAIL(L) (after a
 * rank's leave or crash, a rank's timeout, or diverging pull logs) reaches every rank, and
 * every rank acts at the same boundary L+2+A: freeze keeps the state with rounds up to L
 * applied, fail fails that call and every later one. Until a rank holds result 0 (proof
 * that every rank started) it plays NCCL's own choice, so a rank that missed START, or a
 * stop before any round completed, changes nothing. A rank that loses the coordinator
 * without a verdict cannot know which rounds the others hold: fail mode fails at once,
 * freeze mode plays NCCL's choice from then on.
 */
#include "clock.h"
#include "learn.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "persist.h"
#include "rng.h"
#include "profiler.h"
#include "static_table.h"
#include "sync.h"
#include "table.h"
#include "trace.h"
#include "wire.h"

/* ---------- setup ---------- */

static int alloc_learning(nb_comm *c) {
  if (nb_tab_init(&c->tab, &c->fill, c->cfg.max_contexts) != 0) return -1;
  c->steps = malloc(sizeof *c->steps);
  if (!c->steps) return -1;
  nb_steps_init(c->steps, &c->cfg);
  uint64_t cap = 2 * NB_NREC; /* local mode gives up on a pull after cap/2 later ones */
  while (cap < 2ULL * (c->cfg.sync_lag + 3) * c->cfg.sync_every) cap *= 2; /* unapplied pulls */
  c->log = aligned_alloc(64, cap * sizeof *c->log); /* two entries per line */
  if (!c->log) return -1;
  memset(c->log, 0, cap * sizeof *c->log);
  c->log_mask = cap - 1;
  return 0;
}

static void go_inert(nb_comm *c, const char *why) {
  NB_WARN("staying AUTO (NCCL's own choice) for communicator %016llx: %s",
          (unsigned long long)c->comm_id, why);
  c->mode = NB_MODE_INERT;
}

/* How long a rank with an invalid setting tries to reach the coordinator to say so. */
#define NB_REFUSE_MS 2000u

/*
 * An invalid setting on this rank: stay AUTO and, when a coordinator is set (its address and
 * token are read even then), say so to it, so that every rank of the communicator stays AUTO
 * at once with this rank's reason instead of waiting for its init timeout.
 */
static void refuse_peers(nb_comm *c, int have_comm_id) {
  char why[400];
  snprintf(why, sizeof why, "rank %d: %s", c->rank, c->cfg.why);
  int told = c->nranks > 1 && have_comm_id && c->cfg.sync_configured && c->cfg.sync_token[0] &&
             nb_sync_refuse(&c->cfg, c->comm_id, c->nranks, c->rank, c->cfg.why,
                            c->cfg.sync_init_timeout_ms < NB_REFUSE_MS ? c->cfg.sync_init_timeout_ms
                                                                      : NB_REFUSE_MS) == 0;
  if (told) snprintf(why + strlen(why), sizeof why - strlen(why),
                     "; the coordinator was told, so every rank of the communicator stays AUTO");
  go_inert(c, why);
}

/*
 * Learners and timed AUTO. AUTO never changes an arm, so it times on one rank or on many
 * without a coordinator, and with one runs the learners' rounds (their cost is what the
 * overhead ladder measures); without the profiler it simply leaves NCCL alone.
 */
static void setup_learning(nb_comm *c) {
  char why[512];
  int timing_only = c->cfg.policy == NB_POLICY_AUTO;
  if (timing_only && !(c->prof_refs > 0 && c->rank >= 0)) return; /* inert, nothing to time */
  if (alloc_learning(c) != 0) {
    go_inert(c, "out of memory");
    return;
  }
  uint64_t state_hash = 0;
  if (c->cfg.state_dir[0]) {
    c->saved = nb_saved_load(&c->cfg, c->nranks, c->nnodes, &state_hash, why, sizeof why);
    if (!c->saved && why[0]) NB_INFO("no saved state loaded: %s", why);
  }
  int can_learn = c->prof_refs > 0 && c->rank >= 0;
  if (c->nranks <= 1 || (timing_only && !c->cfg.sync_configured)) {
    if (!can_learn) {
      go_inert(c, "learning needs the profiler: set NCCL_PROFILER_PLUGIN to this same library");
      return;
    }
    c->mode = NB_MODE_LEARN_LOCAL;
  } else {
    if (!c->cfg.sync_configured) {
      go_inert(c, "learning policies on several ranks need NCCLBOT_SYNC_ADDR and "
                  "NCCLBOT_SYNC_TOKEN (a coordinator) so that every rank makes the same choice; "
                  "NCCLBOT_POLICY=auto or static work without it");
      return;
    }
    why[0] = '\0';
    c->sync = nb_sync_open(&c->cfg, c->comm_id, c->nranks, c->rank, can_learn,
                           c->cfg.fingerprint ^ state_hash ^ (uint64_t)nb_scan_order() << 63, why,
                           sizeof why); /* the scan order decides NCCL's choice: ranks must agree */
    if (!c->sync && timing_only) {
      NB_WARN("AUTO is timed without synchronisation rounds: %s", why);
      c->mode = NB_MODE_LEARN_LOCAL;
    } else if (!c->sync) {
      go_inert(c, why);
      return;
    }
    if (!can_learn) { /* we said so in HELLO; the coordinator rejects the whole communicator */
      go_inert(c, "learning needs the profiler: set NCCL_PROFILER_PLUGIN to this same library");
      return;
    }
    if (c->sync) {
      c->sub_buf = malloc(c->cfg.sync_every * sizeof *c->sub_buf);
      if (!c->sub_buf) {
        go_inert(c, "out of memory");
        return;
      }
      c->mode = NB_MODE_LEARN_SYNC;
    }
  }
  *(void **)&c->sim_await = nb_logger_symbol(nb_log_get(), "ncclbotSimAwait");
  if (c->sim_await && c->rank <= 0)
    NB_INFO("the host simulates the GPU (ncclbotSimAwait): waits for samples advance its clock");
  if (c->cfg.trace_dir[0]) nb_trace_open(c);
}

void nb_learn_setup(nb_comm *c, int have_comm_id) {
  nb_config_from_env(&c->cfg);
  c->mode = NB_MODE_INERT;
  if (!c->cfg.valid) {
    refuse_peers(c, have_comm_id);
    return;
  }
  if (c->rank <= 0) nb_config_announce(&c->cfg);
  char why[512] = "";
  switch (c->cfg.policy) {
    case NB_POLICY_STATIC:
      c->stat_tab = nb_static_load(c->cfg.static_table, c->nranks, c->nnodes, why, sizeof why);
      if (!c->stat_tab)
        go_inert(c, why);
      else
        c->mode = NB_MODE_STATIC;
      return;
    default:
      if (!have_comm_id) {
        if (c->cfg.policy != NB_POLICY_AUTO)
          go_inert(c, "learning needs tuner v5+ (NCCL >= 2.28) to join profiler samples");
        return;
      }
      setup_learning(c);
  }
}

/* ---------- applying rewards ---------- */

/* Most of a context's samples never reach its statistics: say once why. */
static __attribute__((noinline, cold)) void warn_drops(nb_comm *c, const nb_ctx *x) {
  static const char *const why[NB_DROP_COUNT] = {
      "", "the profiler reported no usable kernel timers (is NCCL_PROFILER_PLUGIN this same library?)",
      "their kernel events never came", "no Coll start came for them (graph capture, or a group "
      "larger than NCCLBOT_SYNC_LAG x NCCLBOT_SYNC_EVERY timed collectives)",
      "more than half the log of later pulls went by without them", "another rank had none"};
  int top = NB_DROP_TIMER;
  for (int i = NB_DROP_TIMER; i < NB_DROP_COUNT; i++)
    if (c->n_drops[i] > c->n_drops[top]) top = i;
  c->warned_drops = 1;
  NB_WARN("%s %llu bytes: %u of %u samples dropped, most because %s", nb_coll_name(NB_KEY_COLL(x->key)),
          (unsigned long long)NB_KEY_BYTES(x->key), x->n_missing, x->n_missing + x->n_rewarded, why[top]);
}

static void apply_entry(nb_comm *c, nb_pull *e, float merged_us, int64_t round) {
  nb_ctx *x = nb_ctx_at(&c->tab, e->ctx);
  nb_arm_stat *st = &nb_ctx_stats(x)[e->arm_idx];
  double reward = merged_us >= 0.0f ? nb_reward(x->mu_min, merged_us) : -1.0;
  nb_resolve(st);
  if (reward >= 0.0) {
    nb_update(&c->cfg, c->steps, st, reward);
    c->n_applied++;
    x->n_rewarded++;
  } else {
    c->n_missing++;
    x->n_missing++;
    c->n_drops[e->state == NB_PULL_HAVE ? NB_DROP_MERGED : e->why ? e->why : NB_DROP_LOST]++;
    if (!c->warned_drops && x->n_missing >= 64 && x->n_missing > x->n_rewarded) warn_drops(c, x);
  }
  x->sel_ok = 0;
  if (c->trace) nb_trace_pull(c, e, x, reward, round);
}

/* The oldest entry that may still be pending. */
static void advance_match_lo(nb_comm *c) {
  while (c->match_lo < c->head && c->log[c->match_lo & c->log_mask].state != NB_PULL_PENDING)
    c->match_lo++;
}

/* Round of a log index (synchronised mode). */
static int64_t round_of(const nb_comm *c, uint64_t i) { return (int64_t)(i / c->cfg.sync_every); }

/* Why a pull that is given up on has no sample: its kernel events never came, or (no Coll
 * start took it) it was never launched while this rank was looking. */
static uint8_t lost_reason(const nb_pull *e) { return e->bind ? NB_DROP_LOST : NB_DROP_UNLAUNCHED; }

/* Entry i leaves PENDING: its sample (HAVE) or the reason it has none (MISSING). The count of
 * the closed round waiting to be sent follows. */
static void settle(nb_comm *c, uint64_t i, int state, uint8_t why) {
  nb_pull *e = &c->log[i & c->log_mask];
  e->state = (uint8_t)state;
  e->why = why;
  if (c->mode == NB_MODE_LEARN_SYNC && round_of(c, i) == c->sync->submitted + 1 &&
      c->sync->closed > c->sync->submitted)
    c->sync->open_pending--;
}

/*
 * Local mode (one rank): a sample is applied as soon as it is matched (drain); this
 * walks the log only to give up on pulls whose sample never came: half the log of later
 * pulls (2,048 or more, twice what CUDA lets a host queue ahead of its GPU) went by.
 */
static void apply_local(nb_comm *c) {
  uint64_t window = (c->log_mask + 1) / 2;
  while (c->applied < c->head) {
    nb_pull *e = &c->log[c->applied & c->log_mask];
    if (e->state == NB_PULL_PENDING) {
      if (c->head - c->applied < window) break;
      settle(c, c->applied, NB_PULL_MISSING, e->bind ? NB_DROP_OVERRUN : NB_DROP_UNLAUNCHED);
    }
    if (e->state != NB_PULL_APPLIED) {
      apply_entry(c, e, e->state == NB_PULL_HAVE ? e->lat_us : -1.0f, -1);
      e->state = NB_PULL_APPLIED;
    }
    c->applied++;
  }
  advance_match_lo(c);
}

/* Attach each profiler sample to the pull its collective was bound to, if that pull is
 * still in the log and pending; anything else is dropped and counted. Returns the samples
 * taken. */
static uint32_t drain(nb_comm *c) {
  nb_meas m;
  uint32_t taken = 0;
  while (nb_mq_pop(&c->mq, &m) == 0) {
    nb_pull *e = &c->log[m.pull & c->log_mask];
    __builtin_prefetch(e, 1);
    nb_prof_reclaim(c, &m);
    if (m.pull >= c->head || c->head - m.pull > c->log_mask + 1 || e->state != NB_PULL_PENDING ||
        e->arm != m.arm || nb_ctx_at(&c->tab, e->ctx)->key != m.key) {
      c->n_unmatched++;
      continue;
    }
    taken++;
    e->lat_us = m.lat_us;
    e->lag = m.launched - e->launch;
    if (m.pull >= c->newest_sample) c->newest_sample = m.pull + 1;
    settle(c, m.pull, m.lat_us >= 0.0f ? NB_PULL_HAVE : NB_PULL_MISSING,
           m.lat_us >= 0.0f ? NB_DROP_NONE : NB_DROP_TIMER);
    if (c->mode == NB_MODE_LEARN_LOCAL) { /* one rank: learn at once */
      apply_entry(c, e, m.lat_us, -1);
      e->state = NB_PULL_APPLIED;
    }
  }
  if (taken) advance_match_lo(c);
  return taken;
}

/* ---------- waiting for this rank's own samples ---------- */

/* A sample this long overdue behind a later collective's arrival is lost (NCCL delivers a
 * collective's kernel events together, and collectives in launch order). */
#define NB_LOST_AFTER_NEWER_US 50000u

/* Entries [lo, upto) still pending: the ones never launched (no Coll start, and none can
 * come for them before this call returns: an open group, a graph capture) are retired and
 * voided; returns the newest bind ordinal among the launched ones, 0 when none is left. */
static uint32_t retire_unlaunched(nb_comm *c, uint64_t lo, uint64_t upto) {
  uint32_t newest = 0;
  for (uint64_t i = lo; i < upto; i++) {
    nb_pull *e = &c->log[i & c->log_mask];
    if (e->state != NB_PULL_PENDING) continue;
    if (!e->bind) {
      e->voided = 1;
      settle(c, i, NB_PULL_MISSING, NB_DROP_UNLAUNCHED);
    } else if ((int32_t)(e->bind - newest) > 0 || !newest) {
      newest = e->bind;
    }
  }
  return newest;
}

/* Launched entries [lo, upto) still pending count as lost (their events never came). */
static void retire_lost(nb_comm *c, uint64_t lo, uint64_t upto) {
  for (uint64_t i = lo; i < upto; i++)
    if (c->log[i & c->log_mask].state == NB_PULL_PENDING) settle(c, i, NB_PULL_MISSING, NB_DROP_LOST);
}

static void maybe_submit(nb_comm *c);

/* 1 while something other than samples decides what happens next (a verdict, a lost coordinator). */
static int sync_stopping(nb_comm *c) {
  nb_sync *s = c->sync;
  int64_t L;
  int fail;
  return s && (s->stop_at >= 0 || nb_sync_polled_verdict(s, &L, &fail) || __atomic_load_n(&s->lost, __ATOMIC_ACQUIRE));
}

/*
 * Until every entry before `upto` has its outcome and the rounds it completes are sent (the
 * rank's own samples of a round whose result its next boundary needs). Waits only for
 * collectives launched before this call, which every rank launched too before reaching the
 * same pull; under a simulated GPU the host delivers them on request, under NCCL they come as
 * the GPU runs them. A sample counts as lost 50 ms after a later one arrived, or after
 * NCCLBOT_SAMPLE_TIMEOUT_MS without any arriving.
 */
static void await_samples(nb_comm *c, uint64_t upto) {
  if (c->match_lo >= upto) return;
  uint64_t t0 = nb_now_ns(), progress = t0, newer_seen = 0;
  c->n_waits++;
  while (c->match_lo < upto && !sync_stopping(c)) {
    uint64_t lo = c->match_lo;
    uint32_t newest = retire_unlaunched(c, lo, upto);
    maybe_submit(c);
    if (!newest) break;
    if (c->sim_await) { /* the host delivers every event due by then, on its proxy thread */
      c->sim_await(c->comm_id, c->rank, newest, 0);
      drain(c);
      retire_lost(c, lo, upto); /* the host delivered all it ever will for these */
    } else if (drain(c)) {
      progress = nb_now_ns();
      newer_seen = 0;
    } else {
      uint64_t now = nb_now_ns();
      if (c->newest_sample > c->match_lo + 1 && !newer_seen) newer_seen = now;
      if (newer_seen && now - newer_seen > NB_LOST_AFTER_NEWER_US * 1000ull) {
        retire_lost(c, lo, c->newest_sample - 1 < upto ? c->newest_sample - 1 : upto);
        newer_seen = 0;
      } else if (now - progress > (uint64_t)c->cfg.sample_timeout_ms * 1000000ull) {
        retire_lost(c, lo, upto);
      } else {
        nb_mq_wait(&c->mq, 2000);
      }
    }
    advance_match_lo(c);
  }
  c->wait_own_us_total += (double)(nb_now_ns() - t0) / 1000.0;
}

/* ---------- synchronised rounds ---------- */

static void apply_result(nb_comm *c, int64_t r) {
  const float *res = nb_sync_result(c->sync, r);
  uint64_t m = c->cfg.sync_every, first = (uint64_t)r * m;
  for (uint64_t i = 0; i < m; i++) {
    nb_pull *e = &c->log[(first + i) & c->log_mask];
    apply_entry(c, e, res ? res[i] : -1.0f, r);
    e->state = NB_PULL_APPLIED;
  }
  c->sync->applied = r;
}

static void fail_comm(nb_comm *c, const char *why) {
  char copy[sizeof c->fail_why]; /* why may be c->fail_why itself (a verdict's reason) */
  snprintf(copy, sizeof copy, "%.200s", why[0] ? why : "no reason given");
  c->failed = 1;
  memcpy(c->fail_why, copy, sizeof copy);
  NB_WARN("synchronisation failed (%s); failing collectives of communicator %016llx so that "
          "ranks cannot choose differently (NCCLBOT_SYNC_ON_FAILURE=fail)",
          c->fail_why, (unsigned long long)c->comm_id);
}

/* From now on NCCL decides on this rank, as on every other (see the top of this file). */
static int play_nccl(nb_comm *c, const char *why) {
  c->sync->auto_only = 1;
  c->sync->frozen = 1;
  NB_WARN("synchronisation stopped (%s); communicator %016llx keeps NCCL's own choice from now "
          "on, as every rank does", why, (unsigned long long)c->comm_id);
  return 1;
}

/* The boundary at which a verdict after round L takes effect on every rank. */
static int64_t stop_boundary(const nb_comm *c, int64_t L) { return L + 2 + (int64_t)c->cfg.sync_lag; }

/* The coordinator's verdict: stop after round L (fail: fail mode fails). */
static void take_verdict(nb_comm *c, int64_t L, int fail, const char *why) {
  nb_sync *s = c->sync;
  if (s->stop_at >= 0) return;
  s->stop_at = stop_boundary(c, L);
  s->stop_fail = fail && c->cfg.on_failure == NB_FAIL_ABORT;
  snprintf(c->fail_why, sizeof c->fail_why, "%.200s", why);
}

/* Boundary stop_at: act on the verdict. Returns 1 (no more learning) or -1 (failed). */
static int stop_now(nb_comm *c) {
  nb_sync *s = c->sync;
  int64_t L = s->stop_at - 2 - (int64_t)c->cfg.sync_lag;
  char why[300];
  if (L < 0) {
    snprintf(why, sizeof why, "%.200s, before any round completed", c->fail_why);
    return play_nccl(c, why);
  }
  if (s->stop_fail) {
    fail_comm(c, c->fail_why);
    return -1;
  }
  if (s->applied != L) { /* cannot happen: boundary L+1+A applied round L */
    snprintf(why, sizeof why, "%.200s, but round %lld is the last applied here", c->fail_why,
             (long long)s->applied);
    return play_nccl(c, why);
  }
  s->frozen = 1;
  NB_WARN("synchronisation stopped (%s); communicator %016llx keeps its bandit state frozen at "
          "round %lld and stops learning (NCCLBOT_SYNC_ON_FAILURE=freeze)",
          c->fail_why, (unsigned long long)c->comm_id, (long long)L);
  return 1;
}

/* Lost the coordinator with no verdict: nothing proves which rounds the other ranks hold. */
static int lost(nb_comm *c, const char *why) {
  if (c->cfg.on_failure == NB_FAIL_ABORT) {
    fail_comm(c, why);
    return -1;
  }
  return play_nccl(c, why);
}

/* Hands round r's local latencies to the sync thread (every pull has its outcome). */
static void submit_round(nb_comm *c, int64_t r) {
  uint64_t m = c->cfg.sync_every, first = (uint64_t)r * m;
  float *lat = c->sub_buf;
  uint64_t h = 1469598103934665603ULL;
  for (uint64_t i = 0; i < m; i++) {
    nb_pull *e = &c->log[(first + i) & c->log_mask];
    lat[i] = e->state == NB_PULL_HAVE ? e->lat_us : -1.0f;
    uint64_t k = nb_ctx_at(&c->tab, e->ctx)->key ^ ((uint64_t)e->arm << 50);
    h = (h ^ k) * 1099511628211ULL;
  }
  nb_sync_submit(c->sync, r, h, lat);
  c->sync->submitted = r;
}

/* Pulls of round r still waiting for their outcome. */
static uint32_t pending_in(const nb_comm *c, int64_t r) {
  uint64_t m = c->cfg.sync_every, first = (uint64_t)r * m;
  uint32_t pending = 0;
  for (uint64_t i = 0; i < m; i++) pending += c->log[(first + i) & c->log_mask].state == NB_PULL_PENDING;
  return pending;
}

/* Round r's pulls are all issued. */
static void close_round(nb_comm *c, int64_t r) {
  nb_sync *s = c->sync;
  s->closed = r;
  if (r == s->submitted + 1) s->open_pending = pending_in(c, r);
}

/* Sends every closed round whose pulls all have their outcome, in order. */
static void maybe_submit(nb_comm *c) {
  nb_sync *s = c->sync;
  while (s->closed > s->submitted && s->open_pending == 0 && s->stop_at < 0) {
    submit_round(c, s->submitted + 1);
    if (s->closed > s->submitted) s->open_pending = pending_in(c, s->submitted + 1);
  }
}

/* Last log entry of round r plus one. */
static uint64_t round_end(const nb_comm *c, int64_t r) { return (uint64_t)(r + 1) * c->cfg.sync_every; }

/* The newest bind ordinal among round r's entries (0: none was launched). */
static uint32_t newest_bind(const nb_comm *c, int64_t r) {
  uint32_t newest = 0;
  for (uint64_t i = (uint64_t)r * c->cfg.sync_every; i < round_end(c, r); i++) {
    uint32_t b = c->log[i & c->log_mask].bind;
    if (b && (!newest || (int32_t)(b - newest) > 0)) newest = b;
  }
  return newest;
}

/* How long a rank that timed out waits for the coordinator's verdict. */
#define NB_VERDICT_MS 5000u

/* Waits for result r (normally already held). 0 = held, 1 = a verdict, -1 = lost (why). */
static int await_result(nb_comm *c, int64_t r, char *why, size_t whylen) {
  nb_sync *s = c->sync;
  int64_t L = 0;
  int fail = 0;
  uint64_t w0 = nb_now_ns();
  uint32_t newest = c->sim_await ? newest_bind(c, r) : 0;
  if (newest) c->sim_await(c->comm_id, c->rank, newest, 1); /* every rank's samples, then merged */
  int rc = nb_sync_wait(s, r, c->cfg.sync_timeout_ms, &L, &fail, why, whylen);
  if (rc == NB_WAIT_TIMEOUT) { /* ask the coordinator to stop everyone, take its verdict */
    nb_sync_send(s, c->cfg.on_failure == NB_FAIL_ABORT ? NB_MSG_FAIL : NB_MSG_FREEZE, r);
    uint32_t ms = c->cfg.sync_timeout_ms < NB_VERDICT_MS ? c->cfg.sync_timeout_ms : NB_VERDICT_MS;
    char why2[160];
    if (nb_sync_verdict(s, ms, &L, &fail, why2, sizeof why2) == NB_WAIT_FREEZE) {
      snprintf(why + strlen(why), whylen - strlen(why), "; %s", why2);
      rc = NB_WAIT_FREEZE;
    } else {
      snprintf(why + strlen(why), whylen - strlen(why), "; %s", why2);
    }
  }
  c->sync_wait_us_total += (double)(nb_now_ns() - w0) / 1000.0;
  if (rc == NB_WAIT_OK) return 0;
  if (rc == NB_WAIT_FREEZE) {
    take_verdict(c, L, fail, why);
    return 1;
  }
  return -1;
}

/* Round boundary b (see the top of this file). Returns 0 to go on learning, 1 when frozen
 * or NCCL decides from now on, -1 when failed (fail mode). Once per m pulls: kept out of the
 * hot call's frame. */
static __attribute__((noinline)) int boundary(nb_comm *c, int64_t b) {
  uint64_t t0 = nb_now_ns();
  nb_sync *s = c->sync;
  char why[400] = "";
  int64_t r = b - 1 - (int64_t)c->cfg.sync_lag;
  if (s->stop_at >= 0 && b >= s->stop_at) return stop_now(c);
  if (r >= 0) { /* before a verdict's boundary the results it covers are all on their way */
    if (s->submitted < r) {
      await_samples(c, round_end(c, r));
      maybe_submit(c);
    }
    int got = await_result(c, r, why, sizeof why);
    if (got < 0) return lost(c, why);
    if (got > 0 && b >= s->stop_at) return stop_now(c);
    if (got == 0) {
      apply_result(c, r);
      s->confirmed = 1; /* result 0 is held: every rank started; all leave NCCL's choice now */
    }
  }
  close_round(c, b - 1);
  maybe_submit(c);
  double us = (double)(nb_now_ns() - t0) / 1000.0;
  c->n_rounds++;
  c->sync_us_total += us;
  if (c->trace) nb_trace_sync(c, b, us);
  return 0;
}

/* ---------- the decision ---------- */

/* A context's first sight (cold: its arrays stay out of the hot call's frame). */
static __attribute__((noinline, cold)) int64_t create_ctx(nb_comm *c, uint64_t key,
                                                          const float *table, int numAlgo,
                                                          int numProto) {
  if (c->fill.nctx >= c->cfg.max_contexts) { /* bounded memory: NCCL decides, nothing stored */
    c->n_over_cap++;
    return -1;
  }
  uint8_t ids[NCCLBOT_MAX_ARMS];
  double mu[NCCLBOT_MAX_ARMS], mu_min;
  int n = nb_filter_arms(table, numAlgo, numProto, c->cfg.rho_max, ids, mu, &mu_min);
  int auto_arm = nb_auto_arm(table, numAlgo, numProto);
  if (c->cfg.policy == NB_POLICY_AUTO && auto_arm != NB_NO_ARM && mu_min > 0.0) {
    n = 1; /* timed AUTO: one slot, NCCL's arm, whose rewards it records */
    ids[0] = (uint8_t)auto_arm;
    mu[0] = mu_min;
  }
  int pass = c->cfg.policy == NB_POLICY_AUTO ? n != 1 : n <= 1 || !(mu_min > 0.0);
  int64_t ci = nb_tab_add(&c->tab, &c->fill, key, pass ? 0 : n);
  if (ci < 0) return -1;
  nb_ctx *x = nb_ctx_at(&c->tab, (uint32_t)ci);
  x->auto_arm = (uint8_t)auto_arm;
  x->auto_idx = NB_NO_ARM;
  for (int i = 0; i < n; i++)
    if (ids[i] == auto_arm) x->auto_idx = (uint8_t)i;
  if (pass) {
    x->flags = NB_CTX_PASS;
    return ci;
  }
  const nb_saved_ctx *sv = c->saved ? nb_saved_find(c->saved, key) : NULL;
  x->mu_min = sv ? sv->mu_min : mu_min;
  memcpy(nb_ctx_ids(x), ids, (size_t)n);
  nb_arm_stat *st = nb_ctx_stats(x);
  nb_warm_start(mu, x->mu_min, n, c->cfg.pseudo_count, st, &x->pol);
  if (sv) /* the saved state holds means and counts (persist.c) */
    for (int i = 0; i < n; i++)
      for (int j = 0; j < sv->narms; j++)
        if (sv->arm[j] == ids[i]) {
          nb_set_n(&st[i], sv->stat[j].n);
          st[i].mean = sv->stat[j].mean;
          /* its pulls count as evidence for the hold rule, as if applied in this run */
          st[i].resolved = sv->stat[j].n > 0.0 ? (uint32_t)fmin(sv->stat[j].n, 1e9) : 0;
        }
  return ci;
}

static uint32_t available_mask(const nb_ctx *x, const float *table, int numAlgo, int numProto) {
  uint32_t mask = 0;
  const uint8_t *ids = nb_ctx_ids(x);
  if (numProto == NCCLBOT_NUM_PROTOS && numAlgo >= NCCLBOT_NUM_ALGOS) { /* cell = arm id */
    for (int i = 0; i < x->narms; i++) mask |= (uint32_t)nb_cost_available(table[ids[i]]) << i;
    return mask;
  }
  for (int i = 0; i < x->narms; i++) {
    int arm = ids[i];
    int a = arm / NCCLBOT_NUM_PROTOS, p = arm % NCCLBOT_NUM_PROTOS;
    if (a < numAlgo && p < numProto && nb_cost_available(table[a * numProto + p])) mask |= 1u << i;
  }
  return mask;
}

/*
 * The policy's choice (index into the context's arms) among the available arms the hold
 * rule leaves (policy.h, nb_held), then the safety gate (nb_gate). A deterministic decision
 * depends only on the statistics and that mask: between two updates of this context it is
 * reused instead of recomputed. A stochastic one
 * draws afresh each call from the shared stream (rng.h), so it is never reused. Timed
 * AUTO has its one slot: NCCL's arm.
 */
static int select_arm(nb_comm *c, nb_ctx *x, uint64_t key, uint32_t mask) {
  if (c->cfg.policy == NB_POLICY_AUTO) return 0;
  uint32_t available = mask;
  if (x->pulls != x->n_rewarded + x->n_missing) { /* some reward pending: the hold rule */
    uint32_t free_arms = mask & ~nb_held(nb_ctx_cstats(x), x->narms, c->cfg.probe, x->auto_idx);
    if (free_arms) mask = free_arms; /* every arm held: the policy chooses among all */
  }
  int cacheable = nb_policy_cacheable(&c->cfg);
  const nb_arm_stat *st = nb_ctx_cstats(x);
  if (!(cacheable && x->sel_ok && x->sel_mask == mask)) {
    uint64_t stream = cacheable ? 0 : nb_rng_stream(c->cfg.seed, c->comm_id, key);
    x->sel_idx = (uint8_t)nb_select(&c->cfg, st, x->narms, available, mask, &x->pol, stream);
    x->sel_mask = mask;
    x->sel_ok = cacheable;
  }
  return nb_gate(&c->cfg, st, x->sel_idx, x->auto_idx, available);
}

/*
 * Until every rank is known to have started, and after the coordinator was lost without
 * a verdict, NCCL's own choice stands (see the top of this file). Returns -2 (decide as
 * usual), -1 (NCCL decides, nothing is logged) or the index among x's arms of NCCL's
 * choice (NCCL decides, the pull is logged and timed).
 */
static int sync_gate(const nb_comm *c, const nb_ctx *x, const float *table, int numAlgo,
                     int numProto, uint32_t mask) {
  if (c->mode != NB_MODE_LEARN_SYNC || (c->sync->confirmed && !c->sync->auto_only)) return -2;
  if (c->sync->auto_only) return -1;
  int arm = nb_auto_arm(table, numAlgo, numProto);
  const uint8_t *ids = nb_ctx_ids(x);
  for (int i = 0; i < x->narms; i++)
    if (ids[i] == arm && (mask >> i & 1)) return i;
  return -1;
}

static __attribute__((noinline, cold)) ncclResult_t refuse(nb_comm *c) {
  if (c->failed == 1) NB_WARN("refusing this and later collectives: %s", c->fail_why);
  c->failed = 2;
  return ncclSystemError;
}

static ncclResult_t decide_learning(nb_comm *c, int coll, size_t nBytes, float *table,
                                    int numAlgo, int numProto) {
  if (c->failed) return refuse(c); /* fail_comm said why once; NCCL reports each failed call */
  drain(c);
  if (c->mode == NB_MODE_LEARN_LOCAL) apply_local(c);
  else if (!c->sync->frozen) maybe_submit(c);
  uint64_t key = NB_KEY(coll, nBytes);
  int64_t ci = nb_tab_find(&c->tab, key);
  if (ci < 0) ci = create_ctx(c, key, table, numAlgo, numProto);
  if (ci < 0) return ncclSuccess;
  nb_ctx *x = nb_ctx_at(&c->tab, (uint32_t)ci);
  if (x->flags & NB_CTX_PASS) return ncclSuccess;
  uint32_t mask = available_mask(x, table, numAlgo, numProto);
  if (!mask) return ncclSuccess;
  int learning = c->mode == NB_MODE_LEARN_LOCAL || !c->sync->frozen;
  if (learning && c->mode == NB_MODE_LEARN_SYNC && c->head > 0 &&
      c->head % c->cfg.sync_every == 0) {
    int r = boundary(c, (int64_t)(c->head / c->cfg.sync_every));
    if (r < 0) return ncclSystemError;
    if (r > 0) learning = 0;
  }
  int timed_auto = c->cfg.policy == NB_POLICY_AUTO;
  int gate = sync_gate(c, x, table, numAlgo, numProto, mask);
  /* timed AUTO plays NCCL's arm anyway: only a lost coordinator stops its timing */
  if (gate == -1 && (!timed_auto || c->sync->auto_only)) return ncclSuccess;
  int idx = timed_auto ? 0 : gate >= 0 ? gate : select_arm(c, x, key, mask);
  int auto_arm = c->trace || timed_auto ? nb_auto_arm(table, numAlgo, numProto) : x->auto_arm;
  /* timed AUTO logs the arm NCCL plays in this call, which the profiler will report */
  int arm = timed_auto ? auto_arm : nb_ctx_ids(x)[idx];
  if (arm == NB_NO_ARM) return ncclSuccess;
  if (!timed_auto) nb_force_arm(table, numAlgo, numProto, arm);
  if (!learning) return ncclSuccess;
  if (c->mode == NB_MODE_LEARN_LOCAL && c->head - c->applied > c->log_mask) apply_local(c);
  nb_pull *e = &c->log[c->head & c->log_mask];
  e->ctx = (uint32_t)ci;
  e->pull_no = x->pulls++;
  e->lat_us = -1.0f;
  e->arm = (uint8_t)arm;
  e->arm_idx = (uint8_t)idx;
  e->auto_arm = (uint8_t)auto_arm;
  e->state = NB_PULL_PENDING;
  e->launch = (uint32_t)c->launched;
  e->lag = 0;
  e->bind = 0;
  e->why = NB_DROP_NONE;
  e->voided = 0;
  __atomic_store_n(&c->user_thread, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
  nb_issue(&nb_ctx_stats(x)[idx]);
  c->head++;
  c->n_timed++;
  return ncclSuccess;
}

/*
 * A call that finds the caches cold (the host ran framework code since the last collective)
 * would fetch its lines one after another, each waiting for the one before it; these
 * prefetches ask for them together. First the communicator's hot lines (state.h), then, once
 * those arrive, the lines they point to: this context's block (a repeat of the last one:
 * the memo), the log entry the pull will take, the queue cell a sample would be in.
 */
static inline void prefetch_comm(const nb_comm *c) {
  const char *base = (const char *)c;
  for (size_t off = 64; off < offsetof(nb_comm, mq) + 64; off += 64) __builtin_prefetch(base + off);
  __builtin_prefetch(&c->cfg);
  __builtin_prefetch((const char *)&c->cfg + 64);
}

static inline void prefetch_call(const nb_comm *c, uint64_t key) {
  if (c->log) __builtin_prefetch(&c->log[c->head & c->log_mask], 1);
  if (c->mq.cells) __builtin_prefetch(&c->mq.cells[c->mq.tail & c->mq.mask]);
  if (c->tab.arena && c->tab.memo_key == key) {
    const char *x = (const char *)nb_ctx_at(&c->tab, c->tab.memo_ctx);
    for (int line = 0; line < 7; line++) __builtin_prefetch(x + 64 * line, 1);
  }
}

ncclResult_t nb_learn_decide(nb_comm *c, int coll, size_t nBytes, float *table, int numAlgo,
                             int numProto) {
  prefetch_comm(c);
  c->n_calls++;
  __atomic_store_n(&c->launched, c->launched + 1, __ATOMIC_RELAXED); /* the profiler reads it */
  if (c->mode == NB_MODE_INERT || !table || coll < 0 || coll >= NCCLBOT_NUM_COLLS ||
      numAlgo <= 0 || numProto <= 0)
    return ncclSuccess;
  if ((uint64_t)nBytes < c->cfg.min_bytes) return ncclSuccess;
  prefetch_call(c, NB_KEY(coll, nBytes));
  /* NCCL 2.31+'s symmetric-kernel pass: all -1.0, no arm to play; no context, no pull */
  if (nb_table_unavailable(table, numAlgo, numProto)) return ncclSuccess;
  if (c->mode == NB_MODE_STATIC) {
    int arm = nb_static_lookup(c->stat_tab, coll, nBytes);
    if (arm != NB_NO_ARM) nb_force_arm(table, numAlgo, numProto, arm);
    return ncclSuccess;
  }
  return decide_learning(c, coll, nBytes, table, numAlgo, numProto);
}

/* ---------- end of a communicator ---------- */

void nb_learn_finalize(nb_comm *c) {
  if (c->mode == NB_MODE_LEARN_LOCAL) { /* samples still missing now never come */
    drain(c);
    for (uint64_t i = c->applied; i < c->head; i++)
      if (c->log[i & c->log_mask].state == NB_PULL_PENDING)
        settle(c, i, NB_PULL_MISSING, lost_reason(&c->log[i & c->log_mask]));
    apply_local(c);
  }
  if ((c->mode == NB_MODE_LEARN_LOCAL || c->mode == NB_MODE_LEARN_SYNC) && c->cfg.state_dir[0] &&
      c->rank == 0) {
    char why[256];
    if (nb_state_save(c, why, sizeof why) != 0) NB_WARN("state not saved: %s", why);
  }
  if (c->mode == NB_MODE_LEARN_SYNC || c->mode == NB_MODE_LEARN_LOCAL) {
    NB_INFO("communicator %016llx: %llu calls, %llu timed pulls, %llu rewards applied, "
            "%llu missing (%llu bad timers, %llu lost, %llu unlaunched, %llu overrun, %llu another "
            "rank's), %llu unmatched samples, %llu rounds (%.1f us mean), %llu waits for own "
            "samples (%.1f us mean), %llu profiler drops, %llu calls beyond NCCLBOT_MAX_CONTEXTS",
            (unsigned long long)c->comm_id, (unsigned long long)c->n_calls,
            (unsigned long long)c->n_timed, (unsigned long long)c->n_applied,
            (unsigned long long)c->n_missing, (unsigned long long)c->n_drops[NB_DROP_TIMER],
            (unsigned long long)c->n_drops[NB_DROP_LOST],
            (unsigned long long)c->n_drops[NB_DROP_UNLAUNCHED],
            (unsigned long long)c->n_drops[NB_DROP_OVERRUN],
            (unsigned long long)c->n_drops[NB_DROP_MERGED], (unsigned long long)c->n_unmatched,
            (unsigned long long)c->n_rounds, c->n_rounds ? c->sync_us_total / c->n_rounds : 0.0,
            (unsigned long long)c->n_waits, c->n_waits ? c->wait_own_us_total / c->n_waits : 0.0,
            (unsigned long long)__atomic_load_n(&c->n_prof_dropped, __ATOMIC_RELAXED),
            (unsigned long long)c->n_over_cap);
    if (c->trace) nb_trace_samples(c);
  }
  if (c->sync) {
    nb_sync_send(c->sync, NB_MSG_BYE, 0);
    nb_sync_close(c->sync);
    c->sync = NULL;
  }
  nb_trace_close(c);
  c->mode = NB_MODE_INERT;
}

void nb_learn_teardown(nb_comm *c) {
  if (c->sync) nb_sync_close(c->sync);
  c->sync = NULL;
  nb_trace_close(c);
  nb_tab_free(&c->tab, &c->fill);
  free(c->log);
  c->log = NULL;
  free(c->sub_buf);
  c->sub_buf = NULL;
  free(c->steps);
  c->steps = NULL;
  nb_static_free(c->stat_tab);
  c->stat_tab = NULL;
  nb_saved_free(c->saved);
  c->saved = NULL;
}
