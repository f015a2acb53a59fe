"""Issue 21, "real files from the field": classes of published outputs that lost facts.

Each class is checked on real excerpts (tests/fixtures/real/INDEX.md, rows 45 and 76-81) and, where no
public text shows the whole shape, on field fixtures written to it (tests/fixtures/field/README.md):
launcher labels and rows printed in pieces; per-call choice lines that name no collective;
Kineto calls seen several times; rccl-tests outputs; footers that average rows not in the output.
"""

from __future__ import annotations

import gzip

import pytest

from ncclbot_sweep.parsers import detect_format, parse_nccltests_stream, parse_source
from ncclbot_sweep.parsers.prefixes import strip_prefix, unglue

from parser_fixtures import FIELD, real, source


def _parse(path, name="capture.txt"):
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    fmt = detect_format(data[:65536])
    return fmt, parse_source(fmt, data, source(name))


def _sides(rows, size):
    """(out-of-place, in-place) time of ``size``."""
    found = {r["in_place"]: r["time_us"] for r in rows if r["size_bytes"] == size}
    return found.get(False), found.get(True)


# ---------------------------------------------------------------- 1. launcher labels, rows in pieces

def test_torchrun_labels_glued_inside_rows():
    """nccl#1453: torchrun labels every chunk nccl-tests flushes, so each row reads
    ``... -1[0]    1626.5 ... 0[0]    2302.3 ...``; the excerpt starts inside a row and ends inside one."""
    fmt, r = _parse(real("A/issue-nccl1453-allreduce-h100-torchrun-labels-inside-rows-partial.txt"))
    rows, run = r.rows("iterations"), r.rows("runs")[0]
    assert fmt == "nccl-tests-text"
    assert sorted({x["size_bytes"] for x in rows}) == [1048576 << k for k in range(10)] and len(rows) == 20
    assert _sides(rows, 1048576) == (1626.5, 2302.3)
    assert _sides(rows, 67108864) == (24410.0, 24425.0)
    assert next(x["busbw_gbs"] for x in rows if x["size_bytes"] == 33554432 and not x["in_place"]) == 29.50
    assert run["collective"] == "AllReduce" and run["collective_inferred"] is True
    assert [(i.line, i.reason.split(":")[0]) for i in r.issues] == [
        (1, "numbers without a size and count"), (12, "data row cut short")]


def test_indented_openmpi_tags_and_a_row_cut_by_the_source():
    """bottlerocket-kernel-kit#313: ``[1,0]<stdout>:`` after eight blanks of indentation."""
    fmt, r = _parse(real("A/issue-bottlerocket-pr313-alltoall-efa-mpi-tag-indented-partial.txt"))
    rows = r.rows("iterations")
    assert fmt == "nccl-tests-text" and len(rows) == 18
    assert _sides(rows, 2048) == (106.88, 111.25) and _sides(rows, 524288) == (212.76, 223.82)
    assert {x["wrong"] for x in rows if x["in_place"]} == {None} and {x["redop"] for x in rows} == {"none"}
    assert [(i.line, i.reason) for i in r.issues] == [(10, "data row cut short: 6 of 13 fields")]


ROWS = [
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    "     1048576        262144     float     sum      -1    40.00   26.21   49.15      0    41.00   25.57   47.95      0",
    "     2097152        524288     float     sum      -1    60.00   34.95   65.53      0    61.00   34.38   64.46      0",
]
LABELS = ["node-3: ", "2024-05-01T12:00:01.123Z ", "[12:00:01] ", " 7: ", "[pod/launcher-x/mpi] ",
          "May 01 12:00:01 ", "2024-05-01T12:00:01.123456789Z [1,0]<stdout>:", "[default0]:"]


@pytest.mark.parametrize("label", LABELS)
def test_every_label_of_the_class_is_stripped(label):
    text = "".join(f"{label}{line}\n" for line in ROWS)
    r = parse_nccltests_stream([text.encode()], source())
    assert [(x["size_bytes"], x["in_place"], x["time_us"]) for x in r.rows("iterations")] == [
        (1048576, False, 40.0), (2097152, False, 60.0), (1048576, True, 41.0), (2097152, True, 61.0)]
    assert not r.issues


