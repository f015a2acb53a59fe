"""Ingest never stops for one bad input and never keeps an impossible value: corrupt,
special and hostile files, impossible numbers, concurrent ingests, a killed ingest's leftovers,
and ``ingest --strict``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
GOOD = REAL / "A" / "superbench-nccl_reduce.txt"  # 68 rows, all ingested

HEADER = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 "
          "agg iters: 1 validation: 1 graph: 0\n#\n"
          "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")


def _row(size: int, time: str, in_time: str = "10.00") -> str:
    return f"{size:12d}  {max(size, 0) // 4:12d}     float     sum      -1  {time:>7s}    0.01    0.01      0  {in_time:>7s}    0.01    0.01      0\n"


def _sources(root: Path):
    return datasets.read_table(root, "sources").set_index("source_path")


def _quarantine(root: Path, path: Path):
    q = datasets.read_table(root, "quarantine")
    return q[q["source_path"] == str(path)]


@pytest.fixture
def hostile(tmp_path):
    """A folder of inputs that once crashed ingest, beside one good file."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "good.txt").write_bytes(GOOD.read_bytes())
    (d / "deep.json").write_text('{"results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (d / "truncated.txt.gz").write_bytes(gzip.compress(GOOD.read_bytes())[:-400])
    (d / "corrupt.json.gz").write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(300))
    (d / "wrongtypes.json").write_text(json.dumps({"version": 3, "config": "no", "results": [{"size": "big",
                                                  "out_of_place": [1, 2], "in_place": None}], "devices": 7}))
    (d / "inf.json").write_text('{"version": 3, "nccl_version": 22903, "config": {"iterations": 2}, '
                                '"results": [{"size": 1e999, "count": 2, "type": "float", "redop": "sum", '
                                '"root": -1, "out_of_place": {"time": 1e999, "algbw": 1, "busbw": 1, "nwrong": 0}}]}')
    (d / "cr-only.txt").write_bytes(GOOD.read_bytes().replace(b"\n", b"\r"))
    (d / "bom-fragment.txt").write_bytes(b"\xef\xbb\xbf" + _row(8, "5.00").encode() + _row(16, "5.10").encode())
    os.mkfifo(d / "fifo")
    return d


def test_a_batch_of_hostile_inputs_ingests_the_good_ones_and_accounts_for_every_file(hostile, tmp_path):
    root = tmp_path / "ds"
    summary = ingest([hostile, "/dev/zero"], root)  # /dev/zero named explicitly: never read
    sources = _sources(root)
    assert summary.files == 10 == len(sources)
    status = sources["status"].to_dict()
    assert status[str(hostile / "good.txt")] == "ingested"
    assert status[str(hostile / "cr-only.txt")] == "ingested"
    assert status[str(hostile / "bom-fragment.txt")] == "ingested"
    for name in ("deep.json", "corrupt.json.gz", "fifo"):
        assert status[str(hostile / name)] == "quarantined", name
    assert status["/dev/zero"] == "quarantined"
    assert "nested too deeply" in _quarantine(root, hostile / "deep.json")["reason"].iloc[0]
    # Wrong types: the field is named in quarantine, and nothing of the wrong shape becomes a row.
    assert status[str(hostile / "wrongtypes.json")] in ("partial", "quarantined")
    reasons = " ".join(_quarantine(root, hostile / "wrongtypes.json")["reason"])
    assert "'config' is str" in reasons
    assert "FIFO" in _quarantine(root, hostile / "fifo")["reason"].iloc[0]
    assert "character device" in _quarantine(root, Path("/dev/zero"))["reason"].iloc[0]
    # A truncated gzip keeps what came before the cut, and says where it broke.
    assert status[str(hostile / "truncated.txt.gz")] in ("partial", "quarantined")
    assert _quarantine(root, hostile / "truncated.txt.gz")["reason"].str.contains("truncated or corrupt").any()
    it = datasets.read_table(root, "iterations")
    per_file = it.groupby("source_path").size().to_dict()
    assert per_file[str(hostile / "good.txt")] == per_file[str(hostile / "cr-only.txt")] == 68
    assert per_file[str(hostile / "bom-fragment.txt")] == 4
    # 1e999 is infinite: never a row, always a quarantine line.
    assert str(hostile / "inf.json") not in per_file
    assert str(hostile / "wrongtypes.json") not in per_file
    assert _quarantine(root, hostile / "inf.json")["reason"].str.contains("impossible").any()
    again = ingest([hostile, "/dev/zero"], root)
    assert again.skipped == 10 and not again.rows


