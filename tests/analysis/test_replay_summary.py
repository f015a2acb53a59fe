"""Replay pricing, splits and the Table-1 summary on small hand-made pools."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncclbot_sweep.analysis import make_policy, run_replay, summarize
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import predictions_from_cost_tables
from ncclbot_sweep.analysis.replay import make_problem, run_policy, split_labels
from ncclbot_sweep.analysis.summary import per_scenario
from ncclbot_sweep.errors import AnalysisError


def _problem(nodes=(2,)):
    """Ring/LL is predicted best but measured 20% slower than Ring/Simple; Ring/LL's first sample is 10x."""
    it, cost = [], []
    for n in nodes:
        base = dict(fabric="sim-s", collective="AllReduce", nodes=n, ranks=8 * n, size_bytes=1 << 20)
        ll = [100.0] + [12.0] * 9
        simple = [10.0] * 10
        it += [base | dict(arm="Ring/LL", iteration=i, time_us=v) for i, v in enumerate(ll, start=1)]
        it += [base | dict(arm="Ring/Simple", iteration=i, time_us=v) for i, v in enumerate(simple, start=1)]
        cost += [base | dict(arm="Ring/LL", predicted_us=8.0), base | dict(arm="Ring/Simple", predicted_us=9.0)]
    pools = build_pools(pd.DataFrame(it), window=(2, 10))
    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)))


def test_auto_pricing_realized_and_selection():
    run = run_policy(_problem(), make_policy("AUTO"), horizon=10, seeds=[0])
    # AUTO plays Ring/LL: served 100 + 9*12 = 208 against the oracle's 100
    assert run.trlt_realized[0, 0] == pytest.approx(208 / 100 - 1)
    assert run.trlt_selection[0, 0] == pytest.approx(0.2)


def test_pools_shorter_than_the_horizon_wrap_their_steady_part():
    run = run_policy(_problem(), make_policy("AUTO"), horizon=25, seeds=[0])
    # the 10x first sample is served once; pulls 11..25 cycle over the steady iterations 2..10
    assert run.served_us[0, 0] == pytest.approx(208 + 15 * 12)


def test_splits():
    problem = _problem(nodes=(1, 2, 4, 8))
    labels = split_labels(problem.contexts, "scale")
    assert list(labels["part"]) == ["train", "train", "test", "test"]
    loco = split_labels(problem.contexts, "loco")
    assert set(loco["fold"]) == {"AllReduce"} and (loco["part"] == "test").all()
    rnd = split_labels(problem.contexts, "random", seed=1)
    assert (rnd["part"] == "test").sum() == 2
    with pytest.raises(AnalysisError, match="split must be one of"):
        split_labels(problem.contexts, "nope")


def test_summary_table_one():
    problem = _problem(nodes=(1, 2, 4, 8))
    results = run_replay(problem, [make_policy("AUTO"), make_policy("Random")], horizon=10, seeds=range(3))
    assert len(results) == 2 * 4 * 3 and set(results["seed"]) == {0, 1, 2}
    table = summarize(results).set_index("policy")
    assert table.loc["AUTO", "contexts"] == 2
    assert table.loc["AUTO", "realized_mean_pct"] == pytest.approx(108.0)
    assert table.loc["AUTO", "realized_above"] == 2 and table.loc["AUTO", "realized_sem_pct"] == pytest.approx(0.0)
    scen = per_scenario(results)
    assert list(scen[scen["policy"] == "AUTO"]["nodes"]) == [4, 8]
    assert np.isfinite(table.loc["Random", "selection_mean_pct"])


def test_summary_behaviour_columns_and_p99_interval():
    problem = _problem(nodes=(1, 2, 4, 8))
    results = run_replay(problem, [make_policy("AUTO"), make_policy("UCB1")], horizon=10, seeds=range(2))
    table = summarize(results).set_index("policy")
    assert table.loc["AUTO", "auto_share_pct"] == 100.0 and table.loc["AUTO", "leaves_auto_pct"] == 0.0
    assert table.loc["AUTO", "best_last20_pct"] == 0.0  # AUTO never plays the measured-best Ring/Simple
    assert table.loc["UCB1", "distinct_arms"] >= 1
    assert table.loc["AUTO", "realized_p99_lo"] <= table.loc["AUTO", "realized_p99_pct"] <= table.loc["AUTO", "realized_p99_hi"]


def test_survival_curves_count_contexts_above():
    from ncclbot_sweep.analysis.figures import survival_curves

    ctx = pd.DataFrame({"policy": "P", "trlt_realized": [0.0, 0.05, 0.2, 1.0]})
    curves = survival_curves(ctx, n_boot=50)
    at = lambda x: curves.loc[(curves["x_pct"] - x).abs().idxmin(), "survival"]  # noqa: E731
    assert at(1.0) == 0.75 and at(10.0) == 0.5 and at(50.0) == 0.25
    assert (curves["lo"] <= curves["survival"] + 1e-12).all() and (curves["hi"] >= curves["survival"] - 1e-12).all()
