"""Non-stationarity (paper appendix D.4.2, I.10; Tables 8, 12, 52, Figure 8): the measured-best
and worst offered arms of a context swap pools mid-horizon.

:class:`SwapEnvironment` serves the replay engine (:class:`~..replay.Environment`): each
pull is a bootstrap draw from the steady part of the pool its arm currently maps to; in
``abrupt`` the best and worst offered arms exchange pools for the second half of the
horizon, in ``gradual`` they exchange with probability ``1 - p_old(t)``, ``p_old`` ramping
1 -> 0 over 35-65% of the horizon, and ``stationary`` never swaps. Draws and swaps come from
a generator keyed by the seed alone, so every policy faces the same world. The dynamic
oracle always draws from the best pool (with the same uniforms); dynamic TRLT is the served
total over the oracle's, minus 1.

The learners are replayed as tuned, discounted (``estimator.discount`` gamma, chosen on the
train contexts by the mean competitive ratio over the sequential stationary, abrupt and
gradual regimes) and with constant-gain means (``estimator.kind=gain``, fixed grid).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from ..figures import plot_crlt
from ..policies import Policy, make_policy
from ..replay import Environment, ReplayProblem, run_policy
from .harness import Harness, Section, relabel

__all__ = ["REGIMES", "SwapEnvironment", "drift"]

REGIMES = ("stationary", "abrupt", "gradual")
_SALT = 0x0D21F7  # keys the environment's generator apart from the policies' (seed alone)


class SwapEnvironment(Environment):
    """Best <-> worst offered pool swap with bootstrap draws from the steady pools (module docstring)."""

    def __init__(self, regime: str, *, ramp: tuple[float, float] = (0.35, 0.65)) -> None:
        if regime not in REGIMES:
            raise AnalysisError(f"drift regime must be one of {', '.join(REGIMES)}, but got {regime!r}")
        self.regime, self.ramp = regime, ramp

    def bind(self, problem: ReplayProblem, ctx: np.ndarray, seeds: list[int], horizon: int) -> None:
        pools = problem.pools
        steady = np.where(problem.offered, pools.steady, np.nan)
        best = np.nanargmin(np.where(np.isfinite(steady), steady, np.inf), axis=1)
        worst = np.argmax(np.where(np.isfinite(steady), steady, -np.inf), axis=1)
        n_ctx = len(problem)
        u, g = [], []
        for seed in seeds:
            rng = np.random.default_rng([int(seed), _SALT])
            u.append(rng.random((n_ctx, horizon)))
            g.append(rng.random((n_ctx, horizon)))
        self.u, step = np.concatenate(u), np.arange(horizon)[None, :]
        if self.regime == "abrupt":
            self.swap = np.broadcast_to(step >= horizon // 2, self.u.shape)
        elif self.regime == "gradual":
            lo, hi = self.ramp[0] * horizon, self.ramp[1] * horizon
            keep = np.clip((hi - step) / max(hi - lo, 1e-9), 0.0, 1.0)
            self.swap = np.concatenate(g) >= keep
        else:
            self.swap = np.zeros(self.u.shape, dtype=bool)
        self.ctx, self.best, self.worst = ctx, best[ctx], worst[ctx]
        self.samples, self.steady = pools.samples, pools.steady
        self.start = pools.wrap[ctx]
        self.length = np.maximum(pools.depth[ctx] - self.start, 1)
        self.served = np.zeros(self.u.shape)
        self.oracle_served = np.zeros(self.u.shape)

    def _draw(self, t: int, arm: np.ndarray) -> np.ndarray:
        rows = np.arange(len(self.ctx))
        pos = self.start[rows, arm] + np.floor(self.u[:, t - 1] * self.length[rows, arm]).astype(np.int64)
        return self.samples[self.ctx, arm, pos]

    def serve(self, t: int, arms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        swapped = self.swap[:, t - 1]
        source = np.where(swapped & (arms == self.best), self.worst,
                          np.where(swapped & (arms == self.worst), self.best, arms))
        x = self._draw(t, source)
        self.served[:, t - 1] = x
        self.oracle_served[:, t - 1] = self._draw(t, self.best)
        return x, self.steady[self.ctx, source]

    def oracle(self) -> tuple[np.ndarray, np.ndarray]:
        return self.oracle_served.sum(axis=1), self.u.shape[1] * self.steady[self.ctx, self.best]

    def crlt(self) -> np.ndarray:
        """``[rows, T]`` dynamic cumulative relative lost time after each step of the last run."""
        return np.cumsum(self.served, axis=1) / np.cumsum(self.oracle_served, axis=1) - 1.0


def _variants(policy: Policy, gamma: float, gains) -> list[Policy]:
    name = policy.display_name
    est = policy.estimator
    out = [relabel(policy, f"{name} discount {gamma:g}", estimator=dataclasses.replace(est, discount=gamma))]
    out += [relabel(policy, f"{name} gain {g:g}", estimator=dataclasses.replace(est, kind="gain", gain=g))
            for g in gains]
    return out


def _dynamic(h: Harness, problem: ReplayProblem, policy: Policy, regime: str, seeds) -> tuple[np.ndarray, np.ndarray]:
    """Seed-averaged per-context dynamic TRLT ``[C]`` and the mean CRLT curve rows ``[S, C, T]``."""
    if regime == "stationary-sequential":
        run = run_policy(problem, policy, horizon=h.options.horizon, seeds=seeds)
        return run.trlt_realized.mean(axis=0), None
    env = SwapEnvironment(regime)
    run = run_policy(problem, policy, horizon=h.options.horizon, seeds=seeds, environment=env)
    return run.trlt_realized.mean(axis=0), env.crlt().reshape(len(seeds), len(problem), -1)


def _choose_discount(h: Harness, policy: Policy, train: ReplayProblem, seeds) -> tuple[float, pd.DataFrame]:
    """Gamma minimising the mean competitive ratio over the three regimes on the train contexts."""
    grid = list(h.options.discounts)
    means = np.array([[_dynamic(h, train, relabel(policy, policy.display_name,
                                                  estimator=dataclasses.replace(policy.estimator, discount=g)),
                                regime, seeds)[0].mean()
                       for regime in ("stationary-sequential", "abrupt", "gradual")] for g in grid])
    ratio = (means / np.maximum(means.min(axis=0, keepdims=True), 1e-12)).mean(axis=1)
    chosen = grid[int(np.argmin(ratio))]
    record = pd.DataFrame({"policy": policy.display_name, "discount": grid, "train_stationary_pct": 100 * means[:, 0],
                           "train_abrupt_pct": 100 * means[:, 1], "train_gradual_pct": 100 * means[:, 2],
                           "competitive_ratio": ratio, "chosen": [g == chosen for g in grid]})
    return chosen, record


def drift(h: Harness) -> Section:
    """Tables 8, 12 and 52: dynamic TRLT under no, abrupt and gradual drift, with Figure 8's curves."""
    test = h.test()
    seeds = list(range(h.options.drift_seeds))
    train = h.problem.subset(~test)
    if not len(train):
        raise AnalysisError("the drift ablation chooses its discount on train contexts, and the split leaves none",
                            hint="use --split scale or random")
    policies = [make_policy("AUTO"), make_policy("ETC")]
    selection = []
    for learner in h.learners():
        if hasattr(learner, "prepare"):  # a fit-once selector has no estimator to discount
            policies.append(learner)
            continue
        gamma, record = _choose_discount(h, learner, train, seeds)
        selection.append(record)
        policies += [learner, *_variants(learner, gamma, h.options.gains)]
    rows, long, curves = [], [], []
    regimes = ("stationary-sequential", "stationary", "abrupt", "gradual")
    for policy in policies:
        policy = h.prepared(policy)
        row = {"policy": policy.display_name}
        for regime in regimes:
            trlt, crlt = _dynamic(h, h.problem, policy, regime, seeds)
            stats = h.stats(trlt[test])
            key = regime.replace("-", "_")
            row.update({f"{key}_mean_pct": stats["mean_pct"], f"{key}_sem_pct": stats["sem_pct"],
                        f"{key}_p99_pct": stats["p99_pct"]})
            long.append(h.problem.contexts.assign(policy=policy.display_name, regime=regime, trlt=trlt,
                                                  part=h.labels()["part"].to_numpy()))
            if crlt is not None:
                mean = 100 * crlt[:, test].mean(axis=(0, 1))
                curves.append(pd.DataFrame({"policy": policy.display_name, "panel": regime,
                                            "step": np.arange(1, len(mean) + 1), "value_pct": mean}))
        rows.append(row)
    figures = []
    if h.figures is not None and curves:
        figures.append(plot_crlt(pd.concat(curves, ignore_index=True), h.figures / "drift.png",
                                 title="Dynamic CRLT under drift (test contexts)", ylabel="mean dynamic CRLT (%)",
                                 marks=(h.options.horizon // 2,), marks_label="drift", symlog=True,
                                 synthetic=h.synthetic))
    tables = {"drift": pd.DataFrame(rows)}
    if selection:
        tables["drift-discount"] = pd.concat(selection, ignore_index=True)
    return Section("drift", "Non-stationarity: pool swap and drift (Tables 8, 12, 52, Figure 8)",
                   f"Dynamic TRLT (%) on the test contexts over {h.options.drift_seeds} seeds: stationary-sequential is "
                   "the main replay; stationary, abrupt (best and worst offered arms swap pools at mid-horizon) and "
                   "gradual (swap probability ramping over 35-65% of the horizon) draw from the steady pools against "
                   "a dynamic oracle. Discounts are chosen on train by the mean competitive ratio (second table).",
                   tables, pd.concat(long, ignore_index=True), figures=figures)
