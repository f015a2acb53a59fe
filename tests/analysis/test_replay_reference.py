"""The vectorised replay engine equals the plain per-step reference, exactly, for every policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncclbot_sweep.analysis.policies import Estimator
from ncclbot_sweep.analysis.policies import POLICIES, make_policy
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.replay import make_problem, run_policy

from .reference import reference_replay
from .synth import ARMS


def random_problem(seed: int, *, n_ctx: int = 12, depth: int = 30):
    """Random pools: random arm subsets, heavy transients, pools shorter than some horizons,
    and predictions that are sometimes missing (kept by the filter) or far off (filtered)."""
    rng = np.random.default_rng(seed)
    rows, cost = [], []
    for c in range(n_ctx):
        arms = [a for a in ARMS if rng.random() < 0.7] or [ARMS[3], ARMS[5]]
        if len(arms) == 1:
            arms.append(ARMS[4] if arms[0] != ARMS[4] else ARMS[3])
        for arm in arms:
            true = rng.uniform(5, 100)
            d = int(rng.integers(depth // 2, depth + 1))
            times = true * rng.lognormal(0, 0.1, d)
            times[:4] *= 1 + rng.exponential(2.0, 4)
            for i, x in enumerate(times):
                rows.append(dict(fabric="sim-r", collective="AllReduce", nodes=1 + c % 3, ranks=8, size_bytes=1024 * (c + 1),
                                 arm=arm, iteration=i, time_us=float(x)))
            if rng.random() < 0.85:
                cost.append(dict(fabric="sim-r", collective="AllReduce", nodes=1 + c % 3, ranks=8,
                                 size_bytes=1024 * (c + 1), arm=arm,
                                 predicted_us=float(true * np.exp(rng.normal(0, 0.5)))))
    pools = build_pools(pd.DataFrame(rows), window=(5, 99), min_arms=2)
    from ncclbot_sweep.analysis.prior import predictions_from_cost_tables

    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)), rho_max=2.0)


VARIANTS = [(name, {}) for name in POLICIES] + [
    ("UCB1", {"estimator": Estimator(kind="mean")}),
    ("UCB1", {"estimator": Estimator(kind="gain", gain=0.2, discount=0.9), "pseudo_count": 0.0}),
    ("UCB1", {"estimator": Estimator(kind="sgd", skip_first=2, discount=0.95)}),
    ("Softmax", {"decay": False, "pseudo_count": 0.0, "estimator": Estimator(kind="sgd")}),
    ("eps-greedy", {"eps": 0.3, "decay": True, "pseudo_count": 0.0}),
    ("GaussianTS", {"estimator": Estimator(kind="gain", gain=0.3)}),
    ("UCB-V", {"estimator": Estimator(kind="sgd"), "pseudo_count": 0.0}),
    ("ETC", {"m": 3}),
    ("RR-ETC", {"m": 4, "gate": 0.5}),
    ("Tsallis-INF", {"loss_estimator": "iw", "clip_loss": False, "pseudo_count": 0.0}),
    ("EXP3", {"pseudo_count": 1.5, "clip_loss": True}),
    ("FPL", {"pseudo_count": 2.0, "resample": 4}),
    ("Hierarchical", {"pseudo_count": 0.0, "decay": False}),
]


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)])
def test_engine_equals_reference(name, params):
    problem = random_problem(7)
    policy = make_policy(name, **params)
    horizon, seeds = 40, [3, 11]
    run = run_policy(problem, policy, horizon=horizon, seeds=seeds, record_arms=True)
    assert problem.offered[np.arange(len(problem))[None, :, None], run.arms].all()
    for s, seed in enumerate(seeds):
        served, selection, arms = reference_replay(problem, policy, horizon=horizon, seed=seed)
        np.testing.assert_array_equal(run.arms[s], arms)
        np.testing.assert_array_equal(run.served_us[s], served)
        np.testing.assert_array_equal(run.selection_us[s], selection)


def test_stochastic_policies_depend_on_seed_and_repeat_with_it():
    problem = random_problem(3)
    policy = make_policy("Softmax", tau=0.5, decay=False)
    a = run_policy(problem, policy, horizon=30, seeds=[1, 2], record_arms=True)
    b = run_policy(problem, policy, horizon=30, seeds=[1, 2], record_arms=True)
    np.testing.assert_array_equal(a.arms, b.arms)
    assert (a.arms[0] != a.arms[1]).any()


def test_deterministic_policy_has_no_seed_variance():
    problem = random_problem(5)
    run = run_policy(problem, make_policy("UCB1"), horizon=30, seeds=range(4))
    assert np.ptp(run.served_us, axis=0).max() == 0.0
