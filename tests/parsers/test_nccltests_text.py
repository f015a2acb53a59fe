"""nccl-tests text: every real fixture in A/, values checked by hand against the files."""

from __future__ import annotations

import pytest

from ncclbot_sweep.parsers.nccltests_text import TextParser, parse_nccltests_text

from parser_fixtures import real, source

# file: (runs, iteration rows, (first size, first out-of-place time), (last size, last in-place time),
#        ranks, nodes, collective, outcome of the first run)
CASES = {
    "a3mega-h100-2node-16rank-allreduce.txt": (1, 62, (8, 135.8), (8589934592, 47743.0), 16, 2, "AllReduce", "ok"),
    "awsome-aws-batch-p5-trailing-ws.txt": (1, 64, (8, 12.90), (17179869184, 62200.0), None, None, "AllReduce", "ok"),
    "awsome-p4de-2node-srun-prefix.txt": (1, 58, (8, 164.3), (2147483648, 51406.0), None, None, "AllReduce", "ok"),
    "awsome-p5-2node-srun-prefix-16G.txt": (1, 64, (8, 69.12), (17179869184, 66109.0), None, None, "AllReduce", "ok"),
    "coreweave-gb200-144rank-2rack.txt": (1, 12, (536870912, 2156.8), (17179869184, 41557.0), 144, None, "AllReduce",
                                          "ok"),
    "coreweave-gb200-72rank-1rack-nccl2.26.2.txt": (1, 10, (536870912, 1806.7), (8589934592, 20006.0), 72, None,
                                                    "AllReduce", "ok"),
    "coreweave-h100-8node-64gpu-sharp-elided.txt": (1, 10, (536870912, 2984.6), (8589934592, 44094.0), None, None,
                                                    "AllReduce", "ok"),
    "dstack-gcp-a3high-allgather-c0-but-wrong0.txt": (1, 22, (8388608, 784.9), (8589934592, 160117.0), None, None,
                                                      "AllGather", "ok"),
    "dstack-gcp-a3mega-allgather-c0-hash-stripped.txt": (1, 22, (8388608, 166.6), (8589934592, 42701.0), None, None,
                                                         "AllGather", "ok"),
    "dstack-gcp-a4-b200-2node-hash-stripped.txt": (1, 22, (8388608, 156.9), (8589934592, 23702.0), None, None,
                                                   "AllReduce", "ok"),
    "gpusyslab-nt2.19.7-cuda-failure-early-abort.txt": (1, 0, None, None, None, None, "AllReduce", "failed"),
    "issue-hpcaienvs-pr30-rccltests-mi300x-version-line-partial.txt": (1, 2, (8388608, 91.10), (8388608, 94.94), 8, 1,
                                                                       "AllReduce", "ok"),
    "issue-nccl1244-allreduce-h20-16gpu-nvlstree-error-col-partial.txt": (1, 16, (4, 47.54), (512, 46.42), None, None,
                                                                          "AllReduce", "ok"),
    "issue-nccl1259-allreduce-h100-2gpu-graph10-nvls-partial.txt": (1, 4, (128, 5.56), (256, 5.83), 2, 1, "AllReduce",
                                                                    "ok"),
    "issue-nccl340-allgather-nccl2.6.4-2gpu-noredop-tail.txt": (2, 24, (65536, 16.57), (134217728, 3070.3), None, None,
                                                                "AllGather", "ok"),
    "issue-nccl398-allreduce-nccl2.4.8-v100-2node-debuginfo-partial.txt": (1, 0, None, None, 2, 2, "AllReduce",
                                                                           "failed"),
    "issue-nccl583-allreduce-a100-8proc-fork-header-nohash-partial.txt": (1, 0, None, None, 8, 1, "AllReduce",
                                                                          "failed"),
    "issue-ncclt-pr349-alltoall-gb200-N0-S1-timestamp-partial.txt": (1, 0, None, None, 4, 1, "AlltoAll", "failed"),
    "issue-ncclt107-two-independent-runs-no-mpi-duplicated-header.txt": (1, 0, None, None, 1, 1, "AllReduce", "failed"),
    "issue-ncclt128-reducescatter-2node-4gpu-zero-size-rows-partial.txt": (1, 14, (0, 5.70), (256, 23.18), None, None,
                                                                           "ReduceScatter", "ok"),
    "issue-ncclt176-allreduce-128gpu-error-column-partial.txt": (1, 12, (4096, 93.73), (131072, 117.4), None, None,
                                                                 "AllReduce", "ok"),
    "issue-ncclt249-allreduce-a10g-blocking-nohash-partial.txt": (1, 0, None, None, 1, 1, "AllReduce", "failed"),
    "issue-ncclt287-alltoall-1rank-rtx5090-inplace-NA.txt": (1, 2, (33554432, 19.56), (33554432, 0.78), 1, 1,
                                                             "AlltoAll", "ok"),
    "issue-ncclt294-allreduce-h100-multinode-pcidomain-busid-partial.txt": (1, 0, None, None, 12, 2, "AllReduce",
                                                                            "failed"),
    "issue-ncclt44-broadcast-2080ti-root0-error-col-partial.txt": (1, 22, (128, 7.15), (131072, 23.27), None, None,
                                                                   "Broadcast", "ok"),
    "issue-ncclt7-2018-header-nohash-dashes-partial.txt": (1, 0, None, None, None, None, None, "failed"),
    "li-plus-sendrecv-a100-8gpu-fragment.txt": (1, 8, (134217728, 1211.2), (1073741824, 5490.5), None, None,
                                                "SendRecv", "ok"),
    "ncclebpf-nt2.18.0-allreduce-1rank-debuginfo-head.txt": (1, 0, None, None, 1, 1, "AllReduce", "failed"),
    "ncclebpf-nt2.18.0-allreduce-rtx5090-2rank-mpi.txt": (1, 50, (8, 4355.47), (134217728, 57812.0), 2, 1, "AllReduce",
                                                          "ok"),
    "ncclebpf-nt2.18.0-broadcast-rtx5090-2rank-mpi.txt": (1, 36, (1024, 143.97), (134217728, 34784.6), 2, 1,
                                                          "Broadcast", "ok"),
    "superbench-nccl_allgather.txt": (1, 68, (0, 34.27), (8589934592, 32669.0), 8, 1, "AllGather", "ok"),
    "superbench-nccl_allreduce.txt": (1, 68, (0, 35.20), (8589934592, 63959.0), 8, 1, "AllReduce", "ok"),
    "superbench-nccl_broadcast.txt": (1, 68, (0, 34.61), (8589934592, 36599.0), 8, 1, "Broadcast", "ok"),
    "superbench-nccl_reduce.txt": (1, 68, (0, 36.90), (8589934592, 37539.0), 8, 1, "Reduce", "ok"),
}


