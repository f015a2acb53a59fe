"""Shapes of field outputs the parsers once missed (tests/fixtures/field/README.md): a blank
redop column, NCCL lines inside table rows, tables that name no binary, per-call sizes whose
rank count comes later in the log, and Kineto traces that show each call several times."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ncclbot_sweep.parsers import detect_format, parse_nccltests_stream, parse_source
from ncclbot_sweep.parsers.infer import infer_collective

from parser_fixtures import FIELD, real, source


def _text(path, name="out.txt", **meta):
    data = path.read_bytes()
    assert detect_format(data[:65536]) == "nccl-tests-text"
    return parse_nccltests_stream([data], source(name, **meta))


def test_a_redop_column_left_blank_keeps_every_row():
    r = _text(FIELD / "redop-blank-allgather-16rank.txt")
    rows, run = r.rows("iterations"), r.rows("runs")[0]
    assert len(rows) == 16 and not r.issues
    assert {row["redop"] for row in rows} == {None} and {row["root"] for row in rows} == {-1}
    assert run["collective"] == "AllGather" and (run["ranks"], run["nodes"]) == (16, 2)
    big = [row for row in rows if row["size_bytes"] == 268435456]
    assert len(big) == 2 and big[0]["count"] == 268435456 // 4 // 16


@pytest.mark.parametrize("name", ["log-lines-inside-rows-torchrun-prefix.txt", "log-lines-inside-rows-srun-prefix.txt"])
def test_nccl_lines_inside_rows_and_a_row_split_by_one(name):
    r = _text(FIELD / name)
    rows, run = r.rows("iterations"), r.rows("runs")[0]
    sizes = sorted({row["size_bytes"] for row in rows})
    assert sizes == [8, 16, 32, 64, 128, 1048576, 16777216, 268435456] and len(rows) == 16 and not r.issues
    split = sorted((row for row in rows if row["size_bytes"] == 32), key=lambda row: row["in_place"])
    assert [row["in_place"] for row in split] == [False, True]
    assert split[0]["line"] == split[1]["line"]  # the row's first line, though its end came later
    assert split[1]["time_us"] == pytest.approx(10.0)
    # The NCCL lines, the one inside a row included, reached the log parser.
    assert run["nccl_version"] == "2.21.5"
    assert [(c["collective"], c["size_bytes"], c["arm"]) for c in r.rows("choices")] == \
        [("AllReduce", 16777216, "Ring/Simple")]
    assert (run["ranks"], run["nodes"]) == (8, 1)


@pytest.mark.parametrize("rel,coll", [
    ("A/awsome-p4de-2node-srun-prefix.txt", "AllReduce"),  # table only, srun prefixes
    ("A/coreweave-h100-8node-64gpu-sharp-elided.txt", "AllReduce"),
    ("A/superbench-nccl_broadcast.txt", "Broadcast"),  # root 0, no redop column, ratio 1
    ("A/superbench-nccl_reduce.txt", "Reduce"),  # root 0 and a redop
])
def test_a_table_that_names_no_binary_gets_its_collective_from_its_numbers(rel, coll):
    r = parse_nccltests_stream([real(rel).read_bytes()], source("capture.txt"))
    run = r.rows("runs")[0]
    assert run["collective"] == coll and run["collective_inferred"] is True
    assert {row["collective"] for row in r.rows("iterations")} == {coll}


def test_a_named_binary_is_never_marked_inferred():
    text = real("A/ncclebpf-nt2.18.0-broadcast-rtx5090-2rank-mpi.txt").read_bytes()  # "Collective test starting"
    run = parse_nccltests_stream([text], source("capture.txt")).rows("runs")[0]
    assert run["collective"] == "Broadcast" and run["collective_inferred"] is None


def test_inference_refuses_what_the_numbers_cannot_tell_apart():
    size = np.array([1 << 20, 1 << 24])
    alg = np.array([10.0, 20.0])
    # per-rank counts of 8 ranks and a (n-1)/n ratio: AllGather and AlltoAll print the same
    assert infer_collective(size, size // 4 // 8, "float", "none", -1, alg, alg * 7 / 8) is None
    assert infer_collective(size, size // 4 // 8, "float", "sum", -1, alg, alg * 7 / 8) == ("ReduceScatter", 8)
    # ratio 1 and no root: SendRecv, or AllReduce over 2 ranks
    assert infer_collective(size, size // 4, "float", "sum", -1, alg, alg) is None
    assert infer_collective(size, size // 4, "float", "sum", -1, alg, alg, ranks=8) == ("SendRecv", 8)
    assert infer_collective(size, size // 4, "float", "sum", -1, alg, alg * 2 * 15 / 16) == ("AllReduce", None)
    # a ratio that fits no collective for the known rank count
    assert infer_collective(size, size // 4, "float", "sum", -1, alg, alg * 1.5, ranks=16) is None
    assert infer_collective(size, size // 4, "nosuchtype", "sum", -1, alg, alg * 1.5) is None


def test_allgather_choice_sizes_use_a_rank_count_the_log_gives_later():
    log = ("h:1:1 [0] NCCL INFO AllGather: 65536 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n"
           "h:1:1 [0] NCCL INFO AllGather: opCount 0 sendbuff 0x1 recvbuff 0x2 count 16384 datatype 7 op 0 root 0 "
           "comm 0x3 [nranks=8] stream 0x4\n")
    r = parse_source("nccl-log", log.encode(), source("nccl.log"))
    algo = next(c for c in r.rows("choices") if c["kind"] == "algo")
    assert (algo["log_bytes"], algo["ranks"], algo["size_bytes"]) == (65536, 8, 8 * 65536)


def test_allgather_choice_sizes_use_the_rank_lines_of_the_same_output():
    text = real("A/a3mega-h100-2node-16rank-allreduce.txt").read_text()
    text = text.replace("#  Rank  0 Group", "h:1:1 [0] NCCL INFO ReduceScatter: 4096 Bytes -> Algo RING proto LL "
                                            "channel{Lo..Hi}={0..1}\n#  Rank  0 Group", 1)
    r = parse_nccltests_stream([text.encode()], source("capture.txt"))
    choice = r.rows("choices")[0]
    assert (choice["collective"], choice["ranks"], choice["size_bytes"]) == ("ReduceScatter", 16, 16 * 4096)


def _kineto(events) -> bytes:
    return json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": events}).encode()


def _op(ts, coll, nelems, group=8):
    return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": ts, "dur": 2,
            "args": {"Collective name": coll, "In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float",
                     "Group size": group, "Process Group Name": "0"}}


def _kernel(ts, name, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {}}


def test_kineto_call_seq_keeps_the_issue_order_of_interleaved_calls():
    """Rows aggregate per (collective, size, ...), and ``call_seq`` says where each call came in the
    trace, so the job's sequence can be rebuilt: AR, BC, AR, RS, BC here."""
    events = [_op(100, "allreduce", 1024), _op(200, "broadcast", 64), _op(300, "allreduce", 1024),
              _op(400, "reduce_scatter", 4096), _op(500, "broadcast", 64)]
    events += [_kernel(ts + 10, f"ncclDevKernel_{name}_Sum_f32_RING_LL(x)", 5.0)
               for ts, name in ((100, "AllReduce"), (200, "Broadcast"), (300, "AllReduce"), (400, "ReduceScatter"),
                                (500, "Broadcast"))]
    rows = parse_source("kineto-trace", _kineto(events), source("t.json")).rows("workload")
    seq = {row["collective"]: row["call_seq"] for row in rows}
    assert seq == {"AllReduce": [0, 2], "Broadcast": [1, 4], "ReduceScatter": [3]}
    assert all(len(row["call_seq"]) == row["calls"] for row in rows)
    bare = [_kernel(ts, f"ncclDevKernel_{name}_Sum_f32_RING_LL(x)", 5.0)
            for ts, name in ((30, "AllReduce"), (10, "AllGather"), (20, "AllReduce"))]
    rows = parse_source("kineto-trace", _kineto(bare), source("t.json")).rows("workload")
    assert {row["collective"]: row["call_seq"] for row in rows} == {"AllGather": [0], "AllReduce": [1, 2]}


def test_kineto_each_call_is_counted_once():
    data = (FIELD / "kineto-one-call-many-views.json").read_bytes()
    assert detect_format(data) == "kineto-trace"
    w = {row["collective"]: row for row in parse_source("kineto-trace", data, source("t.json")).rows("workload")}
    assert set(w) == {"AllReduce", "Broadcast", "ReduceScatter"}
    ar, bc, rs = w["AllReduce"], w["Broadcast"], w["ReduceScatter"]
    assert (ar["calls"], ar["size_bytes"], ar["group_size"]) == (2, (1 << 20) * 4, 8)
    assert ar["total_us"] == pytest.approx(10 + 5 + 20 + 15)  # both kernels of both calls
    assert (bc["calls"], bc["size_bytes"], bc["total_us"]) == (1, 256 * 4, pytest.approx(3.0))
    assert (rs["calls"], rs["size_bytes"], rs["dtype"], rs["total_us"]) == (1, 8192 * 2, "bfloat16", pytest.approx(7.0))
    assert (ar["call_seq"], bc["call_seq"], rs["call_seq"]) == ([0, 1], [2], [3])
    json.loads(data)  # the fixture itself is valid JSON
