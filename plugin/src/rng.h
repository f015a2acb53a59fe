/*
 * rng.h: the shared randomness of the stochastic policies (softmax, thompson,
 * eps-greedy, etc): a counter-based generator, so a draw is a pure function of
 * (NCCLBOT_SEED, commId, context, decision index, lane) and every rank of a
 * communicator draws the same numbers with no generator state to keep in step.
 *
 *   mix(z)   SplitMix64's finaliser: z += 0x9e3779b97f4a7c15, then the two
 *            xor-shift-multiply steps and a final xor-shift (Steele et al. 2014)
 *   stream = mix(mix(seed ^ mix(commId)) ^ key)      key = collective << 58 | nBytes
 *   base_t = mix(stream ^ t)                          t = the context's decision index, from 0
 *   u(lane) = (mix(base_t ^ lane) >> 11) * 2^-53      in [0, 1)
 *   uniforms use lanes 0, 1, ...; the normal of arm i uses lanes 64 + 2i and 65 + 2i:
 *   z_i = sqrt(-2 log(1 - u(64 + 2i))) * cos(6.283185307179586 * u(65 + 2i))   (Box-Muller)
 *
 * The Python twin is ncclbot_sweep.analysis.policies.counter_rng (the same steps with
 * Python integers and math.log/math.cos, i.e. this C library's libm): bit-identical.
 * Thread safety: pure functions.
 */
#ifndef NCCLBOT_RNG_H
#define NCCLBOT_RNG_H

#include <math.h>
#include <stdint.h>

#define NB_RNG_NORMAL_LANE 64

static inline uint64_t nb_mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The draw stream of one context of one communicator. */
static inline uint64_t nb_rng_stream(uint64_t seed, uint64_t comm_id, uint64_t key) {
  return nb_mix64(nb_mix64(seed ^ nb_mix64(comm_id)) ^ key);
}

/* The draws of decision t of a stream. */
static inline uint64_t nb_rng_at(uint64_t stream, uint64_t t) { return nb_mix64(stream ^ t); }

static inline double nb_rng_uniform(uint64_t base, uint64_t lane) {
  return (double)(nb_mix64(base ^ lane) >> 11) * 0x1.0p-53;
}

static inline double nb_rng_normal(uint64_t base, int i) {
  double u1 = nb_rng_uniform(base, NB_RNG_NORMAL_LANE + 2 * (uint64_t)i);
  double u2 = nb_rng_uniform(base, NB_RNG_NORMAL_LANE + 2 * (uint64_t)i + 1);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

#endif
