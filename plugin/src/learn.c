/*
 * learn.c: the per-communicator decision loop (paper Algorithm 1, Appendix F).
 *
 * Rank consistency. Every decision is a deterministic function of statistics
 * that all ranks hold identically. Timed pulls are logged in call order (the
 * same on every rank); every m pulls is a round boundary b. At boundary b a rank
 *   1. waits for the merged result of submission b-1 (sent one round earlier,
 *      so normally already there),
 *   2. applies the result of submission b-2 (safe: holding b-1 proves every
 *      rank holds b-2),
 *   3. submits its local latencies for pulls of round b-2 (one round of slack so
 *      no rank waits for a GPU; pulls still unmeasured are sent as missing).
 * The coordinator merges per pull the maximum latency over ranks (missing if
 * any rank misses it).
 *
 * Stopping. Holding result s proves every rank submitted s, so no rank can pass
 * boundary L+2, L being the last round the coordinator completed. When a rank times
 * out it asks the coordinator to stop the communicator; the coordinator's verdict
 * (FREEZE(L) or FAIL(L), also sent when a rank leaves or crashes) reaches every rank,
 * and every rank acts at the same boundary L+2: freeze keeps the state with rounds up
 * to L applied, fail fails that call and every later one. Until a rank holds its first
 * result (proof that every rank started) it plays NCCL's own choice, so a rank that
 * missed START, or a stop before any round completed, changes nothing. A rank that
 * loses the coordinator without a verdict cannot know which rounds the others hold:
 * fail mode fails at once, freeze mode plays NCCL's choice from then on.
 */
#include "learn.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  uint64_t cap = 2 * NB_NREC; /* local mode gives up on a pull after cap/2 later ones */
  while (cap < 8ULL * c->cfg.sync_every) cap *= 2;
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
                           c->cfg.fingerprint ^ state_hash, why, sizeof why);
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
    if (c->sync) c->mode = NB_MODE_LEARN_SYNC;
  }
  if (c->cfg.trace_dir[0]) nb_trace_open(c);
}

void nb_learn_setup(nb_comm *c, int have_comm_id) {
  nb_config_from_env(&c->cfg);
  c->mode = NB_MODE_INERT;
  if (!c->cfg.valid) {
    go_inert(c, c->cfg.why);
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

static void apply_entry(nb_comm *c, nb_pull *e, float merged_us, int64_t round) {
  nb_ctx *x = &c->tab.ctx[e->ctx];
  double reward = merged_us >= 0.0f ? nb_reward(x->mu_min, merged_us) : -1.0;
  if (reward >= 0.0) {
    nb_update(&c->cfg, &c->tab.stat[x->arm_off + e->arm_idx], reward);
    x->sel_ok = 0;
    c->n_applied++;
  } else {
    c->n_missing++;
  }
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
    }
    while (c->match_lo < c->head && c->log[c->match_lo & c->log_mask].state != NB_PULL_PENDING)
      c->match_lo++;
  }
}

/* ---------- synchronised rounds ---------- */

static void apply_result(nb_comm *c, int64_t s) {
  const float *res = nb_sync_result(c->sync, s);
  uint64_t m = c->cfg.sync_every, first = (uint64_t)(s - 2) * m;
  for (uint64_t i = 0; i < m; i++) {
    nb_pull *e = &c->log[(first + i) & c->log_mask];
    apply_entry(c, e, res ? res[i] : -1.0f, s);
  }
  c->sync->applied = s;
}

static void fail_comm(nb_comm *c, const char *why) {
  c->failed = 1;
  snprintf(c->fail_why, sizeof c->fail_why, "%.200s", why);
  NB_WARN("synchronisation failed (%s); failing collectives of communicator %016llx so that "
          "ranks cannot choose differently (NCCLBOT_SYNC_ON_FAILURE=fail)",
          why, (unsigned long long)c->comm_id);
}

/* From now on NCCL decides on this rank, as on every other (see the top of this file). */
static int play_nccl(nb_comm *c, const char *why) {
  c->sync->auto_only = 1;
  c->sync->frozen = 1;
  NB_WARN("synchronisation stopped (%s); communicator %016llx keeps NCCL's own choice from now "
          "on, as every rank does", why, (unsigned long long)c->comm_id);
  return 1;
}

/* The coordinator's verdict: stop after round f, at boundary f+2 (fail: fail mode fails). */
static void take_verdict(nb_comm *c, int64_t f, int fail, const char *why) {
  nb_sync *s = c->sync;
  if (s->stop_at) return;
  s->stop_at = f + 2;
  s->stop_fail = fail && c->cfg.on_failure == NB_FAIL_ABORT;
  snprintf(c->fail_why, sizeof c->fail_why, "%.200s", why);
}