def _parse(name: str):
    path = real(f"A/{name}")
    return parse_nccltests_text(path.read_bytes(), source(name))


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_fixture(name):
    runs_n, rows_n, first, last, ranks, nodes, coll, outcome = CASES[name]
    result = _parse(name)
    runs, rows = result.rows("runs"), result.rows("iterations")
    assert len(runs) == runs_n
    assert len(rows) == rows_n
    if first:
        assert (rows[0]["size_bytes"], rows[0]["in_place"]) == (first[0], False)
        assert rows[0]["time_us"] == pytest.approx(first[1])
        assert (rows[-1]["size_bytes"], rows[-1]["in_place"]) == (last[0], True)
        assert rows[-1]["time_us"] == pytest.approx(last[1])
    assert runs[0]["ranks"] == ranks
    assert runs[0]["nodes"] == nodes
    assert runs[0]["collective"] == coll
    assert runs[0]["outcome"] == outcome


def test_modern_header_fields_and_hosts():
    run = _parse("a3mega-h100-2node-16rank-allreduce.txt").rows("runs")[0]
    assert run["hosts"] == "ztan-mig-235z,ztan-mig-gq73"
    assert run["gpus_per_node"] == 8
    assert (run["warmup_iters"], run["iters"], run["agg_iters"], run["validation"], run["graph"]) == (5, 20, 1, 1, 0)
    assert run["avg_busbw_gbs"] == pytest.approx(70.742)
    assert run["gpu_name"] == "NVIDIA H100 80GB HBM3"
    rows = _parse("a3mega-h100-2node-16rank-allreduce.txt").rows("iterations")
    assert all(r["n_iters"] == 20 and r["wrong"] == 0 and r["redop"] == "sum" and r["root"] == -1 for r in rows)


