/*
 * persist.c: see persist.h. Format:
 *   # ncclbot-state v1
 *   collective,size_bytes,mu_min,arm,n,mean
 * one row per (context, arm); doubles printed with 17 significant digits so a
 * reload reproduces the statistics bit for bit.
 */
#include "persist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "names.h"

struct nb_saved {
  nb_saved_ctx *ctx;
  size_t n, cap;
};

static void path_for(const nb_config *cfg, int nranks, int nnodes, char *out, size_t cap) {
  snprintf(out, cap, "%s/ncclbot-state-n%d-r%d.csv", cfg->state_dir, nnodes, nranks);
}

void nb_saved_free(nb_saved *s) {
  if (!s) return;
  free(s->ctx);
  free(s);
}

const nb_saved_ctx *nb_saved_find(const nb_saved *s, uint64_t key) {
  size_t lo = 0, hi = s->n; /* rows are kept sorted by key */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->ctx[mid].key < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n && s->ctx[lo].key == key ? &s->ctx[lo] : NULL;
}

static int cmp_key(const void *a, const void *b) {
  const nb_saved_ctx *x = a, *y = b;
  return x->key < y->key ? -1 : x->key > y->key;
}

static nb_saved_ctx *slot_for(nb_saved *s, uint64_t key, double mu_min) {
  if (s->n && s->ctx[s->n - 1].key == key) return &s->ctx[s->n - 1];
  for (size_t i = 0; i < s->n; i++)
    if (s->ctx[i].key == key) return &s->ctx[i];
  if (s->n == s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 64;
    nb_saved_ctx *n = realloc(s->ctx, ncap * sizeof *n);
    if (!n) return NULL;
    s->ctx = n;
    s->cap = ncap;
  }
  nb_saved_ctx *x = &s->ctx[s->n++];
  memset(x, 0, sizeof *x);
  x->key = key;
  x->mu_min = mu_min;
  return x;
}

nb_saved *nb_saved_load(const nb_config *cfg, int nranks, int nnodes, uint64_t *hash, char *why,
                        size_t whylen) {
  char path[1200], line[512];
  path_for(cfg, nranks, nnodes, path, sizeof path);
  why[0] = '\0';
  FILE *fp = fopen(path, "r");
  if (!fp) {
    snprintf(why, whylen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  nb_saved *s = calloc(1, sizeof *s);
  uint64_t h = 1469598103934665603ULL;
  int lineno = 0, ok = s != NULL;
  while (ok && fgets(line, sizeof line, fp)) {
    lineno++;
    for (char *p = line; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    if (lineno == 1) {
      ok = strncmp(line, "# ncclbot-state v1", 18) == 0;
      if (!ok) snprintf(why, whylen, "%s:1: not an ncclbot-state v1 file", path);
      continue;
    }
    if (line[0] == '#' || strncmp(line, "collective,", 11) == 0) continue;
    char coll[32], arm[32];
    unsigned long long bytes;
    double mu_min, n, mean;
    if (sscanf(line, "%31[^,],%llu,%lf,%31[^,],%lf,%lf", coll, &bytes, &mu_min, arm, &n, &mean) != 6 ||
        nb_coll_from_name(coll) < 0 || nb_arm_from_name(arm) < 0 || !(mu_min > 0) || n < 0) {
      snprintf(why, whylen, "%s:%d: bad row", path, lineno);
      ok = 0;
      break;
    }
    nb_saved_ctx *x = slot_for(s, NB_KEY(nb_coll_from_name(coll), bytes), mu_min);
    if (!x || x->narms >= NCCLBOT_MAX_ARMS) {
      ok = 0;
      break;
    }
    x->arm[x->narms] = (uint8_t)nb_arm_from_name(arm);
    x->stat[x->narms].n = n;
    x->stat[x->narms].mean = mean;
    x->narms++;
  }
  fclose(fp);
  if (!ok) {
    nb_saved_free(s);
    return NULL;
  }
  qsort(s->ctx, s->n, sizeof *s->ctx, cmp_key);
  *hash = h;
  return s;
}

int nb_state_save(const nb_comm *c, char *why, size_t whylen) {
  char path[1200], tmp[1300];
  path_for(&c->cfg, c->nranks, c->nnodes, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *fp = fopen(tmp, "w");
  if (!fp) {
    snprintf(why, whylen, "%s: %s", tmp, strerror(errno));
    return -1;
  }
  fprintf(fp, "# ncclbot-state v1\ncollective,size_bytes,mu_min,arm,n,mean\n");
  for (int64_t ci = nb_tab_next(&c->tab, &c->fill, -1); ci >= 0; ci = nb_tab_next(&c->tab, &c->fill, ci)) {
    const nb_ctx *x = nb_ctx_at(&c->tab, (uint32_t)ci);
    if (x->flags & NB_CTX_PASS) continue;
    for (int a = 0; a < x->narms; a++) {
      char arm[32];
      nb_arm_name(nb_ctx_ids(x)[a], arm, sizeof arm);
      const nb_arm_stat *st = &nb_ctx_cstats(x)[a];
      fprintf(fp, "%s,%llu,%.17g,%s,%.17g,%.17g\n", nb_coll_name(NB_KEY_COLL(x->key)),
              (unsigned long long)NB_KEY_BYTES(x->key), x->mu_min, arm, st->n, st->mean);
    }
  }
  if (fclose(fp) != 0 || rename(tmp, path) != 0) {
    snprintf(why, whylen, "%s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}
