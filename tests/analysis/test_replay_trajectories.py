"""Per-step replay trajectories: recorded only when asked, equal to the reference step by step,
ending at the replay's TRLT; and ``analyze replay --trajectories``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.policies import make_policy
from ncclbot_sweep.analysis.pools import CONTEXT_COLUMNS
from ncclbot_sweep.analysis.replay import (
    replay_with_trajectories,
    run_policy,
    run_replay,
    split_labels,
    trajectory_frame,
)
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import AnalysisError

from .reference import reference_replay
from .simpools import write_sim_dataset
from .test_replay_reference import WINDOW, random_problem

POLICIES = ("AUTO", "UCB1", "Softmax")


def test_the_default_replay_records_no_steps_and_trajectories_change_no_result():
    problem, _ = random_problem(7)
    policies = [make_policy(n) for n in POLICIES]
    run = run_policy(problem, policies[1], horizon=20, seeds=[0])
    assert run.steps is None and run.arms is None
    with pytest.raises(AnalysisError, match="without per-step records"):
        trajectory_frame(problem, run, split_labels(problem.contexts, "random"))
    plain = run_replay(problem, policies, horizon=20, seeds=[0, 1], split="random")
    results, steps = replay_with_trajectories(problem, policies, horizon=20, seeds=[0, 1], split="random")
    pd.testing.assert_frame_equal(plain, results)
    # a deterministic policy is stored once (seed null: it stands for every seed), a stochastic one per seed
    blocks = steps.groupby("policy", observed=True)["seed"].apply(lambda s: sorted(s.dropna().unique()))
    assert blocks.to_dict() == {"AUTO": [], "UCB1": [], "Softmax": [0, 1]}
    assert len(steps) == (1 + 1 + 2) * len(problem) * 20 and steps["seed"].isna().sum() == 2 * len(problem) * 20


@pytest.mark.parametrize("name", POLICIES)
def test_trajectories_equal_the_reference_step_by_step(name):
    problem, raw = random_problem(7)
    policy = make_policy(name)
    horizon, seeds = 30, [3, 11]
    run = run_policy(problem, policy, horizon=horizon, seeds=seeds, record_steps=True)
    frame = trajectory_frame(problem, run, split_labels(problem.contexts, "random"))
    for s, seed in enumerate(seeds):
        served, selection, arms = reference_replay(problem, policy, horizon=horizon, seed=seed, raw=raw, window=WINDOW)
        block = frame[frame["seed"].isna()] if policy.is_deterministic else frame[frame["seed"] == seed]
        got_arms = block["arm"].astype(str).to_numpy().reshape(len(problem), horizon)
        np.testing.assert_array_equal(got_arms, np.asarray(problem.pools.arms)[arms])
        served_steps = block["served_us"].to_numpy().reshape(len(problem), horizon)
        np.testing.assert_array_equal(np.cumsum(served_steps, axis=1)[:, -1], served)
        np.testing.assert_allclose(block["selection_us"].to_numpy().reshape(len(problem), horizon).sum(axis=1),
                                   selection, rtol=1e-12)


def test_crlt_at_the_horizon_is_the_replays_trlt():
    problem, _ = random_problem(9)
    results, steps = replay_with_trajectories(problem, [make_policy(n) for n in POLICIES], horizon=25, seeds=[0, 1, 2],
                                              split="random")
    last = steps[steps["step"] == 25]
    keys = ["policy", *CONTEXT_COLUMNS]
    for pricing in ("realized", "selection"):
        got = last.groupby(keys, observed=True)[f"crlt_{pricing}"].mean()
        want = results.groupby(keys)[f"trlt_{pricing}"].mean()
        np.testing.assert_allclose(got.to_numpy(), want.reindex(got.index).to_numpy(), rtol=1e-9, atol=1e-12)
    first = steps[steps["step"] == 1]
    np.testing.assert_allclose(first["crlt_realized"], first["served_us"] / first["oracle_us"] - 1)


def test_cli_replay_writes_trajectories_when_asked(tmp_path):
    root = write_sim_dataset(tmp_path / "ds", collectives=("AllReduce",), nodes=(4, 8, 16), sizes=(2**12, 2**20),
                             iters=30)
    out, traj = tmp_path / "r.parquet", tmp_path / "t" / "steps.parquet"
    args = ["analyze", "replay", "--dataset", str(root), "--policies", "AUTO,Softmax", "--seeds", "2",
            "--horizon", "12", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "Trajectories" not in result.output and not traj.exists()
    result = CliRunner().invoke(main, [*args, "--trajectories", str(traj)])
    assert result.exit_code == 0, result.output
    assert f"Trajectories written to {traj}" in result.output
    steps = pd.read_parquet(traj)
    assert len(steps) == (1 + 2) * 6 * 12 and set(steps["step"]) == set(range(1, 13))
    replay = pd.read_parquet(out)
    last = steps[steps["step"] == 12].groupby(["policy", "size_bytes", "nodes"], observed=True)["crlt_realized"].mean()
    want = replay.groupby(["policy", "size_bytes", "nodes"])["trlt_realized"].mean()
    np.testing.assert_allclose(last.to_numpy(), want.reindex(last.index).to_numpy(), rtol=1e-9, atol=1e-12)