def test_versions_from_218_header():
    run = _parse("ncclebpf-nt2.18.0-broadcast-rtx5090-2rank-mpi.txt").rows("runs")[0]
    assert run["nccl_tests_version"] == "2.18.0"
    assert run["nccl_version"] == "2.29.7"  # nccl-library=22907
    assert run["binary"] == "broadcast_perf_mpi"


def test_error_column_and_na():
    rows = _parse("issue-nccl1244-allreduce-h20-16gpu-nvlstree-error-col-partial.txt").rows("iterations")
    in_place = [r for r in rows if r["in_place"]]
    assert in_place[0]["error"] == pytest.approx(4e-07)  # first row, in-place
    assert rows[0]["wrong"] is None
    na = _parse("issue-ncclt287-alltoall-1rank-rtx5090-inplace-NA.txt").rows("iterations")
    assert [r["wrong"] for r in na] == [0, None]  # out-of-place, then in-place
    assert na[1]["algbw_gbs"] == pytest.approx(43046.10)
    sb = _parse("superbench-nccl_allreduce.txt").rows("iterations")
    assert all(r["error"] is None for r in sb)


def test_failure_reason_and_versions_of_early_abort():
    run = _parse("gpusyslab-nt2.19.7-cuda-failure-early-abort.txt").rows("runs")[0]
    assert "CUDA driver version is insufficient" in run["failure"]
    assert run["nccl_tests_version"] == "2.19.7"
    assert run["iters"] == 50


def test_duplicated_header_is_explained():
    run = _parse("issue-ncclt107-two-independent-runs-no-mpi-duplicated-header.txt").rows("runs")[0]
    assert "without MPI" in run["failure"]


def test_nccl_warn_is_not_a_failure_and_version_read():
    run = _parse("issue-nccl398-allreduce-nccl2.4.8-v100-2node-debuginfo-partial.txt").rows("runs")[0]
    assert run["nccl_version"] == "2.4.8"
    assert "NCCL WARN" not in (run["failure"] or "")


def test_second_command_starts_second_run():
    runs = _parse("issue-nccl340-allgather-nccl2.6.4-2gpu-noredop-tail.txt").rows("runs")
    assert [r["collective"] for r in runs] == ["AllGather", "Broadcast"]
    assert runs[0]["run_id"] == "run" and runs[1]["run_id"] == "run.1"


SYNTH = """# nThread 1 nGpus 1 minBytes 8 maxBytes 32 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#  Rank  0 Group  0 Pid   1 on node-a device  0 [0000:04:00] GPU
#  Rank  1 Group  0 Pid   2 on node-b device  0 [0000:04:00] GPU
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    1e+01    0.00    0.00      0    11.0    0.00    0.00      0
host:1:1 [0] NCCL INFO something in the middle
          16             4     float     sum      -1    12.0    0.00    0.00      0    13.0    0.00    0.00      0
          32             8     float     sum      -1    14.0    0.00    0.00      0    15.0    0.00    0.00      0
           8             2     float     sum      -1    16.0    0.00    0.00      0    17.0    0.00    0.00      0
          16             4     float     sum      -1    18.0    0.00    0.00    N/A    19.0    0.00    0.00      0
# Out of bounds values : 0 OK
"""


def test_cycles_interleaved_noise_and_g_format():
    result = parse_nccltests_text(SYNTH, source("all_reduce_perf.txt"))
    rows = result.rows("iterations")
    assert [r["cycle"] for r in rows if not r["in_place"]] == [0, 0, 0, 1, 1]
    assert rows[0]["time_us"] == 10.0  # %g form 1e+01
    assert [r["wrong"] for r in rows if not r["in_place"]][4] is None
    assert result.rows("runs")[0]["cycles"] == 2
    assert result.rows("runs")[0]["nodes"] == 2


def test_streaming_in_tiny_chunks_equals_whole():
    whole = parse_nccltests_text(SYNTH, source()).rows("iterations")
    parser = TextParser(source())
    data = SYNTH.encode()
    for i in range(0, len(data), 7):
        parser.feed(data[i:i + 7])
    chunked = parser.close().rows("iterations")
    assert [(r["size_bytes"], r["time_us"], r["cycle"]) for r in chunked] == \
           [(r["size_bytes"], r["time_us"], r["cycle"]) for r in whole]


