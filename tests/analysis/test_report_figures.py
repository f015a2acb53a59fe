"""Report figures on small fixed data: the data behind each PNG, its axes, labels and stamps."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from ncclbot_sweep.analysis.audit import audit_auto
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import predictions_from_cost_tables
from ncclbot_sweep.analysis.replay import make_problem
from ncclbot_sweep.analysis.report import figures

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


@pytest.fixture
def closed_figures(monkeypatch):
    """Keep each figure open until the test has looked at it: pyplot's close is deferred to teardown."""
    import matplotlib.pyplot as plt

    close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)


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


def test_plot_arm_curves_axes_marks_and_csv(tmp_path, closed_figures):
    problem = _problem()
    audit = audit_auto(problem, horizon=4)
    curves = figures.arm_curves(problem.pools, audit)
    paths = figures.plot_arm_curves(curves, tmp_path)
    assert [p.name for p in paths] == ["arms_sim-a_AllReduce_2n.png", "arms_sim-a_AllReduce_4n.png"]
    assert imread(paths[0]).shape[0] > 100
    data = pd.read_csv(paths[0].with_suffix(".csv"))
    assert set(data["nodes"]) == {2} and len(data) == 6
    fig = closed_figures[0]
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


def test_error_map_cells_name_auto_and_best(tmp_path, closed_figures):
    audit = audit_auto(_problem(), horizon=4)
    emap = figures.error_map(audit)
    assert emap.set_index(["nodes", "size_bytes"])["loss_pct"].round(6).to_dict() == {
        (2, 1024): 0.0, (2, 4096): 100.0, (4, 1024): pytest.approx(100 * 3 / 11, abs=1e-5), (4, 4096): 0.0}
    (path,) = figures.plot_error_maps(emap, tmp_path)
    assert path.name == "errmap_sim-a_AllReduce.png" and path.with_suffix(".csv").is_file()
    ax = closed_figures[0].axes[0]
    texts = {t.get_text() for t in ax.texts}
    assert "Ring/LL\n>Ring/Simple\n100%" in texts and "Ring/LL\n>Tree/LL\n27%" in texts
    assert "Ring\nSimple" in texts
    assert [t.get_text() for t in ax.get_yticklabels()] == ["2", "4"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1KiB", "4KiB"]
    assert ax.get_ylabel() == "nodes"
    image = ax.images[0].get_array()
    assert image[0, 1] == pytest.approx(100.0) and image[1, 1] == pytest.approx(0.0)


def test_cost_vs_measured_has_the_diagonal_and_no_stamp_on_real_fabrics(tmp_path, closed_figures):
    problem = _problem("h100-spx", synthetic=False)
    frame = figures.cost_vs_measured(problem.pools, problem.predicted)
    assert len(frame) == 12
    row = frame[(frame["nodes"] == 4) & (frame["size_bytes"] == 4096) & (frame["arm"] == "Tree/LL")].iloc[0]
    assert (row["predicted_us"], row["measured_us"]) == (13.0, 30.0)
    (path,) = figures.plot_cost_vs_measured(frame, tmp_path)
    assert path.name == "costmodel_h100-spx.png"
    assert len(pd.read_csv(path.with_suffix(".csv"))) == 12
    fig = closed_figures[0]
    ax = fig.axes[0]
    diagonal = [line for line in ax.get_lines() if line.get_label() == "predicted = measured"][0]
    x, y = diagonal.get_data()
    np.testing.assert_allclose(x, y)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert not any("synthetic" in t.get_text() for t in fig.texts)


@pytest.mark.parametrize("fabric, synthetic", [("sim-a", False), ("h100-lab", True)])
def test_the_stamp_follows_the_data_not_the_fabric_name(fabric, synthetic, tmp_path, closed_figures):
    problem = _problem(fabric, synthetic=synthetic)
    audit = audit_auto(problem, horizon=4)
    figures.plot_arm_curves(figures.arm_curves(problem.pools, audit), tmp_path)
    figures.plot_error_maps(figures.error_map(audit), tmp_path)
    figures.plot_cost_vs_measured(figures.cost_vs_measured(problem.pools, problem.predicted), tmp_path)
    assert len(closed_figures) == 4
    for fig in closed_figures:
        assert any("synthetic" in t.get_text() for t in fig.texts) == synthetic
    assert set(pd.read_csv(tmp_path / f"errmap_{fabric}_AllReduce.csv")["synthetic"]) == {synthetic}
