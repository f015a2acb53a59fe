/*
 * policy.c: see policy.h. Formulas cite the paper (section 4, Appendix C, Table 16);
 * each rule is written in the operation order of its Python family
 * (ncclbot_sweep.analysis.policies.families), which the tests hold it to bit for bit.
 */
#include "policy.h"

#include <float.h>
#include <math.h>

#include "nccl_abi.h"
#include "rng.h"

int nb_filter_arms(const float *table, int numAlgo, int numProto, double rho_max, uint8_t *ids,
                   double *mu, double *mu_min) {
  int na = numAlgo < NCCLBOT_NUM_ALGOS ? numAlgo : NCCLBOT_NUM_ALGOS;
  int np = numProto < NCCLBOT_NUM_PROTOS ? numProto : NCCLBOT_NUM_PROTOS;
  double lo = INFINITY;
  for (int a = 0; a < na; a++)
    for (int p = 0; p < np; p++) {
      float v = table[a * numProto + p];
      if (nb_cost_available(v) && v < lo) lo = v;
    }
  *mu_min = lo;
  if (!isfinite(lo)) return 0;
  int n = 0;
  for (int a = 0; a < na; a++)
    for (int p = 0; p < np; p++) {
      float v = table[a * numProto + p];
      if (nb_cost_available(v) && (double)v <= rho_max * lo) {
        ids[n] = (uint8_t)(a * NCCLBOT_NUM_PROTOS + p);
        mu[n] = v;
        n++;
      }
    }
  return n;
}

void nb_warm_start(const double *mu, double mu_min, int narms, double pseudo_count,
                   nb_arm_stat *st, nb_policy_state *ps) {
  for (int i = 0; i < narms; i++) {
    int warm = pseudo_count > 0.0 && mu[i] > 0.0;
    st[i] = (nb_arm_stat){warm ? mu_min / mu[i] : 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0};
    nb_set_n(&st[i], warm ? pseudo_count : 0.0);
  }
  *ps = (nb_policy_state){0, 0, NB_NO_COMMIT};
}

/* N summed left to right (the one order) and, in the same pass, the masked arms with n == 0
 * ("unpulled") into *cold: UCB1 needs both, and one pass is a quarter of its selection. */
static double total_and_unpulled(const nb_arm_stat *st, int narms, uint32_t mask, uint32_t *cold) {
  double total = narms > 0 ? st[0].n : 0.0;
  uint32_t u = narms > 0 && (mask & 1u) && st[0].n == 0.0;
  for (int i = 1; i < narms; i++) {
    total += st[i].n;
    u |= (uint32_t)((mask >> i & 1u) && st[i].n == 0.0) << i;
  }
  *cold = u;
  return total;
}

double nb_ucb_total(const nb_arm_stat *st, int narms) {
  uint32_t cold;
  return total_and_unpulled(st, narms, 0, &cold);
}

/* alpha * sqrt(2 ln max(N, 1)), which every arm of a context shares: one log and one square
 * root per selection; an arm's index is then mean + scale * rsn. */
static double ucb_scale(double total, double alpha) {
  return alpha * sqrt(2.0 * log(total > 1.0 ? total : 1.0));
}

double nb_ucb_index(const nb_arm_stat *st, double total, double alpha) {
  return st->mean + ucb_scale(total, alpha) * st->rsn;
}

/* Masked arms with n == 0 ("unpulled"). */
static uint32_t unpulled(const nb_arm_stat *st, int narms, uint32_t mask) {
  uint32_t cold;
  total_and_unpulled(st, narms, mask, &cold);
  return cold;
}

/* The lowest masked index maximising v[] (numpy's argmax over the masked row); the running
 * maximum stays in a register. */
static int argmax(const double *v, int narms, uint32_t mask) {
  int best = -1;
  double top = 0.0;
  for (int i = 0; i < narms; i++)
    if ((mask >> i & 1u) && (best < 0 || v[i] > top)) {
      best = i;
      top = v[i];
    }
  return best;
}

/* argmax over the masked arms' means, read in place (no copy on the stack: a hot call's
 * stack lines are cold lines too). */
static int argmax_mean(const nb_arm_stat *st, int narms, uint32_t mask) {
  int best = -1;
  double top = 0.0;
  for (int i = 0; i < narms; i++)
    if ((mask >> i & 1u) && (best < 0 || st[i].mean > top)) {
      best = i;
      top = st[i].mean;
    }
  return best;
}

/* The floor(u * count)-th set bit of mask (base.pick_uniform). */
static int pick_uniform(uint32_t mask, double u) {
  int count = __builtin_popcount(mask);
  if (count == 0) return -1;
  double j = floor(u * (double)count);
  int k = j > (double)(count - 1) ? count - 1 : (int)j;
  for (int i = 0; i < 32; i++)
    if ((mask >> i & 1u) && k-- == 0) return i;
  return -1;
}

