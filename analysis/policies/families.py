"""The stochastic and index policies of NCCL-BOT (paper appendix C.1-C.9, C.13, C.15).

Conventions shared by every policy are in the package docstring (:mod:`.`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np


from .estimators import BanditState, Estimator
from .base import Policy, iqr_trimmed_mean, pick_uniform, sample_categorical
from .base import log_n as _log_n
from .base import masked_argmax as _masked_argmax
from .base import offered_argmax as _offered_argmax
from .base import softmax_weights as _softmax_weights
from .base import unpulled_first as _unpulled_first
from .base import unpulled_selectable as _unpulled_selectable

__all__ = [
    "Auto", "RandomPolicy", "UCB1", "KLUCB", "Softmax", "GaussianThompson",
    "EpsilonGreedy", "ETC", "RoundRobinETC", "UCBV", "UCBTuned",
]


@dataclasses.dataclass(frozen=True)
class Auto(Policy):
    """NCCL's cost model: always the argmin predicted arm (appendix C.1); never learns."""

    name: ClassVar[str] = "AUTO"

    def init(self, state: BanditState) -> None:
        pass

    def select(self, state, t, u, z):
        return state.auto

    def update(self, state, rows, arms, reward):
        pass


@dataclasses.dataclass(frozen=True)
class RandomPolicy(Policy):
    """Uniform over the offered arms (C.2); a lower reference."""

    name: ClassVar[str] = "Random"
    deterministic: ClassVar[bool] = False

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        pass

    def select(self, state, t, u, z):
        return pick_uniform(state.selectable, u[:, 0])

    def update(self, state, rows, arms, reward):
        pass


