"""The ``workload_steps`` table: a workload run's step times, with every table's guarantees.

A step folder as a workload job leaves it (``step.json`` of kind workload, ``stdout.txt``,
``workload_steps.csv``, ``exit``) and a loose steps file go through the real ingest: rows
carry the run's environment and repetition, a malformed row or an impossible time is
quarantined with its line while the others are kept, ingesting again adds nothing, a run
again replaces its older rows, and a file too big to read whole is refused unread.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.filekind import WHOLE_READ_LIMIT
from ncclbot_sweep.ingest.datasets import read_table
from ncclbot_sweep.parsers import SourceInfo, detect_format, parse_source
from ncclbot_sweep.paths import StepFiles
from ncclbot_sweep.step_output import step_output_usable

GOOD = """\
# ncclbot-workload-steps v1
source,step,step_time_s,warmup,line,text
megatron,0,1.5,1,3,iteration 1/4 | elapsed time per iteration (ms): 1500.0
megatron,1,0.12,0,4,iteration 2/4 | elapsed time per iteration (ms): 120.0
"""
BAD = GOOD + """\
megatron,2,nan,0,5,iteration 3/4 | elapsed time per iteration (ms): nan
megatron,three,0.1,0,6,garbled
megatron,4,-0.2,0,7,iteration 5/4 | elapsed time per iteration (ms): -200
megatron,5,0.121
megatron,6,0.119,0,9,iteration 7/4 | elapsed time per iteration (ms): 119.0
"""
META = {"campaign": "wl", "fabric": "sim-h100", "kind": "workload", "nodes": 8, "ranks": 64, "policy": "ucb1",
        "repeat": 2, "step_key": "0123456789abcdef"}


def _step(folder: Path, steps: str, *, exit_code: int = 0) -> Path:
    folder.mkdir(parents=True)
    (folder / "step.json").write_text(json.dumps(META))
    (folder / "stdout.txt").write_text("loading\n iteration 1/4 | elapsed time per iteration (ms): 1500.0\n")
    (folder / "workload_steps.csv").write_text(steps)
    (folder / "exit").write_text(f"{exit_code}\n")
    return folder


def _ingest(*paths: Path, dataset: Path) -> str:
    result = CliRunner().invoke(main, ["ingest", *map(str, paths), "-d", str(dataset)])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_parser_keeps_good_rows_and_names_bad_ones():
    source = SourceInfo(path="steps.csv", sha256="00", run_id="r1", meta=META)
    assert detect_format(BAD.encode()) == "workload-steps"
    result = parse_source("workload-steps", BAD.encode(), source)
    rows = result.rows("workload_steps")
    assert [(r["step"], r["warmup"], r["line"]) for r in rows] == [(0, True, 3), (1, False, 4), (2, False, 5),
                                                                    (4, False, 7), (6, False, 9)]
    assert {(r["environment"], r["repetition"], r["campaign"], r["nodes"]) for r in rows} == {("ucb1", 2, "wl", 8)}
    assert rows[1]["stdout_line"] == 4 and rows[1]["text"].endswith("(ms): 120.0")
    assert [(i.line, i.reason) for i in result.issues] == [(6, "workload step left out: step is not an integer"),
                                                           (8, "workload step left out: too few fields")]
    unusable = parse_source("workload-steps", b"step,step_time_s\n0,1.0\n", source)
    assert unusable.unusable and "first line must be '# ncclbot-workload-steps v1'" in unusable.issues[0].reason


def test_ingest_stores_measured_steps_only_quarantines_the_rest_and_is_idempotent(tmp_path):
    step = _step(tmp_path / "run" / "jobs" / "j" / "steps" / "s", BAD)
    output = _ingest(tmp_path / "run", dataset=tmp_path / "ds")
    assert "partly: 1" in output
    stored = read_table(tmp_path / "ds", "workload_steps")
    assert sorted(stored["step"]) == [0, 1, 6] and (stored["step_time_s"] > 0).all()
    assert set(stored["environment"]) == {"ucb1"} and set(stored["fabric"]) == {"sim-h100"}
    quarantine = read_table(tmp_path / "ds", "quarantine").sort_values("line")
    assert list(quarantine["line"]) == [5, 6, 7, 8]
    assert "step_time_s" in quarantine["reason"].iloc[0] and "a finite number above 0" in quarantine["reason"].iloc[0]
    runs = read_table(tmp_path / "ds", "runs")
    assert (runs["kind"].item(), runs["outcome"].item(), runs["policy"].item()) == ("workload", "ok", "ucb1")
    again = _ingest(tmp_path / "run", dataset=tmp_path / "ds")
    assert "already in dataset: 1" in again and len(read_table(tmp_path / "ds", "workload_steps")) == 3
    assert step.is_dir()


def test_a_run_without_step_times_is_a_failed_run_and_a_loose_file_still_ingests(tmp_path):
    folder = _step(tmp_path / "run" / "s", GOOD)
    (folder / "workload_steps.csv").unlink()
    loose = tmp_path / "steps.csv"
    loose.write_text(GOOD)
    _ingest(folder, loose, dataset=tmp_path / "ds")
    runs = read_table(tmp_path / "ds", "runs")
    assert (runs["outcome"].item(), runs["failure"].item()) == ("failed", "exit code 0, but no workload_steps.csv "
                                                                          "with a step time")
    stored = read_table(tmp_path / "ds", "workload_steps")
    assert len(stored) == 2 and stored["environment"].isna().all(), "a loose file has no step.json to name its run"


def test_a_huge_steps_file_is_refused_unread_and_fails_the_run_for_ingest_and_the_runner(tmp_path):
    """workload_steps.csv is read whole within the limit a step's stdout has: past it, it is not
    read, the run fails saying so (ingest), and the runner finds no usable output either."""
    folder = _step(tmp_path / "run" / "jobs" / "j" / "steps" / "s", GOOD)
    with open(folder / "workload_steps.csv", "r+b") as fh:
        fh.truncate(WHOLE_READ_LIMIT + 1)  # sparse: the header, then NUL bytes
    assert not step_output_usable(StepFiles(folder))
    output = _ingest(tmp_path / "run", dataset=tmp_path / "ds")
    why = (f"workload_steps.csv: {WHOLE_READ_LIMIT + 1} bytes, over the 64 MiB that a file parsed whole in memory "
           "may hold: not read (split it, or keep the part to ingest)")
    runs = read_table(tmp_path / "ds", "runs")
    assert runs[["outcome", "failure"]].values.tolist() == [["failed", why]], output
    assert read_table(tmp_path / "ds", "workload_steps").empty
    assert read_table(tmp_path / "ds", "quarantine")["reason"].tolist() == [why]


def test_a_run_again_replaces_its_earlier_step_times(tmp_path):
    folder = _step(tmp_path / "run" / "jobs" / "j" / "steps" / "s", GOOD)
    _ingest(tmp_path / "run", dataset=tmp_path / "ds")
    assert len(read_table(tmp_path / "ds", "workload_steps")) == 2
    (folder / "workload_steps.csv").write_text(GOOD + "megatron,2,0.118,0,5,iteration 3/4\n"
                                                      "megatron,3,0.117,0,6,iteration 4/4\n")
    output = _ingest(tmp_path / "run", dataset=tmp_path / "ds")
    assert output.splitlines()[0].endswith("replaced: 1"), output
    stored = read_table(tmp_path / "ds", "workload_steps")
    assert sorted(stored["step"]) == [0, 1, 2, 3] and len(read_table(tmp_path / "ds", "runs")) == 1