static int select_ucb1(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t mask) {
  uint32_t cold;
  double total = total_and_unpulled(st, narms, mask, &cold);
  if (cold) return __builtin_ctz(cold); /* derandomised cold start: lowest unpulled arm */
  double scale = ucb_scale(total, cfg->alpha), top = 0.0;
  int best = -1;
  for (int i = 0; i < narms; i++) {
    if (!(mask >> i & 1u)) continue;
    double v = st[i].mean + scale * st[i].rsn;
    if (best < 0 || v > top) { /* argmax's rule, without storing the indexes */
      best = i;
      top = v;
    }
  }
  return best;
}

/* The policies that keep arrays on the stack are never inlined into nb_select, whose frame
 * then stays small for the deterministic ones. */
#define NB_OUTLINED __attribute__((noinline))

/* families.Softmax: Boltzmann over the means, tau / sqrt(selections) with decay. */
static NB_OUTLINED int select_softmax(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t mask,
                          nb_policy_state *ps, double u) {
  uint32_t cold = unpulled(st, narms, mask);
  if (cold) return pick_uniform(cold, u);
  ps->selections++;
  double sel = ps->selections > 1 ? (double)ps->selections : 1.0;
  double tau = cfg->softmax_decay ? cfg->softmax_tau / sqrt(sel) : cfg->softmax_tau;
  double top = -INFINITY, w[NCCLBOT_MAX_ARMS], total = 0.0;
  for (int i = 0; i < narms; i++)
    if ((mask >> i & 1u) && st[i].mean > top) top = st[i].mean;
  for (int i = 0; i < narms; i++) {
    w[i] = (mask >> i & 1u) ? exp((st[i].mean - top) / tau) : 0.0;
    total += w[i];
  }
  /* base.sample_categorical: count of running sums <= u * total, else the last weighted arm */
  double thr = u * total, cs = 0.0;
  int idx = 0, last = -1;
  for (int i = 0; i < narms; i++) {
    cs += w[i];
    idx += cs <= thr;
    if (w[i] > 0.0) last = i;
  }
  return idx < narms ? idx : last;
}

static double variance(const nb_config *cfg, const nb_arm_stat *st) {
  if (cfg->estimator == NB_EST_MEAN) return st->n > 0.0 ? st->s2 / st->n : 0.0;
  return st->s2;
}

/* families.GaussianThompson: argmax of mean + sqrt(v / n) z, one normal per arm. */
static NB_OUTLINED int select_thompson(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t mask,
                           uint64_t base) {
  double v[NCCLBOT_MAX_ARMS];
  for (int i = 0; i < narms; i++) {
    if (!(mask >> i & 1u)) continue;
    double var = st[i].n < 2.0 ? cfg->ts_prior_var : variance(cfg, &st[i]);
    double scale = sqrt(var / (st[i].n > 0.0 ? st[i].n : 1.0));
    v[i] = st[i].mean + scale * nb_rng_normal(base, i);
  }
  return argmax(v, narms, mask);
}

/* families.EpsilonGreedy: explore uniformly with probability eps_t, else argmax mean. */
static int select_eps(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t mask,
                      uint32_t t, uint64_t base) {
  int greedy = argmax_mean(st, narms, mask);
  if (cfg->epsilon == 0.0) return greedy;
  double eps = cfg->epsilon_decay ? cfg->epsilon / sqrt((double)t + 1.0) : cfg->epsilon;
  return nb_rng_uniform(base, 0) < eps ? pick_uniform(mask, nb_rng_uniform(base, 1)) : greedy;
}

/* families.ETC: uniformly among the arms with fewer than m learned samples, then commit. While
 * every such arm is held (its rewards pending) the best mean is played, not committed to. */
static int select_etc(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t avail,
                      uint32_t mask, nb_policy_state *ps, double u) {
  uint32_t eligible = 0;
  for (int i = 0; i < narms; i++)
    if ((avail >> i & 1u) && st[i].n < (double)cfg->etc_m) eligible |= 1u << i;
  if (eligible & mask) return pick_uniform(eligible & mask, u);
  if (eligible) return argmax_mean(st, narms, mask);
  if (ps->commit == NB_NO_COMMIT) ps->commit = (uint8_t)argmax_mean(st, narms, mask);
  return (mask >> ps->commit & 1u) ? ps->commit : argmax_mean(st, narms, mask);
}

