/*
 * config.c: the NCCLBOT_* settings as one table (k_settings). Each row names the
 * variable, its type and field, its default (text, read by the same reader as the
 * environment), its range or choices, whether ranks must agree on it (then it is in
 * the fingerprint the coordinator compares) and its README meaning. Defaults,
 * validation, the typo check, the INFO line and the README table are all loops over
 * it. Any invalid value marks the whole configuration invalid (plugin inert) with a
 * reason naming the variable, the value and what is accepted; no silent defaults.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

typedef enum { T_ENUM, T_DOUBLE, T_U32, T_U64, T_STR, T_ADDR } nb_type;

#define F_AGREE 0x1  /* in the fingerprint: every rank must have the same value */
#define F_SECRET 0x2 /* never printed */

typedef struct {
  const char *name;
  nb_type type;
  size_t off, cap;            /* field offset; capacity of a string field */
  const char *dflt;           /* default, as the environment would give it */
  double lo, hi;              /* T_DOUBLE range */
  uint64_t ulo, uhi;          /* T_U32/T_U64 range */
  const char *const *choices; /* T_ENUM names, index = value */
  unsigned flags;
  const char *shown_dflt;     /* README default when it is not a plain value */
  const char *doc;            /* README meaning */
} nb_setting;

static const char *const k_policies[NB_POLICY_COUNT + 1] = {
    "auto", "static", "greedy", "ucb1", "etc", "softmax", "thompson", "eps-greedy", NULL};
static const char *const k_estimators[] = {"sgd", "mean", "gain", NULL};
static const char *const k_failure[] = {"freeze", "fail", NULL};

#define OFF(f) offsetof(nb_config, f)
#define DBL(n, f, d, l, h, doc) {n, T_DOUBLE, OFF(f), 0, d, l, h, 0, 0, NULL, F_AGREE, NULL, doc}
#define INT(t, n, f, d, l, h, doc) {n, t, OFF(f), 0, d, 0, 0, l, h, NULL, F_AGREE, NULL, doc}
#define STR(n, f, flags, doc) \
  {n, T_STR, OFF(f), sizeof(((nb_config *)0)->f), "", 0, 0, 0, 0, NULL, flags, "(none)", doc}

