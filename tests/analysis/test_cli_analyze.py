"""``ncclbot-sweep analyze`` on a dataset written through ``datasets.write_rows``."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main

from .simpools import write_sim_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    return write_sim_dataset(root, nodes=(4, 8, 16), sizes=tuple(2**k for k in range(12, 31, 3)), iters=40)


def test_audit_prints_the_tables_and_writes_csv(dataset, tmp_path):
    result = CliRunner().invoke(main, ["analyze", "audit", "--dataset", str(dataset), "--horizon", "40",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "AUTO against the measured-best arm" in result.output and "Tail anatomy" in result.output
    contexts = pd.read_csv(tmp_path / "audit_contexts.csv")
    assert len(contexts) == 3 * 3 * 7 and contexts["error"].any()


def test_replay_writes_one_row_per_policy_context_seed(dataset, tmp_path):
    out = tmp_path / "r.parquet"
    result = CliRunner().invoke(main, ["analyze", "replay", "--dataset", str(dataset), "--policies", "AUTO,UCB1,Softmax",
                                       "--seeds", "3", "--horizon", "40", "--split", "loco", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert len(frame) == 3 * 63 * 3
    assert set(frame["fold"]) == {"AllGather", "AllReduce", "ReduceScatter"}
    assert re.search(r"^\| UCB1 +\|", result.output, re.M), result.output


def test_report_writes_html_figures_and_table_copies(dataset, tmp_path):
    result = CliRunner().invoke(main, ["analyze", "report", "--dataset", str(dataset), "--out", str(tmp_path),
                                       "--seeds", "2", "--horizon", "40", "--policies", "AUTO,UCB1,Random"])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "index.html").read_text()
    for part in ("Summary (Table 1)", "survival.png", "gate.png", "Tail anatomy", "Synthetic data",
                 "No live runs (dataset has no live, stock or overhead runs)"):
        assert part in html
    for name in ("summary", "scenarios", "audit_summary", "audit_gate", "tail_anatomy", "transients", "tests"):
        assert (tmp_path / "tables" / f"{name}.csv").exists()
        assert re.search(r"^\| \S", (tmp_path / "tables" / f"{name}.md").read_text(), re.M), name
    assert (tmp_path / "survival.png").stat().st_size > 1000
    arms = sorted((tmp_path / "figures").glob("arms_*.png"))
    maps = sorted((tmp_path / "figures").glob("errmap_*.png"))
    assert len(arms) == 3 * 3 and len(maps) == 3
    assert (tmp_path / "figures" / "costmodel_sim-h100.png").is_file()
    for png in [*arms, *maps, tmp_path / "survival.png", tmp_path / "gate.png"]:
        assert png.with_suffix(".csv").is_file()
        assert f'src="{png.relative_to(tmp_path).as_posix()}"' in html


def test_missing_dataset_is_a_user_error(tmp_path):
    result = CliRunner().invoke(main, ["analyze", "audit", "--dataset", str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert "dataset folder does not exist" in result.output and "hint:" in result.output


def test_unknown_policy_is_a_user_error(dataset, tmp_path):
    result = CliRunner().invoke(main, ["analyze", "replay", "--dataset", str(dataset), "--policies", "AUTO,Nope",
                                       "--out", str(tmp_path / "x.parquet")])
    assert result.exit_code == 1 and "policy must be one of" in result.output


def _strict_json(text: str):
    return json.loads(text, parse_constant=lambda token: pytest.fail(f"non-standard JSON token {token}"))


def test_pools_json_matches_the_problem(dataset):
    result = CliRunner().invoke(main, ["analyze", "pools", "-d", str(dataset), "--json"])
    assert result.exit_code == 0, result.output
    data = _strict_json(result.output)
    assert set(data) == {"convention", "contexts", "arms", "pool_depth", "mean_offered_arms", "transients"}
    assert data["contexts"] == 3 * 3 * 7 and data["pool_depth"] == 39 and "Ring/Simple" in data["arms"]
    assert 1 <= data["mean_offered_arms"] <= len(data["arms"])
    assert len(data["transients"]) == 3 * 3 and {"collective", "nodes", "tau"} <= set(data["transients"][0])


def test_audit_json_holds_the_csv_tables(dataset, tmp_path):
    result = CliRunner().invoke(main, ["analyze", "audit", "-d", str(dataset), "--horizon", "40", "-o", str(tmp_path),
                                       "--json"])
    assert result.exit_code == 0, result.output
    data = _strict_json(result.output)
    assert set(data) == {"convention", "summary", "gate", "tail", "contexts"}
    for name in ("summary", "gate", "contexts"):
        csv = pd.read_csv(tmp_path / f"audit_{name}.csv")
        frame = pd.DataFrame(data[name])
        assert list(frame.columns) == list(csv.columns) and len(frame) == len(csv)
        numeric = csv.select_dtypes("number").columns
        pd.testing.assert_frame_equal(frame[numeric].astype(float), csv[numeric].astype(float), rtol=1e-9)
    # Context by context the margin is the CSV's, and null wherever the CSV has no finite one.
    margins = pd.read_csv(tmp_path / "audit_contexts.csv")["margin"]
    assert [row["margin"] for row in data["contexts"]] == [None if not pd.notna(m) or m == float("inf") else m
                                                          for m in margins]


def test_replay_json_summarises_the_written_results(dataset, tmp_path):
    out = tmp_path / "r.parquet"
    result = CliRunner().invoke(main, ["analyze", "replay", "-d", str(dataset), "--policies", "AUTO,UCB1", "--seeds", "2",
                                       "--horizon", "40", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = _strict_json(result.output)
    assert data["out"] == str(out) and out.is_file()
    assert [row["policy"] for row in data["summary"]] == ["AUTO", "UCB1"]
    assert data["summary"][0]["auto_share_pct"] == 100.0
    frame = pd.read_parquet(out)
    test = frame[(frame["policy"] == "UCB1") & (frame["part"] == "test")]
    assert data["summary"][1]["contexts"] == len(test.drop_duplicates(["collective", "nodes", "size_bytes"]))


def test_an_unknown_fabric_gets_a_did_you_mean(dataset):
    result = CliRunner().invoke(main, ["analyze", "pools", "-d", str(dataset), "--fabric", "sim-h10"])
    assert result.exit_code == 1
    assert "no iterations for fabric 'sim-h10' (did you mean 'sim-h100'?)" in result.output
    assert "fabrics in this dataset: sim-h100\n" in result.output


def test_report_on_a_given_replay_without_trajectories_says_why_there_are_no_learning_curves(dataset, tmp_path):
    replay = tmp_path / "r.parquet"
    args = ["-d", str(dataset), "--policies", "AUTO,UCB1", "--seeds", "2", "--horizon", "20"]
    assert CliRunner().invoke(main, ["analyze", "replay", *args, "-o", str(replay)]).exit_code == 0
    result = CliRunner().invoke(main, ["analyze", "report", *args, "-o", str(tmp_path / "rep"),
                                       "--replay", str(replay)])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Not drawn: replay results were passed in without per-step trajectories" in html
    assert not (tmp_path / "rep" / "learning_curves.png").exists()
    assert (tmp_path / "rep" / "survival.png").exists()


def test_report_draws_learning_curves_from_a_given_replay_and_its_trajectories(dataset, tmp_path):
    replay, steps = tmp_path / "r.parquet", tmp_path / "steps.parquet"
    args = ["-d", str(dataset), "--policies", "AUTO,UCB1", "--seeds", "2", "--horizon", "20"]
    done = CliRunner().invoke(main, ["analyze", "replay", *args, "-o", str(replay), "--trajectories", str(steps)])
    assert done.exit_code == 0, done.output
    result = CliRunner().invoke(main, ["analyze", "report", *args, "-o", str(tmp_path / "rep"),
                                       "--replay", str(replay), "--trajectories", str(steps)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rep" / "learning_curves.png").exists()
    lone = CliRunner().invoke(main, ["analyze", "report", *args, "-o", str(tmp_path / "x"), "--trajectories", str(steps)])
    assert lone.exit_code == 2 and "--trajectories goes with --replay" in lone.output


def test_split_seed_chooses_the_random_split_where_the_readme_says(dataset, tmp_path):
    """README: ``random`` (50/50, ``--split-seed``): the seed changes which contexts are tested."""
    def test_contexts(seed: int) -> set:
        out = tmp_path / f"r{seed}.parquet"
        result = CliRunner().invoke(main, ["analyze", "replay", "--dataset", str(dataset), "--policies", "AUTO",
                                           "--seeds", "1", "--horizon", "10", "--split", "random",
                                           "--split-seed", str(seed), "--out", str(out)])
        assert result.exit_code == 0, result.output
        frame = pd.read_parquet(out)
        return set(map(tuple, frame.loc[frame["part"] == "test", ["collective", "nodes", "size_bytes"]].to_numpy()))

    assert test_contexts(1) != test_contexts(2) and test_contexts(1) == test_contexts(1)
    for command in ("replay", "tune", "ablate", "workload"):
        assert "--split-seed" in CliRunner().invoke(main, ["analyze", command, "--help"]).output, command


def test_report_on_an_empty_dataset_is_an_error_that_leaves_nothing_behind(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    ingested = CliRunner().invoke(main, ["ingest", str(empty), "-d", str(tmp_path / "ds")])
    assert ingested.exit_code == 1 and "found nothing to ingest" in ingested.output  # the dataset exists, empty
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(main, ["analyze", "report", "-d", str(tmp_path / "ds"), "-o",
                                       str(tmp_path / "new" / "report")])
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"Error: {tmp_path / 'ds'}: dataset has no iterations"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
