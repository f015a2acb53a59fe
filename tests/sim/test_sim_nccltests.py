"""The nccl-tests stand-ins: real 2.19 layout line by line, JSON v3, flags, NCCL env and logs."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from ncclbot_sweep import costmodel
from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim import fabric
from ncclbot_sweep.sim.nccltests import main

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
A = Arm.parse


def run(binary: str, *args: str, nodes: int = 4, tasks: int | None = None, folder: str = "/opt/nccl-tests/build",
        **env: str) -> tuple[int, str]:
    base = {"SLURM_NNODES": str(nodes), "SLURM_NTASKS": str(tasks if tasks is not None else 8 * nodes),
            "NCCLBOT_SIM_FABRIC": "sim-h100"}
    base.update(env)
    out = io.StringIO()
    status = main([f"{folder}/{binary}", *args], env=base, stdout=out)
    return status, out.getvalue()


def _fixture(name: str) -> list[str]:
    return (REAL / "A" / name).read_text().splitlines()


def _ends(line: str) -> list[int]:
    return [m.end() for m in re.finditer(r"\S+", line)]


def test_text_layout_matches_real_nccl_tests_line_by_line():
    real = _fixture("ncclebpf-nt2.18.0-broadcast-rtx5090-2rank-mpi.txt")
    status, text = run("broadcast_perf", "-b", "1024", "-e", "128M", "-f", "2", "-w", "10", "-n", "50",
                       nodes=1, tasks=2, SLURM_JOB_NODELIST="lab")
    ours = text.splitlines()
    assert status == 0
    assert re.fullmatch(r"# nccl-tests version 2\.19\.\d+ nccl-headers=\d+ nccl-library=\d+ simulator=ncclbot-sweep",
                        ours[0])  # the stamp that makes ingest label the run synthetic
    assert ours[1] == "# Collective test starting: broadcast_perf"
    assert ours[2] == real[2] + " unalign: 0"  # 2.19 appends unalign to the 2.18 line
    assert ours[3:5] == real[3:5] == ["#", "# Using devices"]
    def shape(line: str) -> str:  # pid, device index and bus id differ between machines
        line = re.sub(r"Pid +\d+", "Pid N", line)
        return re.sub(r"device +\d+ \[.*$", "device D [B] NAME", line)

    for mine, theirs in zip(ours[5:7], real[5:7], strict=True):
        assert shape(mine) == shape(theirs)
        assert mine.index(" on ") - len("Pid") > 0 and mine[mine.index("device") - 11:mine.index("device")] == theirs[
            theirs.index("device") - 11:theirs.index("device")]
    assert ours[7:11] == real[7:11]  # "#" and the three column-header lines, byte for byte
    rows_real, rows_ours = real[11:29], ours[11:29]
    for mine, theirs in zip(rows_ours, rows_real, strict=True):
        assert mine[:52] == theirs[:52]  # size count type redop root
        assert _ends(mine) == _ends(theirs)  # every number right-aligned in the same column
    footer = [re.sub(r": [\d.]+ $", ": X ", line).replace("_mpi", "") for line in real[29:]]
    assert [re.sub(r": [\d.]+ $", ": X ", line) for line in ours[29:]] == footer


def test_per_iteration_columns_and_json_version_3_match_the_real_file(tmp_path):
    real = json.loads((REAL / "A" / "gpusyslab-nt2.19.7-allreduce-t4-2gpu-J-output.json").read_text())
    path = tmp_path / "out.json"
    status, text = run("all_reduce_perf", "-b", "128M", "-e", "128M", "-f", "2", "-w", "10", "-n", "50",
                       "-d", "half", "-c", "1", "-I", "1", "-J", str(path), nodes=1, tasks=2)
    assert status == 0
    lines = text.splitlines()
    assert lines[0] == f"# Writing JSON output to {path}"
    assert lines[4] == "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows "
    header = next(i for i, line in enumerate(lines) if "i_min" in line)
    assert lines[header - 1].strip().endswith("in-place (+ per-iteration)")
    row = lines[header + 2].split()
    assert len(row) == 5 + 2 * 8 and row[:5] == ["134217728", "67108864", "half", "sum", "-1"]
    raw = path.read_text()
    doc = json.loads(raw)

    def paths(node, prefix=""):
        if isinstance(node, dict):
            return [p for k, v in node.items() for p in [f"{prefix}/{k}", *paths(v, f"{prefix}/{k}")]]
        if isinstance(node, list) and node and isinstance(node[0], dict):
            return paths(node[0], prefix + "[]")
        return []

    assert doc["simulator"] == "ncclbot-sweep"  # the stamp that makes ingest label the run synthetic
    assert [p for p in paths(doc) if p != "/simulator"] == paths(real)  # same keys, same order
    assert doc["version"] == 3 and doc["config"]["per_iter_timing"] == "true"
    assert doc["config"]["blocking_collectives"] == "false"
    result = doc["results"][0]
    assert result["root"] == "    -1" and result["out_of_place"]["nwrong"] == 0.0
    per_iter = result["out_of_place_per_iter"]
    times = np.array(per_iter["times_us"])
    assert len(times) == 50 == result["actual_iterations"]
    assert per_iter["min_us"] == pytest.approx(times.min(), abs=1e-5)
    assert per_iter["p99_us"] == pytest.approx(np.sort(times)[49], abs=1e-5)
    assert result["out_of_place"]["time"] == pytest.approx(times.mean(), abs=1e-4)
    assert re.search(r'"time":\d+\.\d{6},', raw) and "\\/" in raw and "\n" not in raw


def test_sizes_iterations_and_flags(tmp_path):
    status, text = run("all_gather_perf", "-b", "1K", "-e", "8K", "-i", "1024", "-n", "7", "-w", "0", "-c", "0",
                       "-d", "int8", "-N", "2", "-G", "3", "-z", "1", "-T", "30", "-S", "0", "-a", "3", "-t", "1",
                       "-g", "8", nodes=2, tasks=2)
    assert status == 0
    lines = text.splitlines()
    assert "graph: 3" in lines[2] and "iters: 7" in lines[2] and "step: 1024(bytes)" in lines[2]
    assert lines[3].startswith("# Blocking Enabled")
    assert sum(line.startswith("#  Rank") for line in lines) == 16
    rows = [line.split() for line in lines if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192] * 2  # -N 2 cycles
    assert rows[0][1] == "64" and rows[0][2] == "int8" and rows[0][3] == "none"  # count per rank
    assert rows[0][8] == "N/A"  # -c 0: no validation


def test_root_op_and_datatype_columns():
    status, text = run("reduce_perf", "-b", "64K", "-e", "64K", "-o", "max", "-r", "3", "-d", "double", "-w", "1",
                       "-n", "2", nodes=1)
    row = [line.split() for line in text.splitlines() if line and not line.startswith("#")][0]
    assert status == 0 and row[:5] == ["65536", "8192", "double", "max", "3"]
    for binary in ("alltoall_perf", "sendrecv_perf", "broadcast_perf", "reduce_scatter_perf"):
        status, text = run(binary, "-b", "1M", "-e", "1M", "-w", "1", "-n", "2", nodes=2)
        assert status == 0 and f"# Collective test concluded: {binary}" in text


def test_bad_flags_are_usage_errors(capsys):
    assert run("all_reduce_perf", "-q", "1")[0] == 2
    assert run("all_reduce_perf", "-b", "1X")[0] == 2
    assert run("all_reduce_perf", "-b", "512B")[0] == 2  # nccl-tests' parsesize knows K, M and G only
    assert run("all_reduce_perf", "-b", "8M", "-e", "1M")[0] == 2
    assert "invalid option" in capsys.readouterr().err
    assert run("all_reduce_perf", "-g", "16", nodes=1, tasks=1)[0] == 1  # more GPUs than a node has
    assert "Invalid number of GPUs" in capsys.readouterr().err


def test_datatype_spellings_come_from_names_and_only_nccl_types_run(capsys):
    from ncclbot_sweep.sim.nccltests.options import parse_options

    assert [parse_options(["-d", name]).datatype for name in ("fp16", "BF16", "float32", "char")] == [
        "half", "bfloat16", "float", "int8"]
    assert parse_options(["-d", "bf16"]).element_size == 2 and parse_options(["-d", "all"]).element_size == 4
    assert run("all_reduce_perf", "-d", "short")[0] == 2  # int16 is a known width but no NCCL type
    assert "invalid type short, must be one of int8, uint8, int32," in capsys.readouterr().err
    assert parse_options(["-b", "1.5k", "-e", "2G"]).minbytes == 1536
    assert parse_options(["-b", "1KB", "-e", "2GiB"]).maxbytes == 2 * 2**30  # the letter after K/M/G is ignored


def _tuning_lines(text: str) -> list[str]:
    return [line.split("NCCL INFO ", 1)[1] for line in text.splitlines() if "NCCL INFO " in line]


def _choices(text: str) -> list[tuple[str, int, str, str]]:
    found = re.findall(r"NCCL INFO (\w+): (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{0\.\.\d+\}", text)
    return [(c, int(b), a, p) for c, b, a, p in found]


def test_nccl_algo_and_proto_are_honoured_in_every_syntax():
    debug = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"}
    args = ("-b", "1M", "-e", "4M", "-f", "2", "-w", "1", "-n", "3")
    _s, text = run("all_reduce_perf", *args, NCCL_ALGO="Ring", NCCL_PROTO="LL128", **debug)
    assert {(a, p) for _c, _b, a, p in _choices(text)} == {("RING", "LL128")}
    _s, text = run("all_reduce_perf", *args, NCCL_ALGO="allreduce:ring;allgather:tree", NCCL_PROTO="^LL,LL128", **debug)
    assert {(a, p) for _c, _b, a, p in _choices(text)} == {("RING", "SIMPLE")}
    _s, text = run("all_gather_perf", *args, NCCL_ALGO="allreduce:tree", NCCL_PROTO="allgather:LL", **debug)
    assert {(a, p) for _c, _b, a, p in _choices(text)} == {("RING", "LL")}  # the AllReduce entry does not apply
    status, text = run("all_reduce_perf", *args, NCCL_ALGO="Rnig", NCCL_DEBUG="WARN")
    assert status == 1 and "Unrecognized element token" in text and "NCCL WARN" in text


def test_an_invalid_forced_arm_fails_like_nccl():
    status, text = run("all_reduce_perf", "-b", "1M", "-e", "1M", NCCL_ALGO="NVLS", NCCL_PROTO="Simple")
    assert status == 1
    assert "no algorithm/protocol available for function AllReduce with datatype ncclFloat32. " \
           "NCCL_ALGO was set to NVLS. NCCL_PROTO was set to Simple." in text
    assert "Test NCCL failure" in text and "NCCL WARN" not in text  # WARN lines need NCCL_DEBUG
    status, text = run("all_gather_perf", "-b", "1M", "-e", "1M", NCCL_ALGO="Tree", NCCL_DEBUG="WARN")
    assert status == 1 and "NCCL WARN Error : no algorithm/protocol available for function AllGather" in text
    status, text = run("all_reduce_perf", "-b", "1M", "-e", "1M", NCCL_ALGO="NVLSTree", nodes=1)
    assert status == 1  # NVLSTree needs more than one node


def test_only_procid_0_prints():
    status, text = run("all_reduce_perf", "-b", "1M", "-e", "1M", SLURM_PROCID="3")
    assert status == 0 and text == ""


def _parse_table(lines: list[str]) -> costmodel.TuningTable:
    """A minimal parser of the printed three-block table (what the analysis does from the log)."""
    cells, algos = {}, []
    for line in lines:
        head, _, rest = line.partition("|")
        head = head.strip()
        if head == "Algorithm":
            algos = [a.strip() for a in rest.split("|") if a.strip()]
        elif head in ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"):
            values = [v.strip() for v in rest.split("|") if v.strip()]
            for i, value in enumerate(values):
                lat, bw = (float(x) for x in value.split("/"))
                cells[(head, Arm(algos[i // 3], ("LL", "LL128", "Simple")[i % 3]))] = (lat, bw)
    return costmodel.TuningTable.from_cells(cells)


def test_debug_file_holds_version_table_and_one_choice_line_per_call(tmp_path):
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log"),
           "SLURM_JOB_NODELIST": "gpu[07-22]"}
    status, text = run("all_gather_perf", "-b", "512", "-e", "64M", "-f", "4", "-w", "2", "-n", "5", nodes=16, **env)
    assert status == 0 and "NCCL INFO" not in text
    [log_file] = tmp_path.glob("nccl.gpu07.*.log")
    log = log_file.read_text()
    assert re.search(r"^gpu07:\d+:\d+ \[0\] NCCL INFO NCCL version 2\.30\.\d+\+cuda[\d.]+$", log, re.M)
    assert "nRanks 128 nNodes 16 localRanks 8" in log and "16 coll channels" in log
    table = _parse_table(_tuning_lines(log))
    sim = fabric("sim-h100")
    for size in (512 * 4**k for k in range(9)):
        ctx = sim.call_context("AllGather", 16, size)
        np.testing.assert_array_equal(costmodel.cost_table(table, ctx), sim.cost_table("AllGather", 16, size))
    choices = _choices(log)
    sizes = [512 * 4**k for k in range(9)]
    assert len(choices) == 2 * 2 + len(sizes) * 2 * (5 + 1)  # warm-up at max and min, then (n + check) x 2
    for coll, n_bytes, algo, proto in choices:
        assert coll == "AllGather" and n_bytes * 128 in sizes  # bytes per rank, as NCCL logs them
        arm = sim.auto_arm("AllGather", 16, n_bytes * 128)
        assert (algo, proto) == ("RING", arm.protocol.upper())


def test_same_step_same_numbers_and_the_seed_changes_them():
    args = ("all_reduce_perf", "-b", "1M", "-e", "4M", "-f", "2", "-w", "1", "-n", "20")

    def table(text):
        return [line for line in text.splitlines() if line and not line.startswith("#")]

    assert table(run(*args)[1]) == table(run(*args)[1])
    assert table(run(*args)[1]) != table(run(*args, NCCLBOT_SIM_SEED="42")[1])
    assert table(run(*args, NCCLBOT_SIM_SEED="42")[1]) == table(run(*args, NCCLBOT_SIM_SEED="42")[1])


def test_where_the_binary_is_installed_does_not_change_the_numbers():
    """The launchers live in a per-interpreter cache folder; a sweep rerun from another venv or
    cache location must draw the same noise (only the measurement's own arguments seed it)."""
    args = ("all_reduce_perf", "-b", "1M", "-e", "4M", "-f", "2", "-w", "1", "-n", "20")

    def table(text):
        return [line for line in text.splitlines() if line and not line.startswith("#")]

    here = table(run(*args)[1])
    assert here == table(run(*args, folder="/tmp/pytest-of-someone/pytest-7/simbin0/sim-bin-0.1.0-0123")[1])
    assert here != table(run(*args, "-c", "0")[1]), "a measuring argument still changes them"


def test_busbw_factors_follow_nccl_tests():
    for binary, factor in (("all_reduce_perf", 2 * 31 / 32), ("all_gather_perf", 31 / 32), ("broadcast_perf", 1.0)):
        _s, text = run(binary, "-b", "64M", "-e", "64M", "-w", "1", "-n", "5")
        row = [line.split() for line in text.splitlines() if line and not line.startswith("#")][0]
        assert float(row[7]) == pytest.approx(float(row[6]) * factor, abs=0.011)
        assert float(row[6]) == pytest.approx(int(row[0]) / float(row[5]) / 1000, rel=0.01)


def test_warmup_zero_shows_the_nvls_stall_in_the_first_timed_iteration(tmp_path):
    path = tmp_path / "j.json"
    status, _text = run("all_reduce_perf", "-b", "1M", "-e", "2M", "-f", "2", "-w", "0", "-n", "20", "-I", "1",
                        "-J", str(path), nodes=8, NCCL_ALGO="NVLSTree", NCCL_PROTO="Simple")
    doc = json.loads(path.read_text())
    first = doc["results"][0]["out_of_place_per_iter"]["times_us"]
    later = doc["results"][1]["out_of_place_per_iter"]["times_us"]
    assert status == 0 and first[0] > 5.7e6 and max(first[1:]) < 1e4 and max(later) < 1e4


def test_nvls_enable_0_removes_nvlstree_from_auto_and_from_forcing():
    debug = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"}
    args = ("-b", "32M", "-e", "32M", "-w", "1", "-n", "2")
    _s, text = run("all_reduce_perf", *args, nodes=8, **debug)
    assert {(a, p) for _c, _b, a, p in _choices(text)} == {("NVLS_TREE", "SIMPLE")}  # AUTO's pick on this fabric
    _s, text = run("all_reduce_perf", *args, nodes=8, NCCL_NVLS_ENABLE="0", **debug)
    assert "NVLS_TREE" not in text and _choices(text)
    status, _text = run("all_reduce_perf", *args, nodes=8, NCCL_NVLS_ENABLE="0", NCCL_ALGO="NVLSTree")
    assert status == 1


def test_mnnvl_switch_changes_what_nccl_sees_on_gb200():
    env = {"NCCLBOT_SIM_FABRIC": "sim-gb200-mnnvl-on", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}
    _s, text = run("all_reduce_perf", "-b", "1M", "-e", "1M", "-w", "1", "-n", "2", nodes=8, tasks=32, **env)
    assert "nNodes 4 localRanks 8" in text and "MNNVL 1" in text
    _s, text = run("all_reduce_perf", "-b", "1M", "-e", "1M", "-w", "1", "-n", "2", nodes=8, tasks=32,
                   NCCL_MNNVL_ENABLE="0", **env)
    assert "nNodes 8 localRanks 4" in text and "MNNVL 0" in text
    assert sum(line.startswith("#  Rank") and "NVIDIA GB200" in line for line in text.splitlines()) == 32


def test_all_datatypes_and_ops_loop_like_nccl_tests():
    from ncclbot_sweep.names import NCCL_DATATYPES
    from ncclbot_sweep.sim.nccltests.options import REDOPS

    DATATYPES = [name for name, _width in NCCL_DATATYPES]
    _s, text = run("all_reduce_perf", "-b", "1K", "-e", "2K", "-f", "2", "-d", "all", "-o", "all", "-w", "1", "-n", "2")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    assert len(rows) == len(DATATYPES) * len(REDOPS) * 2
    assert {(r[2], r[3]) for r in rows} == {(t, o) for t in DATATYPES for o in REDOPS}
    assert [r for r in rows if r[2] == "double" and r[0] == "1024"][0][1] == "128"
    _s, text = run("all_gather_perf", "-b", "64K", "-e", "64K", "-d", "all", "-o", "all", "-w", "1", "-n", "2")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    assert len(rows) == len(DATATYPES) and {r[3] for r in rows} == {"none"}