int nb_select(const nb_config *cfg, const nb_arm_stat *st, int narms, uint32_t avail,
              uint32_t mask, nb_policy_state *ps, uint64_t stream) {
  uint32_t t = ps->t++;
  if (!mask) return -1;
  switch (cfg->policy) {
    case NB_POLICY_UCB1: return select_ucb1(cfg, st, narms, mask);
    case NB_POLICY_SOFTMAX:
      return select_softmax(cfg, st, narms, mask, ps, nb_rng_uniform(nb_rng_at(stream, t), 0));
    case NB_POLICY_THOMPSON: return select_thompson(cfg, st, narms, mask, nb_rng_at(stream, t));
    case NB_POLICY_EPS_GREEDY: return select_eps(cfg, st, narms, mask, t, nb_rng_at(stream, t));
    case NB_POLICY_ETC:
      return select_etc(cfg, st, narms, avail, mask, ps, nb_rng_uniform(nb_rng_at(stream, t), 0));
    default: return argmax_mean(st, narms, mask); /* greedy */
  }
}

uint32_t nb_held(const nb_arm_stat *st, int narms, uint32_t probe, int auto_idx) {
  uint32_t held = 0;
  if (!probe) return 0;
  for (int i = 0; i < narms; i++)
    held |= (uint32_t)((uint64_t)st[i].inflight >= (uint64_t)probe + 2ULL * st[i].resolved) << i;
  return auto_idx >= 0 && auto_idx < narms ? held & ~(1u << auto_idx) : held;
}

/* Rewards learned from (skip-first-k: the first k received are not). */
static uint32_t learned(const nb_config *cfg, const nb_arm_stat *st) {
  return st->seen > cfg->skip_first ? (uint32_t)(st->seen - cfg->skip_first) : 0;
}

int nb_gate(const nb_config *cfg, const nb_arm_stat *st, int idx, int auto_idx, uint32_t mask) {
  if (!cfg->gate || idx < 0 || idx == NB_NO_ARM || auto_idx == idx || auto_idx == NB_NO_ARM || !(mask >> auto_idx & 1u))
    return idx;
  if (learned(cfg, &st[idx]) >= cfg->gate_min && learned(cfg, &st[auto_idx]) >= 1 &&
      st[idx].mean < (1.0 - cfg->gate_margin) * st[auto_idx].mean)
    return auto_idx;
  return idx;
}

void nb_steps_init(nb_steps *s, const nb_config *cfg) {
  double n = cfg->pseudo_count;
  for (int j = 0; j < NB_STEPS; j++) {
    n = n + 1.0;
    s->at[j].n = n;
    s->at[j].step = cfg->sgd_lr * pow(fmin(n, cfg->sgd_nmax), -cfg->sgd_decay);
  }
  s->at_max = cfg->sgd_lr * pow(cfg->sgd_nmax, -cfg->sgd_decay);
}

static double sgd_step(const nb_config *cfg, const nb_steps *s, double n_new) {
  if (n_new >= cfg->sgd_nmax) return s->at_max;
  double j = n_new - cfg->pseudo_count - 1.0;
  if (j > -0.5 && j < NB_STEPS - 0.5) {
    int k = (int)(j + 0.5);
    if (s->at[k].n == n_new) return s->at[k].step;
  }
  return cfg->sgd_lr * pow(n_new, -cfg->sgd_decay);
}

/* estimators.BanditState.update with discount 1, after skip-first-k. */
void nb_update(const nb_config *cfg, const nb_steps *steps, nb_arm_stat *st, double reward) {
  int learn = st->seen >= cfg->skip_first;
  st->seen++;
  if (!learn) return;
  double n_old = st->n, n_new = n_old + 1.0, d = reward - st->mean;
  if (cfg->estimator == NB_EST_MEAN) {
    st->mean = st->mean + d / n_new;
    st->s2 = st->s2 + d * (reward - st->mean);
  } else {
    double step = cfg->gain;
    if (cfg->estimator == NB_EST_SGD) { /* lr * min(n, nmax)^-decay, residual clipped to +-clip */
      step = sgd_step(cfg, steps, n_new);
      d = d < -cfg->sgd_clip ? -cfg->sgd_clip : d > cfg->sgd_clip ? cfg->sgd_clip : d;
    }
    if (n_old == 0.0) { /* the first observation of a cold arm sets it */
      st->mean = reward;
      st->s2 = 0.0;
    } else {
      st->mean = st->mean + step * d;
      st->s2 = st->s2 + step * (d * d - st->s2);
    }
  }
  nb_set_n(st, n_new);
}

double nb_reward(double mu_min, double latency_us) {
  if (!(latency_us > 0.0) || !isfinite(latency_us) || !(mu_min > 0.0)) return -1.0;
  return mu_min / latency_us;
}
