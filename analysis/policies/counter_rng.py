"""The plugin's shared randomness: a counter-based generator every rank computes alike.

A stochastic policy inside NCCL must draw the same numbers on every rank (paper section 4,
"shared randomness"), so the plugin (``plugin/src/rng.h``) keeps no generator state: each
draw is a pure function of the communicator-wide seed ``NCCLBOT_SEED``, the communicator
id, the context (collective, nBytes), the context's decision index ``t`` and a lane::

    mix(z)   = SplitMix64's finaliser (below), on 64-bit unsigned integers
    stream   = mix(mix(seed ^ mix(comm_id)) ^ key)      key = collective << 58 | nBytes
    base_t   = mix(stream ^ t)                           t = 0, 1, ... per context
    u(lane)  = (mix(base_t ^ lane) >> 11) * 2**-53       in [0, 1)
    z_i      = sqrt(-2 ln(1 - u(64 + 2i))) * cos(6.283185307179586 * u(65 + 2i))

Uniforms use lanes 0, 1, ...; the normal of arm ``i`` is Box-Muller on lanes ``64 + 2i``
and ``65 + 2i``. ``math.log``/``math.cos``/``math.sqrt`` are the C library's, the ones the
plugin links, so the draws are bit-identical with the plugin's on the same machine.

:class:`CounterDraws` feeds these draws to a policy family through :class:`StepPolicy`
(``draws=``), which makes the family's rule, driven call by call, the per-call reference
the plugin matches bit for bit. The vectorised replay keeps drawing from
``numpy.random.default_rng(seed)`` (independent seeds per bandit, one block per step):
the rule is the same, only the source of the uniforms and normals differs.
"""

from __future__ import annotations

import math

import numpy as np

from ncclbot_sweep.names import COLLECTIVES, canonical_collective

__all__ = ["mix64", "stream", "uniform", "normal", "context_key", "CounterDraws", "NORMAL_LANE"]

_MASK = (1 << 64) - 1
NORMAL_LANE = 64
_TWO_PI = 6.283185307179586


def mix64(z: int) -> int:
    """SplitMix64's output function (Steele, Lea and Flood 2014) on a 64-bit integer."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def context_key(collective: str | int, nbytes: int) -> int:
    """The plugin's context key: NCCL's collective index (names.COLLECTIVES order) << 58 | nBytes."""
    coll = COLLECTIVES.index(canonical_collective(collective)) if isinstance(collective, str) else int(collective)
    return (coll << 58) | (int(nbytes) & ((1 << 58) - 1))


def stream(seed: int, comm_id: int, key: int) -> int:
    """The draw stream of one context of one communicator."""
    return mix64(mix64((seed & _MASK) ^ mix64(comm_id & _MASK)) ^ key)


def uniform(base: int, lane: int) -> float:
    """The uniform in [0, 1) of one lane of one decision (``base = mix64(stream ^ t)``)."""
    return (mix64(base ^ lane) >> 11) * 2.0**-53


def normal(base: int, arm: int) -> float:
    """The standard normal of one arm of one decision (Box-Muller, lanes 64 + 2i, 65 + 2i)."""
    u1 = uniform(base, NORMAL_LANE + 2 * arm)
    u2 = uniform(base, NORMAL_LANE + 2 * arm + 1)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(_TWO_PI * u2)


class CounterDraws:
    """The uniforms and normals of one plugin context, decision by decision.

    ``draw(t, n_uniform, n_normal)`` returns ``u`` ``[1, n_uniform]`` and ``z``
    ``[1, n_normal]`` (or None when zero), the shapes the policy families' ``select`` takes.
    Stateless: the same ``t`` always gives the same draws, as on every rank.
    """

    def __init__(self, *, seed: int = 0, comm_id: int, collective: str | int, nbytes: int) -> None:
        self.stream = stream(seed, comm_id, context_key(collective, nbytes))

    def draw(self, t: int, n_uniform: int, n_normal: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        base = mix64(self.stream ^ t)
        u = np.array([[uniform(base, j) for j in range(n_uniform)]]) if n_uniform else None
        z = np.array([[normal(base, i) for i in range(n_normal)]]) if n_normal else None
        return u, z
