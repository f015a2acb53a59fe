/* static_table.c: see static_table.h. Every bad line is rejected with its line number. */
#include "static_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "nccl_abi.h"
#include "policy.h"

typedef struct {
  uint64_t bytes;
  int spec; /* 2 = nodes and ranks exact, 1 = one exact, 0 = both '*' */
  int line;
  uint8_t arm;
} nb_static_row;

struct nb_static {
  nb_static_row *rows[NCCLBOT_NUM_COLLS];
  size_t n[NCCLBOT_NUM_COLLS];
};

void nb_static_free(nb_static *t) {
  if (!t) return;
  for (int i = 0; i < NCCLBOT_NUM_COLLS; i++) free(t->rows[i]);
  free(t);
}

static int cmp_row(const void *a, const void *b) {
  const nb_static_row *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
  if (x->spec != y->spec) return x->spec > y->spec ? -1 : 1;
  return x->line - y->line;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
  return s;
}

/* -1 wildcard, -2 invalid */
static long parse_dim(const char *s) {
  if (strcmp(s, "*") == 0 || s[0] == '\0') return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  return (errno || *end || v < 1) ? -2 : v;
}

static int parse_line(char *line, int lineno, int nranks, int nnodes, nb_static *t, char *why,
                      size_t whylen, const char *path) {
  char *f[6];
  int nf = 0;
  for (char *tok = line; nf < 6;) {
    char *comma = strchr(tok, ',');
    if (comma) *comma = '\0';
    f[nf++] = trim(tok);
    if (!comma) break;
    tok = comma + 1;
  }
  if (nf != 5) {
    snprintf(why, whylen, "%s:%d: expected 5 fields collective,nodes,ranks,size_bytes,arm", path,
             lineno);
    return -1;
  }
  if (strcmp(f[0], "collective") == 0) return 0; /* header */
  int coll = nb_coll_from_name(f[0]);
  long nodes = parse_dim(f[1]), ranks = parse_dim(f[2]);
  char *end;
  errno = 0;
  unsigned long long bytes = strtoull(f[3], &end, 10);
  int arm = strcasecmp(f[4], "AUTO") == 0 ? NB_NO_ARM : nb_arm_from_name(f[4]);
  if (coll < 0 || nodes == -2 || ranks == -2 || errno || *end || f[3][0] == '\0' ||
      f[3][0] == '-' || arm < 0) {
    snprintf(why, whylen,
             "%s:%d: bad row (collective Broadcast|Reduce|AllGather|ReduceScatter|AllReduce, "
             "nodes and ranks a positive integer or *, size_bytes an integer, arm like Ring/LL128 "
             "or AUTO)",
             path, lineno);
    return -1;
  }
  if ((nodes >= 0 && nodes != nnodes) || (ranks >= 0 && ranks != nranks)) return 0;
  nb_static_row *rows = realloc(t->rows[coll], (t->n[coll] + 1) * sizeof *rows);
  if (!rows) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  t->rows[coll] = rows;
  rows[t->n[coll]++] = (nb_static_row){bytes, (nodes >= 0) + (ranks >= 0), lineno, (uint8_t)arm};
  return 0;
}

nb_static *nb_static_load(const char *path, int nranks, int nnodes, char *why, size_t whylen) {
  FILE *fp = fopen(path, "r");
  if (!fp) {
    snprintf(why, whylen, "NCCLBOT_STATIC_TABLE=\"%s\" cannot be read (%s)", path,
             strerror(errno));
    return NULL;
  }
  nb_static *t = calloc(1, sizeof *t);
  char line[1024];
  int lineno = 0, rc = t ? 0 : -1;
  while (rc == 0 && fgets(line, sizeof line, fp)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = trim(line);
    if (*s) rc = parse_line(s, lineno, nranks, nnodes, t, why, whylen, path);
  }
  fclose(fp);
  if (rc != 0) {
    nb_static_free(t);
    return NULL;
  }
  for (int c = 0; c < NCCLBOT_NUM_COLLS; c++)
    if (t->n[c]) qsort(t->rows[c], t->n[c], sizeof *t->rows[c], cmp_row);
  return t;
}

int nb_static_lookup(const nb_static *t, int coll, uint64_t nbytes) {
  const nb_static_row *r = t->rows[coll];
  size_t lo = 0, hi = t->n[coll];
  while (lo < hi) { /* first row with bytes > nbytes */
    size_t mid = (lo + hi) / 2;
    if (r[mid].bytes <= nbytes)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return NB_NO_ARM;
  uint64_t b = r[lo - 1].bytes;
  size_t i = lo - 1;
  while (i > 0 && r[i - 1].bytes == b) i--; /* most specific, then first in file */
  return r[i].arm;
}
