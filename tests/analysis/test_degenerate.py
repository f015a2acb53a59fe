"""Degenerate contexts: the left-out ones are listed with their reason, the kept ones flagged."""

from __future__ import annotations

import pandas as pd

from ncclbot_sweep.analysis.degenerate import FLAGS, context_flags, flag_summary, flag_table
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import predictions_from_cost_tables
from ncclbot_sweep.analysis.replay import make_problem

WINDOW = (3, 10)  # spans 8 iterations


def _problem():
    """One context of each kind, on one fabric and node count (size names the kind)."""
    spec = {  # size -> {arm: last iteration}, predictions
        1024: ({"Ring/LL": 12, "Ring/Simple": 12, "Tree/LL": 12}, {"Ring/LL": 5, "Ring/Simple": 6, "Tree/LL": 7}),
        2048: ({"Ring/LL": 12}, {"Ring/LL": 5}),  # one measured arm
        4096: ({"Ring/LL": 12, "Tree/LL": 12}, {}),  # no prediction
        8192: ({"Ring/LL": 12, "Tree/LL": 12}, {"Ring/LL": 5, "Tree/LL": 50}),  # the filter keeps one arm
        16384: ({"Ring/LL": 12, "Tree/LL": 5}, {"Ring/LL": 5, "Tree/LL": 6}),  # Tree/LL: 3 of 8 window samples
        32768: ({"Ring/LL": 12, "Tree/LL": 2}, {"Ring/LL": 5, "Tree/LL": 6}),  # Tree/LL: none in the window
    }
    base = dict(fabric="sim-d", collective="AllReduce", nodes=2, ranks=16)
    rows, cost = [], []
    for size, (arms, pred) in spec.items():
        for arm, last in arms.items():
            rows += [base | dict(size_bytes=size, count=size // 4, arm=arm, iteration=i, time_us=10.0 + i % 3)
                     for i in range(last + 1)]
        cost += [base | dict(size_bytes=size, arm=arm, predicted_us=float(v)) for arm, v in pred.items()]
    rows += [base | dict(size_bytes=0, count=0, arm=a, iteration=i, time_us=5.0) for a in ("Ring/LL", "Tree/LL")
             for i in range(12)]  # 0 elements per rank
    pools = build_pools(pd.DataFrame(rows), window=WINDOW, min_arms=2)
    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)), rho_max=2.0)


def test_left_out_contexts_are_listed_with_their_reason():
    problem = _problem()
    assert sorted(problem.contexts["size_bytes"]) == [1024, 8192, 16384, 32768]
    excluded = problem.pools.excluded.set_index("size_bytes")["flag"].to_dict()
    assert excluded == {0: "zero_elements", 2048: "one_measured_arm", 4096: "no_prediction"}
    convention = problem.pools.convention
    assert "1 zero-element contexts left out" in convention and "1 single-arm contexts left out" in convention
    assert "1 unpredicted contexts left out" in convention


def test_kept_contexts_carry_their_flags_and_the_arms_concerned():
    flags = context_flags(_problem()).set_index("size_bytes")
    assert flags["flags"].to_dict() == {1024: "", 8192: "one_offered_arm", 16384: "short_window",
                                        32768: "no_steady_samples"}
    assert flags.loc[16384, "flag_note"] == "short_window: Tree/LL"
    assert flags.loc[8192, "flag_note"] == "one_offered_arm: Ring/LL"


def test_flag_table_and_summary_cover_left_out_and_kept():
    table = flag_table(_problem())
    assert list(table["status"]) == ["left out"] * 3 + ["kept"] * 3
    assert table.set_index("flag")["size_bytes"].to_dict() == {
        "zero_elements": 0, "one_measured_arm": 2048, "no_prediction": 4096, "one_offered_arm": 8192,
        "short_window": 16384, "no_steady_samples": 32768}
    summary = flag_summary(table)
    assert list(summary["flag"]) == list(FLAGS)  # every flag once, in report order
    assert (summary["contexts"] == 1).all()
    assert summary.set_index("flag").loc["short_window", "examples"] == "AllReduce 2n 16384 B"
