/*
 * config.h: NCCLBOT_* settings, one table (config.c, k_settings) from which the
 * defaults, the validation, the typo check, the INFO announcement, the
 * fingerprint the coordinator compares and the README table all come.
 *
 * Read at each communicator's tuner init (so every communicator holds an
 * immutable snapshot); nothing reads the environment afterwards.
 */
#ifndef NCCLBOT_CONFIG_H
#define NCCLBOT_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  NB_POLICY_AUTO = 0,
  NB_POLICY_STATIC,
  NB_POLICY_GREEDY,
  NB_POLICY_UCB1,
  NB_POLICY_ETC,
  NB_POLICY_SOFTMAX,
  NB_POLICY_THOMPSON,
  NB_POLICY_EPS_GREEDY,
  NB_POLICY_COUNT
} nb_policy;
typedef enum { NB_EST_SGD = 0, NB_EST_MEAN, NB_EST_GAIN } nb_estimator;
typedef enum { NB_FAIL_FREEZE = 0, NB_FAIL_ABORT } nb_on_failure;

typedef struct {
  /* The first two lines hold what a getCollInfo reads (policy arithmetic, gates, rounds). */
  int policy;          /* nb_policy */
  int estimator;       /* nb_estimator */
  double alpha;        /* UCB1 exploration coefficient */
  double pseudo_count; /* warm-start virtual pulls (nu); 0 = cold start */
  double sgd_lr, sgd_decay, sgd_clip; /* clipped-SGD: step lr / n^decay, clip residual */
  double sgd_nmax;     /* ... n stops decaying the step here */
  double gain;         /* constant-gain eta */
  uint64_t skip_first; /* first rewards of each arm served but not learned from */
  uint64_t min_bytes;  /* size gate: below it NCCL's choice stands, nothing is timed */
  uint32_t sync_every; /* m: timed pulls per synchronisation round */
  uint32_t sync_lag;   /* rounds between a round's end and the boundary that applies it, minus 1 */
  uint32_t probe;      /* pulls an arm may have in flight before any of its rewards is applied */
  uint32_t max_contexts;
  uint64_t gate;       /* safety gate on: AUTO's arm where the choice is measured worse than it */
  double gate_margin;  /* ... by more than this fraction of AUTO's mean reward */
  uint64_t gate_min;   /* ... once the choice has this many learned rewards */
  double epsilon;      /* eps-greedy exploration rate */
  uint64_t epsilon_decay; /* 1: eps / sqrt(t) */
  uint64_t seed;       /* shared randomness: with commId, keys every rank's draws */
  double softmax_tau;  /* Softmax temperature */
  uint64_t softmax_decay; /* 1: tau / sqrt(selections) */
  double ts_prior_var; /* Gaussian Thompson prior variance (while n < 2) */
  uint64_t etc_m;      /* ETC: learned samples per arm before committing */
  double rho_max;      /* arm filter: keep mu(a) <= rho_max * mu_min */
  uint32_t sync_timeout_ms;      /* a round's result */
  uint32_t sync_init_timeout_ms; /* connect and START at init */
  uint32_t sample_timeout_ms;    /* a launched pull's sample that long overdue is lost */
  int on_failure;                /* nb_on_failure */
  int sync_configured;
  int valid;           /* 0: a setting was invalid; the plugin stays AUTO */
  char why[256];       /* what was invalid, for the one WARN line */
  char sync_host[256];
  int sync_port;
  char sync_token[256];
  char static_table[1024];
  char trace_dir[1024];
  char state_dir[1024];
  uint64_t fingerprint; /* hash of every setting marked in the table (ranks must agree) */
} nb_config;

void nb_config_from_env(nb_config *cfg);
/* Parse from an explicit getenv-like function (tests, coordinator). */
void nb_config_parse(nb_config *cfg, const char *(*get)(const char *name));
const char *nb_policy_name(int p);
/* Log the table of settings (rank 0 at init). */
void nb_config_announce(const nb_config *cfg);
/* The README's settings table, generated from the same table (build/ncclbot-settings). */
void nb_config_markdown(FILE *out);

#endif
