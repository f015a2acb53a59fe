/* trace.c: see trace.h. */
#include "trace.h"

#include <stdlib.h>
#include <time.h>

#include "learn.h"
#include "log.h"

#define NB_TRACE_HEADER                                                                    \
  "kind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,auto_arm,policy," \
  "latency_us,reward,round,sync_us\n"

static unsigned long long wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

void nb_trace_open(nb_comm *c) {
  if (c->rank < 0) {
    NB_WARN("NCCLBOT_TRACE_DIR is set but this rank is unknown (profiler not loaded); no trace");
    return;
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/ncclbot-%016llx-r%d.csv", c->cfg.trace_dir,
           (unsigned long long)c->comm_id, c->rank);
  c->trace = fopen(path, "w");
  if (!c->trace) {
    NB_WARN("cannot write the trace %s; continuing without it", path);
    return;
  }
  c->trace_buf = malloc(1 << 20);
  if (c->trace_buf) setvbuf(c->trace, c->trace_buf, _IOFBF, 1 << 20);
  fputs("# ncclbot-trace v1\n" NB_TRACE_HEADER, c->trace);
}

static void common(nb_comm *c, const char *kind) {
  fprintf(c->trace, "%s,%llu,%016llx,%d,%d,%d,", kind, wall_ns(), (unsigned long long)c->comm_id,
          c->rank, c->nranks, c->nnodes);
}

void nb_trace_pull(nb_comm *c, const nb_pull *e, const nb_ctx *x, double reward, int64_t round) {
  char arm[32], auto_arm[32];
  nb_arm_name(e->arm, arm, sizeof arm);
  nb_arm_name(e->auto_arm == 255 ? -1 : e->auto_arm, auto_arm, sizeof auto_arm);
  common(c, "pull");
  fprintf(c->trace, "%s,%llu,%u,%s,%s,%s,", nb_coll_name(NB_KEY_COLL(x->key)),
          (unsigned long long)NB_KEY_BYTES(x->key), e->pull_no, arm, auto_arm,
          nb_policy_name(c->cfg.policy));
  if (e->state == NB_PULL_HAVE)
    fprintf(c->trace, "%.3f,", e->lat_us);
  else
    fputc(',', c->trace);
  if (reward >= 0.0)
    fprintf(c->trace, "%.9g,", reward);
  else
    fputc(',', c->trace);
  if (round >= 0)
    fprintf(c->trace, "%lld,\n", (long long)round);
  else
    fputs(",\n", c->trace);
}

void nb_trace_sync(nb_comm *c, int64_t round, double sync_us) {
  common(c, "sync");
  fprintf(c->trace, ",,,,,,,,%lld,%.3f\n", (long long)round, sync_us);
}

void nb_trace_close(nb_comm *c) {
  if (c->trace) fclose(c->trace);
  c->trace = NULL;
  free(c->trace_buf);
  c->trace_buf = NULL;
}