static const nb_setting k_settings[] = {
    {"NCCLBOT_POLICY", T_ENUM, OFF(policy), 0, "ucb1", 0, 0, 0, 0, k_policies, F_AGREE, NULL,
     "`auto` (NCCL's choice; timed and traced when the profiler is loaded), `static` (table "
     "file), learners `greedy`, `ucb1` (the paper's champion), `etc`, `softmax`, `thompson`, "
     "`eps-greedy` (see \"Policies\")"},
    {"NCCLBOT_ESTIMATOR", T_ENUM, OFF(estimator), 0, "mean", 0, 0, 0, 0, k_estimators, F_AGREE,
     NULL, "reward mean: `sgd` (clipped SGD), `mean` (sample mean), `gain` (constant gain)"},
    DBL("NCCLBOT_UCB_ALPHA", alpha, "0.0928", 0.0, 1e6, "UCB1 exploration coefficient alpha"),
    DBL("NCCLBOT_PSEUDO_COUNT", pseudo_count, "2.89", 0.0, 1e9,
        "warm-start virtual pulls nu per arm (0 = cold start); `etc` is always cold"),
    DBL("NCCLBOT_RHO_MAX", rho_max, "2", 1.0, 1e9,
        "arm filter: keep arms whose cost is at most rho_max times the cheapest"),
    DBL("NCCLBOT_SGD_LR", sgd_lr, "0.468", 1e-9, 1.0,
        "clipped SGD: learning rate (step lr * min(n, NMAX)^-decay)"),
    DBL("NCCLBOT_SGD_DECAY", sgd_decay, "0.467", 0.0, 2.0, "clipped SGD: step-size decay exponent"),
    DBL("NCCLBOT_SGD_NMAX", sgd_nmax, "1024", 1.0, 1e18,
        "clipped SGD: the step stops decaying at this count (lr * min(n, NMAX)^-decay), so a mean "
        "learned over a long job keeps following a latency that drifts"),
    DBL("NCCLBOT_SGD_CLIP", sgd_clip, "0.389", 1e-9, 1e9, "clipped SGD: residual clip"),
    DBL("NCCLBOT_GAIN", gain, "0.1", 1e-9, 1.0, "constant-gain eta"),
    INT(T_U64, "NCCLBOT_SKIP_FIRST", skip_first, "0", 0, 1000000,
        "skip-first-k: the first k rewards of each arm are paid for but not learned from"),
    DBL("NCCLBOT_SOFTMAX_TAU", softmax_tau, "0.089", 1e-9, 1e9, "`softmax` temperature tau"),
    INT(T_U64, "NCCLBOT_SOFTMAX_DECAY", softmax_decay, "1", 0, 1,
        "`softmax`: 1 = temperature tau / sqrt(selections after the cold start), 0 = constant"),
    DBL("NCCLBOT_TS_PRIOR_VAR", ts_prior_var, "0.000301", 0.0, 1e9,
        "`thompson`: prior variance, used while an arm has n < 2"),
    DBL("NCCLBOT_EPSILON", epsilon, "0", 0.0, 1.0,
        "`eps-greedy` exploration rate (the champion's 0 is greedy; the paper's live run used "
        "0.033 with decay)"),
    INT(T_U64, "NCCLBOT_EPSILON_DECAY", epsilon_decay, "0", 0, 1,
        "`eps-greedy`: 1 = rate eps / sqrt(t), t the context's decision number"),
    INT(T_U64, "NCCLBOT_ETC_M", etc_m, "2", 1, 1000000,
        "`etc`: learned samples per arm before it commits to the best mean"),
    INT(T_U64, "NCCLBOT_SEED", seed, "0", 0, UINT64_MAX,
        "shared randomness: with the communicator id it keys every draw "
        "(see \"Shared randomness\")"),
    INT(T_U64, "NCCLBOT_MIN_BYTES", min_bytes, "1048576", 0, UINT64_MAX,
        "size gate: below it NCCL's choice stands and nothing is timed (paper section 7: the model "
        "is exact there)"),
    INT(T_U32, "NCCLBOT_MAX_CONTEXTS", max_contexts, "16384", 1, 1u << 24,
        "contexts kept per communicator, their table allocated at init (about 400 bytes of address "
        "space each, touched as contexts appear); later ones keep NCCL's choice and cost no memory"),
    STR("NCCLBOT_STATIC_TABLE", static_table, 0, "table file for `static` (format below)"),
    {"NCCLBOT_SYNC_ADDR", T_ADDR, 0, 0, NULL, 0, 0, 0, 0, NULL, 0,
     "`$SLURM_LAUNCH_NODE_IPADDR:20000+SLURM_JOB_ID%20000`",
     "coordinator `host:port`; an empty value turns synchronisation (and the Slurm default) off"},
    STR("NCCLBOT_SYNC_TOKEN", sync_token, F_SECRET,
        "shared secret, required whenever a coordinator address is set (the coordinator checks it)"),
    INT(T_U32, "NCCLBOT_SYNC_EVERY", sync_every, "16", 1, 4096,
        "m: timed pulls per synchronisation round"),
    INT(T_U32, "NCCLBOT_SYNC_LAG", sync_lag, "1", 1, 64,
        "A: round r's merged rewards apply at the boundary that starts round r+1+A; there a rank "
        "waits, if it must, for its own samples of round r (so its host runs at most (A+1) x m "
        "timed collectives ahead of its GPU) and for the merged result"),
    INT(T_U32, "NCCLBOT_PROBE", probe, "0", 0, 1000000,
        "hold rule: an arm other than AUTO's may have at most PROBE + 2 x (its pulls already "
        "applied) pulls whose rewards are not applied yet; a held arm is left out of the choice; "
        "0 = no hold (see \"Hold\")"),
    INT(T_U64, "NCCLBOT_GATE", gate, "1", 0, 1,
        "safety gate: 1 = play AUTO's arm (NCCL's choice) whenever the policy's choice has a "
        "mean reward below (1 - NCCLBOT_GATE_MARGIN) times AUTO's arm's (the choice with "
        "NCCLBOT_GATE_MIN learned rewards, AUTO's arm with one), 0 = off"),
    DBL("NCCLBOT_GATE_MARGIN", gate_margin, "0.1", 0.0, 1.0,
        "safety gate margin, a fraction of AUTO's arm's mean reward"),
    INT(T_U64, "NCCLBOT_GATE_MIN", gate_min, "10", 1, 1000000,
        "safety gate: learned rewards the policy's choice needs before the gate judges it (past "
        "the first-use transient, whose inflated first samples must not condemn a good arm)"),
    INT(T_U32, "NCCLBOT_SYNC_TIMEOUT_MS", sync_timeout_ms, "30000", 1, 86400000,
        "how long a rank waits for a round's merged result"),
    INT(T_U32, "NCCLBOT_SYNC_INIT_TIMEOUT_MS", sync_init_timeout_ms, "60000", 1, 86400000,
        "how long a rank's init waits to reach the coordinator and for every rank to join (START)"),
    {"NCCLBOT_SAMPLE_TIMEOUT_MS", T_U32, OFF(sample_timeout_ms), 0, "10000", 0, 0, 1, 86400000, NULL,
     0, NULL,
     "how long a rank waiting for its own samples goes without any arriving before it counts "
     "the launched ones still missing as lost (NCCL never delivered them); a sample also counts "
     "as lost 50 ms after a later collective's arrived"},
    {"NCCLBOT_SYNC_ON_FAILURE", T_ENUM, OFF(on_failure), 0, "fail", 0, 0, 0, 0, k_failure, F_AGREE,
     NULL,
     "`fail`: every rank fails from the same collective on, with a WARN (ranks never run different "
     "arms); `freeze`: stop learning on identical state and keep running (see \"Rank consistency\")"},
    STR("NCCLBOT_TRACE_DIR", trace_dir, 0, "write the per-rank trace there"),
    STR("NCCLBOT_STATE_DIR", state_dir, 0,
        "load and save per-context statistics there (every rank must read the same file: its hash "
        "is in the fingerprint)"),
};
#define NSET (sizeof k_settings / sizeof *k_settings)

