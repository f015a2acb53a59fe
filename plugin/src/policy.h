/*
 * policy.h: pure bandit arithmetic (no state, no I/O, no allocation).
 *
 * Arms are numbered as NCCL scans them: id = algo * 3 + proto, so "lowest arm
 * index" tie-breaks match NCCL's own order. Everything here is deterministic:
 * the same statistics give the same arm on every rank (paper section 4).
 */
#ifndef NCCLBOT_POLICY_H
#define NCCLBOT_POLICY_H

#include <stdint.h>

#include "config.h"

typedef struct {
  double mean; /* running mean reward (mu_hat_min / latency) */
  double n;    /* pulls, including the warm-start pseudo-count */
} nb_arm_stat;

#define NB_NO_ARM 255

/* 1 when NCCL could select this cost: finite, >= 0 and below FLT_MAX (NaN fails both). */
static inline int nb_cost_available(float v) { return v >= 0.0f && v < 3.40282346638528859812e+38F; }

/* NCCL's own choice on a table (first strict minimum of available entries), or NB_NO_ARM. */
int nb_auto_arm(const float *table, int numAlgo, int numProto);

/*
 * Arm filter (paper Eq. 2): available arms with mu(a) <= rho_max * mu_min, in
 * NCCL order. Fills ids[]/mu[] (up to NCCLBOT_MAX_ARMS) and *mu_min; returns the count.
 */
int nb_filter_arms(const float *table, int numAlgo, int numProto, double rho_max, uint8_t *ids,
                   double *mu, double *mu_min);

/* Warm start: mean = mu_min / mu(a) backed by pseudo_count pulls (0 = cold). */
void nb_warm_start(const double *mu, double mu_min, int narms, double pseudo_count,
                   nb_arm_stat *st);

/*
 * Index (into st[]) of the arm to play among those with mask bit set. Unpulled
 * arms (n == 0) come first, lowest index first; then UCB1 or greedy argmax with
 * ties to the lowest index. Returns -1 when the mask is empty.
 */
int nb_select(nb_policy policy, const nb_arm_stat *st, int narms, uint32_t mask, double alpha);

/* One reward into one arm's statistics with the configured estimator. */
void nb_update(const nb_config *cfg, nb_arm_stat *st, double reward);

/* Reward of a latency (paper Eq. 1); <0 when the latency is unusable. */
double nb_reward(double mu_min, double latency_us);

#endif
