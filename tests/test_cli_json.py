"""Machine-readable output: the shipped-file lists and ``--json`` of ``datasets info`` and ``sim cost-table``.

Every JSON is parsed strictly (a NaN or Infinity token fails the parse), and its numbers are
checked against the text output of the same command or the files it names.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.cli.jsonout import jsonable

REPO = Path(__file__).resolve().parents[1]


def _strict(text: str):
    def refuse(token: str):
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _invoke(*args: str):
    """Run the CLI; ``.stdout`` holds what it printed to stdout alone (warnings go to stderr)."""
    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1; 8.2 keeps stdout apart by itself
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_jsonable_turns_missing_numbers_into_null():
    frame = pd.DataFrame({"a": [1.0, np.nan, np.inf], "b": pd.array([1, None, 3], dtype="Int64"),
                          "c": ["x", None, "z"]})
    value = {"frame": frame, "n": np.int64(3), "f": np.float32(0.5), "nan": float("nan"), "ninf": -math.inf,
             "flag": np.bool_(True), "arr": np.array([1.5, np.nan]), "path": Path("a/b"), "na": pd.NA}
    text = json.dumps(jsonable(value), allow_nan=False)
    assert _strict(text) == {
        "frame": [{"a": 1.0, "b": 1, "c": "x"}, {"a": None, "b": None, "c": None}, {"a": None, "b": 3, "c": "z"}],
        "n": 3, "f": 0.5, "nan": None, "ninf": None, "flag": True, "arr": [1.5, None], "path": "a/b", "na": None}
    with pytest.raises(TypeError, match="cannot write object"):
        jsonable(object())


@pytest.mark.parametrize(("kind", "column"), [("inventory", "fabric"), ("campaign", "kind")])
def test_lists_show_every_shipped_file(kind, column):
    folder = REPO / ("inventories" if kind == "inventory" else "campaigns")
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    rows = _strict(_invoke(kind, "list", "--json").stdout)
    assert [r["name"] for r in rows] == names
    assert all(r["description"] and r[column] for r in rows)
    text = _invoke(kind, "list").stdout.splitlines()
    assert len(text) == 1 + len(names)
    for row, line in zip(rows, text[1:]):
        assert line.startswith(row["name"] + " ") and line.endswith(row["description"])


def test_listed_inventory_names_are_accepted_by_i():
    for row in _strict(_invoke("inventory", "list", "--json").stdout):
        out = _strict(_invoke("inventory", "check", row["name"], "--json").stdout)
        assert out["name"] == row["fabric"] and out["gpus_per_node"] == row["gpus_per_node"]
    kinds = {r["name"]: r["kind"] for r in _strict(_invoke("campaign", "list", "--json").stdout)}
    assert kinds["demo"] == "forced" and kinds["demo-live"] == "live"
    plan = _strict(_invoke("plan", "demo", "-i", "sim-h100", "--json").stdout)
    assert plan["campaign"] == "demo" and plan["kind"] == kinds["demo"]


def test_sim_cost_table_json_matches_the_text():
    args = ("sim", "cost-table", "--collective", "AllGather", "--nodes", "16", "--size", "512MiB")
    data = _strict(_invoke(*args, "--json").stdout)
    text = _invoke(*args).stdout.splitlines()
    assert (data["fabric"], data["collective"], data["nodes"], data["size_bytes"]) == \
        ("sim-h100", "AllGather", 16, 512 << 20)
    assert [a["arm"] for a in data["arms"]] == [line.split()[0] for line in text[1:-1]]
    assert [a["arm"] for a in data["arms"] if a["auto"]] == [data["auto_arm"]]
    assert [a["arm"] for a in data["arms"] if a["best"]] == [data["best_arm"]]
    auto_line = next(line for line in text if "AUTO" in line.split()[3:])
    assert auto_line.split()[0] == data["auto_arm"]
    loss = float(re.search(r"AUTO loss vs best: ([0-9.]+)%", text[-1]).group(1))
    assert loss == pytest.approx(100 * data["auto_loss"], abs=0.05)
    best = min(data["arms"], key=lambda a: a["true_us"])
    assert best["arm"] == data["best_arm"] and data["runner_up_margin"] > 0


def test_datasets_info_json_matches_the_text(tmp_path):
    source = REPO / "tests" / "fixtures" / "real" / "A" / "a3mega-h100-2node-16rank-allreduce.txt"
    dataset = tmp_path / "ds"
    _invoke("ingest", str(source), "-d", str(dataset), "--fabric", "h100")
    data = _strict(_invoke("datasets", "info", "-d", str(dataset), "--json").stdout)
    assert set(data) == {"root", "tables", "sources", "quarantine_reasons", "runs_by_fabric"}
    text = _invoke("datasets", "info", str(dataset)).stdout
    for name, stats in data["tables"].items():
        assert re.search(rf"^  {name} +{stats['rows']} rows in {stats['files']} files$", text, re.M), name
    assert data["tables"]["runs"]["rows"] >= 1 and "h100" in data["runs_by_fabric"]
