/*
 * learn.c: the per-communicator decision loop (paper Algorithm 1, Appendix F).
 *
 * Rank consistency. Every decision is a deterministic function of statistics that all
 * ranks hold identically. Timed pulls are logged in call order (the same on every
 * rank); round r is pulls [r*m, (r+1)*m). With lag A (NCCLBOT_SYNC_LAG):
 *   - a rank sends round r (its local latencies; pulls still unmeasured go as missing)
 *     once each of them has its sample, at the latest A*m/2 pulls after the round's end;
 *     the sync thread does the sending (sync.c), never the collective's call;
 *   - the coordinator merges per pull the maximum latency over ranks (missing if any rank
 *     misses it) and sends the result to every rank, where the sync thread publishes it;
 *   - at boundary b (the call that starts round b) a rank applies the result of round
 *     b-1-A. It is normally already in memory; a rank waits only when it is not.
 * So a reward reaches the statistics between m and (A+1)*m pulls after its call, on every
 * rank at the same call.
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
#include "learn.h"

#include <float.h>
#include <math.h>
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
  if (nb_tab_init(&c->tab, c->cfg.max_contexts) != 0) return -1;
  c->steps = malloc(sizeof *c->steps);
  if (!c->steps) return -1;
  nb_steps_init(c->steps, &c->cfg);
  uint64_t cap = 2 * NB_NREC; /* local mode gives up on a pull after cap/2 later ones */
  while (cap < 2ULL * (c->cfg.sync_lag + 3) * c->cfg.sync_every) cap *= 2; /* unapplied pulls */
  c->log = calloc(cap, sizeof *c->log);
  if (!c->log) return -1;
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

/* Most of a context's samples never reach its statistics: say once what to change. */
static void warn_drops(nb_comm *c, const nb_ctx *x) {
  c->warned_drops = 1;
  char ctx[64];
  snprintf(ctx, sizeof ctx, "%s %llu bytes", nb_coll_name(NB_KEY_COLL(x->key)),
           (unsigned long long)NB_KEY_BYTES(x->key));
  if (c->mode == NB_MODE_LEARN_SYNC)
    NB_WARN("%s: %u of %u samples dropped (their latency was not measured when their round was "
            "sent, %u pulls after its end): the GPU runs that far behind the host; raise "
            "NCCLBOT_SYNC_LAG (up to 8) or NCCLBOT_SYNC_EVERY so that NCCLBOT_SYNC_LAG x "
            "NCCLBOT_SYNC_EVERY / 2 exceeds it",
            ctx, x->n_missing, x->n_missing + x->n_rewarded,
            c->cfg.sync_lag * c->cfg.sync_every / 2);
  else
    NB_WARN("%s: %u of %u samples dropped: the profiler reports no usable kernel timers for "
            "them (is NCCL_PROFILER_PLUGIN this same library?)",
            ctx, x->n_missing, x->n_missing + x->n_rewarded);
}

static void apply_entry(nb_comm *c, nb_pull *e, float merged_us, int64_t round) {
  nb_ctx *x = &c->tab.ctx[e->ctx];
  nb_arm_stat *st = &c->tab.stat[x->arm_off + e->arm_idx];
  double reward = merged_us >= 0.0f ? nb_reward(x->mu_min, merged_us) : -1.0;
  nb_resolve(st);
  if (reward >= 0.0) {
    nb_update(&c->cfg, c->steps, st, reward);
    c->n_applied++;
    x->n_rewarded++;
  } else {
    c->n_missing++;
    x->n_missing++;
    if (!c->warned_drops && x->n_missing >= 64 && x->n_missing > x->n_rewarded) warn_drops(c, x);
  }
  x->sel_ok = 0;
  if (c->trace) nb_trace_pull(c, e, x, reward, round);
}

/*
 * Local mode (one rank): a sample is applied as soon as it is matched (drain); this
 * walks the log only to give up on pulls whose sample never came (a lost channel).
 */
static void apply_local(nb_comm *c) {
  uint64_t window = (c->log_mask + 1) / 2;
  while (c->applied < c->head) {
    nb_pull *e = &c->log[c->applied & c->log_mask];
    if (e->state == NB_PULL_PENDING) {
      if (c->head - c->applied < window) break;
      e->state = NB_PULL_MISSING;
    }
    if (e->state != NB_PULL_APPLIED) {
      apply_entry(c, e, e->state == NB_PULL_HAVE ? e->lat_us : -1.0f, -1);
      e->state = NB_PULL_APPLIED;
    }
    c->applied++;
  }
  while (c->match_lo < c->head && c->log[c->match_lo & c->log_mask].state != NB_PULL_PENDING)
    c->match_lo++;
}

/* Attach each profiler sample to the pull its collective was bound to, if that pull is
 * still in the log and pending; anything else is dropped and counted. */
