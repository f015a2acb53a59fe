/*
 * comm.c: the process-wide registry of communicators, keyed by commId.
 *
 * NCCL opens the tuner and the profiler separately but, for the same file, gets
 * the same handle and so these same globals (reference section 5). The profiler
 * init runs first for each communicator, then the tuner init; finalize runs in
 * the opposite order. The last release frees the state, and the registry itself
 * once it is empty, so nothing is left behind when NCCL dlcloses the library.
 * The registry owns each communicator's shape (nranks, nnodes) and the logger:
 * both are written here, under the registry mutex, and only here. It includes nothing
 * above it: the last releaser tears the rest down (plugin.c).
 * Thread safety: every function here takes the registry mutex.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "state.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_comm **g_comms;
static size_t g_n, g_cap;

void nb_registry_lock(void) { pthread_mutex_lock(&g_lock); }
void nb_registry_unlock(void) { pthread_mutex_unlock(&g_lock); }

static nb_comm *create(uint64_t comm_id, int nranks, int nnodes) {
  nb_comm *c = aligned_alloc(64, (sizeof *c + 63) / 64 * 64); /* its lines are laid out by access */
  if (!c) return NULL;
  memset(c, 0, sizeof *c);
  c->comm_id = comm_id;
  c->rank = -1;
  c->nranks = nranks;
  c->nnodes = nnodes;
  c->rec_base = aligned_alloc(256, (size_t)NB_NREC * NB_REC_SIZE);
  c->rec_free = malloc(NB_NREC * sizeof *c->rec_free);
  if (!c->rec_base || !c->rec_free || (uintptr_t)c->rec_base >> NB_GEN_SHIFT ||
      nb_mq_init(&c->mq, 4096) != 0) {
    free(c->rec_base); /* (a record address using the top byte cannot carry a generation) */
    free(c->rec_free);
    free(c);
    return NULL;
  }
  for (uint32_t i = 0; i < NB_NREC; i++) c->rec_free[i] = (uint16_t)(NB_NREC - 1 - i);
  c->rec_nfree = NB_NREC;
  memset(c->rec_base, 0, (size_t)NB_NREC * NB_REC_SIZE);
  for (int i = 0; i < NB_NREC; i++) ((nb_rec *)(c->rec_base + (size_t)i * NB_REC_SIZE))->comm = c;
  return c;
}

nb_comm *nb_comm_acquire(uint64_t comm_id, int tuner_side, int nranks, int nnodes,
                         ncclDebugLogger_t logfn) {
  nb_comm *found = NULL;
  pthread_mutex_lock(&g_lock);
  nb_log_set(logfn);
  for (size_t i = 0; i < g_n; i++)
    if (g_comms[i]->comm_id == comm_id && !(tuner_side ? g_comms[i]->tuner_refs
                                                        : g_comms[i]->prof_refs)) {
      found = g_comms[i];
      break;
    }
  if (found && (found->nranks != nranks || found->nnodes != nnodes))
    NB_WARN("communicator %016llx: the tuner and the profiler were given different shapes "
            "(%d/%d ranks, %d/%d nodes); keeping the first", (unsigned long long)comm_id,
            found->nranks, nranks, found->nnodes, nnodes);
  if (!found && g_n == g_cap) {
    size_t ncap = g_cap ? g_cap * 2 : 16;
    nb_comm **n = realloc(g_comms, ncap * sizeof *n);
    if (n) {
      g_comms = n;
      g_cap = ncap;
    }
  }
  if (!found && g_n < g_cap) {
    found = create(comm_id, nranks, nnodes);
    if (found) g_comms[g_n++] = found;
  }
  if (found) {
    if (tuner_side)
      found->tuner_refs++;
    else
      found->prof_refs++;
  }
  pthread_mutex_unlock(&g_lock);
  return found;
}

int nb_comm_release(nb_comm *c, int tuner_side) {
  pthread_mutex_lock(&g_lock);
  if (tuner_side)
    c->tuner_refs--;
  else
    c->prof_refs--;
  int last = c->tuner_refs <= 0 && c->prof_refs <= 0;
  if (last) {
    for (size_t i = 0; i < g_n; i++)
      if (g_comms[i] == c) {
        g_comms[i] = g_comms[--g_n];
        break;
      }
    if (g_n == 0) { /* NCCL may dlclose the library next: leave nothing allocated */
      free(g_comms);
      g_comms = NULL;
      g_cap = 0;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return last;
}

void nb_comm_free(nb_comm *c) {
  nb_mq_free(&c->mq);
  free(c->rec_base);
  free(c->rec_free);
  free(c);
}
