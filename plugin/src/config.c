/*
 * config.c: one reader per type for NCCLBOT_* variables. Any invalid value marks
 * the whole configuration invalid (plugin inert) with a reason naming the
 * variable, the value and what is accepted; there are no silent defaults.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static void invalid(nb_config *c, const char *name, const char *val, const char *accepted) {
  if (!c->valid) return; /* keep the first reason */
  c->valid = 0;
  snprintf(c->why, sizeof c->why, "%s=\"%s\" is invalid (%s)", name, val, accepted);
}

static void read_double(nb_config *c, const char *(*get)(const char *), const char *name,
                        double *out, double lo, double hi) {
  const char *v = get(name);
  if (!v) return;
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end != '\0' || !isfinite(d) || d < lo || d > hi) {
    char acc[96];
    snprintf(acc, sizeof acc, "expected a number in [%g, %g]", lo, hi);
    invalid(c, name, v, acc);
    return;
  }
  *out = d;
}

static void read_u64(nb_config *c, const char *(*get)(const char *), const char *name,
                     uint64_t *out, uint64_t lo, uint64_t hi) {
  const char *v = get(name);
  if (!v) return;
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end != '\0' || v[0] == '-' || x < lo || x > hi) {
    char acc[96];
    snprintf(acc, sizeof acc, "expected an integer in [%llu, %llu]", (unsigned long long)lo,
             (unsigned long long)hi);
    invalid(c, name, v, acc);
    return;
  }
  *out = x;
}

static int read_enum(nb_config *c, const char *(*get)(const char *), const char *name,
                     const char *const *names, int n, int dflt) {
  const char *v = get(name);
  if (!v) return dflt;
  for (int i = 0; i < n; i++)
    if (strcasecmp(v, names[i]) == 0) return i;
  char acc[128] = "expected one of";
  for (int i = 0; i < n; i++) {
    strncat(acc, i ? ", " : " ", sizeof acc - strlen(acc) - 1);
    strncat(acc, names[i], sizeof acc - strlen(acc) - 1);
  }
  invalid(c, name, v, acc);
  return dflt;
}

static void read_str(nb_config *c, const char *(*get)(const char *), const char *name, char *out,
                     size_t cap) {
  const char *v = get(name);
  if (!v) return;
  if (strlen(v) >= cap) {
    invalid(c, name, v, "too long");
    return;
  }
  strcpy(out, v);
}

static const char *const k_policies[] = {"auto", "static", "greedy", "ucb1"};
static const char *const k_estimators[] = {"sgd", "mean", "gain"};
static const char *const k_failure[] = {"freeze", "fail"};

const char *nb_policy_name(nb_policy p) { return k_policies[p]; }

/* host:port, [v6]:port not supported (loopback and cluster IPv4/hostnames only). */
static void parse_addr(nb_config *c, const char *name, const char *v) {
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || strlen(colon + 1) == 0 || (size_t)(colon - v) >= sizeof c->sync_host) {
    invalid(c, name, v, "expected host:port");
    return;
  }
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) {
    invalid(c, name, v, "expected host:port with port in [1, 65535]");
    return;
  }
  memcpy(c->sync_host, v, (size_t)(colon - v));
  c->sync_host[colon - v] = '\0';
  c->sync_port = (int)port;
  c->sync_configured = 1;
}

