"""One simulated NCCL process: per-call latencies with noise, lazy-connection transients and stalls.

What a real process shows, and what the replay must see:

* **Noise**: multiplicative, log-normal with unit mean; wider for small messages (launch
  jitter), plus rare outliers (a late rank, an interrupt), on top of a small per-process
  offset (node placement and background traffic differ between jobs).
* **Lazy connection** (``NCCL_RUNTIME_CONNECT=1``, paper Appendix B): the first calls of an
  arm at a message size are slower while channels connect and buffers warm; the excess is
  heavy-tailed and decays over about ten calls. The very first call of an algorithm in the
  process also pays the connection set-up itself.
* **NVLS set-up stall** (paper sections 6.5/7): the first NVLSTree (or NVLS) call of a
  process stalls for several seconds (multicast objects, buffer registration).

Everything is drawn from one ``numpy`` generator seeded once, in call order, so a process
with the same seed and the same calls gives the same numbers. Nothing sleeps.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter

import numpy as np

from ncclbot_sweep.names import NVLS_ALGORITHMS, Arm
from ncclbot_sweep.sim.fabric import SimFabric

__all__ = ["SimProcess", "derive_seed", "TRANSIENT_CALLS"]

#: Calls per (arm, size) after which the lazy-connection excess is gone.
TRANSIENT_CALLS = 11
_TRANSIENT_SCALE = 0.4  # excess of the first call, before the heavy-tailed factor
_TRANSIENT_DECAY = 2.5  # calls
_OUTLIER_P = 0.003
_JOB_SIGMA = 0.008  # between-job variation (placement, neighbours' traffic)


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from the parts that identify a run (fabric, step, arm, ...)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def _noise_sigma(size_bytes: int) -> float:
    """Log-normal sigma: ~4% for tiny messages down to ~1.2% for large ones."""
    return 0.012 + 0.028 / (1.0 + size_bytes / 262144.0)


class SimProcess:
    """The state of one NCCL process on a simulated fabric (connections made, stalls paid).

    Call :meth:`run` for consecutive calls of one (collective, arm, size); it returns their
    latencies in microseconds and remembers what each call warmed up.
    """

    def __init__(self, fabric: SimFabric, *, nodes: int, seed: int, ranks: int | None = None) -> None:
        self.fabric = fabric
        self.nodes = nodes
        self.ranks = fabric.ranks(nodes) if ranks is None else ranks
        self.rng = np.random.default_rng(seed)
        self.job_factor = float(self.rng.lognormal(0.0, _JOB_SIGMA))
        self._calls: Counter[tuple[str, int]] = Counter()
        self._connected: set[str] = set()
        self._nvls_ready = False

    def steady_us(self, collective: str, arm: Arm | None, size_bytes: int) -> float:
        """Noise-free warm latency of one call (armless collectives use their own physics)."""
        if arm is None:
            return _armless_us(self.fabric, collective, self.nodes, self.ranks, size_bytes)
        return self.fabric.steady_latency_us(collective, self.nodes, arm, size_bytes, ranks=self.ranks)

    def run(self, collective: str, arm: Arm | None, size_bytes: int, count: int) -> np.ndarray:
        """Latencies (us) of ``count`` consecutive calls, warming the process as they go."""
        if count <= 0:
            return np.zeros(0)
        base = self.steady_us(collective, arm, size_bytes) * self.job_factor
        sigma = _noise_sigma(size_bytes)
        times = base * self.rng.lognormal(-0.5 * sigma * sigma, sigma, count)
        outliers = self.rng.random(count) < _OUTLIER_P
        times[outliers] *= self.rng.uniform(1.2, 1.8, int(outliers.sum()))
        key = (str(arm), int(size_bytes))
        first = self._calls[key]
        index = np.arange(first, first + count)
        warm = index < TRANSIENT_CALLS
        if warm.any():
            heavy = self.rng.lognormal(0.0, 0.8, int(warm.sum()))
            excess = _TRANSIENT_SCALE * np.exp(-index[warm] / _TRANSIENT_DECAY) * heavy
            times[warm] *= 1.0 + excess
        self._calls[key] += count
        if arm is not None:
            times[0] += self._first_use_us(arm)
        return times

    def _first_use_us(self, arm: Arm) -> float:
        """One-time cost of the first call that uses ``arm``'s algorithm in this process."""
        cost = 0.0
        if arm.algorithm not in self._connected:
            self._connected.add(arm.algorithm)
            cost += self.rng.uniform(1.0, 3.0) * (500.0 + 20.0 * self.ranks)  # connect channels
        if arm.algorithm in NVLS_ALGORITHMS and not self._nvls_ready:
            self._nvls_ready = True
            low, high = self.fabric.spec.nvls_stall_s
            cost += self.rng.uniform(low, high) * 1e6
        return cost


def _armless_us(fabric: SimFabric, collective: str, nodes: int, ranks: int, size_bytes: int) -> float:
    """AlltoAll and SendRecv, which NCCL runs without an algorithm choice (p2p over the ring graph)."""
    ring = fabric.spec.truth.ring["Simple"]
    bus = ring.nvl_bus_gbs if nodes <= fabric.spec.truth.domain_nodes else ring.bus_gbs
    if collective == "SendRecv":
        return 8.0 + (4.0 if nodes > 1 else 1.5) + size_bytes / (1000.0 * bus)
    peers = max(ranks - 1, 1)
    per_peer = 2.0 if nodes > 1 else 0.8
    return 10.0 + per_peer * math.sqrt(peers) * 4.0 + (peers / max(ranks, 1)) * size_bytes / (1000.0 * bus * 0.8)
