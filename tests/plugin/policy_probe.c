/* policy_probe.c: exports the plugin's shared generator (plugin/src/rng.h) and the way it
 * sets an arm's count (nb_set_n, inline in policy.h) for the tests; built by conftest.py
 * together with plugin/src/policy.c, whose nb_ucb_* the tests call directly (the library
 * itself exports only NCCL's symbols). */
#include <stdint.h>

#include "policy.h"
#include "rng.h"

void nb_probe_set_n(nb_arm_stat *st, double n) { nb_set_n(st, n); }

double nb_probe_uniform(uint64_t seed, uint64_t comm_id, uint64_t key, uint64_t t, uint64_t lane) {
  return nb_rng_uniform(nb_rng_at(nb_rng_stream(seed, comm_id, key), t), lane);
}

double nb_probe_normal(uint64_t seed, uint64_t comm_id, uint64_t key, uint64_t t, int arm) {
  return nb_rng_normal(nb_rng_at(nb_rng_stream(seed, comm_id, key), t), arm);
}