/* Slurm default: the coordinator listens on the launch node, port 20000 + jobid % 20000. */
static void slurm_default_addr(nb_config *c, const char *(*get)(const char *)) {
  const char *host = get("SLURM_LAUNCH_NODE_IPADDR");
  const char *job = get("SLURM_JOB_ID");
  if (!host || !job || strlen(host) >= sizeof c->sync_host) return;
  long id = strtol(job, NULL, 10);
  if (id <= 0) return;
  strcpy(c->sync_host, host);
  c->sync_port = 20000 + (int)(id % 20000);
  c->sync_configured = 1;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

static void fingerprint(nb_config *c) {
  uint64_t h = 1469598103934665603ULL;
  int pol = c->policy, est = c->estimator;
  h = fnv(h, &pol, sizeof pol);
  h = fnv(h, &est, sizeof est);
  h = fnv(h, &c->alpha, sizeof c->alpha);
  h = fnv(h, &c->pseudo_count, sizeof c->pseudo_count);
  h = fnv(h, &c->rho_max, sizeof c->rho_max);
  h = fnv(h, &c->sgd_lr, sizeof c->sgd_lr);
  h = fnv(h, &c->sgd_decay, sizeof c->sgd_decay);
  h = fnv(h, &c->sgd_clip, sizeof c->sgd_clip);
  h = fnv(h, &c->gain, sizeof c->gain);
  h = fnv(h, &c->min_bytes, sizeof c->min_bytes);
  h = fnv(h, &c->max_contexts, sizeof c->max_contexts);
  h = fnv(h, &c->sync_every, sizeof c->sync_every);
  int f = c->on_failure;
  h = fnv(h, &f, sizeof f);
  c->fingerprint = h;
}

void nb_config_parse(nb_config *c, const char *(*get)(const char *)) {
  memset(c, 0, sizeof *c);
  c->valid = 1;
  /* Paper champion (Appendix E, Table 16): UCB1, clipped-SGD mean, warm start. */
  c->alpha = 0.0928;
  c->pseudo_count = 2.89;
  c->rho_max = 2.0;
  c->sgd_lr = 0.468;
  c->sgd_decay = 0.467;
  c->sgd_clip = 0.389;
  c->gain = 0.1;
  c->min_bytes = 1048576; /* paper section 7: below 1 MiB the cost model is exact */
  c->max_contexts = 16384;
  c->sync_every = 64;
  c->sync_timeout_ms = 30000;
  c->sync_init_timeout_ms = 60000;

  c->policy = (nb_policy)read_enum(c, get, "NCCLBOT_POLICY", k_policies, 4, NB_POLICY_UCB1);
  nb_estimator est_default = NB_EST_SGD;
  if (c->policy == NB_POLICY_GREEDY) { /* its own champion (Table 16): nu 0.892, sample mean */
    c->pseudo_count = 0.892;
    est_default = NB_EST_MEAN;
  }
  c->estimator = (nb_estimator)read_enum(c, get, "NCCLBOT_ESTIMATOR", k_estimators, 3, est_default);
  /* fail by default: it is the only mode in which ranks can never run different arms */
  c->on_failure = (nb_on_failure)read_enum(c, get, "NCCLBOT_SYNC_ON_FAILURE", k_failure, 2,
                                           NB_FAIL_ABORT);
  read_double(c, get, "NCCLBOT_UCB_ALPHA", &c->alpha, 0.0, 1e6);
  read_double(c, get, "NCCLBOT_PSEUDO_COUNT", &c->pseudo_count, 0.0, 1e9);
  read_double(c, get, "NCCLBOT_RHO_MAX", &c->rho_max, 1.0, 1e9);
  read_double(c, get, "NCCLBOT_SGD_LR", &c->sgd_lr, 1e-9, 1.0);
  read_double(c, get, "NCCLBOT_SGD_DECAY", &c->sgd_decay, 0.0, 2.0);
  read_double(c, get, "NCCLBOT_SGD_CLIP", &c->sgd_clip, 1e-9, 1e9);
  read_double(c, get, "NCCLBOT_GAIN", &c->gain, 1e-9, 1.0);
  read_u64(c, get, "NCCLBOT_MIN_BYTES", &c->min_bytes, 0, UINT64_MAX);
  uint64_t v = c->max_contexts;
  read_u64(c, get, "NCCLBOT_MAX_CONTEXTS", &v, 1, 1u << 24);
  c->max_contexts = (uint32_t)v;
  v = c->sync_every;
  read_u64(c, get, "NCCLBOT_SYNC_EVERY", &v, 1, 4096);
  c->sync_every = (uint32_t)v;
  v = c->sync_timeout_ms;
  read_u64(c, get, "NCCLBOT_SYNC_TIMEOUT_MS", &v, 1, 86400000);
  c->sync_timeout_ms = (uint32_t)v;
  v = c->sync_init_timeout_ms;
  read_u64(c, get, "NCCLBOT_SYNC_INIT_TIMEOUT_MS", &v, 1, 86400000);
  c->sync_init_timeout_ms = (uint32_t)v;
  read_str(c, get, "NCCLBOT_STATIC_TABLE", c->static_table, sizeof c->static_table);
  read_str(c, get, "NCCLBOT_TRACE_DIR", c->trace_dir, sizeof c->trace_dir);
  read_str(c, get, "NCCLBOT_STATE_DIR", c->state_dir, sizeof c->state_dir);
  read_str(c, get, "NCCLBOT_SYNC_TOKEN", c->sync_token, sizeof c->sync_token);
  const char *addr = get("NCCLBOT_SYNC_ADDR");
  if (addr && addr[0])
    parse_addr(c, "NCCLBOT_SYNC_ADDR", addr);
  else if (!addr)
    slurm_default_addr(c, get);

  if (c->valid && c->policy == NB_POLICY_STATIC && !c->static_table[0])
    invalid(c, "NCCLBOT_STATIC_TABLE", "", "NCCLBOT_POLICY=static needs a table file");
  if (c->valid && c->sync_configured && !c->sync_token[0])
    invalid(c, "NCCLBOT_SYNC_TOKEN", "", "synchronisation needs a shared token");
  fingerprint(c);
}

static const char *env_get(const char *name) { return getenv(name); }

/* Every variable this plugin reads. */
static const char *const k_known[] = {
    "NCCLBOT_POLICY", "NCCLBOT_ESTIMATOR", "NCCLBOT_UCB_ALPHA", "NCCLBOT_PSEUDO_COUNT",
    "NCCLBOT_RHO_MAX", "NCCLBOT_SGD_LR", "NCCLBOT_SGD_DECAY", "NCCLBOT_SGD_CLIP", "NCCLBOT_GAIN",
    "NCCLBOT_MIN_BYTES", "NCCLBOT_MAX_CONTEXTS", "NCCLBOT_STATIC_TABLE", "NCCLBOT_SYNC_ADDR",
    "NCCLBOT_SYNC_TOKEN", "NCCLBOT_SYNC_EVERY", "NCCLBOT_SYNC_TIMEOUT_MS",
    "NCCLBOT_SYNC_INIT_TIMEOUT_MS",
    "NCCLBOT_SYNC_ON_FAILURE", "NCCLBOT_TRACE_DIR", "NCCLBOT_STATE_DIR"};

/* Edit distance of two short names (init only). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  size_t row[64];
  if (na >= 63 || nb >= 63) return 99;
  for (size_t j = 0; j <= nb; j++) row[j] = j;
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

extern char **environ;

/*
 * Other parts of ncclbot-sweep use NCCLBOT_* names too (NCCLBOT_SIM_*, NCCLBOT_STEP_KEY),
 * so an unknown name is only an error when it is within two edits of a setting: then it
 * is a typo, and a typo must not silently fall back to a default.
 */
void nb_config_from_env(nb_config *cfg) {
  nb_config_parse(cfg, env_get);
  for (char **e = environ; e && *e && cfg->valid; e++) {
    if (strncmp(*e, "NCCLBOT_", 8) != 0) continue;
    size_t n = strcspn(*e, "="), nearest = 99;
    const char *near = NULL;
    for (size_t i = 0; i < sizeof k_known / sizeof *k_known; i++) {
      size_t d = edit_distance(*e, n, k_known[i], strlen(k_known[i]));
      if (d < nearest) {
        nearest = d;
        near = k_known[i];
      }
    }
    if (nearest > 0 && nearest <= 2) {
      cfg->valid = 0;
      snprintf(cfg->why, sizeof cfg->why,
               "%.*s is not a setting of this plugin; did you mean %s? (plugin/README.md)", (int)n,
               *e, near);
    }
  }
}

/* One INFO line with the effective value of every setting (the token is never printed). */
void nb_config_announce(const nb_config *c) {
  NB_INFO("settings: NCCLBOT_POLICY=%s NCCLBOT_ESTIMATOR=%s NCCLBOT_UCB_ALPHA=%g "
          "NCCLBOT_PSEUDO_COUNT=%g NCCLBOT_RHO_MAX=%g NCCLBOT_SGD_LR=%g NCCLBOT_SGD_DECAY=%g "
          "NCCLBOT_SGD_CLIP=%g NCCLBOT_GAIN=%g NCCLBOT_MIN_BYTES=%llu NCCLBOT_MAX_CONTEXTS=%u "
          "NCCLBOT_STATIC_TABLE=%s NCCLBOT_SYNC_ADDR=%s:%d NCCLBOT_SYNC_TOKEN=%s "
          "NCCLBOT_SYNC_EVERY=%u NCCLBOT_SYNC_TIMEOUT_MS=%u NCCLBOT_SYNC_INIT_TIMEOUT_MS=%u "
          "NCCLBOT_SYNC_ON_FAILURE=%s "
          "NCCLBOT_TRACE_DIR=%s NCCLBOT_STATE_DIR=%s",
          k_policies[c->policy], k_estimators[c->estimator], c->alpha, c->pseudo_count,
          c->rho_max, c->sgd_lr, c->sgd_decay, c->sgd_clip, c->gain,
          (unsigned long long)c->min_bytes, c->max_contexts,
          c->static_table[0] ? c->static_table : "(none)",
          c->sync_configured ? c->sync_host : "(none)", c->sync_port,
          c->sync_token[0] ? "(set)" : "(none)", c->sync_every, c->sync_timeout_ms,
          c->sync_init_timeout_ms, k_failure[c->on_failure], c->trace_dir[0] ? c->trace_dir : "(none)",
          c->state_dir[0] ? c->state_dir : "(none)");
}