@dataclasses.dataclass(frozen=True)
class UCB1(Policy):
    """UCB1 with tuned alpha, warm start and clipped-SGD mean (C.3; champion defaults)."""

    name: ClassVar[str] = "UCB1"
    probe: int = 1
    safety_gate: bool = True
    estimator: Estimator = Estimator(kind="sgd", clip=0.389, lr=0.468, decay=0.467)
    pseudo_count: float = 2.89
    alpha: float = 0.0928

    def index(self, state: BanditState) -> np.ndarray:
        """Per-arm index ``mu_a + (alpha sqrt(2 ln max(N, 1))) (1 / sqrt(n_a))`` (inf or NaN at n_a = 0).

        The plugin's ``nb_ucb_index`` computes the same float64 value arm by arm.
        """
        return self._index(self._scale(state)[:, None], state.n, state.mu)

    def _scale(self, state: BanditState) -> np.ndarray:
        """``alpha * sqrt(2 ln max(N, 1))`` per row: the factor every arm's bonus shares."""
        scale = np.sqrt(2.0 * _log_n(state))
        scale *= self.alpha
        return scale

    @staticmethod
    def _index(scale: np.ndarray, n: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The index from the row's ``scale``, ``n`` and ``mu`` (broadcast alike), in the one
        float64 operation order (``plugin/README.md``): ``1 / sqrt(n)``, times the scale, plus
        ``mu``."""
        with np.errstate(divide="ignore", invalid="ignore"):
            bonus = np.sqrt(n)
            np.divide(1.0, bonus, out=bonus)
            bonus *= scale
            bonus += mu
        return bonus

    def select(self, state, t, u, z):
        # The index of the offered arms only (the others can never be chosen), one value per
        # offered cell; the same numbers as ``index`` there, so the same argmax.
        cells, rows, _scratch = state.offered_cells()
        score = self._index(self._scale(state)[rows], state.n.reshape(-1)[cells], state.mu.reshape(-1)[cells])
        if state.selectable is not state.offered:  # arms held while rewards are pending
            score[~state.selectable.reshape(-1)[cells]] = -np.inf
        return _unpulled_first(state, _offered_argmax(state, score))


@dataclasses.dataclass(frozen=True)
class KLUCB(Policy):
    """Bernoulli KL-UCB (C.6): largest ``q`` with ``n KL(mu, q) <= c ln N`` by bisection."""

    name: ClassVar[str] = "KL-UCB"
    probe: int = 1
    pseudo_count: float = 1.56
    c: float = 0.0373
    iterations: int = 25

    def select(self, state, t, u, z):
        eps = 1e-12
        p = np.clip(state.mu, 0.0, 1.0)
        bound = self.c * _log_n(state)[:, None]
        lo, hi = p.copy(), np.ones_like(p)
        pc = np.clip(p, eps, 1 - eps)
        for _ in range(self.iterations):
            mid = 0.5 * (lo + hi)
            qc = np.clip(mid, eps, 1 - eps)
            kl = pc * np.log(pc / qc) + (1 - pc) * np.log((1 - pc) / (1 - qc))
            ok = state.n * kl <= bound
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid)
        return _unpulled_first(state, _masked_argmax(lo, state.selectable))


@dataclasses.dataclass(frozen=True)
class Softmax(Policy):
    """Boltzmann exploration (C.13) with optional ``tau / sqrt(N_softmax)`` decay."""

    name: ClassVar[str] = "Softmax"
    safety_gate: bool = True
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(kind="gain")
    pseudo_count: float = 1.24
    tau: float = 0.089
    decay: bool = True

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        super().init(state)
        state.extra["selections"] = np.zeros(state.offered.shape[0])

    def select(self, state, t, u, z):
        unpulled = _unpulled_selectable(state)
        cold = np.zeros(state.offered.shape[0], dtype=bool) if unpulled is None else unpulled.any(axis=1)
        sel = state.extra["selections"]
        sel += ~cold
        tau = np.full(sel.shape, self.tau)
        if self.decay:
            tau = self.tau / np.sqrt(np.maximum(sel, 1.0))
        arms = sample_categorical(_softmax_weights(state.mu, state.selectable, tau), u[:, 0])
        if cold.any():
            arms = np.where(cold, pick_uniform(unpulled, u[:, 0]), arms)
        return arms


@dataclasses.dataclass(frozen=True)
class GaussianThompson(Policy):
    """Gaussian Thompson sampling (C.15): ``mu~_a = mu_a + sqrt(v_a / n_a) z_a``.

    ``v_a`` is the prior variance while ``n_a < 2`` and the estimator's variance after;
    ``n_a = 0`` divides by 1. Champion: skip-first-1, prior variance 3.01e-4, nu 0.491.
    """

    name: ClassVar[str] = "GaussianTS"
    safety_gate: bool = True
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(kind="gain", skip_first=1)
    pseudo_count: float = 0.491
    prior_var: float = 0.000301

    def draws(self, n_arms):
        return (0, n_arms)

    def select(self, state, t, u, z):
        v = np.where(state.n < 2, self.prior_var, state.variance(self.estimator))
        scale = np.sqrt(v / np.where(state.n > 0, state.n, 1.0))
        return _masked_argmax(state.mu + scale * z, state.selectable)


@dataclasses.dataclass(frozen=True)
class EpsilonGreedy(Policy):
    """Epsilon-greedy (C.7), ``eps_t = eps / sqrt(t)`` with decay; ``eps = 0`` is Greedy."""

    name: ClassVar[str] = "eps-greedy"
    safety_gate: bool = True
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(kind="gain")
    pseudo_count: float = 0.892
    eps: float = 0.0
    decay: bool = False

    @property
    def is_deterministic(self) -> bool:
        return self.eps == 0.0

    def draws(self, n_arms):
        return (2, 0)

    def select(self, state, t, u, z):
        greedy = _masked_argmax(state.mu, state.selectable)
        if self.eps == 0.0:
            return greedy
        eps = self.eps / np.sqrt(t) if self.decay else self.eps
        return np.where(u[:, 0] < eps, pick_uniform(state.selectable, u[:, 1]), greedy)


@dataclasses.dataclass(frozen=True)
class ETC(Policy):
    """Explore-then-commit (C.8): ``m`` learned pulls per arm at random, then argmax mean."""

    name: ClassVar[str] = "ETC"
    probe: int = 1
    safety_gate: bool = True
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(skip_first=1)
    m: int = 2  # the champion m=1 commits on one transient-inflated sample live; see the package docstring

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        state.extra["commit"] = np.full(state.offered.shape[0], -1)

    def select(self, state, t, u, z):
        eligible = state.offered & (state.learned < self.m)
        exploring = eligible.any(axis=1)
        commit = state.extra["commit"]
        fresh = ~exploring & (commit < 0)
        commit[fresh] = _masked_argmax(state.mu, state.selectable)[fresh]
        if state.selectable is state.offered:
            return np.where(exploring, pick_uniform(eligible, u[:, 0]), commit)
        # Held arms wait for their rewards (the plugin's rule): explore among the free eligible
        # arms; while every eligible arm is held play the best mean, without committing; a
        # held committed arm gives way to the best mean among the free ones.
        free_eligible = eligible & state.selectable
        best = _masked_argmax(state.mu, state.selectable)
        free_commit = state.selectable[state.rows, np.maximum(commit, 0)]
        explore = np.where(free_eligible.any(axis=1), pick_uniform(free_eligible, u[:, 0]), best)
        return np.where(exploring, explore, np.where(free_commit, commit, best))


@dataclasses.dataclass(frozen=True)
class RoundRobinETC(Policy):
    """Madan et al. round-robin ETC (C.9): lexicographic order, IQR-trimmed commit, AUTO gate.

    Costs are ``c = -r``. Taken literally from the paper, the gate's relative improvement
    ``iota = (c_auto - c_star) / c_auto`` is only used when ``c_auto > 0``; with positive
    rewards ``c_auto < 0``, so ``iota`` is ``+inf`` whenever another arm is strictly cheaper
    and the gate never overrides. Kept as specified.
    """

    name: ClassVar[str] = "RR-ETC"
    estimator: Estimator = Estimator(skip_first=1)
    m: int = 1
    gate: float = 0.0102

    def init(self, state):
        b, k = state.offered.shape
        # lex_rank: rank of each arm's string in lexicographic order, set by the replay
        # (paper C.9 sorts arms lexicographically); default is the arm axis order.
        rank = np.asarray(state.extra.get("lex_rank", np.arange(k)))
        key = np.where(state.offered, rank[None, :], k + 1)
        state.extra["order"] = np.argsort(key, axis=1, kind="stable")
        state.extra["costs"] = np.full((b, k, self.m), np.nan)
        state.extra["commit"] = np.full(b, -1)
        state.extra["inner"] = np.zeros(b, dtype=np.int64)

    def select(self, state, t, u, z):
        k_off = state.offered.sum(axis=1)
        inner = state.extra["inner"]
        exploring = inner < self.m * k_off
        pos = inner % np.maximum(k_off, 1)
        rr = state.extra["order"][state.rows, pos]
        commit = state.extra["commit"]
        fresh = ~exploring & (commit < 0)
        if fresh.any():
            commit[fresh] = self._commit(state, np.flatnonzero(fresh))
        return np.where(exploring, rr, commit)

    def _commit(self, state, rows):
        cbar = iqr_trimmed_mean(state.extra["costs"][rows])
        cbar = np.where(state.offered[rows], cbar, np.inf)
        star = np.argmin(np.nan_to_num(cbar, nan=np.inf), axis=1)
        auto = state.auto[rows]
        c_auto = cbar[np.arange(len(rows)), auto]
        c_star = cbar[np.arange(len(rows)), star]
        with np.errstate(divide="ignore", invalid="ignore"):
            iota = np.where(c_auto > 0, (c_auto - c_star) / c_auto, np.where(c_star < c_auto, np.inf, 0.0))
        return np.where(iota < self.gate, auto, star)

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        inner = state.extra["inner"]
        slot = state.learned[rows, arms] - 1
        keep = slot < self.m
        state.extra["costs"][rows[keep], arms[keep], slot[keep]] = -reward[keep]
        inner[rows] += 1


@dataclasses.dataclass(frozen=True)
class UCBV(Policy):
    """UCB-V (C.4): ``mu + sqrt(2 var zeta ln N / n) + c zeta ln N / n``."""

    name: ClassVar[str] = "UCB-V"
    probe: int = 1
    pseudo_count: float = 1.73
    zeta: float = 0.501
    c: float = 1.02

    def select(self, state, t, u, z):
        log_n = _log_n(state)[:, None]
        var = state.variance(self.estimator)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = (state.mu + np.sqrt(2.0 * var * self.zeta * log_n / state.n)
                     + self.c * self.zeta * log_n / state.n)
        return _unpulled_first(state, _masked_argmax(score, state.selectable))


@dataclasses.dataclass(frozen=True)
class UCBTuned(Policy):
    """UCB-tuned (C.5): ``mu + sqrt(ln N / n * min(1/4, var + sqrt(2 ln N / n)))``."""

    name: ClassVar[str] = "UCB-tuned"
    probe: int = 1
    pseudo_count: float = 2.0

    def select(self, state, t, u, z):
        log_n = _log_n(state)[:, None]
        var = state.variance(self.estimator)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = var + np.sqrt(2.0 * log_n / state.n)
            score = state.mu + np.sqrt(log_n / state.n * np.minimum(0.25, v))
        return _unpulled_first(state, _masked_argmax(score, state.selectable))