def test_labels_that_differ_from_line_to_line_and_a_row_in_three_pieces():
    """A row printed in three writes, other ranks' lines and NCCL lines between its pieces,
    each piece under another label (what ``srun -l`` and ``pdsh`` make of a busy job)."""
    text = "\n".join([
        "0: " + ROWS[0], "node-a: " + ROWS[1],
        "0:      1048576        262144     float     sum      -1",
        "1: node-b:22:22 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC",
        "2024-05-01T12:00:01.5Z 0:     40.00   26.21   49.15      0",
        "srun: Job step 7.0 still running",
        "[0]    41.00   25.57   47.95      0",
        "node-a:      2097152        524288     float     sum      -1    60.00   34.95   65.53      0    61.00   34.38   64.46      0",
    ]) + "\n"
    r = parse_nccltests_stream([text.encode()], source())
    rows = r.rows("iterations")
    assert _sides(rows, 1048576) == (40.0, 41.0) and _sides(rows, 2097152) == (60.0, 61.0)
    assert {x["line"] for x in rows if x["size_bytes"] == 1048576} == {3}  # the row's first piece
    assert not r.issues


def test_what_is_not_a_label_stays():
    assert strip_prefix("rccl-tests: Version develop:83d38d9") == "rccl-tests: Version develop:83d38d9"
    assert strip_prefix("srun: error: node-3: task 5: Exited") == "srun: error: node-3: task 5: Exited"
    # nccl-tests' own -S column (no fraction, no zone) is a table column, not a label
    assert strip_prefix("2025-10-14 12:00:00   17179869184") == "2025-10-14 12:00:00   17179869184"
    assert strip_prefix("2025-10-14 12:00:00.250 # nThread 1") == "# nThread 1"
    assert strip_prefix("host-3: #  Rank  0 Group") == "#  Rank  0 Group"
    assert unglue("Channel 00/0 : 1[1] -> 0[0] via P2P") != "Channel 00/0 : 1[1] -> 0[0] via P2P"  # rows only
    assert unglue("-1[0]    1626.5    0.64    1.24      0[0]") == "-1     1626.5    0.64    1.24      0 "


# ---------------------------------------------------------------- 2. choice lines that name no collective

def _algo(r):
    return [(c["collective"], c["size_bytes"], c["datatype"], c["arm"], c["channels"], c["predicted_us"],
             c["op_count"], c["calls"]) for c in r.rows("choices") if c["kind"] == "algo"]


def test_trace_choice_lines_take_the_collective_from_their_threads_coll_line():
    fmt, r = _parse(FIELD / "nccl2.18-trace-choice-lines-after-coll-lines-2rank.txt", "nccl.log")
    assert fmt == "nccl-log"
    assert _algo(r) == [
        ("AllReduce", 1048576, "float", "Ring/Simple", None, 41.5, 0, 2),  # both ranks' TRACE lines
        ("AllGather", 524288, "float", "Ring/LL", None, 12.25, 1, 1),     # all ranks' bytes in the line
        ("Broadcast", 1024, "int8", "Ring/LL", None, 6.1, 2, 1),          # a group: matched by size
        ("ReduceScatter", 8192, "float", "Ring/LL", None, 7.2, 3, 1),
        ("AllReduce", 8388608, "bfloat16", "Tree/Simple", 2, None, 4, 1),  # by opCount
        (None, 4096, None, "Ring/LL", None, 5.0, None, 1),               # no COLL line on its thread
    ]
    assert [(c["collective"], c["size_bytes"], c["arm"]) for c in r.rows("cost_tables")][:4] == [
        ("AllReduce", 1048576, "Ring/Simple"), ("AllGather", 524288, "Ring/LL"), ("Broadcast", 1024, "Ring/LL"),
        ("ReduceScatter", 8192, "Ring/LL")]
    run = r.rows("runs")[0]
    assert (run["nccl_version"], run["library"], run["ranks"], run["nodes"]) == ("2.18.5", "nccl", 2, 2)


