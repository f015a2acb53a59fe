/* names.c: NCCL's spellings of collectives, algorithms and protocols (docs/architecture.md section 3). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "names.h"
#include "nccl_abi.h"
#include "policy.h"

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

/* ---- profiler descriptor spellings (ncclFuncToString, ncclDatatypeToString,
 * ncclAlgoToString, ncclProtoToString): one small table each, matched on length
 * first, then one memcmp ---- */

typedef struct {
  const char *name;
  uint8_t len;
  uint8_t value;
} nb_name;

#define NB_N(s, v) {s, sizeof(s) - 1, v}

static const nb_name k_prof_colls[] = {NB_N("Broadcast", 0), NB_N("Reduce", 1),
                                       NB_N("AllGather", 2), NB_N("ReduceScatter", 3),
                                       NB_N("AllReduce", 4)};
static const nb_name k_prof_types[] = {
    NB_N("ncclInt8", 1),      NB_N("ncclChar", 1),       NB_N("ncclUint8", 1),
    NB_N("ncclInt32", 4),     NB_N("ncclInt", 4),        NB_N("ncclUint32", 4),
    NB_N("ncclInt64", 8),     NB_N("ncclUint64", 8),     NB_N("ncclFloat16", 2),
    NB_N("ncclHalf", 2),      NB_N("ncclFloat32", 4),    NB_N("ncclFloat", 4),
    NB_N("ncclFloat64", 8),   NB_N("ncclDouble", 8),     NB_N("ncclBfloat16", 2),
    NB_N("ncclFloat8e4m3", 1), NB_N("ncclFloat8e5m2", 1)};
static const nb_name k_prof_algos[] = {NB_N("TREE", 0), NB_N("RING", 1),
                                       NB_N("COLLNET_DIRECT", 2), NB_N("COLLNET_CHAIN", 3),
                                       NB_N("NVLS", 4), NB_N("NVLS_TREE", 5), NB_N("PAT", 6)};
static const nb_name k_prof_protos[] = {NB_N("LL", 0), NB_N("LL128", 1), NB_N("SIMPLE", 2)};

/* The value of s in t, or -1 (also for NULL and names longer than any entry); a string at
 * the address memo remembers is checked against that entry alone. */
static int lookup(const nb_name *t, size_t n, const char *s, nb_name_memo *memo) {
  if (!s) return -1;
  if (s == memo->ptr && memo->idx < n && strncmp(t[memo->idx].name, s, t[memo->idx].len + 1u) == 0)
    return t[memo->idx].value;
  size_t len = strnlen(s, 32);
  for (size_t i = 0; i < n; i++)
    if (t[i].len == len && t[i].name[0] == s[0] && memcmp(t[i].name, s, len) == 0) {
      memo->ptr = s;
      memo->idx = (uint32_t)i;
      return t[i].value;
    }
  return -1;
}

#define NB_LOOKUP(t, s, memo) lookup((t), sizeof(t) / sizeof *(t), (s), (memo))

int nb_prof_coll(const char *func, nb_name_memo *memo) { return NB_LOOKUP(k_prof_colls, func, memo); }

size_t nb_prof_type_size(const char *datatype, nb_name_memo *memo) {
  int v = NB_LOOKUP(k_prof_types, datatype, memo);
  return v < 0 ? 0 : (size_t)v;
}

int nb_prof_arm(const char *algo, const char *proto, nb_name_memo *algo_memo,
                nb_name_memo *proto_memo) {
  int a = NB_LOOKUP(k_prof_algos, algo, algo_memo), p = NB_LOOKUP(k_prof_protos, proto, proto_memo);
  return a < 0 || p < 0 ? NB_NO_ARM : a * NCCLBOT_NUM_PROTOS + p;
}
