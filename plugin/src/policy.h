/*
 * policy.h: pure bandit arithmetic (no I/O, no allocation, no state beyond what
 * the caller passes in).
 *
 * Arms are numbered as NCCL scans them: id = algo * 3 + proto, so "lowest arm
 * index" tie-breaks match NCCL's own order. Every rule here is the per-call rule of
 * ncclbot_sweep.analysis.policies (the families' select/update driven one call at a
 * time by StepPolicy, with counter_rng draws): the same statistics, the same
 * decision index and the same seed give the same arm on every rank and in Python,
 * bit for bit (float64, the operation order written in the package docstring).
 */
#ifndef NCCLBOT_POLICY_H
#define NCCLBOT_POLICY_H

#include <math.h>
#include <stdint.h>

#include "config.h"

typedef struct {
  double mean;   /* running mean reward (mu_hat_min / latency) */
  double n;      /* learned pulls, including the warm-start pseudo-count */
  double s2;     /* m2 (sample mean) or variance (sgd, gain) of the rewards */
  double rsn;    /* 1 / sqrt(n), set with n (nb_set_n): UCB1 pays it once per update, not per arm */
  uint32_t seen; /* rewards received, learned or skipped (skip-first-k) */
  uint32_t inflight; /* pulls issued whose reward (or its absence) is not applied yet */
  uint32_t resolved; /* pulls whose reward (or its absence) was applied */
  uint32_t pad_;
} nb_arm_stat;

/* Per-context policy state beyond the arms (identical on every rank). */
typedef struct {
  uint32_t t;          /* decisions made so far: the draw counter */
  uint32_t selections; /* softmax: selections after the cold start */
  uint8_t commit;      /* etc: committed arm index, NB_NO_COMMIT while exploring */
} nb_policy_state;

#define NB_NO_ARM 255
#define NB_NO_COMMIT 255

/* n and its cached 1 / sqrt(n) (inf at n = 0), the only way the plugin sets a count. */
static inline void nb_set_n(nb_arm_stat *st, double n) {
  st->n = n;
  st->rsn = 1.0 / sqrt(n);
}

/* 1 when NCCL could select this cost: finite, >= 0 and below FLT_MAX (NaN fails both). */
static inline int nb_cost_available(float v) {
  return v >= 0.0f && v < 3.40282346638528859812e+38F;
}

/* NCCL's own choice on a table under the running NCCL's scan order, or NB_NO_ARM
 * (defined in table.c with the orders: table.h). */
int nb_auto_arm(const float *table, int numAlgo, int numProto);

/*
 * Arm filter (paper Eq. 2): available arms with mu(a) <= rho_max * mu_min, in
 * NCCL order. Fills ids[]/mu[] (up to NCCLBOT_MAX_ARMS) and *mu_min; returns the count.
 */
int nb_filter_arms(const float *table, int numAlgo, int numProto, double rho_max, uint8_t *ids,
                   double *mu, double *mu_min);

/* Warm start: mean = mu_min / mu(a) backed by pseudo_count pulls (0 = cold); ps reset. */
void nb_warm_start(const double *mu, double mu_min, int narms, double pseudo_count,
                   nb_arm_stat *st, nb_policy_state *ps);

/* 1 when a decision depends only on the statistics (it may be reused until they change). */
static inline int nb_policy_cacheable(const nb_config *cfg) {
  return cfg->policy == NB_POLICY_UCB1 || cfg->policy == NB_POLICY_GREEDY ||
         (cfg->policy == NB_POLICY_EPS_GREEDY && cfg->epsilon == 0.0);
}

/*
 * Index (into st[]) of the arm to play among those with mask bit set (the available arms the
 * hold rule leaves; avail: all available ones, which ETC's exploration is decided on), or -1
 * when the mask is empty. stream is nb_rng_stream(seed, commId, context key); ps->t advances.
 */
int nb_select(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t avail,
              uint32_t mask, nb_policy_state *ps, uint64_t stream);

/* UCB1's N: the counts of all the context's arms summed left to right (arm order). */
double nb_ucb_total(const nb_arm_stat *st, int narms);
/* UCB1's index of one arm: mean + (alpha * sqrt(2 ln max(N, 1))) * (1 / sqrt(n)), the first
 * factor once per selection, the second the arm's cached rsn. */
double nb_ucb_index(const nb_arm_stat *st, double total, double alpha);

/*
 * The hold rule: arms other than auto_idx (AUTO's, never held) with at least
 * probe + 2 * resolved pulls in flight (issued, reward not applied yet), as a mask; probe 0
 * holds nothing. A held arm is left out of the choice, so a newly tried arm is played `probe`
 * times and then waits for its rewards instead of being played blindly for the whole
 * synchronisation delay; trust grows with the evidence applied.
 */
uint32_t nb_held(const nb_arm_stat *st, int narms, uint32_t probe, int auto_idx);
/*
 * The safety gate: `auto_idx` (AUTO's arm) instead of `idx` when idx has NCCLBOT_GATE_MIN
 * learned rewards, AUTO's arm one, and idx's mean is below (1 - margin) times AUTO's; idx
 * otherwise (or when auto_idx is not in mask).
 */
int nb_gate(const nb_config *cfg, const nb_arm_stat *st, int idx, int auto_idx, uint32_t mask);

/* A pull of this arm was issued / its reward (or its absence) applied. */
static inline void nb_issue(nb_arm_stat *st) { st->inflight++; }
static inline void nb_resolve(nb_arm_stat *st) {
  if (st->inflight) st->inflight--;
  st->resolved++;
}

/*
 * The clipped-SGD step lr * min(n, NCCLBOT_SGD_NMAX)^-decay for the counts an arm warm-started
 * with the pseudo-count reaches (pseudo + 1, + 2, ... summed as nb_update sums them), and the
 * step past NMAX, computed once: the hot path then skips pow() with the same bits. Other counts
 * below NMAX (a saved state's) call pow().
 */
#define NB_STEPS 1024
typedef struct {
  struct {
    double n, step; /* a count and its step, side by side: one line per lookup */
  } at[NB_STEPS];
  double at_max; /* the step at and past n = NMAX */
} nb_steps;

void nb_steps_init(nb_steps *s, const nb_config *cfg);

/* One reward into one arm's statistics with the configured estimator and skip-first-k. */
void nb_update(const nb_config *cfg, const nb_steps *steps, nb_arm_stat *st, double reward);

/* Reward of a latency (paper Eq. 1, no cap); <0 when the latency is unusable. */
double nb_reward(double mu_min, double latency_us);

#endif
