"""A plain-Python reference of the plugin's per-context bandit (plugin/src/policy.c):
arm filter, warm start, UCB1/greedy selection and the three estimators, in
float64 with the same operation order, so decisions can be compared exactly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CHAMPION = dict(alpha=0.0928, pseudo_count=2.89, rho_max=2.0, lr=0.468, decay=0.467, clip=0.389,
                gain=0.1)
FLT_MAX = 3.4028234663852886e38


def pairwise_sum(x: list[float]) -> float:
    """numpy's summation order for a row of up to 128 values (what np.sum does)."""
    if len(x) < 8:
        r = 0.0
        for v in x:
            r += v
        return r
    acc = list(x[:8])
    i = 8
    while i < len(x) - len(x) % 8:
        for j in range(8):
            acc[j] += x[i + j]
        i += 8
    res = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
    for v in x[i:]:
        res += v
    return res


def available(v: float) -> bool:
    return v >= 0.0 and v < FLT_MAX and not math.isnan(v)


@dataclass
class RefBandit:
    """One context: the arms the filter kept (NCCL order) and their statistics."""

    arms: list[int]
    mu_min: float
    mean: list[float] = field(default_factory=list)
    n: list[float] = field(default_factory=list)

    @classmethod
    def from_table(cls, table: list[float], *, pseudo_count: float, rho_max: float) -> "RefBandit":
        costs = [(i, v) for i, v in enumerate(table[:21]) if available(v)]
        lo = min(v for _, v in costs)
        kept = [(i, v) for i, v in costs if v <= rho_max * lo]
        b = cls([i for i, _ in kept], lo)
        for _, v in kept:
            if pseudo_count > 0 and v > 0:
                b.mean.append(lo / v)
                b.n.append(pseudo_count)
            else:
                b.mean.append(0.0)
                b.n.append(0.0)
        return b

    def select(self, policy: str, alpha: float) -> int:
        """Index into arms: unpulled first, then argmax with ties to the lowest index."""
        for i, n in enumerate(self.n):
            if n <= 0.0:
                return i
        total = pairwise_sum(self.n)
        two_ln = 2.0 * math.log(total) if total > 1.0 else 0.0
        best, best_v = -1, -math.inf
        for i, (m, n) in enumerate(zip(self.mean, self.n)):
            v = m + alpha * math.sqrt(two_ln / n) if policy == "ucb1" else m
            if v > best_v:
                best, best_v = i, v
        return best

    def update(self, i: int, reward: float, estimator: str, p: dict) -> None:
        prior = self.n[i]
        self.n[i] = prior + 1.0
        if prior <= 0.0:
            self.mean[i] = reward
        elif estimator == "mean":
            self.mean[i] += (reward - self.mean[i]) / self.n[i]
        elif estimator == "gain":
            self.mean[i] += p["gain"] * (reward - self.mean[i])
        else:
            d = max(-p["clip"], min(p["clip"], reward - self.mean[i]))
            self.mean[i] += p["lr"] * math.pow(self.n[i], -p["decay"]) * d

    def reward(self, latency_us: float) -> float:
        return min(self.mu_min / latency_us, 1e6)