def test_malformed_row_becomes_issue_with_line():
    text = SYNTH.replace("          32             8     float     sum      -1    14.0",
                         "          32             8     float     sum      -1")
    result = parse_nccltests_text(text, source())
    assert any(i.line == 10 and "fields" in i.reason for i in result.issues)
    assert len(result.rows("iterations")) == 8


def test_ms_units_of_2017_layout():
    text = ("nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            "   bytes    N    type      op     time  algbw  busbw    res     time  algbw  busbw    res\n"
            "                                   (ms) (GB/s) (GB/s)            (ms) (GB/s) (GB/s)\n"
            "       8    2   float     sum    0.012   0.00   0.00  0e+00    0.011   0.00   0.00  0e+00\n")
    rows = parse_nccltests_text(text, source()).rows("iterations")
    assert rows[0]["time_us"] == pytest.approx(12.0)
    assert rows[0]["count"] == 2 and rows[0]["redop"] == "sum"


def test_garbage_is_unusable_not_an_exception():
    result = parse_nccltests_text(b"\x00\xff hello\nworld\n", source())
    assert result.unusable and result.issues


PER_ITER_AND_TIMESTAMPS = """# nccl-tests version 2.19.7 nccl-headers=23004 nccl-library=23004
# nThread 1 nGpus 8 minBytes 8 maxBytes 32 step: 4(factor) warmup iters: 2 iters: 5 agg iters: 1 validation: 1 graph: 0 unalign: 0
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%            timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)  %Y-%m-%d %H:%M:%S
           8             2     float     sum      -1    97.45    0.00    0.00       0    84.17   111.65   111.65    11.93    83.58    0.00    0.00       0    77.19    87.53    87.53     4.53  2026-12-01 05:45:25
          32             8     float     sum      -1   105.39    0.00    0.00       0    88.60   155.89   155.89    24.34    80.99    0.00    0.00       0    77.94    85.07    85.07     3.38  2026-12-01 05:45:26
# Out of bounds values : 0 OK
"""


def test_per_iteration_columns_and_trailing_timestamp():
    rows = parse_nccltests_text(PER_ITER_AND_TIMESTAMPS, source()).rows("iterations")
    assert [(r["size_bytes"], r["in_place"], r["time_us"]) for r in rows] == [
        (8, False, 97.45), (32, False, 105.39), (8, True, 83.58), (32, True, 80.99)]
    assert rows[1]["timestamp"] == "2026-12-01 05:45:26" and rows[0]["wrong"] == 0


def test_mpirun_timestamp_prefix():
    text = "".join(f"Thu Jul 18 15:41:05 2024<stdout>:{line}\n" for line in SYNTH.splitlines())
    rows = parse_nccltests_text(text, source()).rows("iterations")
    assert len(rows) == 10 and rows[0]["time_us"] == 10.0


def test_crlf_tabs_and_utf8_noise():
    text = SYNTH.replace("\n", "\r\n").replace("     float", "\tfloat") + "h\u00e9llo w\u00f6rld\r\n"
    result = parse_nccltests_text(text.encode("utf-8"), source())
    rows = result.rows("iterations")
    assert len(rows) == 10 and rows[0]["dtype"] == "float" and rows[-1]["time_us"] == 19.0
    assert not result.issues


def test_failure_during_the_table_keeps_rows():
    cut = SYNTH.split("          32")[0]
    text = cut + "node-a: Test NCCL failure common.cu:1279 'unhandled system error'\n .. node-a pid 1: Test failure\n"
    result = parse_nccltests_text(text, source())
    run = result.rows("runs")[0]
    assert run["outcome"] == "failed" and "unhandled system error" in run["failure"]
    assert [r["size_bytes"] for r in result.rows("iterations") if not r["in_place"]] == [8, 16]


def test_cycles_with_one_iteration_are_per_iteration_rows():
    text = SYNTH.replace("iters: 20", "iters: 1")
    rows = parse_nccltests_text(text, source()).rows("iterations")
    assert [(r["size_bytes"], r["iteration"], r["n_iters"]) for r in rows if not r["in_place"]] == [
        (8, 0, 1), (16, 0, 1), (32, 0, 1), (8, 1, 1), (16, 1, 1)]
    averaged = parse_nccltests_text(SYNTH, source()).rows("iterations")
    assert all(r["iteration"] is None and r["n_iters"] == 20 for r in averaged)