def test_impossible_values_are_quarantined_with_their_line_never_stored(tmp_path):
    text = HEADER + _row(8, "5.00") + _row(16, "nan") + _row(32, "-3.00") + _row(64, "0.00") + _row(-128, "5.00")
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(text)
    summary = ingest([path], tmp_path / "ds")
    it = datasets.read_table(tmp_path / "ds", "iterations")
    assert (it["time_us"] > 0).all() and (it["size_bytes"] >= 0).all()
    assert len(it) == 2 + 3  # size 8 both halves, the in-place half of 16, 32 and 64
    q = _quarantine(tmp_path / "ds", path).sort_values("line")
    first_row = 5  # the four header lines come first
    # one issue per broken half-row: the negative size breaks both halves of its line
    assert list(q["line"]) == [first_row + 1, first_row + 2, first_row + 3, first_row + 4, first_row + 4]
    assert q["reason"].str.startswith("impossible").all()
    assert "size_bytes -128" in q["reason"].iloc[-1]
    assert summary.partial == 1 and _sources(tmp_path / "ds")["status"].iloc[0] == "partial"


def test_rows_of_impossible_trace_durations_and_latencies_are_quarantined(tmp_path):
    trace = tmp_path / "ncclbot-00000000000000ab-r0.csv"
    trace.write_text("# ncclbot-trace v1\nkind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,"
                     "auto_arm,policy,latency_us,reward,round,sync_us\n"
                     "pull,1,00000000000000ab,0,8,1,AllReduce,1024,1,Ring/LL,Ring/LL,ucb1,12.5,1,1,\n"
                     "pull,2,00000000000000ab,0,8,1,AllReduce,1024,2,Ring/LL,Ring/LL,ucb1,inf,1,1,\n"
                     "pull,3,00000000000000ab,0,8,1,AllReduce,1024,3,Ring/LL,Ring/LL,ucb1,-4,1,1,\n")
    ingest([trace], tmp_path / "ds")
    ev = datasets.read_table(tmp_path / "ds", "live_events")
    assert list(ev["latency_us"]) == [12.5]
    assert len(_quarantine(tmp_path / "ds", trace)) == 2


def _without_root_file_access() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    bounding set, so even root meets file permissions (CI runs as root)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_an_unreadable_file_is_quarantined_and_the_rest_ingested(tmp_path):
    (tmp_path / "in").mkdir()
    locked = tmp_path / "in" / "locked.txt"
    locked.write_bytes(GOOD.read_bytes())
    locked.chmod(0)
    (tmp_path / "in" / "good.txt").write_bytes(GOOD.read_bytes())
    code = _INGEST + "print(*(f'{path}: {reason}' for path, reason in s.quarantined), sep='\\n')\n"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ds"), str(tmp_path / "in")],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=_without_root_file_access if os.geteuid() == 0 else None)
    assert done.returncode == 0, done.stderr
    counts, *reasons = done.stdout.splitlines()
    assert counts.split() == ["1", "0", "1"]
    assert len(reasons) == 1 and reasons[0].startswith(f"{locked}: ") and "permissions" in reasons[0]


def test_a_source_whose_files_exist_but_not_its_ledger_entry_is_ingested_not_quarantined(tmp_path):
    """A kill between the data files' renames and the ledger's leaves rows but no ledger entry."""
    ingest([GOOD], tmp_path / "ds")
    for ledger in (tmp_path / "ds" / "sources").rglob(datasets.data_file_name("*")):
        ledger.unlink()
    summary = ingest([GOOD], tmp_path / "ds")
    assert summary.ingested == 1 and not summary.quarantined
    assert _sources(tmp_path / "ds")["status"].tolist() == ["ingested"]
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68