/* Policy-specific defaults: the analysis package's champions (paper Table 16). */
static const struct {
  int policy;
  const char *name, *value;
} k_policy_defaults[] = {
    {NB_POLICY_UCB1, "NCCLBOT_ESTIMATOR", "sgd"},
    {NB_POLICY_AUTO, "NCCLBOT_SYNC_ON_FAILURE", "freeze"}, /* AUTO's arms never differ */
    {NB_POLICY_GREEDY, "NCCLBOT_PSEUDO_COUNT", "0.892"},
    {NB_POLICY_EPS_GREEDY, "NCCLBOT_PSEUDO_COUNT", "0.892"},
    {NB_POLICY_SOFTMAX, "NCCLBOT_PSEUDO_COUNT", "1.24"},
    {NB_POLICY_THOMPSON, "NCCLBOT_PSEUDO_COUNT", "0.491"},
    {NB_POLICY_ETC, "NCCLBOT_PSEUDO_COUNT", "0"},
    {NB_POLICY_THOMPSON, "NCCLBOT_SKIP_FIRST", "1"},
    {NB_POLICY_ETC, "NCCLBOT_SKIP_FIRST", "1"},
    /* the first-use transient: the constant-gain mean for the mean-based learners (UCB1's
     * clipped SGD and ETC's skip-first-1 bound it already), as the delayed offline replay shows */
    {NB_POLICY_GREEDY, "NCCLBOT_ESTIMATOR", "gain"},
    {NB_POLICY_EPS_GREEDY, "NCCLBOT_ESTIMATOR", "gain"},
    {NB_POLICY_SOFTMAX, "NCCLBOT_ESTIMATOR", "gain"},
    {NB_POLICY_THOMPSON, "NCCLBOT_ESTIMATOR", "gain"},
    /* the hold rule for the learners that would replay a new arm blindly through the delay */
    {NB_POLICY_UCB1, "NCCLBOT_PROBE", "1"},
    {NB_POLICY_ETC, "NCCLBOT_PROBE", "1"},
};
#define NPD (sizeof k_policy_defaults / sizeof *k_policy_defaults)

const char *nb_policy_name(int p) {
  return p >= 0 && p < NB_POLICY_COUNT ? k_policies[p] : "?";
}

static void invalid(nb_config *c, const char *name, const char *val, const char *accepted) {
  if (!c->valid) return; /* keep the first reason */
  c->valid = 0;
  snprintf(c->why, sizeof c->why, "%s=\"%s\" is invalid (%s)", name, val, accepted);
}

