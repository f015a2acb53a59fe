/* names.c: NCCL's spellings of collectives, algorithms and protocols (ARCHITECTURE section 3). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "learn.h"

static const char *const k_colls[NCCLBOT_NUM_COLLS] = {"Broadcast", "Reduce", "AllGather",
                                                       "ReduceScatter", "AllReduce"};
static const char *const k_algos[NCCLBOT_NUM_ALGOS] = {"Tree", "Ring", "CollNetDirect",
                                                       "CollNetChain", "NVLS", "NVLSTree", "PAT"};
static const char *const k_protos[NCCLBOT_NUM_PROTOS] = {"LL", "LL128", "Simple"};

const char *nb_coll_name(int coll) {
  return coll >= 0 && coll < NCCLBOT_NUM_COLLS ? k_colls[coll] : "?";
}

int nb_coll_from_name(const char *s) {
  for (int i = 0; i < NCCLBOT_NUM_COLLS; i++)
    if (strcasecmp(s, k_colls[i]) == 0) return i;
  return -1;
}

void nb_arm_name(int arm, char *out, size_t cap) {
  if (arm < 0 || arm >= NCCLBOT_MAX_ARMS) {
    snprintf(out, cap, "%s", "");
    return;
  }
  snprintf(out, cap, "%s/%s", k_algos[arm / NCCLBOT_NUM_PROTOS], k_protos[arm % NCCLBOT_NUM_PROTOS]);
}

int nb_arm_from_name(const char *s) {
  const char *slash = strchr(s, '/');
  if (!slash) return -1;
  size_t alen = (size_t)(slash - s);
  for (int a = 0; a < NCCLBOT_NUM_ALGOS; a++) {
    if (strlen(k_algos[a]) != alen || strncasecmp(s, k_algos[a], alen) != 0) continue;
    for (int p = 0; p < NCCLBOT_NUM_PROTOS; p++)
      if (strcasecmp(slash + 1, k_protos[p]) == 0) return a * NCCLBOT_NUM_PROTOS + p;
  }
  return -1;
}