def test_a_trace_collective_line_repeating_the_info_line_is_one_call():
    _, r = _parse(FIELD / "nccl2.23-info-and-trace-collective-lines.txt", "nccl.log")
    assert _algo(r) == [
        ("AllReduce", 1048576, "float", "Ring/LL", 2, None, 0, 1),
        ("AllReduce", 1048576, "float", "Ring/LL", 2, None, 1, 1),
        ("AllGather", 524288, "float", "Ring/LL128", 4, None, 2, 1),  # TRACE alone: count=65536 x 4 B x 2 ranks
    ]


def test_a_2_23_choice_line_with_enum_ids_behind_srun_labels():
    """ai-on-eks' FSDP log (INDEX row 84): ``2: node-0:309:309 [0] NCCL INFO AllGather: 37756928 Bytes
    -> Algo 1 proto 2 time 2860.208008``: the ids are NCCL's enum order (Ring, Simple) and the
    bytes the whole gathered buffer, as the COLL lines of the call show (2359808 floats x 4 ranks)."""
    fmt, r = _parse(real("B/ai-on-eks-slinky-fsdp-srun-l-numeric-choice-coll-lines-partial.txt"), "slurm.out")
    algo = [c for c in r.rows("choices") if c["kind"] == "algo"]
    assert fmt == "nccl-log" and len(algo) == 1
    assert (algo[0]["collective"], algo[0]["arm"], algo[0]["size_bytes"], algo[0]["predicted_us"]) == (
        "AllGather", "Ring/Simple", 2359808 * 4 * 4, 2860.208008)
    assert {c["size_bytes"] for c in r.rows("choices") if c["collective"] == "AllGather"} == {37756928}
    assert [(c["arm"], c["size_bytes"]) for c in r.rows("cost_tables")] == [("Ring/Simple", 37756928)]
    assert not r.issues


def test_numeric_choice_lines_keep_a_null_collective_when_nothing_names_it():
    fmt, r = _parse(real("B/issue-nccl1453-torchrun-numeric-choice-lines-glued-row-partial.txt"), "nccl.log")
    assert fmt == "nccl-log"
    assert _algo(r) == [(None, 65536, None, "Tree/LL", None, 37.798233, None, 6),
                        (None, 131072, None, "Tree/LL128", None, 51.603912, None, 7)]


def test_numeric_choice_lines_inside_nccl_tests_output_are_the_tested_collective():
    log = real("B/issue-nccl1453-torchrun-numeric-choice-lines-glued-row-partial.txt").read_text()
    text = real("A/a3mega-h100-2node-16rank-allreduce.txt").read_text()
    head, rows = text.split("#       size", 1)
    r = parse_nccltests_stream([(head + log + "#       size" + rows).encode()], source("capture.txt"))
    assert [(c[0], c[1], c[3], c[7]) for c in _algo(r)] == [("AllReduce", 65536, "Tree/LL", 6),
                                                          ("AllReduce", 131072, "Tree/LL128", 7)]
    assert len(r.rows("iterations")) == 62


# ---------------------------------------------------------------- collective of a run that names no binary

@pytest.mark.parametrize("rel,coll,ranks", [
    # OpenMPI tags, NCCL INFO lines between the header and the table, 2 ranks: busbw = algbw as
    # for SendRecv, but the in-place results were checked (#wrong 0): an AllReduce
    ("A/eks-blueprints-efa-t4-2rank-mpi-tag-nccl-info-interleaved.txt", "AllReduce", 2),
    ("A/issue-ncclt214-sendrecv-a40-2rank-inplace-unchecked-partial.txt", "SendRecv", 2),  # in-place N/A
    ("A/issue-bottlerocket-pr313-alltoall-efa-mpi-tag-indented-partial.txt", "AlltoAll", 16),
    ("A/superbench-nccl_allgather.txt", "AllGather", 8),  # a pre-2.13 header without a redop column
])
def test_the_collective_of_a_run_that_names_no_binary_comes_from_its_table(rel, coll, ranks):
    _, r = _parse(real(rel), "capture.txt")
    run = r.rows("runs")[0]
    assert (run["collective"], run["collective_inferred"], run["ranks"]) == (coll, True, ranks)
    assert {x["collective"] for x in r.rows("iterations")} == {coll}