static void accepted(const nb_setting *s, char *out, size_t cap) {
  switch (s->type) {
    case T_DOUBLE: snprintf(out, cap, "expected a number in [%g, %g]", s->lo, s->hi); break;
    case T_U32:
    case T_U64:
      if (s->uhi == UINT64_MAX)
        snprintf(out, cap, "expected an integer >= %llu", (unsigned long long)s->ulo);
      else
        snprintf(out, cap, "expected an integer in [%llu, %llu]", (unsigned long long)s->ulo,
                 (unsigned long long)s->uhi);
      break;
    case T_ENUM:
      snprintf(out, cap, "expected one of");
      for (int i = 0; s->choices[i]; i++) {
        strncat(out, i ? ", " : " ", cap - strlen(out) - 1);
        strncat(out, s->choices[i], cap - strlen(out) - 1);
      }
      break;
    case T_STR: snprintf(out, cap, "at most %zu characters", s->cap - 1); break;
    case T_ADDR: snprintf(out, cap, "expected host:port with port in [1, 65535], or empty"); break;
  }
}

/* host:port, [v6]:port not supported (loopback and cluster IPv4/hostnames only). */
static int parse_addr(nb_config *c, const char *v) {
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || (size_t)(colon - v) >= sizeof c->sync_host) return -1;
  char *end = NULL;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end != '\0' || port < 1 || port > 65535) return -1;
  memcpy(c->sync_host, v, (size_t)(colon - v));
  c->sync_host[colon - v] = '\0';
  c->sync_port = (int)port;
  c->sync_configured = 1;
  return 0;
}

/* One reader for every row: 0 when v was stored, -1 when it is not acceptable. */
static int read_value(nb_config *c, const nb_setting *s, const char *v) {
  char *field = (char *)c + s->off, *end = NULL;
  errno = 0;
  switch (s->type) {
    case T_DOUBLE: {
      double d = strtod(v, &end);
      if (errno || end == v || *end != '\0' || !isfinite(d) || d < s->lo || d > s->hi) return -1;
      memcpy(field, &d, sizeof d);
      return 0;
    }
    case T_U32:
    case T_U64: {
      unsigned long long x = strtoull(v, &end, 10);
      if (errno || end == v || *end != '\0' || v[0] == '-' || x < s->ulo || x > s->uhi) return -1;
      if (s->type == T_U32) {
        uint32_t y = (uint32_t)x;
        memcpy(field, &y, sizeof y);
      } else {
        uint64_t y = x;
        memcpy(field, &y, sizeof y);
      }
      return 0;
    }
    case T_ENUM:
      for (int i = 0; s->choices[i]; i++)
        if (strcasecmp(v, s->choices[i]) == 0) {
          memcpy(field, &i, sizeof i);
          return 0;
        }
      return -1;
    case T_STR:
      if (strlen(v) >= s->cap) return -1;
      strcpy(field, v);
      return 0;
    case T_ADDR:
      c->sync_configured = 0;
      return v[0] ? parse_addr(c, v) : 0;
  }
  return -1;
}

static const nb_setting *setting(const char *name) {
  for (size_t i = 0; i < NSET; i++)
    if (strcmp(k_settings[i].name, name) == 0) return &k_settings[i];
  return NULL;
}

static void read_env(nb_config *c, const nb_setting *s, const char *(*get)(const char *)) {
  const char *v = get(s->name);
  if (!v || read_value(c, s, v) == 0) return;
  char acc[160];
  accepted(s, acc, sizeof acc);
  invalid(c, s->name, v, acc);
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

static size_t field_size(const nb_setting *s) {
  switch (s->type) {
    case T_DOUBLE: return sizeof(double);
    case T_U64: return sizeof(uint64_t);
    case T_U32: return sizeof(uint32_t);
    case T_ENUM: return sizeof(int);
    default: return 0;
  }
}

/* Every F_AGREE row, by name and effective value. */
static uint64_t fingerprint(const nb_config *c) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < NSET; i++) {
    const nb_setting *s = &k_settings[i];
    if (!(s->flags & F_AGREE)) continue;
    h = fnv(h, s->name, strlen(s->name));
    h = fnv(h, (const char *)c + s->off, field_size(s));
  }
  return h;
}

static void cross_checks(nb_config *c, const char *(*get)(const char *)) {
  if (!c->valid) return;
  if (c->policy == NB_POLICY_STATIC && !c->static_table[0])
    invalid(c, "NCCLBOT_STATIC_TABLE", "", "NCCLBOT_POLICY=static needs a table file");
  else if (c->sync_configured && !c->sync_token[0])
    invalid(c, "NCCLBOT_SYNC_TOKEN", "", "synchronisation needs a shared token");
  else if (c->policy == NB_POLICY_ETC && c->pseudo_count != 0.0)
    invalid(c, "NCCLBOT_PSEUDO_COUNT", get("NCCLBOT_PSEUDO_COUNT"),
            "etc is always cold (paper Appendix C.8): leave it unset or 0");
}

