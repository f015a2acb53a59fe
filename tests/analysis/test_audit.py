"""AUTO audit: error flags, pricing, runner-up margin, gate curve and tail anatomy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncclbot_sweep.analysis.audit import audit_auto, audit_summary, gate_curve, tail_anatomy
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import predictions_from_cost_tables
from ncclbot_sweep.analysis.replay import make_problem


def _problem(spec):
    """spec: {size: ({arm: steady_us}, {arm: predicted_us})}; 4 flat iterations per arm."""
    it, cost = [], []
    for size, (truth, pred) in spec.items():
        base = dict(fabric="sim-a", collective="AllGather", nodes=16, ranks=128, size_bytes=size)
        for arm, value in truth.items():
            it += [base | dict(arm=arm, iteration=i, time_us=value) for i in range(4)]
        cost += [base | dict(arm=arm, predicted_us=value) for arm, value in pred.items()]
    pools = build_pools(pd.DataFrame(it), window=(0, 99), min_arms=2)
    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)))


SPEC = {
    # AUTO right, margin 1.0
    1024: ({"Ring/LL": 10.0, "Ring/Simple": 30.0}, {"Ring/LL": 5.0, "Ring/Simple": 10.0}),
    # AUTO wrong by 50%, margin 0.1
    2048: ({"Ring/LL": 15.0, "Ring/Simple": 10.0}, {"Ring/LL": 10.0, "Ring/Simple": 11.0}),
    # AUTO wrong by 5%, margin 0.2
    4096: ({"Ring/LL128": 21.0, "Ring/Simple": 20.0}, {"Ring/LL128": 10.0, "Ring/Simple": 12.0}),
}


def test_audit_rows():
    audit = audit_auto(_problem(SPEC), horizon=4)
    assert list(audit["error"]) == [False, True, True]
    np.testing.assert_allclose(audit["trlt_selection"], [0.0, 0.5, 0.05])
    np.testing.assert_allclose(audit["trlt_realized"], [0.0, 0.5, 0.05])
    np.testing.assert_allclose(audit["margin"], [1.0, 0.1, 0.2])
    assert list(audit["auto_arm"]) == ["Ring/LL", "Ring/LL", "Ring/LL128"]


def test_summary_and_gate_curve():
    audit = audit_auto(_problem(SPEC), horizon=4)
    summary = audit_summary(audit).set_index("pricing")
    assert summary.loc["selection", "error_rate_pct"] == pytest.approx(200 / 3)
    assert summary.loc["selection", "mean_pct"] == pytest.approx(100 * 0.55 / 3)
    assert summary.loc["selection", "above_0.1"] == 1
    gate = gate_curve(audit, thresholds=[0.0, 0.15, 0.5]).set_index("margin_min")
    np.testing.assert_allclose(gate["kept_pct"], [100.0, 200 / 3, 100 / 3])
    assert gate.loc[0.15, "error_rate_pct"] == 50.0
    assert gate.loc[0.5, "mean_pct"] == 0.0


def test_tail_anatomy_groups_by_auto_and_best_arm():
    spec = dict(SPEC)
    spec[8192] = ({"Ring/LL": 30.0, "Ring/Simple": 10.0}, {"Ring/LL": 10.0, "Ring/Simple": 15.0})
    audit = audit_auto(_problem(spec), horizon=4)
    replay = audit[["fabric", "collective", "nodes", "ranks", "size_bytes"]].assign(
        policy="UCB1", trlt_realized=[0.0, 0.02, 0.01, 0.04])
    tail = tail_anatomy(audit, replay=replay)
    assert len(tail) == 1
    row = tail.iloc[0]
    assert (row["auto_arm"], row["best_arm"], row["n"]) == ("Ring/LL", "Ring/Simple", 2)
    assert row["sizes"] == "2 KiB-8 KiB" and row["margin"] == "0.10-0.50"
    assert row["auto_max_pct"] == pytest.approx(200.0)
    assert row["UCB1_max_pct"] == pytest.approx(4.0)