def test_a_command_line_with_nccl_variables_names_the_binary():
    """nccl-tests#82: ``mpirun ... -x NCCL_DEBUG=WARN ... ./build/broadcast_perf -b 8 ...`` on a
    shell prompt line before the output (its NCCL variables hid it before)."""
    _, r = _parse(real("A/issue-ncclt82-broadcast-v100-2node-mpirun-with-nccl-env-partial.txt"), "capture.txt")
    run = r.rows("runs")[0]
    assert (run["binary"], run["collective"], run["collective_inferred"], run["nccl_version"], run["ranks"]) == (
        "broadcast_perf", "Broadcast", None, "2.9.6", 2)


def test_nccl_coll_lines_name_the_collective_the_numbers_cannot():
    """Hand-made (no public nccl-tests output with COLL lines and no binary name was found): a
    2-rank table whose rows decide nothing (bandwidths below 1 GB/s, -c 0), and the COLL line
    NCCL_DEBUG_SUBSYS=COLL prints for the call, in the form of INDEX row 57."""
    text = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 0 graph: 0\n"
            "#  Rank  0 Group  0 Pid   1000 on host-a device  0 [0x31] NVIDIA A40\n"
            "#  Rank  1 Group  0 Pid   1001 on host-b device  0 [0x31] NVIDIA A40\n"
            "host-a:1000:1000 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f0 recvbuff 0x7f8 count 2 datatype 7 "
            "op 0 root 0 comm 0x55 [nranks=2] stream 0x56\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
            "           8             2     float     sum      -1    34.24    0.00    0.00    N/A    33.65    0.00    0.00    N/A\n"
            "          16             4     float     sum      -1    34.24    0.00    0.00    N/A    34.15    0.00    0.00    N/A\n")
    r = parse_nccltests_stream([text.encode()], source("capture.txt"))
    run = r.rows("runs")[0]
    assert (run["collective"], run["collective_inferred"]) == ("AllReduce", True)
    assert {x["collective"] for x in r.rows("iterations")} == {"AllReduce"}
    without = parse_nccltests_stream([text.replace("AllReduce: opCount", "x").encode()], source("capture.txt"))
    assert without.rows("runs")[0]["collective"] is None  # the numbers alone do not decide


# ---------------------------------------------------------------- run-level facts

def test_runs_split_by_begin_markers_keep_their_ranks_and_binaries():
    """llv22/nccl-osx: five runs in one capture, each after an ``===begin <binary> test===`` echo."""
    _, r = _parse(real("A/nccl-osx-gtx1080-2gpu-five-runs-begin-markers.txt"), "capture.txt")
    runs = r.rows("runs")
    assert [(x["binary"], x["collective"], x["ranks"], x["nodes"], x["hosts"]) for x in runs] == [
        (f"{b}_perf", c, 2, 1, "Orlando") for b, c in (("all_reduce", "AllReduce"), ("all_gather", "AllGather"),
                                                        ("broadcast", "Broadcast"), ("reduce", "Reduce"),
                                                        ("reduce_scatter", "ReduceScatter"))]
    assert {(x["run_id"], x["ranks"]) for x in r.rows("iterations")} == {(x["run_id"], 2) for x in runs}


def test_a_shell_prompt_before_the_version_line_keeps_the_versions_on_the_run():
    """cscs-docs: ``$ srun ... all_reduce_perf -b 1M ...`` then ``# nccl-tests version 2.18.2 ...`` and
    ``# Collective test starting``: the prompt started a run the next line split (versions lost)."""
    _, r = _parse(real("A/cscs-docs-sarus-gh200-2node-prompt-before-version-line.txt"), "capture.txt")
    (run,) = r.rows("runs")
    assert (run["run_id"], run["nccl_tests_version"], run["nccl_version"], run["ranks"], run["nodes"]) == (
        "run", "2.18.2", "2.30.7", 2, 2)  # the file's first run id: no empty run before it
    assert len(r.rows("iterations")) == 16