static void drain(nb_comm *c) {
  nb_meas m;
  while (nb_mq_pop(&c->mq, &m) == 0) {
    nb_prof_reclaim(c, &m);
    nb_pull *e = &c->log[m.pull & c->log_mask];
    if (m.pull >= c->head || c->head - m.pull > c->log_mask + 1 || e->state != NB_PULL_PENDING ||
        e->arm != m.arm || c->tab.ctx[e->ctx].key != m.key) {
      c->n_unmatched++;
      continue;
    }
    e->lat_us = m.lat_us;
    e->state = m.lat_us >= 0.0f ? NB_PULL_HAVE : NB_PULL_MISSING;
    if (c->mode == NB_MODE_LEARN_LOCAL) { /* one rank: learn at once */
      apply_entry(c, e, m.lat_us, -1);
      e->state = NB_PULL_APPLIED;
    } else if ((int64_t)(m.pull / c->cfg.sync_every) == c->sync->submitted + 1 &&
               c->sync->closed > c->sync->submitted) {
      c->sync->open_pending--; /* a sample of the closed round waiting to be sent */
    }
    while (c->match_lo < c->head && c->log[c->match_lo & c->log_mask].state != NB_PULL_PENDING)
      c->match_lo++;
  }
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

/* Hands round r's local latencies to the sync thread (pulls still unmeasured go as missing). */
static void submit_round(nb_comm *c, int64_t r) {
  uint64_t m = c->cfg.sync_every, first = (uint64_t)r * m;
  float *lat = c->sub_buf;
  uint64_t h = 1469598103934665603ULL;
  for (uint64_t i = 0; i < m; i++) {
    nb_pull *e = &c->log[(first + i) & c->log_mask];
    if (e->state == NB_PULL_PENDING) e->state = NB_PULL_MISSING;
    lat[i] = e->state == NB_PULL_HAVE ? e->lat_us : -1.0f;
    uint64_t k = c->tab.ctx[e->ctx].key ^ ((uint64_t)e->arm << 50);
    h = (h ^ k) * 1099511628211ULL;
  }
  while (c->match_lo < c->head && c->log[c->match_lo & c->log_mask].state != NB_PULL_PENDING)
    c->match_lo++;
  nb_sync_submit(c->sync, r, h, lat);
  c->sync->submitted = r;
}

/* Round r's pulls are all issued: count those still waiting for their sample. */
static void close_round(nb_comm *c, int64_t r) {
  uint64_t m = c->cfg.sync_every, first = (uint64_t)r * m;
  uint32_t pending = 0;
  for (uint64_t i = 0; i < m; i++) pending += c->log[(first + i) & c->log_mask].state == NB_PULL_PENDING;
  c->sync->closed = r;
  c->sync->open_pending = pending;
}

/* Sends the closed round once its samples are in, or at its deadline (A*m/2 pulls late). */
static void maybe_submit(nb_comm *c) {
  nb_sync *s = c->sync;
  if (s->closed <= s->submitted || s->stop_at >= 0) return;
  int64_t r = s->submitted + 1;
  uint64_t deadline = (uint64_t)(r + 1) * c->cfg.sync_every + c->cfg.sync_lag * c->cfg.sync_every / 2;
  if (s->open_pending == 0 || c->head >= deadline) submit_round(c, r);
}

/* How long a rank that timed out waits for the coordinator's verdict. */
#define NB_VERDICT_MS 5000u

/* Waits for result r (normally already held). 0 = held, 1 = a verdict, -1 = lost (why). */
static int await_result(nb_comm *c, int64_t r, char *why, size_t whylen) {
  nb_sync *s = c->sync;
  int64_t L = 0;
  int fail = 0;
  uint64_t w0 = nb_now_ns();
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
 * or NCCL decides from now on, -1 when failed (fail mode). */
static int boundary(nb_comm *c, int64_t b) {
  uint64_t t0 = nb_now_ns();
  nb_sync *s = c->sync;
  char why[400] = "";
  int64_t r = b - 1 - (int64_t)c->cfg.sync_lag;
  if (s->stop_at >= 0 && b >= s->stop_at) return stop_now(c);
  if (r >= 0) { /* before a verdict's boundary the results it covers are all on their way */
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

static int64_t create_ctx(nb_comm *c, uint64_t key, const float *table, int numAlgo,
                          int numProto) {
  if (c->tab.nctx >= c->cfg.max_contexts) { /* bounded memory: NCCL decides, nothing stored */
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
  int64_t ci = nb_tab_add(&c->tab, key, pass ? 0 : n);
  if (ci < 0) return -1;
  nb_ctx *x = &c->tab.ctx[ci];
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
  memcpy(&c->tab.arm_id[x->arm_off], ids, (size_t)n);
  nb_arm_stat *st = &c->tab.stat[x->arm_off];
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

static uint32_t available_mask(const nb_comm *c, const nb_ctx *x, const float *table, int numAlgo,
                               int numProto) {
  uint32_t mask = 0;
  const uint8_t *ids = &c->tab.arm_id[x->arm_off];
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
    uint32_t free_arms = mask & ~nb_held(&c->tab.stat[x->arm_off], x->narms, c->cfg.probe, x->auto_idx);
    if (free_arms) mask = free_arms; /* every arm held: the policy chooses among all */
  }
  int cacheable = nb_policy_cacheable(&c->cfg);
  const nb_arm_stat *st = &c->tab.stat[x->arm_off];
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
  const uint8_t *ids = &c->tab.arm_id[x->arm_off];
  for (int i = 0; i < x->narms; i++)
    if (ids[i] == arm && (mask >> i & 1)) return i;
  return -1;
}

static ncclResult_t decide_learning(nb_comm *c, int coll, size_t nBytes, float *table,
                                    int numAlgo, int numProto) {
  if (c->failed) { /* fail_comm said why once; NCCL reports each failed call itself */
    if (c->failed == 1) NB_WARN("refusing this and later collectives: %s", c->fail_why);
    c->failed = 2;
    return ncclSystemError;
  }
  drain(c);
  if (c->mode == NB_MODE_LEARN_LOCAL) apply_local(c);
  else if (!c->sync->frozen) maybe_submit(c);
  uint64_t key = NB_KEY(coll, nBytes);
  int64_t ci = nb_tab_find(&c->tab, key);
  if (ci < 0) ci = create_ctx(c, key, table, numAlgo, numProto);
  if (ci < 0 || (c->tab.ctx[ci].flags & NB_CTX_PASS)) return ncclSuccess;
  nb_ctx *x = &c->tab.ctx[ci];
  uint32_t mask = available_mask(c, x, table, numAlgo, numProto);
  if (!mask) return ncclSuccess;
  int learning = c->mode == NB_MODE_LEARN_LOCAL || !c->sync->frozen;
  if (learning && c->mode == NB_MODE_LEARN_SYNC && c->head > 0 &&
      c->head % c->cfg.sync_every == 0) {
    int r = boundary(c, (int64_t)(c->head / c->cfg.sync_every));
    if (r < 0) return ncclSystemError;
    if (r > 0) learning = 0;
    x = &c->tab.ctx[ci];
  }
  int timed_auto = c->cfg.policy == NB_POLICY_AUTO;
  int gate = sync_gate(c, x, table, numAlgo, numProto, mask);
  /* timed AUTO plays NCCL's arm anyway: only a lost coordinator stops its timing */
  if (gate == -1 && (!timed_auto || c->sync->auto_only)) return ncclSuccess;
  int idx = timed_auto ? 0 : gate >= 0 ? gate : select_arm(c, x, key, mask);
  int auto_arm = c->trace || timed_auto ? nb_auto_arm(table, numAlgo, numProto) : x->auto_arm;
  /* timed AUTO logs the arm NCCL plays in this call, which the profiler will report */
  int arm = timed_auto ? auto_arm : c->tab.arm_id[x->arm_off + idx];
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
  e->bound = 0;
  nb_issue(&c->tab.stat[x->arm_off + idx]);
  c->head++;
  c->n_timed++;
  return ncclSuccess;
}

ncclResult_t nb_learn_decide(nb_comm *c, int coll, size_t nBytes, float *table, int numAlgo,
                             int numProto) {
  c->n_calls++;
  if (c->mode == NB_MODE_INERT || !table || coll < 0 || coll >= NCCLBOT_NUM_COLLS ||
      numAlgo <= 0 || numProto <= 0)
    return ncclSuccess;
  if ((uint64_t)nBytes < c->cfg.min_bytes) return ncclSuccess;
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
        c->log[i & c->log_mask].state = NB_PULL_MISSING;
    apply_local(c);
  }
  if ((c->mode == NB_MODE_LEARN_LOCAL || c->mode == NB_MODE_LEARN_SYNC) && c->cfg.state_dir[0] &&
      c->rank == 0) {
    char why[256];
    if (nb_state_save(c, why, sizeof why) != 0) NB_WARN("state not saved: %s", why);
  }
  if (c->mode == NB_MODE_LEARN_SYNC || c->mode == NB_MODE_LEARN_LOCAL)
    NB_INFO("communicator %016llx: %llu calls, %llu timed pulls, %llu rewards applied, "
            "%llu missing, %llu unmatched samples, %llu rounds (%.1f us mean), %llu profiler drops, "
            "%llu calls beyond NCCLBOT_MAX_CONTEXTS",
            (unsigned long long)c->comm_id, (unsigned long long)c->n_calls,
            (unsigned long long)c->n_timed, (unsigned long long)c->n_applied,
            (unsigned long long)c->n_missing, (unsigned long long)c->n_unmatched,
            (unsigned long long)c->n_rounds, c->n_rounds ? c->sync_us_total / c->n_rounds : 0.0,
            (unsigned long long)__atomic_load_n(&c->n_prof_dropped, __ATOMIC_RELAXED),
            (unsigned long long)c->n_over_cap);
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
  nb_tab_free(&c->tab);
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