/* Boundary stop_at: act on the verdict. Returns 1 (no more learning) or -1 (failed). */
static int stop_now(nb_comm *c) {
  nb_sync *s = c->sync;
  int64_t f = s->stop_at - 2;
  char why[300];
  if (f < 2) {
    snprintf(why, sizeof why, "%.200s, before any round completed", c->fail_why);
    return play_nccl(c, why);
  }
  if (s->stop_fail) {
    fail_comm(c, c->fail_why);
    return -1;
  }
  for (int64_t k = s->applied + 1; k <= f; k++) {
    if (!nb_sync_result(s, k)) { /* cannot happen: result f came before the verdict */
      snprintf(why, sizeof why, "%.200s, but round %lld is not held here", c->fail_why, (long long)k);
      return play_nccl(c, why);
    }
    apply_result(c, k);
  }
  s->frozen = 1;
  NB_WARN("synchronisation stopped (%s); communicator %016llx keeps its bandit state frozen at "
          "round %lld and stops learning (NCCLBOT_SYNC_ON_FAILURE=freeze)",
          c->fail_why, (unsigned long long)c->comm_id, (long long)f);
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

static void submit_round(nb_comm *c, int64_t b) {
  uint64_t m = c->cfg.sync_every, first = (uint64_t)(b - 2) * m;
  float *lat = c->sync->res[(b + 2) % NB_RES_RING]; /* slot of b-2, already applied */
  uint64_t h = 1469598103934665603ULL;
  for (uint64_t i = 0; i < m; i++) {
    nb_pull *e = &c->log[(first + i) & c->log_mask];
    if (e->state == NB_PULL_PENDING) e->state = NB_PULL_MISSING;
    lat[i] = e->state == NB_PULL_HAVE ? e->lat_us : -1.0f;
    uint64_t k = c->tab.ctx[e->ctx].key ^ ((uint64_t)e->arm << 50);
    h = (h ^ k) * 1099511628211ULL;
  }
  c->sync->have[(b + 2) % NB_RES_RING] = -1;
  while (c->match_lo < c->head && c->log[c->match_lo & c->log_mask].state != NB_PULL_PENDING)
    c->match_lo++;
  (void)nb_sync_submit(c->sync, b, h, lat); /* a failed send shows up as the next wait's failure */
}

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* How long a rank that timed out waits for the coordinator's verdict. */
#define NB_VERDICT_MS 5000u

/* Round boundary b (see the top of this file). Returns 0 to go on learning, 1 when frozen
 * or NCCL decides from now on, -1 when failed (fail mode). */
static int boundary(nb_comm *c, int64_t b) {
  uint64_t t0 = nb_now_ns(), c0 = cpu_ns();
  nb_sync *s = c->sync;
  char why[256];
  if (!s->stop_at && b - 1 >= 2) {
    int64_t f = 0;
    int fail = 0;
    uint64_t w0 = nb_now_ns();
    int r = nb_sync_wait(s, b - 1, c->cfg.sync_timeout_ms, &f, &fail, why, sizeof why);
    if (r == NB_WAIT_TIMEOUT) { /* ask the coordinator to stop everyone, take its verdict */
      nb_sync_send(s, c->cfg.on_failure == NB_FAIL_ABORT ? NB_MSG_FAIL : NB_MSG_FREEZE, b - 2);
      uint32_t ms = c->cfg.sync_timeout_ms < NB_VERDICT_MS ? c->cfg.sync_timeout_ms : NB_VERDICT_MS;
      char why2[128];
      if (nb_sync_verdict(s, ms, &f, &fail, why2, sizeof why2) == NB_WAIT_FREEZE)
        r = NB_WAIT_FREEZE;
      else
        snprintf(why + strlen(why), sizeof why - strlen(why), "; %s", why2);
    }
    c->sync_wait_us_total += (double)(nb_now_ns() - w0) / 1000.0;
    if (r == NB_WAIT_FREEZE)
      take_verdict(c, f, fail, why);
    else if (r != NB_WAIT_OK)
      return lost(c, why);
    /* Result b-1 is held here (also when a verdict names it, it came first), so on every
     * rank that plays round b: all started, and all leave NCCL's choice together. */
    if (nb_sync_result(s, b - 1)) s->confirmed = 1;
  }
  if (s->stop_at && b >= s->stop_at) return stop_now(c);
  if (b - 2 >= 2) apply_result(c, b - 2);
  if (b >= 2 && !s->stop_at) submit_round(c, b);
  double us = (double)(nb_now_ns() - t0) / 1000.0;
  c->n_rounds++;
  c->sync_us_total += us;
  c->sync_cpu_us_total += (double)(cpu_ns() - c0) / 1000.0;
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
          st[i].n = sv->stat[j].n;
          st[i].mean = sv->stat[j].mean;
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
 * The policy's choice (index into the context's arms). A deterministic decision depends
 * only on the statistics and the mask: between two updates of this context (in
 * synchronised mode, a whole round) it is reused instead of recomputed. A stochastic one
 * draws afresh each call from the shared stream (rng.h), so it is never reused. Timed
 * AUTO has its one slot: NCCL's arm.
 */
static int select_arm(nb_comm *c, nb_ctx *x, uint64_t key, uint32_t mask) {
  if (c->cfg.policy == NB_POLICY_AUTO) return 0;
  int cacheable = nb_policy_cacheable(&c->cfg);
  if (cacheable && x->sel_ok && x->sel_mask == mask) return x->sel_idx;
  uint64_t stream = cacheable ? 0 : nb_rng_stream(c->cfg.seed, c->comm_id, key);
  int idx = nb_select(&c->cfg, &c->tab.stat[x->arm_off], x->narms, mask, &x->pol, stream);
  x->sel_idx = (uint8_t)idx;
  x->sel_mask = mask;
  x->sel_ok = cacheable;
  return idx;
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
  nb_static_free(c->stat_tab);
  c->stat_tab = NULL;
  nb_saved_free(c->saved);
  c->saved = NULL;
}