def test_an_old_rccl_tests_colon_header_that_fails_at_init():
    """ROCm/rccl-tests#50: ``# nThreads: 1 nGpus: 4 nRanks: 1 ... warmupIters: 5 iters: 20``, four
    Rank lines, then the init failure (the file was not even recognised)."""
    fmt, r = _parse(real("A/issue-rccltests50-mi210-4gpu-colon-header-init-failure-partial.txt"), "capture.txt")
    (run,) = r.rows("runs")
    assert fmt == "nccl-tests-text"
    assert (run["ranks"], run["nodes"], run["library"], run["gpu_name"], run["outcome"]) == (
        4, 1, "rccl", "AMD Instinct MI210", "failed")
    assert (run["min_bytes"], run["max_bytes"], run["warmup_iters"], run["iters"]) == (8, 134217728, 5, 20)
    assert run["failure"].startswith("sharbox-ultra: Test NCCL failure common.cu:1285")


def test_rccl_kernel_trace_records_are_not_choice_lines():
    """Hand-made from RCCL's collective-trace format strings (ROCm/rccl src/init.cc @0cbce2a7:
    ``## [ts] [rank:bid] opCount KL HWID ... <func>``, ``KE``, ``CE``, ``CL``, ``PE``, ``DT``, ``Abort``;
    RCCL_KERNEL_COLL_TRACE_ENABLE=1): the kernel's function name spells an algorithm and a protocol,
    but no record is a choice NCCL made for a call; only the COLL line of the call is a row."""
    host = "banff:52944:53177 [0] NCCL INFO "
    records = ["## [170260.347287] [07:00] 000001 KL HWID 42300700 ncclDevFunc_AllReduce_RING_LL_Sum_double "
               "nw 4 bi 0 nc 0 busId df000 nRanks 8",
               "## [170260.348516] [07:00] 000001 KE busId df000 nRanks 8",
               "## [170260.348587] [07:00] 000001 CE ncclDevFunc_AllReduce_RING_LL_Sum_double nw 4 bi 0 nc 0 "
               "busId df000 nRanks 8",
               "## [170260.348600] [07:00] 000002 CL ncclDevFunc_AllReduce_RING_LL_Sum_double nw 4 bi 0 nc 0 "
               "busId df000 nRanks 8",
               "## [122210.650274] [00:01] 000000-000000 PE ncclDevFunc_SendRecv_RING_SIMPLE_Sum_i8 1 -> 1/0/4/0/1 "
               "conn/nw/ws/ng 1/4/0/1 -> 1 busId c1000 nRanks 2",
               "## [170260.348700] [07:00] L:0042 DT 00000001 0000000000000003 0000000000000000",
               "## [170260.348800] [07:00] 000003 Abort"]
    text = (host + "AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f00 count 9 datatype 8 op 0 root 0 comm 0xb7f1460 "
            "[nranks=8] stream 0xba10e60\n" + "".join(host + r + "\n" for r in records))
    r = parse_source("nccl-log", text.encode(), source("rccl.log"))
    assert [(c["kind"], c["collective"], c["op_count"]) for c in r.rows("choices")] == [("coll", "AllReduce", 1)]
    assert not r.issues


# ---------------------------------------------------------------- 3. Kineto: one call, many views

def _workload(r):
    return sorted((w["collective"], w["size_bytes"], w["calls"], w["total_us"], w["call_seq"]) for w in r.rows("workload"))


def test_pytorch_2_5_views_are_one_call_and_other_libraries_kernels_are_no_call():
    fmt, r = _parse(FIELD / "kineto-pt2.5-views-seq-symm-mem.json", "trace.json")
    assert fmt == "kineto-trace"
    assert _workload(r) == [
        ("AllGather", 1048576 * 2, 1, 250.0, [2]),      # kernel tied by process group and Seq
        ("AllReduce", 1048576 * 2, 2, 1000.0, [0, 1]),  # by External id, and by its launch
        ("ReduceScatter", 1048576 * 2, 1, 120.0, [3]),  # a kernel whose CPU side was not recorded
    ]


