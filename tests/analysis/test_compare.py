"""``analyze compare DS_A DS_B``: two simulated GB200 fabrics (MNNVL off and on), matched per context."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.compare import compare_contexts
from ncclbot_sweep.cli import main
from ncclbot_sweep.ingest.datasets import write_rows

from .simpools import sim_frames, write_sim_dataset

SMALL = dict(collectives=("AllReduce", "AllGather"), nodes=(2, 4, 8), sizes=(2**12, 2**18, 2**24), iters=30)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    return (write_sim_dataset(root / "off", "sim-gb200-mnnvl-off", **SMALL),
            write_sim_dataset(root / "on", "sim-gb200-mnnvl-on", **SMALL))


def _run(*args):
    result = CliRunner().invoke(main, ["analyze", "compare", *map(str, args)])
    return result


def test_json_has_one_row_per_matched_context_and_flags_by_the_threshold(pair):
    result = _run(*pair, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["a"]["fabric"], doc["b"]["fabric"]) == ("sim-gb200-mnnvl-off", "sim-gb200-mnnvl-on")
    rows = pd.DataFrame(doc["contexts"])
    summary = doc["summary"]
    assert summary["matched"] == len(rows) == 2 * 3 * 3 and summary["only_a"] == summary["only_b"] == 0
    assert summary["threshold"] == 0.05
    above = ((rows["best_latency_change_pct"].abs() > 5) | (rows["best_busbw_change_pct"].abs() > 5)
             | (rows["auto_loss_change_pp"].abs() > 5))
    assert (rows["flagged"] == above).all() and summary["flagged"] == int(above.sum()) > 0
    np.testing.assert_allclose(rows["best_latency_change_pct"], 100 * (rows["best_us_b"] / rows["best_us_a"] - 1))
    np.testing.assert_allclose(rows["auto_loss_change_pp"], rows["auto_loss_b_pct"] - rows["auto_loss_a_pct"])
    assert summary["auto_arm_changed"] == int((rows["auto_arm_a"] != rows["auto_arm_b"]).sum())
    assert all(bool(w) == f for w, f in zip(rows["why"], rows["flagged"]))
    # MNNVL fuses two nodes into one NVLink domain: the 2-node AllReduce gets faster, never slower beyond noise
    two = rows[(rows["nodes"] == 2) & (rows["collective"] == "AllReduce")]
    assert (two["best_latency_change_pct"] < -5).all()


def test_out_writes_table_figure_and_json(pair, tmp_path):
    result = _run(*pair, "--out", tmp_path, "--threshold", "0.2")
    assert result.exit_code == 0, result.output
    assert "18 contexts matched" in result.output and "Flagged contexts" in result.output
    table = pd.read_parquet(tmp_path / "compare.parquet")
    csv = pd.read_csv(tmp_path / "compare.csv")
    assert len(table) == len(csv) == 18 and list(csv.columns) == list(table.columns)
    assert (tmp_path / "compare.png").stat().st_size > 1000
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["summary"]["threshold"] == 0.2 and doc["summary"]["flagged"] == int(table["flagged"].sum())


def test_a_dataset_against_itself_changes_nothing(pair):
    doc = json.loads(_run(pair[0], pair[0], "--json").output)
    rows = pd.DataFrame(doc["contexts"])
    assert doc["summary"]["flagged"] == 0 and not rows["best_arm_changed"].any() and not rows["auto_arm_changed"].any()
    assert (rows["best_latency_change_pct"] == 0).all() and (rows["auto_loss_change_pp"] == 0).all()


def test_a_dataset_with_two_fabrics_is_a_user_error(pair, tmp_path):
    mixed = write_sim_dataset(tmp_path / "mixed", "sim-gb200-mnnvl-off", **SMALL)
    it, cost = sim_frames("sim-h100", **SMALL)
    write_rows(mixed, "iterations", it.assign(source_sha256="h100"))
    write_rows(mixed, "cost_tables", cost.assign(source_sha256="h100-cost"))
    result = _run(mixed, pair[1])
    assert result.exit_code == 1
    assert "dataset A holds 2 fabrics" in result.output and "its own dataset" in result.output


def test_compare_contexts_matches_without_the_fabric_and_counts_the_unmatched():
    def side(fabric, best_us, auto_arm, loss, sizes=(1024, 2048)):
        return pd.DataFrame({"fabric": fabric, "collective": "AllReduce", "nodes": 2, "ranks": 16,
                             "size_bytes": list(sizes), "best_arm": "Ring/LL", "best_us": best_us,
                             "best_busbw_gbs": [100.0 / b for b in best_us], "auto_arm": auto_arm, "auto_loss": loss})

    a = side("fab-a", [10.0, 10.0], ["Ring/LL", "Tree/LL"], [0.0, 0.20])
    b = side("fab-b", [10.4, 8.0], ["Ring/LL", "Ring/LL"], [0.0, 0.0])
    table = compare_contexts(a, b, threshold=0.05)
    assert list(table["fabric_a"]) == ["fab-a"] * 2 and list(table["fabric_b"]) == ["fab-b"] * 2
    assert table["best_latency_change_pct"].to_numpy() == pytest.approx([4.0, -20.0])
    assert table["best_busbw_change_pct"].to_numpy() == pytest.approx([100 / 1.04 - 100, 25.0])
    assert list(table["flagged"]) == [False, True] and list(table["auto_arm_changed"]) == [False, True]
    assert table["why"].iloc[1] == "best latency -20.0%, best bandwidth +25.0%, AUTO's loss -20.0 pp"
    only_a = compare_contexts(side("fab-a", [1.0, 1.0, 1.0], ["Ring/LL"] * 3, [0.0] * 3, sizes=(1, 2, 3)),
                              side("fab-b", [1.0], ["Ring/LL"], [0.0], sizes=(2,)))
    assert list(only_a["size_bytes"]) == [2]


def test_a_note_about_the_data_is_said_once_per_command_not_once_per_load(tmp_path):
    """Both sides load a dataset with zero-element contexts: the note that they are left out is
    one line of the command's output, not one per load."""
    import subprocess
    import sys

    root = write_sim_dataset(tmp_path / "ds", "sim-h100", collectives=("AllGather",), nodes=(2,), sizes=(0, 2**12),
                             iters=30)
    cli = "from ncclbot_sweep.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", cli, "analyze", "compare", str(root), str(root)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "leaving out" in line]
    assert notes == ["WARNING ncclbot_sweep.analysis.pools: leaving out 1 contexts whose message is 0 elements "
                     "per rank"]