def test_leftover_temporary_files_of_a_killed_ingest_are_removed(tmp_path):
    ingest([GOOD], tmp_path / "ds")
    folder = next((tmp_path / "ds" / "iterations").rglob(datasets.data_file_name("*"))).parent
    leftover = folder / f".{datasets.data_file_name('ab' * 32)}.0123.tmp"
    leftover.write_bytes(b"PAR1 half written")
    ingest([REAL / "A" / "superbench-nccl_broadcast.txt"], tmp_path / "ds")
    assert not leftover.exists()
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68 + 68


_INGEST = """
import sys
from ncclbot_sweep.ingest.walk import ingest
s = ingest(sys.argv[2:], sys.argv[1])
print(s.ingested, s.skipped, len(s.quarantined))
"""


def test_concurrent_ingests_into_one_dataset_take_turns(tmp_path):
    inputs = sorted(str(p) for p in (REAL / "A").glob("superbench-*.txt")) + [str(REAL / "B")]
    root = tmp_path / "ds"
    procs = [subprocess.Popen([sys.executable, "-c", _INGEST, str(root), *inputs], stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    ingested = sorted(int(o[0]) for o in outs)
    assert ingested[0] == ingested[1] == 0 and ingested[2] > 0  # one did the work, two found it done
    assert all(int(o[2]) == 0 for o in outs)
    sources = datasets.read_table(root, "sources")
    assert len(sources) == sources["source_sha256"].nunique() and "quarantined" not in set(sources["status"])
    assert not list(root.rglob("*.tmp"))


def test_cli_strict_exits_1_when_anything_was_quarantined(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text(HEADER + _row(8, "5.00") + _row(16, "nan"))
    runner = CliRunner()
    ok = runner.invoke(main, ["ingest", str(GOOD), "--dataset", str(tmp_path / "ds"), "--strict"])
    assert ok.exit_code == 0, ok.output
    res = runner.invoke(main, ["ingest", str(bad), "--dataset", str(tmp_path / "ds"), "--strict"])
    assert res.exit_code == 1
    assert res.output.splitlines()[-1].startswith("Error: --strict: 0 input(s) quarantined and 1 partly")
    lax = runner.invoke(main, ["ingest", str(bad), "--dataset", str(tmp_path / "ds2")])
    assert lax.exit_code == 0


def test_cli_unwritable_dataset_is_an_error_line_not_a_traceback(tmp_path):
    target = tmp_path / "file-not-folder"
    target.write_text("x")
    res = CliRunner().invoke(main, ["ingest", str(GOOD), "--dataset", str(target / "ds")])
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: {target / 'ds'}: cannot write the dataset")


def _step_folder(folder: Path, **meta_changes) -> Path:
    """A finished step folder (step.json, stdout, exit 0) with ``meta_changes`` in its step.json."""
    folder.mkdir(parents=True)
    meta = {"campaign": "c", "step_key": folder.name, "fabric": "sim-h100", "kind": "forced",
            "collective": "Reduce", "binary": "reduce_perf", "nodes": 1, "gpus_per_node": 8, "ranks": 8,
            "arm": "Ring/LL", "timeout_s": 600, "env": {"NCCL_ALGO": "Ring"}}
    (folder / "step.json").write_text(json.dumps(meta | meta_changes, indent=2) + "\n")
    (folder / "stdout.txt").write_bytes(GOOD.read_bytes())
    (folder / "exit").write_text("0\n")
    return folder


_STEP_JSON_CASES = {
    "fabric-list": ({"fabric": ["sim-h100", "x"]}, "fabric: must be text"),
    "arm-dict": ({"arm": {"algo": "Ring"}}, "arm: must be text"),
    "nodes-huge": ({"nodes": 10**30}, "nodes: 1000000000000000000000000000000 is out of range"),
    "nodes-text": ({"nodes": "many"}, 'nodes: must be a whole number (true, 2.0 and "2" are not), not "many"'),
    "nodes-bool": ({"nodes": True}, "nodes: must be a whole number"),
    "ranks-negative": ({"ranks": -1}, "ranks: must be at least 1, not -1"),
    "timeout-huge": ({"timeout_s": 1e20}, "timeout_s: must be a whole number"),
    "env-number": ({"env": {"NCCL_ALGO": 7}}, "env.NCCL_ALGO: must be text, not 7"),
}


@pytest.mark.parametrize("case", sorted(_STEP_JSON_CASES))
def test_a_step_json_of_the_wrong_shape_quarantines_the_step_naming_the_field_and_its_line(case, tmp_path, caplog):
    change, reason = _STEP_JSON_CASES[case]
    step = _step_folder(tmp_path / "c" / "jobs" / "j" / "steps" / case, **change)
    field = reason.split(":")[0].split(".")[-1]  # the innermost key: its line is the one named
    line = next(i for i, text in enumerate((step / "step.json").read_text().splitlines(), 1) if f'"{field}"' in text)
    summary = ingest([tmp_path / "c"], tmp_path / "ds")
    assert [path for path, _ in summary.quarantined] == [str(step)] and not summary.rows.get("runs")
    q = _quarantine(tmp_path / "ds", step)
    assert q["line"].tolist() == [line]
    assert q["reason"].iloc[0].startswith(f"step.json: {reason}")
    assert not [r for r in caplog.records if r.exc_info], "a step.json problem is an input's, not a parser bug"


@pytest.mark.parametrize("kind", ["directory", "device"])
def test_a_step_whose_exit_is_not_a_file_is_quarantined_not_left_as_unfinished(kind, tmp_path):
    step = _step_folder(tmp_path / "c" / "jobs" / "j" / "steps" / kind)
    (step / "exit").unlink()
    if kind == "directory":
        (step / "exit").mkdir()
    else:
        (step / "exit").symlink_to("/dev/zero")
    summary = ingest([tmp_path / "c"], tmp_path / "ds")
    assert not summary.unfinished and [path for path, _ in summary.quarantined] == [str(step)]
    expected = "directory" if kind == "directory" else "character device"
    assert _quarantine(tmp_path / "ds", step)["reason"].iloc[0].startswith(f"exit is a {expected}, not the file")


def test_the_runner_reads_an_exit_marker_that_is_a_device_or_a_fifo_as_a_failure_without_reading_it(tmp_path):
    from ncclbot_sweep.outcomes import read_exit_marker

    os.mkfifo(tmp_path / "fifo")  # opening it would block for ever
    (tmp_path / "zero").symlink_to("/dev/zero")  # reading it would never end
    (tmp_path / "dir").mkdir()
    (tmp_path / "big").write_text("99999999999999999999\n")
    names = ("fifo", "zero", "dir", "big", "none")
    assert [read_exit_marker(tmp_path / name) for name in names] == [-1, -1, -1, -1, None]


_INF_PROFILER = ('[\n{"name": "AllReduce", "cat": "COLL", "ph": "b", "id": 0, "pid": 1, "tid": 1, "ts": Infinity, '
                 '"args": {"Count": 8, "Datatype": "ncclFloat32", "Algorithm": "RING", "Protocol": "LL", "Rank": 0, '
                 '"SeqNum": 1e300}},\n'
                 '{"name": "AllReduce", "cat": "COLL", "ph": "e", "id": 0, "pid": 1, "tid": 1, "ts": Infinity},\n'
                 '{"name": "AllReduce", "cat": "COLL", "ph": "b", "id": 1, "pid": 1, "tid": 1, "ts": 1e300, '
                 '"args": {"Count": 8, "Datatype": "ncclFloat32", "Algorithm": "RING", "Protocol": "LL", "Rank": 0}},\n'
                 '{"name": "AllReduce", "cat": "COLL", "ph": "e", "id": 1, "pid": 1, "tid": 1, "ts": 1e300},\n'
                 '{"name": "AllReduce", "cat": "COLL", "ph": "b", "id": 2, "pid": 1, "tid": 1, "ts": 10.0, '
                 '"args": {"Count": 8, "Datatype": "ncclFloat32", "Algorithm": "RING", "Protocol": "LL", "Rank": 0}},\n'
                 '{"name": "AllReduce", "cat": "COLL", "ph": "e", "id": 2, "pid": 1, "tid": 1, "ts": 12.5}\n]\n')
_INF_KINETO = json.dumps({"traceEvents": [
    {"name": "record_param_comms", "cat": "cpu_op", "ts": 1.0, "args": {
        "Collective name": "allreduce", "dtype": "Float", "In msg nelems": "inf", "Out msg nelems": 1e999,
        "Group size": float("nan")}},
    {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cat": "kernel", "ts": 2.0, "dur": 5.0, "args": {}}]})
_HUGE_INSPECTOR = json.dumps({"header": {"id": "c1", "rank": 0, "n_ranks": 8, "nnodes": 10**30},
                              "coll_perf": {"coll": "AllReduce", "coll_sn": 1, "coll_msg_size_bytes": 1024,
                                            "coll_exec_time_us": 12.0}})


@pytest.mark.parametrize(("name", "text", "kept", "reason"), [
    ("profiler-trace.json", _INF_PROFILER, 1, "impossible latency_us nan"),
    ("kineto-trace.json", _INF_KINETO, 1, None),
    ("inspector.json", _HUGE_INSPECTOR, 1, "nodes 1000000000000000000000000000000 in live_events does not fit"),
])
def test_infinite_and_huge_numbers_in_traces_never_raise(name, text, kept, reason, tmp_path, caplog):
    path = tmp_path / name
    path.write_text(text)
    summary = ingest([path], tmp_path / "ds")
    assert not summary.quarantined and summary.ingested == 1
    table = "workload" if name.startswith("kineto") else "live_events"
    assert len(datasets.read_table(tmp_path / "ds", table)) == kept
    if reason is not None:
        assert _quarantine(tmp_path / "ds", path)["reason"].str.startswith(reason).any()
    assert not [r for r in caplog.records if r.exc_info], "no traceback: a corrupt number is an input's problem"


def test_cli_dangling_and_circular_links_are_quarantined_and_the_good_file_ingested(tmp_path):
    good = tmp_path / "good.txt"
    good.write_bytes(GOOD.read_bytes())
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    args = [str(good), str(tmp_path / "dangling"), str(tmp_path / "loop")]
    res = CliRunner().invoke(main, ["ingest", *args, "--dataset", str(tmp_path / "ds")])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == "files: 3  ingested: 1 (partly: 0)  already in dataset: 0  quarantined: 2"
    assert f"quarantined: {tmp_path / 'dangling'}: not a regular file (broken link): not read" in res.output
    assert f"quarantined: {tmp_path / 'loop'}: not a regular file (circular link): not read" in res.output
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68


def test_cli_ingest_of_an_empty_folder_is_an_error_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(main, ["ingest", str(tmp_path / "empty"), "--dataset", str(tmp_path / "ds")])
    assert res.exit_code == 1
    assert res.output == f"Error: found nothing to ingest in {tmp_path / 'empty'}\n"


def test_cli_ingest_names_the_input_that_held_nothing_and_ingests_the_others(tmp_path):
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "campaign.yaml").write_text("name: x\n")  # bookkeeping only: nothing to ingest
    res = CliRunner().invoke(main, ["ingest", str(GOOD), str(tmp_path / "plan"), "--dataset", str(tmp_path / "ds")])
    assert res.exit_code == 1
    assert res.output.splitlines()[0].startswith("files: 1  ingested: 1")
    assert res.output.splitlines()[-1] == (f"Error: found nothing to ingest in {tmp_path / 'plan'} "
                                           "(1 campaign bookkeeping files ignored)")
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68


def _non_utf8(folder: Path, name: bytes) -> Path:
    """A path whose last name is ``name``, bytes that are not UTF-8 (as Python lists it)."""
    return Path(os.fsdecode(os.path.join(os.fsencode(folder), name)))


def test_names_that_are_not_utf8_are_quarantined_escaped_and_the_rest_ingested(tmp_path, caplog):
    d = tmp_path / "in"
    d.mkdir()
    (d / "good.txt").write_bytes(GOOD.read_bytes())
    _non_utf8(d, b"bad\xff.txt").write_bytes(GOOD.read_bytes())
    inner = _non_utf8(d, b"dir\xfe")
    inner.mkdir()
    (inner / "x.txt").write_bytes(GOOD.read_bytes())
    root = tmp_path / "ds"
    summary = ingest([d], root)
    escaped = {f"{d}/bad\\xff.txt", f"{d}/dir\\xfe/x.txt"}
    assert summary.ingested == 1 and {path for path, _ in summary.quarantined} == escaped
    status = _sources(root)["status"].to_dict()
    assert status == {str(d / "good.txt"): "ingested", **{path: "quarantined" for path in escaped}}
    q = datasets.read_table(root, "quarantine")
    assert set(q["reason"]) == {"the path is not valid UTF-8: not read (rename it to ingest it)"}
    assert len(datasets.read_table(root, "iterations")) == 68
    assert not [r for r in caplog.records if r.exc_info]
    again = ingest([d], root)
    assert again.skipped == 3 and not again.quarantined
    res = CliRunner().invoke(main, ["ingest", str(d), "--dataset", str(tmp_path / "ds2")])
    assert res.exit_code == 0 and f"quarantined: {d}/bad\\xff.txt: the path is not valid UTF-8" in res.output


_PEAK_RSS = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-c", "import sys\\nfrom ncclbot_sweep.ingest.walk import ingest\\n"
                       "ingest(sys.argv[2:], sys.argv[1])", *sys.argv[1:]], capture_output=True, text=True)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def _peak_rss_mb(*args: Path) -> int:
    """Peak RSS (MB) of one ingest in a process of its own (measured from a fresh parent, so no
    earlier child of the test run counts)."""
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS, *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    code, peak = done.stdout.split()
    assert code == "0", done.stderr
    return int(peak)


def test_a_table_followed_by_a_huge_line_is_read_in_bounded_memory(tmp_path):
    """A 256 MiB line (a sparse file: NUL bytes, no newline) after a valid table: the rows are
    kept and the line is one quarantine row; memory does not follow the line (1.5 GB before)."""
    path = tmp_path / "reduce_perf.txt"
    path.write_bytes(GOOD.read_bytes())
    table_lines = GOOD.read_bytes().count(b"\n")
    with open(path, "r+b") as fh:
        fh.truncate(256 << 20)
    assert _peak_rss_mb(tmp_path / "ds", path) < 400
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68
    q = _quarantine(tmp_path / "ds", path)
    assert q["line"].tolist() == [table_lines + 1]
    assert q["reason"].iloc[0] == (f"line of {(256 << 20) - len(GOOD.read_bytes())} bytes, longer than the 1048576 "
                                   "bytes a line may hold: not read")


def test_a_huge_step_stdout_is_refused_unread_in_bounded_memory(tmp_path):
    step = _step_folder(tmp_path / "c" / "jobs" / "j" / "steps" / "s")
    with open(step / "stdout.txt", "r+b") as fh:
        fh.truncate(256 << 20)  # 4.3 GB peak before, at 2 GiB
    assert _peak_rss_mb(tmp_path / "ds", tmp_path / "c") < 400
    why = (f"stdout.txt: {256 << 20} bytes, over the 64 MiB that a file parsed whole in memory may hold: not read "
           "(split it, or keep the part to ingest)")
    runs = datasets.read_table(tmp_path / "ds", "runs")
    assert runs[["outcome", "failure"]].values.tolist() == [["failed", why]]
    assert _quarantine(tmp_path / "ds", step)["reason"].tolist() == [why]


def test_a_compressed_document_too_big_to_parse_whole_is_refused(tmp_path, caplog):
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (65 << 20) + b"]}", compresslevel=1))
    summary = ingest([path], tmp_path / "ds")
    (_, reason), = summary.quarantined
    size, rest = reason.split(" ", 1)
    assert int(size) > 64 << 20 and path.stat().st_size < 1 << 20  # counted as it is decompressed
    assert rest == "bytes, over the 64 MiB that a file parsed whole in memory may hold: not read " \
                   "(split it, or keep the part to ingest)"
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("field", ["size", "count", "root"])
def test_a_json_integer_beyond_64_bits_is_a_clean_quarantine_row_without_a_traceback(field, tmp_path, caplog):
    """nccl-tests' real -J output (INDEX row 19) with one integer of 65 bits: that value is left
    out with a one-line reason (an OverflowError traceback was logged before), the rest is read."""
    doc = json.loads((REAL / "A" / "gpusyslab-nt2.19.7-allreduce-t4-2gpu-J-output.json").read_text())
    doc["results"][0][field] = 2**64
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    summary = ingest([path], tmp_path / "ds")
    assert summary.partial == 1 and not summary.quarantined
    assert not [r for r in caplog.records if r.exc_info]
    column = {"size": "size_bytes"}.get(field, field)
    width = "int64" if field != "root" else "int32"
    reasons = _quarantine(tmp_path / "ds", path)["reason"].tolist()
    assert reasons[0] == f"{column} {2**64} in iterations does not fit the column ({width}): left out"
    kept = len(datasets.read_table(tmp_path / "ds", "iterations"))
    assert kept == (0 if field == "size" else 100)  # a row without its size is no measurement


def test_integers_beyond_their_columns_in_a_text_header_are_clean_quarantine_rows(tmp_path, caplog):
    text = GOOD.read_text().replace("iters: 20", f"iters: {2**64}", 1).replace("Rank  7 Pid", f"Rank {2**64} Pid", 1)
    path = tmp_path / "reduce_perf.txt"
    path.write_text(text)
    summary = ingest([path], tmp_path / "ds")
    assert summary.partial == 1 and not [r for r in caplog.records if r.exc_info]
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68
    reasons = _quarantine(tmp_path / "ds", path)["reason"].tolist()
    assert f"iters {2**64} in runs does not fit the column (int32): left out" in reasons
    assert f"ranks {2**64 + 1} in runs does not fit the column (int32): left out" in reasons


def test_a_file_appended_to_and_ingested_again_keeps_only_its_newest_content(tmp_path, caplog):
    """A log that grows between ingests: each ingest replaces the path's older rows (it was kept
    as several runs, 4 runs and 34,922 rows where the final file held 12,668)."""
    parts = [GOOD.read_bytes(), (REAL / "A" / "superbench-nccl_broadcast.txt").read_bytes(),
             (REAL / "A" / "superbench-nccl_allgather.txt").read_bytes()]
    path = tmp_path / "nccl-tests.out"
    root = tmp_path / "ds"
    caplog.set_level("INFO", logger="ncclbot_sweep.ingest.walk")
    for n in range(1, len(parts) + 1):
        path.write_bytes(b"".join(parts[:n]))
        summary = ingest([path], root)
        assert summary.replaced == (n > 1)
    fresh = tmp_path / "fresh"
    ingest([path], fresh)
    for table in ("runs", "iterations", "sources"):
        assert len(datasets.read_table(root, table)) == len(datasets.read_table(fresh, table)), table
    assert len(datasets.read_table(root, "runs")) == 3 and len(datasets.read_table(root, "iterations")) == 3 * 68
    assert datasets.read_table(root, "sources")["source_sha256"].tolist() == \
        datasets.read_table(fresh, "sources")["source_sha256"].tolist()
    assert f"{path}: replaced 1 older version(s) of this path in the dataset" in caplog.messages
    again = ingest([path], root)
    assert again.skipped == 1 and again.replaced == 0


def test_a_step_run_again_replaces_its_earlier_run_and_the_cli_says_so(tmp_path):
    step = _step_folder(tmp_path / "c" / "jobs" / "j" / "steps" / "s")
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(tmp_path / "c"), "-d", str(tmp_path / "ds")]).exit_code == 0
    (step / "stdout.txt").write_bytes((REAL / "A" / "superbench-nccl_broadcast.txt").read_bytes())
    res = runner.invoke(main, ["ingest", str(tmp_path / "c"), "-d", str(tmp_path / "ds")])
    assert res.exit_code == 0
    assert res.output.splitlines()[0] == ("files: 1  ingested: 1 (partly: 0)  already in dataset: 0  quarantined: 0"
                                          "  replaced: 1")
    runs = datasets.read_table(tmp_path / "ds", "runs")
    assert len(runs) == 1 and len(datasets.read_table(tmp_path / "ds", "sources")) == 1


def test_an_input_that_cannot_be_read_any_more_keeps_its_older_rows(tmp_path):
    path = tmp_path / "reduce_perf.txt"
    path.write_bytes(GOOD.read_bytes())
    ingest([path], tmp_path / "ds")
    path.unlink()
    path.symlink_to(tmp_path / "gone")  # now a broken link: quarantined, never read
    summary = ingest([path], tmp_path / "ds")
    assert summary.replaced == 0 and len(summary.quarantined) == 1
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 68