@pytest.mark.parametrize("rank,first", [(0, (78473228, 11727.0)), (1, (78473228, 12994.0))])
def test_kernels_named_sendrecv_join_the_calls_that_launched_them(rank, first):
    """HTA's sampled PyTorch 2.0 traces: every NCCL kernel is ``ncclKernel_SendRecv_...``,
    whatever the call; each launch lies inside an ``nccl:`` annotation on its thread."""
    _, r = _parse(real(f"C/hta-trace_filter-sampled_rank-{rank}.json.gz"), "trace.json")
    w = r.rows("workload")
    assert sum(x["calls"] for x in w) == 10 and "SendRecv" not in {x["collective"] for x in w}
    assert {x["collective"]: 0 for x in w}.keys() == {"AllReduce", "AlltoAll", "AllGather"}
    assert sum(x["calls"] for x in w if x["collective"] == "AllReduce") == 4
    ar = [x for x in w if x["collective"] == "AllReduce" and x["size_bytes"] == first[0]]
    assert sum(x["total_us"] for x in ar) == pytest.approx(first[1]) and all(x["total_us"] for x in w)


def test_batched_point_to_point_operations_are_one_call_each_batch():
    """li-plus/playground's Megatron trace (PyTorch 2.1): ``batch_isend_irecv`` shows an
    ``nccl:send``/``nccl:recv`` per operation and an ``nccl:coalesced`` where the batch ends and
    its one kernel is launched: three batches, three SendRecv calls (four were counted)."""
    _, r = _parse(real("C/lp-megatron-rank_0-p2p-coalesced-excerpt.json"), "trace.json")
    assert _workload(r) == [("SendRecv", 512 * 32 * 1024 * 2, 3, pytest.approx(177.0 + 138837.0 + 113233.0), [0, 1, 2])]
    assert not r.issues


def test_rccl_generic_kernels_count_through_the_calls_that_launched_them():
    """TraceLens' MI300 DDP trace: every kernel is ``ncclDevKernel_Generic(...)``; twelve
    collective calls carry ``record_param_comms`` metadata (quarantined as "no NCCL kernels"
    before). Five kernels no call of the trace launched (the step before it) are reported."""
    _, r = _parse(real("C/tracelens-mi300-resnet-ddp-rccl-generic-kernels-excerpt.json"), "trace.json")
    w = r.rows("workload")
    assert sorted((x["collective"], x["size_bytes"], x["dtype"], x["calls"], x["group_size"]) for x in w) == [
        ("AllReduce", 2873320 * 2, "bfloat16", 3, 8), ("AllReduce", 8816192 * 2, "bfloat16", 3, 8),
        ("Broadcast", 20 * 8, "int64", 3, 8), ("Broadcast", 9600 * 2, "bfloat16", 3, 8)]
    assert sum(x["total_us"] for x in w if x["size_bytes"] == 2873320 * 2) == pytest.approx(6911.678 + 6678.4 + 6748.72)
    assert [i.reason.split(" that")[0] for i in r.issues] == ["5 NCCL kernel(s)"]


def test_pytorch_2_3_trace_keeps_its_counts():
    _, r = _parse(real("C/hta-nccl_parser_config-nccl_data.json.gz"), "trace.json")
    w = r.rows("workload")
    assert sum(x["calls"] for x in w if x["collective"] == "AllReduce") == 15
    assert sum(x["calls"] for x in w if x["collective"] == "Broadcast") == 6
    assert all(x["total_us"] for x in w) and {x["group_size"] for x in w} == {2}


# ---------------------------------------------------------------- 4. rccl-tests

