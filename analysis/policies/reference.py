"""One bandit driven call by call: the per-call reference the C plugin must match.

With ``draws=CounterDraws(...)`` (:mod:`.counter_rng`) a stochastic family draws what the
plugin draws for that communicator and context, so the plugin's arms and per-arm state
equal :class:`StepPolicy`'s bit for bit when both are fed the same rewards in the same
order (tests/plugin/test_plugin_policy.py).
"""

from __future__ import annotations

import numpy as np

from ncclbot_sweep.errors import AnalysisError

from .base import Policy, safety_gate, selectable
from .counter_rng import CounterDraws
from .estimators import BanditState
from .registry import draw_counts

__all__ = ["StepPolicy"]


class StepPolicy:
    """One bandit driven call by call: the Python reference for the C plugin.

    ``predicted_us`` lists the cost model's prediction per arm (None or NaN = undefined) on
    the caller's arm order, which must be NCCL's scan order for ties to match. The filter
    ``rho_max`` and the reward ``mu_hat_min / latency`` are applied here.

    Randomness comes from ``numpy.random.default_rng(seed)``, or, with ``draws``, from the
    plugin's counter-based generator for one communicator and context (then ``seed`` is
    unused and decision ``t`` draws ``draws.draw(t, ...)``, ``t`` counted from 0).

    >>> p = StepPolicy(make_policy("UCB1"), [10.0, 12.0, 30.0])
    >>> arm = p.select(); p.update(arm, 11.0)
    """

    def __init__(self, policy: Policy, predicted_us, *, rho_max: float = 2.0, seed: int = 0,
                 draws: CounterDraws | None = None) -> None:
        pred = np.array([np.nan if v is None else float(v) for v in predicted_us], dtype=float)
        if not np.isfinite(pred).any():
            raise AnalysisError("StepPolicy needs at least one defined prediction")
        self.policy = policy
        self.mu_hat_min = float(np.nanmin(pred))
        offered = ~(pred > rho_max * self.mu_hat_min)
        auto = int(np.nanargmin(np.where(offered, pred, np.nan)))
        self.state = BanditState.empty(offered[None, :], (self.mu_hat_min / pred)[None, :], np.array([auto]))
        policy.init(self.state)
        self._rng = np.random.default_rng(seed)
        self._draws = draws
        self.t = 0
        self._last: int | None = None

    @property
    def offered(self) -> list[bool]:
        return [bool(v) for v in self.state.offered[0]]

    def select(self) -> int:
        """Choose the arm index for the next call (its reward is pending until :meth:`update`).

        Arms held by the hold rule are left out while some reward is pending, and the safety
        gate may replace the choice by AUTO's arm, as in the plugin.
        """
        nu, nz = draw_counts(self.policy, self.state.offered.shape[1])
        if self._draws is not None:
            u, z = self._draws.draw(self.t, nu, nz)
        else:
            u = self._rng.random((1, nu)) if nu else None
            z = self._rng.standard_normal((1, nz)) if nz else None
        self.t += 1
        if self.state.pending.any():
            self.state.selectable = selectable(self.state, self.policy.probe)
        arms = self.policy.select(self.state, self.t, u, z)
        self.state.selectable = self.state.offered
        if self.policy.safety_gate:
            arms = safety_gate(self.state, arms, self.policy.gate_margin, self.policy.gate_min)
        self._last = int(arms[0])
        self.state.pending[0, self._last] += 1
        return self._last

    def update(self, arm: int, latency_us: float) -> float | None:
        """Feed the measured latency of a pull of ``arm`` (pulls of one arm in the order they
        were selected); returns the reward learned (renormalised with ``observed_max``).

        A latency that is not positive and finite gives no reward: None, and nothing changes
        but the pull's resolution (not even the arm's pull count), as the plugin's
        ``nb_reward`` drops it (``plugin/README.md``, "A reward needs a usable latency").
        """
        latency = float(latency_us)
        if self.state.pending[0, arm] > 0:
            self.state.pending[0, arm] -= 1
        self.state.resolved[0, arm] += 1
        if not (latency > 0.0 and np.isfinite(latency)):
            return None
        reward = np.array([self.mu_hat_min / latency])
        rows, arms = np.array([0]), np.array([int(arm)])
        est = self.policy.estimator
        if self.state.learn_mask(rows, arms, est)[0]:
            reward = self.state.renormalise(rows, reward, est)
            self.policy.update(self.state, rows, arms, reward)
        self.state.pulls[0, arm] += 1
        return float(reward[0])

    def means(self) -> list[float]:
        """Current per-arm reward means (for cross-checking the plugin's state)."""
        return [float(v) for v in self.state.mu[0]]

    def counts(self) -> list[float]:
        """Current per-arm counts ``n_a``, pseudo-counts included (the plugin's ``n``)."""
        return [float(v) for v in self.state.n[0]]
