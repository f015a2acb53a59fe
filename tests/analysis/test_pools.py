"""Pools, steady means, measured-best arms and the transient switch point."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.transient import bic_switch_point, detect_transients
from ncclbot_sweep.errors import AnalysisError

from .synth import synth_frames


def _frame(times_by_arm, **ctx):
    rows = []
    base = dict(fabric="sim-t", collective="AllReduce", nodes=2, ranks=16, size_bytes=4096) | ctx
    for arm, times in times_by_arm.items():
        for i, t in enumerate(times):
            rows.append(base | dict(arm=arm, iteration=i, time_us=t))
    return pd.DataFrame(rows)


def test_steady_mean_uses_the_window_and_best_arm_follows_it():
    # Ring/LL is fastest on average only because of its first iterations' absence in the window.
    ring_ll = [1000.0] * 3 + [10.0] * 7
    tree_ll = [9.0] * 3 + [11.0] * 7
    pools = build_pools(_frame({"Tree/LL": tree_ll, "Ring/LL": ring_ll}), window=(3, 9))
    assert pools.arms == ("Tree/LL", "Ring/LL")  # NCCL scan order, not input order
    np.testing.assert_allclose(pools.steady[0], [11.0, 10.0])
    assert pools.contexts.loc[0, "best_arm"] == "Ring/LL"
    # pools keep the transient, in iteration order, without iteration 0 (the perf binary's warm-up)
    np.testing.assert_array_equal(pools.samples[0, 1, :3], [1000.0, 1000.0, 10.0])
    kept = build_pools(_frame({"Tree/LL": tree_ll, "Ring/LL": ring_ll}), window=(3, 9), keep_warmup=True)
    np.testing.assert_array_equal(kept.samples[0, 1, :4], [1000.0, 1000.0, 1000.0, 10.0])
    np.testing.assert_array_equal(kept.steady, pools.steady)
    assert "dropped" in pools.convention and "kept" in kept.convention


def test_iteration_order_not_row_order_and_auto_rows_skipped():
    df = _frame({"Ring/LL": [5.0, 6.0, 7.0], "Ring/Simple": [1.0, 2.0, 3.0]})
    df = pd.concat([df.iloc[::-1], _frame({"AUTO": [0.5, 0.5]})])
    pools = build_pools(df, window=(0, 9), keep_warmup=True)
    assert pools.arms == ("Ring/LL", "Ring/Simple")
    np.testing.assert_array_equal(pools.samples[0, 0], [5.0, 6.0, 7.0])


def test_in_place_and_wrong_rows_are_dropped():
    df = _frame({"Ring/LL": [5.0, 6.0]})
    df["in_place"] = False
    extra = df.assign(in_place=True, time_us=1.0)
    bad = df.assign(iteration=[2, 3], wrong=[1, 1], time_us=0.1)
    pools = build_pools(pd.concat([df, extra, bad]).assign(wrong=lambda d: d["wrong"].fillna(0)), window=(0, 9),
                        keep_warmup=True)
    np.testing.assert_array_equal(pools.samples[0, 0], [5.0, 6.0])


def test_min_arms_filters_contexts_and_empty_raises():
    df = pd.concat([_frame({"Ring/LL": [9.0, 1.0], "Ring/Simple": [9.0, 2.0]}),
                    _frame({"Ring/LL": [9.0, 1.0]}, size_bytes=8)])
    assert len(build_pools(df, min_arms=2)) == 1
    with pytest.raises(AnalysisError, match="at least 3"):
        build_pools(df, min_arms=3)


def test_bic_switch_point_finds_a_step_and_rejects_a_flat_trace():
    rng = np.random.default_rng(0)
    step = np.r_[np.full(8, 1.5), np.ones(60)] + 0.01 * rng.standard_normal(68)
    sp = bic_switch_point(step)
    assert sp.tau == 8 and sp.two_segments
    assert sp.mean_before == pytest.approx(1.5, abs=0.02)
    flat = 1.0 + 0.01 * rng.standard_normal(68)
    assert not bic_switch_point(flat).two_segments


def test_detect_transients_per_scenario():
    it, _ = synth_frames(collectives=("AllReduce",), nodes=(2, 4), transient=6, iters=40)
    table = detect_transients(build_pools(it))
    assert list(table["nodes"]) == [2, 4]
    assert table["two_segments"].all()
    assert set(table["tau"]) <= {5, 6, 7}
