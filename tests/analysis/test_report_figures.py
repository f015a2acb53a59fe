"""Report figures on small fixed data: the data behind each PNG, its axes, labels and stamps."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from ncclbot_sweep.analysis import figures
from ncclbot_sweep.analysis.audit import audit_auto
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import predictions_from_cost_tables
from ncclbot_sweep.analysis.replay import make_problem

matplotlib.use("Agg")

# (nodes, size) -> ({arm: steady_us}, {arm: predicted_us}); AUTO errs at (2, 4096) and (4, 1024).
SPEC = {
    (2, 1024): ({"Ring/LL": 10.0, "Ring/Simple": 30.0, "Tree/LL": 12.0},
                {"Ring/LL": 5.0, "Ring/Simple": 10.0, "Tree/LL": 6.0}),
    (2, 4096): ({"Ring/LL": 40.0, "Ring/Simple": 20.0, "Tree/LL": 25.0},
                {"Ring/LL": 8.0, "Ring/Simple": 11.0, "Tree/LL": 9.0}),
    (4, 1024): ({"Ring/LL": 14.0, "Ring/Simple": 35.0, "Tree/LL": 11.0},
                {"Ring/LL": 6.0, "Ring/Simple": 12.0, "Tree/LL": 7.0}),
    (4, 4096): ({"Ring/LL": 50.0, "Ring/Simple": 24.0, "Tree/LL": 30.0},
                {"Ring/LL": 14.0, "Ring/Simple": 11.0, "Tree/LL": 13.0}),
}


def _problem(fabric: str = "sim-a", *, synthetic: bool = True):
    """The SPEC contexts on ``fabric``; ``synthetic`` is what the rows say (as ``runs.synthetic`` would)."""
    it, cost = [], []
    for (nodes, size), (truth, pred) in SPEC.items():
        base = dict(fabric=fabric, collective="AllReduce", nodes=nodes, ranks=8 * nodes, size_bytes=size)
        for arm, value in truth.items():
            it += [base | dict(arm=arm, iteration=i, time_us=value, synthetic=synthetic) for i in range(4)]
        cost += [base | dict(arm=arm, predicted_us=value) for arm, value in pred.items()]
    pools = build_pools(pd.DataFrame(it), window=(0, 99), min_arms=2)
    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)))


def test_arm_curves_mark_the_audits_auto_and_best():
    problem = _problem()
    audit = audit_auto(problem, horizon=4)
    curves = figures.arm_curves(problem.pools, audit)
    assert len(curves) == 12
    marked = curves[curves["auto"]].set_index(["nodes", "size_bytes"])["arm"]
    expected = audit.set_index(["nodes", "size_bytes"])["auto_arm"]
    assert marked.sort_index().to_dict() == expected.sort_index().to_dict()
    best = curves[curves["best"]].set_index(["nodes", "size_bytes"])["arm"].sort_index().to_dict()
    assert best == {(2, 1024): "Ring/LL", (2, 4096): "Ring/Simple", (4, 1024): "Tree/LL", (4, 4096): "Ring/Simple"}
    # one AUTO and one best mark per context; AUTO errs on two of four
    assert curves.groupby(["nodes", "size_bytes"])[["auto", "best"]].sum().eq(1).all().all()
    assert int((curves["auto"] != curves["best"]).sum()) == 4
    # nccl-tests' busbw: AllReduce on 16 ranks, 1 KiB in 10 us -> 0.1024 GB/s algbw x 2*15/16
    row = curves[(curves["nodes"] == 2) & (curves["size_bytes"] == 1024) & (curves["arm"] == "Ring/LL")].iloc[0]
    assert row["busbw_gbs"] == pytest.approx(1024 / 10e3 * 2 * 15 / 16)


def test_plot_arm_curves_axes_marks_and_csv(tmp_path, kept_figures):
    problem = _problem()
    audit = audit_auto(problem, horizon=4)
    curves = figures.arm_curves(problem.pools, audit)
    paths = figures.plot_arm_curves(curves, tmp_path)
    assert [p.name for p in paths] == ["arms_sim-a_AllReduce_2n.png", "arms_sim-a_AllReduce_4n.png"]
    assert imread(paths[0]).shape[0] > 100
    data = pd.read_csv(paths[0].with_suffix(".csv"))
    assert set(data["nodes"]) == {2} and len(data) == 6
    fig = kept_figures[0]
    bw, lat = fig.axes
    assert bw.get_xscale() == "log" and lat.get_yscale() == "log"
    assert "bus bandwidth (GB/s)" in bw.get_ylabel() and "latency (us)" in lat.get_ylabel()
    assert "message size" in bw.get_xlabel()
    assert any("synthetic" in t.get_text() for t in fig.texts)
    labels = [t.get_text() for t in lat.get_legend().get_texts()]
    assert {"Ring/LL", "Ring/Simple", "Tree/LL", "AUTO's pick", "measured best"} <= set(labels)
    auto_marks = [c for c in lat.collections if c.get_label() == "AUTO's pick"][0].get_offsets()
    expected = audit[audit["nodes"] == 2].sort_values("size_bytes")["auto_us"].to_numpy()
    np.testing.assert_allclose(np.asarray(auto_marks)[:, 1], expected)


def test_error_map_cells_name_auto_and_best(tmp_path, kept_figures):
    audit = audit_auto(_problem(), horizon=4)
    emap = figures.error_map(audit)
    assert emap.set_index(["nodes", "size_bytes"])["loss_pct"].round(6).to_dict() == {
        (2, 1024): 0.0, (2, 4096): 100.0, (4, 1024): pytest.approx(100 * 3 / 11, abs=1e-5), (4, 4096): 0.0}
    (path,) = figures.plot_error_maps(emap, tmp_path)
    assert path.name == "errmap_sim-a_AllReduce.png" and path.with_suffix(".csv").is_file()
    ax = kept_figures[0].axes[0]
    texts = {t.get_text() for t in ax.texts}
    # The best arm first, then AUTO's arm and how much slower it is: read as a sentence, not an inequality.
    assert "Ring/Simple is best;\nRing/LL is 100% slower" in texts and "Tree/LL is best;\nRing/LL is 27% slower" in texts
    assert not any(">" in text for text in texts)
    assert "Ring/Simple" in texts
    # Sizes run down the page (one row each, the report's size labels), node counts across.
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1 KiB", "4 KiB"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2 nodes", "4 nodes"]
    assert ax.get_ylabel() == "message size (nccl-tests size)"
    image = ax.images[0].get_array()  # [size, nodes]
    assert image[1, 0] == pytest.approx(100.0) and image[1, 1] == pytest.approx(0.0)


def test_cost_vs_measured_has_the_diagonal_and_no_stamp_on_real_fabrics(tmp_path, kept_figures):
    problem = _problem("h100-spx", synthetic=False)
    frame = figures.cost_vs_measured(problem.pools, problem.predicted)
    assert len(frame) == 12
    row = frame[(frame["nodes"] == 4) & (frame["size_bytes"] == 4096) & (frame["arm"] == "Tree/LL")].iloc[0]
    assert (row["predicted_us"], row["measured_us"]) == (13.0, 30.0)
    (path,) = figures.plot_cost_vs_measured(frame, tmp_path)
    assert path.name == "costmodel_h100-spx.png"
    assert len(pd.read_csv(path.with_suffix(".csv"))) == 12
    fig = kept_figures[0]
    ax = fig.axes[0]
    diagonal = [line for line in ax.get_lines() if line.get_label() == "predicted = measured"][0]
    x, y = diagonal.get_data()
    np.testing.assert_allclose(x, y)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert not any("synthetic" in t.get_text() for t in fig.texts)


def test_survival_curves_end_at_the_last_non_zero_value_and_state_the_zero_share():
    ctx = pd.DataFrame({"policy": ["P"] * 6 + ["Q"] * 4 + ["R"] * 4,
                        "trlt_realized": [0.0, 0.0, 0.01, 0.05, 0.05, 0.2,  # P: two at zero, largest 20%
                                          0.0, 0.0, 0.0, 0.0,  # Q: always the best arm
                                          -0.01, 0.0, 1e-17, 0.3]})  # R: one below zero, 1e-17 is rounding
    curves = figures.survival_curves(ctx, n_boot=50)
    p = curves[curves["policy"] == "P"]
    assert p["zero_share"].iloc[0] == pytest.approx(2 / 6) and p["negative_share"].iloc[0] == 0
    assert list(p["x_pct"].iloc[1:]) == pytest.approx([1.0, 5.0, 20.0])  # a point at each distinct positive value
    # starts at the share above zero, ends at the largest TRLT with the share just before it (1 of 6), never 0
    assert list(p["survival"]) == pytest.approx([4 / 6, 3 / 6, 1 / 6, 1 / 6])
    assert (p["survival"] > 0).all() and (p["lo"] <= p["survival"]).all() and (p["hi"] >= p["survival"]).all()
    q = curves[curves["policy"] == "Q"]
    assert len(q) == 1 and q["x_pct"].isna().all() and q["zero_share"].iloc[0] == 1.0
    r = curves[curves["policy"] == "R"]
    assert r["zero_share"].iloc[0] == 0.5 and r["negative_share"].iloc[0] == 0.25
    assert r["x_pct"].iloc[-1] == pytest.approx(30.0) and r["survival"].iloc[-1] == 0.25


def test_plot_survival_draws_no_floor_and_names_the_zero_share(tmp_path, kept_figures):
    ctx = pd.DataFrame({"policy": ["P"] * 6 + ["Q"] * 2,
                        "trlt_realized": [0.0, 0.0, 0.01, 0.05, 0.05, 0.2, 0.0, 0.0]})
    path = figures.plot_survival(figures.survival_curves(ctx, n_boot=20), tmp_path / "survival.png", threshold_pct=10)
    assert len(pd.read_csv(path.with_suffix(".csv"))) == 5
    ax = kept_figures[0].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["P (33% at 0)", "Q (100% at 0), none above 0", "10% threshold"]
    x, y = ax.get_lines()[0].get_data()
    assert x[-1] == pytest.approx(20.0) and y[-1] == pytest.approx(1 / 6) and min(y) == pytest.approx(1 / 6)
    assert ax.get_ylim()[0] == pytest.approx(1 / 12)  # the axis stops below the last value, no 1/1000 floor
    assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_xlabel() == "realized TRLT (%)"


def test_learning_curves_end_at_the_table_1_mean(tmp_path, kept_figures):
    from ncclbot_sweep.analysis.policies import make_policy
    from ncclbot_sweep.analysis.replay import replay_with_trajectories
    from ncclbot_sweep.analysis.report.dynamics import learning_curves, plot_learning_curves
    from ncclbot_sweep.analysis.summary import summarize

    problem = _problem()
    replay, steps = replay_with_trajectories(problem, [make_policy("AUTO"), make_policy("Random")], horizon=6,
                                             seeds=[0, 1, 2])
    curves = learning_curves(steps)
    assert list(curves["policy"].unique()) == ["AUTO", "Random"] and list(curves["step"].unique()) == list(range(1, 7))
    last = curves[curves["step"] == 6].set_index("policy")["mean_pct"]
    table = summarize(replay).set_index("policy")["realized_mean_pct"]
    assert last.to_dict() == pytest.approx(table.to_dict())
    assert (curves["contexts"] == 2).all()  # the scale split tests the 4-node contexts
    assert (curves["lo_pct"] <= curves["mean_pct"]).all() and (curves["hi_pct"] >= curves["mean_pct"]).all()
    path = plot_learning_curves(curves, tmp_path / "learning_curves.png", synthetic=True)
    assert len(pd.read_csv(path.with_suffix(".csv"))) == 12
    ax = kept_figures[0].axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["AUTO", "Random"]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), curves[curves["policy"] == "AUTO"]["mean_pct"])
    assert "step t" in ax.get_xlabel() and "CRLT(t) (%)" in ax.get_ylabel()


def test_transient_curves_give_each_arms_ratio_to_steady_per_iteration(tmp_path, kept_figures):
    from ncclbot_sweep.analysis.report.dynamics import plot_transients, transient_curves

    # iteration 0 (dropped) is the warm-up; 1 and 2 are slow; steady from 3 on at 10 and 20 us
    slow = {0: 100.0, 1: 3.0, 2: 2.0}
    rows = [dict(fabric="sim-a", collective="AllReduce", nodes=2, ranks=16, size_bytes=size, arm=arm, iteration=i,
                 time_us=base * slow.get(i, 1.0), synthetic=True)
            for size in (1024, 2048) for arm, base in (("Ring/LL", 10.0), ("Tree/LL", 20.0)) for i in range(12)]
    pools = build_pools(pd.DataFrame(rows), window=(3, 11), min_arms=2)
    frame = transient_curves(pools, first=5)
    ring = frame[frame["arm"] == "Ring/LL"].set_index("iteration")
    assert list(ring.index) == [1, 2, 3, 4, 5]  # pool positions 0.. are iterations 1.. with the warm-up dropped
    assert list(ring["median"]) == pytest.approx([3.0, 2.0, 1.0, 1.0, 1.0])
    assert (ring["contexts"] == 2).all()
    (path,) = plot_transients(frame, tmp_path, window_start=3)
    assert path.name == "transient_sim-a.png" and len(pd.read_csv(path.with_suffix(".csv"))) == 10
    ax = kept_figures[0].axes[0]
    assert ax.get_ylabel() == "latency / steady mean (ratio)" and "iteration" in ax.get_xlabel()
    assert "steady window starts" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("synthetic" in t.get_text() for t in kept_figures[0].texts)


@pytest.mark.parametrize("fabric, synthetic", [("sim-a", False), ("h100-lab", True)])
def test_the_stamp_follows_the_data_not_the_fabric_name(fabric, synthetic, tmp_path, kept_figures):
    problem = _problem(fabric, synthetic=synthetic)
    audit = audit_auto(problem, horizon=4)
    figures.plot_arm_curves(figures.arm_curves(problem.pools, audit), tmp_path)
    figures.plot_error_maps(figures.error_map(audit), tmp_path)
    figures.plot_cost_vs_measured(figures.cost_vs_measured(problem.pools, problem.predicted), tmp_path)
    assert len(kept_figures) == 4
    for fig in kept_figures:
        assert any("synthetic" in t.get_text() for t in fig.texts) == synthetic
    assert set(pd.read_csv(tmp_path / f"errmap_{fabric}_AllReduce.csv")["synthetic"]) == {synthetic}


def test_every_size_axis_prints_binary_units(tmp_path, kept_figures):
    problem = _problem()
    audit = audit_auto(problem, horizon=4)
    curves = figures.arm_curves(problem.pools, audit)
    figures.plot_arm_curves(curves.assign(size_bytes=curves["size_bytes"] * 4096), tmp_path)
    for ax in kept_figures[0].axes:
        ax.figure.canvas.draw()
        shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert shown and all(re.fullmatch(r"\d+ (B|KiB|MiB|GiB|TiB)", t) for t in shown), shown
    assert [figures.size_label(v) for v in (512, 4096, 16 << 20, 2 << 30)] == ["512 B", "4 KiB", "16 MiB", "2 GiB"]
