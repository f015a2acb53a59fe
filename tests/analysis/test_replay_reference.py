"""The vectorised replay engine equals the plain per-step reference, exactly, for every policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncclbot_sweep.analysis.policies import Estimator
from ncclbot_sweep.analysis.policies import POLICIES, make_policy
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.replay import make_problem, run_policy
from ncclbot_sweep.errors import AnalysisError

from .reference import reference_replay
from .synth import ARMS


WINDOW = (5, 99)


def random_problem(seed: int, *, n_ctx: int = 12, depth: int = 30, keep_warmup: bool = False):
    """Random pools: random arm subsets, heavy transients, pools shorter than some horizons,
    predictions that are sometimes missing (kept by the filter) or far off (filtered), and a
    multi-second warm-up stall on iteration 0 of some arms. Returns (problem, raw frame)."""
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
            if rng.random() < 0.3:
                times[0] += 5e6  # first-use NVLS-like stall on the perf binary's warm-up
            for i, x in enumerate(times):
                rows.append(dict(fabric="sim-r", collective="AllReduce", nodes=1 + c % 3, ranks=8, size_bytes=1024 * (c + 1),
                                 arm=arm, iteration=i, time_us=float(x)))
            if rng.random() < 0.85:
                cost.append(dict(fabric="sim-r", collective="AllReduce", nodes=1 + c % 3, ranks=8,
                                 size_bytes=1024 * (c + 1), arm=arm,
                                 predicted_us=float(true * np.exp(rng.normal(0, 0.5)))))
    frame = pd.DataFrame(rows)
    pools = build_pools(frame, window=WINDOW, min_arms=2, keep_warmup=keep_warmup)
    from ncclbot_sweep.analysis.prior import predictions_from_cost_tables

    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)), rho_max=2.0), frame


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
    problem, raw = random_problem(7)
    policy = make_policy(name, **params)
    horizon, seeds = 40, [3, 11]
    run = run_policy(problem, policy, horizon=horizon, seeds=seeds, record_arms=True)
    assert problem.offered[np.arange(len(problem))[None, :, None], run.arms].all()
    for s, seed in enumerate(seeds):
        served, selection, arms = reference_replay(problem, policy, horizon=horizon, seed=seed, raw=raw,
                                                   window=WINDOW)
        np.testing.assert_array_equal(run.arms[s], arms)
        np.testing.assert_array_equal(run.served_us[s], served)
        np.testing.assert_array_equal(run.selection_us[s], selection)


def assert_one_seed_matches(problem, raw, policy, *, horizon, seed, dilution=1, lag=0, keep_warmup=False):
    """One seed of the engine equals the plain reference: arms, realized and selection totals."""
    run = run_policy(problem, policy, horizon=horizon, seeds=[seed], record_arms=True, dilution=dilution, lag=lag)
    served, selection, arms = reference_replay(problem, policy, horizon=horizon, seed=seed, raw=raw, window=WINDOW,
                                               keep_warmup=keep_warmup, dilution=dilution, lag=lag)
    np.testing.assert_array_equal(run.arms[0], arms)
    np.testing.assert_array_equal(run.served_us[0], served)
    np.testing.assert_array_equal(run.selection_us[0], selection)


@pytest.mark.parametrize("name", ["UCB1", "Softmax", "ETC", "GaussianTS", "eps-greedy", "EXP3"])
@pytest.mark.parametrize(("k", "lag"), [(1, 0), (4, 0), (16, 0), (4, 1), (8, 2), (1, 3)])
def test_delayed_updates_match_the_reference(name, k, lag):
    """Rewards of each block of k steps applied lag blocks after it ends (the plugin's rounds:
    NCCLBOT_SYNC_EVERY=k, NCCLBOT_SYNC_LAG=lag), with the hold rule and the safety gate, equal
    the plain reference."""
    problem, raw = random_problem(7)
    assert_one_seed_matches(problem, raw, make_policy(name), horizon=60, seed=3, dilution=k, lag=lag)


@pytest.mark.parametrize("name", ["UCB1", "ETC", "eps-greedy"])
def test_the_hold_and_the_gate_change_what_is_played(name):
    """Off and on give different arms on these pools, so the tests above compare something."""
    problem, raw = random_problem(7)
    off = make_policy(name, safety_gate=False, probe=10**6)
    on = make_policy(name, safety_gate=True, probe=1)
    arms_off = run_policy(problem, off, horizon=60, seeds=[3], record_arms=True, dilution=8, lag=1).arms
    arms_on = run_policy(problem, on, horizon=60, seeds=[3], record_arms=True, dilution=8, lag=1).arms
    assert (arms_off != arms_on).any()
    assert_one_seed_matches(problem, raw, on, horizon=60, seed=3, dilution=8, lag=1)


def test_dilution_one_is_the_plain_replay_and_more_changes_learning():
    problem, _ = random_problem(7)
    policy = make_policy("UCB1")
    plain = run_policy(problem, policy, horizon=40, seeds=[0], record_arms=True)
    one = run_policy(problem, policy, horizon=40, seeds=[0], record_arms=True, dilution=1)
    np.testing.assert_array_equal(plain.arms, one.arms)
    np.testing.assert_array_equal(plain.served_us, one.served_us)
    slow = run_policy(problem, policy, horizon=40, seeds=[0], record_arms=True, dilution=16)
    assert not np.array_equal(plain.arms, slow.arms)
    with pytest.raises(AnalysisError, match="dilution must be"):
        run_policy(problem, policy, horizon=10, seeds=[0], dilution=0)


def test_stochastic_policies_depend_on_seed_and_repeat_with_it():
    problem, _ = random_problem(3)
    policy = make_policy("Softmax", tau=0.5, decay=False)
    a = run_policy(problem, policy, horizon=30, seeds=[1, 2], record_arms=True)
    b = run_policy(problem, policy, horizon=30, seeds=[1, 2], record_arms=True)
    np.testing.assert_array_equal(a.arms, b.arms)
    assert (a.arms[0] != a.arms[1]).any()


def test_deterministic_policy_has_no_seed_variance():
    problem, _ = random_problem(5)
    run = run_policy(problem, make_policy("UCB1"), horizon=30, seeds=range(4))
    assert np.ptp(run.served_us, axis=0).max() == 0.0


@pytest.mark.parametrize("name", ["AUTO", "UCB1", "Softmax"])
def test_keeping_iteration_0_matches_the_reference_too(name):
    problem, raw = random_problem(7, keep_warmup=True)
    assert_one_seed_matches(problem, raw, make_policy(name), horizon=70, seed=5, keep_warmup=True)


def test_dropping_iteration_0_changes_realized_not_selection_prices():
    dropped, _ = random_problem(7)
    kept, _ = random_problem(7, keep_warmup=True)
    auto = make_policy("AUTO")
    a = run_policy(dropped, auto, horizon=40, seeds=[0])
    b = run_policy(kept, auto, horizon=40, seeds=[0])
    # steady means (iterations 5..99) do not see iteration 0: a fixed arm's selection price is unchanged
    np.testing.assert_array_equal(a.trlt_selection, b.trlt_selection)
    stalled = b.served_us[0] > 1e6
    assert stalled.any() and (a.served_us[0] < 1e6).all()
    assert not np.allclose(a.trlt_realized, b.trlt_realized)


def test_a_long_horizon_wraps_the_steady_part_not_the_transient():
    rows = [dict(fabric="sim-w", collective="AllReduce", nodes=2, ranks=16, size_bytes=4096, arm=arm,
                 iteration=i, time_us=(1000.0 if i < 3 else 10.0 + i)) for arm in ("Ring/LL", "Ring/Simple")
            for i in range(8)]
    pools = build_pools(pd.DataFrame(rows), window=(3, 99))
    # iteration 0 dropped: positions 0..6 hold iterations 1..7; the steady window starts at position 2
    assert pools.depth[0, 0] == 7 and pools.wrap[0, 0] == 2
    from ncclbot_sweep.analysis.pools import pool_position

    served = [int(pool_position(k, 7, 2)) for k in range(12)]
    assert served == [0, 1, 2, 3, 4, 5, 6, 2, 3, 4, 5, 6]
    problem = make_problem(pools, np.array([[10.0, 30.0]]))
    run = run_policy(problem, make_policy("AUTO"), horizon=12, seeds=[0])
    expected = 2 * 1000.0 + sum(10.0 + it for it in (3, 4, 5, 6, 7, 3, 4, 5, 6, 7))
    assert run.served_us[0, 0] == expected


def test_zero_element_contexts_are_left_out_with_a_note():
    rows = [dict(fabric="sim-z", collective="AllGather", nodes=32, ranks=256, size_bytes=size, count=size // 4 // 256,
                 arm=arm, iteration=i, time_us=5.0 + i) for size in (0, 1 << 20) for arm in ("Ring/LL", "Ring/Simple")
            for i in range(5)]
    pools = build_pools(pd.DataFrame(rows), window=(1, 99))
    assert list(pools.contexts["size_bytes"]) == [1 << 20]
    assert list(pools.excluded["size_bytes"]) == [0] and "0 elements" in pools.excluded["note"].iloc[0]
    assert "1 zero-element contexts left out" in pools.convention


AOM_FAMILIES = [name for name in POLICIES if name not in ("AUTO", "Random")]


@pytest.mark.parametrize("name", AOM_FAMILIES)
def test_adaptive_observed_max_matches_the_reference(name):
    """With the observed-max wrapper on, every learning family still equals the plain reference."""
    problem, raw = random_problem(7)
    policy = make_policy(name, estimator={"observed_max": True})
    horizon, seeds = 40, [3, 11]
    run = run_policy(problem, policy, horizon=horizon, seeds=seeds, record_arms=True)
    for s, seed in enumerate(seeds):
        served, _, arms = reference_replay(problem, policy, horizon=horizon, seed=seed, raw=raw, window=WINDOW)
        np.testing.assert_array_equal(run.arms[s], arms)
        np.testing.assert_array_equal(run.served_us[s], served)


def test_adaptive_observed_max_changes_some_replays_and_is_off_by_default():
    """The random problem has rewards above 1 (predictions far off), so the wrapper fires and moves
    arms somewhere; the default estimator leaves it off."""
    assert not make_policy("UCB1").estimator.observed_max
    problem, _ = random_problem(7)
    moved = []
    for name in ("UCB1", "Softmax", "GaussianTS", "FPL"):
        plain = run_policy(problem, make_policy(name), horizon=40, seeds=[3], record_arms=True)
        aom = run_policy(problem, make_policy(name, estimator={"observed_max": True}), horizon=40, seeds=[3],
                         record_arms=True)
        moved.append(not np.array_equal(plain.arms, aom.arms))
    assert any(moved)
