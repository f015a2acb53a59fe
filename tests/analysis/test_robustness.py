"""Splits, largest-scale holdout, labelled mini-sweep and replication: one command per study."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.replay import split_labels
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import AnalysisError

from .simpools import write_sim_dataset

SIZES = tuple(2**k for k in range(10, 31, 2))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_sim_dataset(tmp_path_factory.mktemp("rob-ds"), nodes=(4, 8, 16, 32), sizes=SIZES, iters=30)


def _run(args):
    result = CliRunner().invoke(main, ["analyze", *args])
    assert result.exit_code == 0, result.output
    return result


def test_splits_label_train_and_test_as_the_paper():
    ctx = pd.DataFrame({"collective": ["AllGather", "AllReduce"] * 4, "nodes": [4, 4, 8, 8, 16, 16, 32, 32]})
    assert list(split_labels(ctx, "reverse")["part"]) == ["test"] * 4 + ["train"] * 4
    assert list(split_labels(ctx, "largest")["part"]) == ["train"] * 6 + ["test"] * 2
    held = split_labels(ctx, "loco:AllReduce")
    assert list(held["part"]) == ["train", "test"] * 4 and set(held["fold"]) == {"loco-AllReduce"}
    with pytest.raises(AnalysisError, match="loco:<one of AllGather, AllReduce>"):
        split_labels(ctx, "loco:Broadcast")


def test_splits_command_retunes_per_split_and_writes_tables_36_and_41(dataset, tmp_path):
    _run(["splits", "--dataset", str(dataset), "--out", str(tmp_path), "--splits", "scale,loco:AllGather,random-43",
          "--families", "UCB1,Linear+cost", "--fixed", "AUTO,Linear+cost", "--trials", "3", "--startup-trials", "1", "--seeds", "1", "--horizon", "30"])
    t36 = pd.read_csv(tmp_path / "tables" / "table36.csv")
    assert list(t36["split"]) == ["scale", "loco:AllGather", "random-43"]
    assert {"AUTO", "UCB1", "Linear+cost", "Linear+cost-tuned"} <= set(t36.columns)
    assert t36.loc[0, "n_test"] == 3 * len(SIZES) * 2 and t36.loc[1, "n_test"] == 4 * len(SIZES)
    assert (tmp_path / "loco-AllGather" / "champions.yaml").exists()
    t41 = pd.read_csv(tmp_path / "tables" / "table41.csv")
    assert {"p_mean", "p_above", "UCB1", "Linear+cost-tuned"} <= set(t41.columns)
    assert t41["UCB1"].str.count("/").eq(2).all()


def test_holdout_and_minisweep_score_the_target_contexts(dataset, tmp_path):
    _run(["holdout", "--dataset", str(dataset), "--out", str(tmp_path), "--policies", "AUTO,UCB1,GBM+cost",
          "--seeds", "1", "--horizon", "30"])
    t46 = pd.read_csv(tmp_path / "tables" / "table46.csv")
    assert list(t46["policy"]) == ["AUTO", "UCB1", "GBM+cost"] and (t46["contexts"] == 3 * len(SIZES)).all()
    _run(["minisweep", "--dataset", str(dataset), "--out", str(tmp_path), "--policies", "UCB1,GBM+cost",
          "--every", "4", "--seeds", "1", "--horizon", "30"])
    long = pd.read_csv(tmp_path / "tables" / "table51_long.csv")
    assert sorted(long["offset"].unique()) == [0, 1, 2, 3]
    # the labelled sizes are not scored: 11 sizes, every 4th labelled at offset 0 -> 3 of 11 per scenario
    first = long[(long["offset"] == 0) & (long["policy"] == "UCB1")]
    assert int(first["contexts"].iloc[0]) == 6 * (len(SIZES) - 3)
    report = tmp_path / "report"
    _run(["report", "--dataset", str(dataset), "--out", str(report), "--study", str(tmp_path), "--seeds", "1",
          "--horizon", "30", "--policies", "AUTO,UCB1,GBM+cost"])
    html = (report / "index.html").read_text()
    assert "Table 46" in html and "Table 51" in html and "Pool convention: iteration 0" in html
    summary = pd.read_csv(report / "tables" / "summary.csv")
    assert list(summary["policy"]) == ["AUTO", "UCB1", "GBM+cost"]


def test_minisweep_labels_only_target_cells_with_post_warmup_samples(dataset):
    from ncclbot_sweep.analysis.inputs import load_problem
    from ncclbot_sweep.analysis.study.robustness import minisweep_labels

    problem = load_problem(dataset)
    labels = split_labels(problem.contexts, "scale")
    mask, values = minisweep_labels(problem, labels, every=4, offset=1, samples=1)
    rows = mask.any(axis=1)
    assert (labels["part"].to_numpy()[rows] == "test").all()
    c, k = np.nonzero(mask)
    expected = problem.pools.samples[c, k, problem.pools.wrap[c, k]]
    np.testing.assert_array_equal(values[c, k], expected)


def test_replication_replays_frozen_champions_on_two_fabrics(tmp_path):
    off = write_sim_dataset(tmp_path / "off", "sim-gb200-mnnvl-off", nodes=(4, 8, 16), sizes=SIZES[::2], iters=30)
    on = write_sim_dataset(tmp_path / "on", "sim-gb200-mnnvl-on", nodes=(4, 8, 16), sizes=SIZES[::2], iters=30)
    (tmp_path / "champions.yaml").write_text("policies:\n- UCB1[alpha=0.09;label=UCB1]\n")
    _run(["replication", "--dataset", str(off), "--dataset", str(on), "--out", str(tmp_path / "rep"),
          "--policies", f"AUTO,@{tmp_path / 'champions.yaml'}", "--seeds", "1", "--horizon", "30"])
    t3 = pd.read_csv(tmp_path / "rep" / "tables" / "table3.csv")
    assert list(t3["policy"]) == ["AUTO", "UCB1"]
    for fabric in ("sim-gb200-mnnvl-off", "sim-gb200-mnnvl-on"):
        assert {f"{fabric} realized mean", f"{fabric} realized p99", f"{fabric} realized above"} <= set(t3.columns)
    long = pd.read_csv(tmp_path / "rep" / "tables" / "table3_long.csv")
    assert long.loc[long["policy"] == "UCB1", "p_mean"].notna().all()