@pytest.mark.parametrize("rel,coll,rows,library,tests_version,version", [
    ("A/issue-rocmsystems-pr3415-rccltests-2.17.9-rccl2.28.3-gfx1151-head-partial.txt", "AllReduce", 0, "rccl",
     "rccl-tests 2.17.9-users/speriaswamy-amd/gfx1151-rccl-tests-enablement:f220897c9b", "2.28.3"),
    ("A/issue-hpcaienvs-pr30-rccltests-mi300x-version-line-partial.txt", "AllReduce", 2, "rccl",
     "rccl-tests develop:83d38d9", None),
    ("A/issue-rccl-pr2075-broadcast-gfx1151-tail-footer-elided-partial.txt", "Broadcast", 20, "rccl", None, None),
    ("A/issue-rccl-pr2078-allreduce-mi300x-16rank-tail-footer-elided-partial.txt", "AllReduce", 8, "rccl", None, None),
    ("A/ncclebpf-nt2.18.0-broadcast-rtx5090-2rank-mpi.txt", "Broadcast", 36, "nccl", "2.18.0", "2.29.7"),
    ("A/superbench-nccl_allreduce.txt", "AllReduce", 68, "nccl", None, None),  # an NVIDIA device
    ("A/li-plus-sendrecv-a100-8gpu-fragment.txt", "SendRecv", 8, None, None, None),  # nothing says
])
def test_rccl_tests_outputs_are_read_and_recorded_with_their_library(rel, coll, rows, library, tests_version,
                                                                      version):
    fmt, r = _parse(real(rel), real(rel).name)
    run = r.rows("runs")[0]
    assert fmt == "nccl-tests-text" and len(r.rows("iterations")) == rows
    assert (run["collective"], run["library"], run["nccl_tests_version"], run["nccl_version"]) == (
        coll, library, tests_version, version)


def test_rccl_tests_rows_with_over_threshold_marks_are_kept():
    text = real("A/issue-rccl-pr2078-allreduce-mi300x-16rank-tail-footer-elided-partial.txt").read_text()
    text = text.replace("22410  191.65  359.35      0", "22410  191.65  359.35      2*")
    r = parse_nccltests_stream([text.encode()], source())
    assert [x["wrong"] for x in r.rows("iterations") if not x["in_place"]] == [0, 2, 0, 0] and not r.issues


def test_rccl_tests_head_facts():
    run = _parse(real("A/issue-rocmsystems-pr3415-rccltests-2.17.9-rccl2.28.3-gfx1151-head-partial.txt"))[1] \
        .rows("runs")[0]
    assert (run["gpu_name"], run["ranks"], run["min_bytes"], run["max_bytes"], run["outcome"]) == (
        "Radeon 8050S Graphics", 1, 1024, 4294967296, "failed")


# ---------------------------------------------------------------- 5. footers of rows not stored

@pytest.mark.parametrize("rel,footer,elided", [
    ("A/issue-rccl-pr2078-allreduce-mi300x-16rank-tail-footer-elided-partial.txt", 142.652, True),  # 1K..1G gone
    ("A/issue-rccl-pr2075-broadcast-gfx1151-tail-footer-elided-partial.txt", 3.41227, True),
    ("A/dstack-gcp-a4-b200-2node-hash-stripped.txt", 165.789, True),  # 8 B..4 MB left out of the doc
    ("A/issue-nccl340-allgather-nccl2.6.4-2gpu-noredop-tail.txt", 6.6972, True),
    ("A/a3mega-h100-2node-16rank-allreduce.txt", 70.742, False),
    ("A/coreweave-h100-8node-64gpu-sharp-elided.txt", 373.187, False),  # its "..." elides Rank lines only
    ("A/ncclebpf-nt2.18.0-allreduce-rtx5090-2rank-mpi.txt", 0.515158, False),  # 50 rounded rows
    ("A/issue-ncclt287-alltoall-1rank-rtx5090-inplace-NA.txt", 0.0, False),
    ("A/awsome-p4de-2node-srun-prefix.txt", None, None),  # no footer
])
def test_a_footer_is_flagged_when_the_stored_rows_do_not_give_it(rel, footer, elided):
    run = _parse(real(rel))[1].rows("runs")[0]
    assert run["avg_busbw_gbs"] == (pytest.approx(footer) if footer is not None else None)
    assert run["avg_busbw_elided"] is elided


def test_an_elision_line_inside_the_table_flags_the_footer():
    text = real("A/a3mega-h100-2node-16rank-allreduce.txt").read_text()
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("8 "))
    # the same rows, with a "..." line where a paste would have cut: the rows' mean still
    # matches, but the output says rows are missing
    text = "".join(lines[:first + 1] + ["...\n"] + lines[first + 1:])
    run = parse_nccltests_stream([text.encode()], source()).rows("runs")[0]
    assert run["avg_busbw_elided"] is True and run["avg_busbw_gbs"] == pytest.approx(70.742)
