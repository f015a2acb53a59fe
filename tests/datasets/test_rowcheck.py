"""Impossible values have one home (``rowcheck``), and every float column of every table goes
through it: a NaN or infinite average bandwidth, a list where a name belongs, a count beyond
its column are quarantined with their line, never stored."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from ncclbot_sweep.ingest import datasets, rowcheck
from ncclbot_sweep.ingest.walk import ingest

GOOD = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "A" / "superbench-nccl_reduce.txt"


def _float_columns(schema: pa.Schema) -> set[str]:
    def floating(typ: pa.DataType) -> bool:
        return pa.types.is_floating(typ) or (pa.types.is_map(typ) and pa.types.is_floating(typ.item_type))

    return {f.name for f in schema if floating(f.type)}


@pytest.mark.parametrize("name", datasets.TABLES)
def test_every_float_column_of_every_table_has_a_rule(name):
    ruled = {column for column, _ in rowcheck.RULES.get(name, ())}
    assert _float_columns(datasets.SCHEMAS[name]) <= ruled
    assert ruled <= set(datasets.SCHEMAS[name].names)


def _quarantine(root: Path, path: Path):
    q = datasets.read_table(root, "quarantine")
    return q[q["source_path"] == str(path)]


def test_an_impossible_average_bandwidth_is_quarantined_with_its_line_and_the_run_kept(tmp_path):
    lines = GOOD.read_text().splitlines(keepends=True)
    avg = next(i for i, line in enumerate(lines) if line.startswith("# Avg bus bandwidth"))
    lines[avg] = "# Avg bus bandwidth    : nan\n"
    text = tmp_path / "nan.txt"
    text.write_text("".join(lines))
    doc = tmp_path / "inf.json"
    doc.write_text('{"version": 3, "config": {"iterations": 2}, "average_bus_bandwidth": {"bandwidth": 1e999}, '
                   '"results": [{"size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1, '
                   '"out_of_place": {"time": 5.0, "algbw": 1, "busbw": 1, "nwrong": 0}}]}')
    root = tmp_path / "ds"
    summary = ingest([text, doc], root)
    assert summary.partial == 2 and not summary.quarantined
    runs = datasets.read_table(root, "runs")
    assert len(runs) == 2 and runs["avg_busbw_gbs"].isna().all()
    assert len(datasets.read_table(root, "iterations")) == 68 + 1
    nan = _quarantine(root, text)
    assert nan["line"].tolist() == [avg + 1]
    assert nan["reason"].iloc[0].startswith("impossible avg_busbw_gbs nan in runs")
    assert _quarantine(root, doc)["reason"].iloc[0].startswith("impossible avg_busbw_gbs inf in runs")


@pytest.mark.parametrize(("spelling", "shown"), [
    ("-nan", "nan"), ("NaN", "nan"), ("-inf", "-inf"), ("Infinity", "inf"), ("1e308", "1e+308"), ("-3.5", "-3.5")])
def test_every_spelling_of_an_impossible_footer_gets_its_quarantine_row(spelling, shown, tmp_path):
    """glibc prints a NaN footer as ``-nan``; other libcs as ``nan`` or ``NaN``; none of it, nor
    a bandwidth no link reaches, may leave the column null without a word."""
    lines = GOOD.read_text().splitlines(keepends=True)
    avg = next(i for i, line in enumerate(lines) if line.startswith("# Avg bus bandwidth"))
    lines[avg] = f"# Avg bus bandwidth    : {spelling} \n"
    path = tmp_path / "footer.txt"
    path.write_text("".join(lines))
    ingest([path], tmp_path / "ds")
    assert datasets.read_table(tmp_path / "ds", "runs")["avg_busbw_gbs"].isna().all()
    q = _quarantine(tmp_path / "ds", path)
    assert q["line"].tolist() == [avg + 1]
    assert q["reason"].tolist() == [f"impossible avg_busbw_gbs {shown} in runs: it must be a finite number of GB/s, "
                                    "0 or more and below 1e+09; left out (null)"]


def test_a_bandwidth_no_measurement_can_print_quarantines_its_row(tmp_path):
    lines = GOOD.read_text().splitlines(keepends=True)
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1048576"])
    tokens = lines[row].split()
    tokens[7] = "1e308"  # the out-of-place bus bandwidth
    lines[row] = " ".join(tokens) + "\n"
    path = tmp_path / "bw.txt"
    path.write_text("".join(lines))
    ingest([path], tmp_path / "ds")
    it = datasets.read_table(tmp_path / "ds", "iterations")
    assert len(it) == 67 and (it["busbw_gbs"] < rowcheck.MAX_GBS).all()
    q = _quarantine(tmp_path / "ds", path)
    assert q["line"].tolist() == [row + 1] and q["reason"].str.startswith("impossible busbw_gbs 1e+308").all()


def test_values_that_do_not_fit_their_column_are_left_out_with_their_line_and_the_rest_kept():
    rows = [{"run_id": "r", "collective": ["AllReduce"], "nodes": 10**30, "size_bytes": 8, "time_us": 5.0, "line": 7},
            {"run_id": "r", "collective": "AllReduce", "nodes": True, "size_bytes": 16, "time_us": 6.0, "line": 8},
            {"run_id": "r", "collective": "AllReduce", "nodes": 2, "size_bytes": 32, "time_us": 7.0, "line": 9}]
    table, issues = rowcheck.fit("iterations", rows)
    assert table.column("size_bytes").to_pylist() == [8, 16, 32]
    assert table.column("collective").to_pylist() == [None, "AllReduce", "AllReduce"]
    assert table.column("nodes").to_pylist() == [None, None, 2]
    assert [(i.line, i.reason.split(" in ")[0]) for i in issues] == [
        (7, "collective ['AllReduce']"), (7, f"nodes {10**30}"), (8, "nodes True")]
    assert all("does not fit the column" in i.reason for i in issues)


def test_a_record_table_keeps_the_row_and_nulls_an_impossible_map_value():
    table = datasets.to_table("contexts", [
        {"fabric": "f", "best_us": 3.0, "steady_us": [("Ring/LL", 3.0), ("Ring/LL128", float("nan"))]},
        {"fabric": "f", "best_us": float("inf"), "steady_us": [("Ring/LL", 4.0)]}])
    kept, issues = rowcheck.split_impossible("contexts", table)
    assert kept.num_rows == 2
    assert kept.column("best_us").to_pylist() == [3.0, None]
    assert kept.column("steady_us").to_pylist() == [None, [("Ring/LL", 4.0)]]
    assert sorted(i.reason.split(" ")[1] for i in issues) == ["best_us", "steady_us"]


def test_an_out_of_range_count_in_a_json_config_is_left_out_not_the_whole_file(tmp_path):
    doc = tmp_path / "odd.json"
    doc.write_text(json.dumps({"version": 3, "config": {"iterations": 2, "warmup_iters": 10**12},
                               "results": [{"size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
                                            "out_of_place": {"time": 5.0, "algbw": 1, "busbw": 1, "nwrong": 0}}]}))
    summary = ingest([doc], tmp_path / "ds")
    assert summary.partial == 1
    assert datasets.read_table(tmp_path / "ds", "runs")["warmup_iters"].isna().all()
    assert "warmup_iters 1000000000000" in _quarantine(tmp_path / "ds", doc)["reason"].iloc[0]