void nb_config_parse(nb_config *c, const char *(*get)(const char *)) {
  memset(c, 0, sizeof *c);
  c->valid = 1;
  for (size_t i = 0; i < NSET; i++)
    if (k_settings[i].dflt) (void)read_value(c, &k_settings[i], k_settings[i].dflt);
  const nb_setting *pol = setting("NCCLBOT_POLICY");
  read_env(c, pol, get);
  for (size_t i = 0; i < NPD; i++)
    if (k_policy_defaults[i].policy == c->policy)
      (void)read_value(c, setting(k_policy_defaults[i].name), k_policy_defaults[i].value);
  for (size_t i = 0; i < NSET; i++) {
    const nb_setting *s = &k_settings[i];
    if (s == pol) continue;
    if (s->type == T_ADDR && !get(s->name))
      slurm_default_addr(c, get);
    else
      read_env(c, s, get);
  }
  cross_checks(c, get);
  c->fingerprint = fingerprint(c);
}

static const char *env_get(const char *name) { return getenv(name); }

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
    for (size_t i = 0; i < NSET; i++) {
      size_t d = edit_distance(*e, n, k_settings[i].name, strlen(k_settings[i].name));
      if (d < nearest) {
        nearest = d;
        near = k_settings[i].name;
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

static void format_value(const nb_config *c, const nb_setting *s, char *out, size_t cap) {
  const char *field = (const char *)c + s->off;
  double d;
  uint64_t u64;
  uint32_t u32;
  int e;
  switch (s->type) {
    case T_DOUBLE: memcpy(&d, field, sizeof d); snprintf(out, cap, "%g", d); break;
    case T_U64:
      memcpy(&u64, field, sizeof u64);
      snprintf(out, cap, "%llu", (unsigned long long)u64);
      break;
    case T_U32: memcpy(&u32, field, sizeof u32); snprintf(out, cap, "%u", u32); break;
    case T_ENUM: memcpy(&e, field, sizeof e); snprintf(out, cap, "%s", s->choices[e]); break;
    case T_STR:
      if (s->flags & F_SECRET)
        snprintf(out, cap, "%s", field[0] ? "(set)" : "(none)");
      else
        snprintf(out, cap, "%s", field[0] ? field : "(none)");
      break;
    case T_ADDR:
      if (c->sync_configured)
        snprintf(out, cap, "%s:%d", c->sync_host, c->sync_port);
      else
        snprintf(out, cap, "(none)");
      break;
  }
}

/* One INFO line with the effective value of every setting (the token is never printed). */
void nb_config_announce(const nb_config *c) {
  char line[4096] = "", val[1100];
  size_t len = 0;
  for (size_t i = 0; i < NSET && len < sizeof line; i++) {
    format_value(c, &k_settings[i], val, sizeof val);
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%s=%s", i ? " " : "",
                            k_settings[i].name, val);
  }
  NB_INFO("settings: %s", line);
}

static void markdown_default(FILE *out, const nb_setting *s) {
  if (s->shown_dflt) {
    fputs(s->shown_dflt, out);
    return;
  }
  fprintf(out, "`%s`", s->dflt);
  const char *prev = NULL; /* policies sharing a value are listed together */
  for (size_t i = 0; i < NPD; i++) {
    if (strcmp(k_policy_defaults[i].name, s->name) != 0) continue;
    const char *v = k_policy_defaults[i].value, *p = k_policies[k_policy_defaults[i].policy];
    if (prev && strcmp(prev, v) == 0)
      fprintf(out, ", %s", p);
    else
      fprintf(out, "%s`%s` for %s", prev ? "; " : " (", v, p);
    prev = v;
  }
  if (prev) fputc(')', out);
}

void nb_config_markdown(FILE *out) {
  fputs("| variable | default | accepted | ranks must agree | meaning |\n", out);
  fputs("|---|---|---|---|---|\n", out);
  for (size_t i = 0; i < NSET; i++) {
    const nb_setting *s = &k_settings[i];
    char acc[160];
    accepted(s, acc, sizeof acc);
    fprintf(out, "| `%s` | ", s->name);
    markdown_default(out, s);
    fprintf(out, " | %s | %s | %s |\n", strncmp(acc, "expected ", 9) == 0 ? acc + 9 : acc,
            s->flags & F_AGREE ? "yes" : "no", s->doc);
  }
}
