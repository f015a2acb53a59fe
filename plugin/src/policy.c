/* policy.c: see policy.h. Formulas cite the paper (section 4, Appendix C, Table 16). */
#include "policy.h"

#include <float.h>
#include <math.h>

#include "nccl_abi.h"

int nb_auto_arm(const float *table, int numAlgo, int numProto) {
  int best = NB_NO_ARM;
  float best_v = FLT_MAX;
  int na = numAlgo < NCCLBOT_NUM_ALGOS ? numAlgo : NCCLBOT_NUM_ALGOS;
  int np = numProto < NCCLBOT_NUM_PROTOS ? numProto : NCCLBOT_NUM_PROTOS;
  for (int a = 0; a < na; a++)
    for (int p = 0; p < np; p++) {
      float v = table[a * numProto + p];
      if (v >= 0.0f && v < best_v) {
        best_v = v;
        best = a * NCCLBOT_NUM_PROTOS + p;
      }
    }
  return best;
}

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
                   nb_arm_stat *st) {
  for (int i = 0; i < narms; i++) {
    if (pseudo_count > 0.0 && mu[i] > 0.0) {
      st[i].mean = mu_min / mu[i];
      st[i].n = pseudo_count;
    } else {
      st[i].mean = 0.0;
      st[i].n = 0.0;
    }
  }
}

/*
 * numpy's pairwise summation order for n <= 128 (np.sum of a row), so that N is
 * bit-identical to the analysis package's float64 reference on the same arms.
 */
static double pairwise_sum(const double *x, int n) {
  if (n < 8) {
    double r = 0.0;
    for (int i = 0; i < n; i++) r += x[i];
    return r;
  }
  double r[8];
  for (int j = 0; j < 8; j++) r[j] = x[j];
  int i = 8;
  for (; i < n - (n % 8); i += 8)
    for (int j = 0; j < 8; j++) r[j] += x[i + j];
  double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (; i < n; i++) res += x[i];
  return res;
}

int nb_select(nb_policy policy, const nb_arm_stat *st, int narms, uint32_t mask, double alpha) {
  double ns[NCCLBOT_MAX_ARMS];
  int k = 0;
  for (int i = 0; i < narms; i++) {
    if (!(mask >> i & 1u)) continue;
    if (st[i].n <= 0.0) return i; /* derandomised cold start: lowest unpulled arm */
    ns[k++] = st[i].n;
  }
  double total = pairwise_sum(ns, k);
  /* UCB1 radius alpha * sqrt(2 ln N / n_a) (Appendix C.3); ln N clamped at 0 for N < 1. */
  double two_ln = total > 1.0 ? 2.0 * log(total) : 0.0;
  int best = -1;
  double best_v = -INFINITY;
  for (int i = 0; i < narms; i++) {
    if (!(mask >> i & 1u)) continue;
    double v = st[i].mean;
    if (policy == NB_POLICY_UCB1) v += alpha * sqrt(two_ln / st[i].n);
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  return best;
}

void nb_update(const nb_config *cfg, nb_arm_stat *st, double reward) {
  double prior_n = st->n;
  st->n = prior_n + 1.0;
  if (prior_n <= 0.0) { /* first observation of a cold arm sets the mean */
    st->mean = reward;
    return;
  }
  switch (cfg->estimator) {
    case NB_EST_MEAN:
      st->mean += (reward - st->mean) / st->n;
      break;
    case NB_EST_GAIN: /* constant gain: mean <- (1 - eta) mean + eta r (paper section 6.2) */
      st->mean += cfg->gain * (reward - st->mean);
      break;
    case NB_EST_SGD: { /* clipped SGD: step lr * n^-decay, residual clipped to +-clip */
      double d = reward - st->mean;
      if (d > cfg->sgd_clip) d = cfg->sgd_clip;
      if (d < -cfg->sgd_clip) d = -cfg->sgd_clip;
      st->mean += cfg->sgd_lr * pow(st->n, -cfg->sgd_decay) * d;
      break;
    }
  }
}

double nb_reward(double mu_min, double latency_us) {
  if (!(latency_us > 0.0) || !isfinite(latency_us) || !(mu_min > 0.0)) return -1.0;
  double r = mu_min / latency_us;
  return r > 1e6 ? 1e6 : r;
}
