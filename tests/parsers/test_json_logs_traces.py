"""nccl-tests JSON, NCCL logs, traces and Kineto: real fixtures in A/, B/ and C/, hand-checked."""

from __future__ import annotations

import gzip
import json

import pytest

from ncclbot_sweep.parsers import detect_format, parse_source
from ncclbot_sweep.names import torch_collective
from ncclbot_sweep.parsers.kineto import kernel_collective
from ncclbot_sweep.parsers.nccl_log import parse_nccl_log

from parser_fixtures import real, source


def _parse(rel: str, fmt: str | None = None, **meta):
    path = real(rel)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    fmt = fmt or detect_format(data[:65536])
    return fmt, parse_source(fmt, data, source(path.name, **meta))


def test_json_v3_per_iteration_rows():
    fmt, r = _parse("A/gpusyslab-nt2.19.7-allreduce-t4-2gpu-J-output.json")
    assert fmt == "nccl-tests-json"
    rows = r.rows("iterations")
    assert len(rows) == 100  # 50 times_us per placement
    assert [rows[0]["iteration"], rows[49]["iteration"]] == [0, 49]
    assert rows[0]["time_us"] == pytest.approx(23677.312851)
    assert rows[49]["time_us"] == pytest.approx(23474.176407) and not rows[49]["in_place"]
    assert rows[-1]["time_us"] == pytest.approx(23526.432037) and rows[-1]["in_place"]
    assert rows[0]["dtype"] == "half" and rows[0]["root"] == -1 and rows[0]["wrong"] == 0
    run = r.rows("runs")[0]
    assert (run["nccl_version"], run["ranks"], run["iters"], run["outcome"]) == ("2.29.3", 2, 50, "ok")
    assert run["hosts"] == "22f64f592750" and run["avg_busbw_gbs"] == pytest.approx(5.724297)


def test_json_truncated_fork_keeps_complete_sizes():
    fmt, r = _parse("A/issue-ncclt-pr318-fork-json-structured-output-partial.txt")
    assert fmt == "nccl-tests-json"
    rows = r.rows("iterations")
    assert [x["size_bytes"] for x in rows] == [33554432, 33554432, 67108864, 67108864]
    assert rows[0]["time_us"] == pytest.approx(1494.278386) and rows[1]["error"] is None  # ip_error "N/A"
    run = r.rows("runs")[0]
    assert run["collective"] == "AlltoAll" and run["outcome"] == "failed"
    assert any("truncated" in i.reason for i in r.issues)


def test_rccl_jsonlines():
    fmt, r = _parse("A/issue-rccltests-pr93-jsonlines-output-partial.txt")
    assert fmt == "rccl-tests-jsonlines"
    rows = r.rows("iterations")
    assert len(rows) == 5 and rows[0]["size_bytes"] == 1024 and rows[-1]["size_bytes"] == 4096
    assert rows[1]["in_place"] and rows[0]["wrong"] == 0
    assert r.rows("runs")[0]["ranks"] == 4


def test_tuning_three_block_and_choices():
    fmt, r = _parse("B/ncclebpf-nccl2.29.7-tuning-3block-table-algo-choice.txt")
    assert fmt == "nccl-log"
    tt = r.rows("tuning_tables")
    assert len(tt) == 105  # 5 collectives x (3 blocks of 9 columns minus PAT's 6 empty)
    ring_ll_ar = next(x for x in tt if x["collective"] == "AllReduce" and x["arm"] == "Ring/LL")
    assert (ring_ll_ar["latency_us"], ring_ll_ar["algbw_gbs"]) == (16.6, 1.2)
    pat = next(x for x in tt if x["collective"] == "AllGather" and x["arm"] == "PAT/Simple")
    assert (pat["latency_us"], pat["algbw_gbs"]) == (17.6, 3.6)
    assert {x["layout"] for x in tt} == {"three-block"} and tt[0]["nccl_version"] == "2.29.7"
    assert tt[0]["nchannels"] is None  # the excerpt has no "coll channels" or "Channel xx/yy" line
    ch = r.rows("choices")
    # 72 per-call lines: 18 sizes once, then 9 sizes six times each (uniq -c on the file)
    assert len(ch) == 27 and sum(c["calls"] for c in ch) == 72
    assert (ch[0]["collective"], ch[0]["size_bytes"], ch[0]["arm"], ch[0]["channels"]) == ("Broadcast", 1024,
                                                                                          "Ring/LL", 1)
    assert (ch[-1]["size_bytes"], ch[-1]["arm"], ch[-1]["channels"], ch[-1]["calls"]) == (67108864, "Ring/Simple",
                                                                                          4, 6)
    assert ch[-1]["seq"] == 66 and ch[-1]["line"] == 95
    run = r.rows("runs")[0]
    assert run["arm_observed"] == "Ring/Simple" and "libnccl-tuner.so" in run["plugins"]


@pytest.mark.parametrize("rel,rows,cell", [
    ("B/issue-nccl754-tuning-collnet-9col-partial.txt", 26, ("Broadcast", "Ring/Simple", 18.0, 3.0)),
    ("B/issue-ncclt89-nccl2.8.3-t4-16rank-tuning-partial.txt", 12, ("Broadcast", "Ring/Simple", 18.0, 9.0)),
    ("B/issue-nccl1154-nccl2.19-h800-tuning-algorithm-protocol-rows-partial.txt", 2, ("Broadcast", "Tree/LL", 0.0, 0.0)),
])
def test_older_tuning_layouts(rel, rows, cell):
    _, r = _parse(rel)
    tt = r.rows("tuning_tables")
    assert len(tt) == rows
    coll, arm, lat, bw = cell
    hit = next(x for x in tt if x["collective"] == coll and x["arm"] == arm)
    assert (hit["latency_us"], hit["algbw_gbs"]) == (lat, bw)


def test_collnet_column_is_collnetdirect_and_cut_rows_are_issues():
    _, r = _parse("B/issue-nccl754-tuning-collnet-9col-partial.txt")
    assert {x["arm"] for x in r.rows("tuning_tables") if x["arm"].startswith("CollNet")} == {
        "CollNetDirect/LL", "CollNetDirect/LL128", "CollNetDirect/Simple"}
    assert any(i.line == 5 and "cut short" in i.reason for i in r.issues)


def test_header_only_table_is_reported():
    _, r = _parse("B/issue-nccl340-nccl2.6.4-tuning-header-interleaved-partial.txt")
    assert not r.rows("tuning_tables")
    assert any("without rows" in i.reason for i in r.issues)


def test_numeric_choices():
    _, r = _parse("B/issue-nccl1595-bytes-algo-proto-time-numeric-partial.txt")
    ch = r.rows("choices")
    assert len(ch) == 1 and ch[0]["calls"] == 5  # five identical consecutive lines
    assert ch[0]["arm"] == "Ring/Simple" and ch[0]["predicted_us"] == pytest.approx(3970.683594)
    assert ch[0]["size_bytes"] == 805306368 and ch[0]["collective"] is None
    cost = r.rows("cost_tables")
    assert [(c["size_bytes"], c["arm"], c["predicted_us"], c["source"]) for c in cost] == [
        (805306368, "Ring/Simple", pytest.approx(3970.683594), "nccl-log-choice")]


@pytest.mark.parametrize("rel,n,first", [
    ("B/issue-nccl203-coll-opcount-hex-tensorflow-2gpu-partial.txt", 7, ("AllReduce", 0x1a, 64, 256, 2)),
    ("B/issue-nccl1193-coll-opcount-ray-worker-prefix-128rank-partial.txt", 4,
     ("AllReduce", 0x139d, 7382228, 29528912, 128)),
    ("B/issue-torchtitan1369-coll-allgather-reducescatter-tp2-partial.txt", 7,
     ("AllGather", 0xd, 2097152, 2097152 * 4 * 2, 2)),
    ("B/issue-nccl584-coll-send-recv-opcount-nil-buffers-partial.txt", 7, ("Send", 0x12, 2420736, 9682944, 2)),
])
def test_coll_lines(rel, n, first):
    _, r = _parse(rel)
    ch = r.rows("choices")
    assert len(ch) == n
    c = ch[0]
    assert (c["collective"], c["op_count"], c["count"], c["size_bytes"], c["ranks"]) == first
    assert c["kind"] == "coll"


def test_invalid_arm_warning_and_forced_arm_mismatch():
    text = ("h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
            "h:1:1 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n"
            "h:1:1 [0] misc.cc:1 NCCL WARN Error : no algorithm/protocol available for function AllReduce\n")
    result, facts = parse_nccl_log(text, source(arm="Tree/LL"))
    assert facts.invalid_arm and facts.nccl_version == "2.21.5"
    cols = facts.as_run_columns("Tree/LL")
    assert cols["arm_mismatch"] is True and cols["arm_observed"] == "Ring/LL"
    assert facts.as_run_columns("Ring/LL")["arm_mismatch"] is False


def test_func_matrix_and_env():
    text = ("h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to ring,tree\n"
            "h:1:1 [0] NCCL INFO Enabled NCCL Func/Proto/Algo Matrix:\n"
            "     Function |       LL     LL128    Simple   |          Tree           Ring  CollNetDirect  \n"
            "    AllReduce |        1         2         1   |             1              1              0  \n")
    _, facts = parse_nccl_log(text, source())
    assert facts.algo_env == "ring,tree"
    assert facts.func_matrix["AllReduce"] == {"LL": 1, "LL128": 2, "Simple": 1, "Tree": 1, "Ring": 1,
                                               "CollNetDirect": 0}


def test_profiler_trace_v1_latency():
    fmt, r = _parse("C/nccl-2.24-ext-profiler-example-trace-readme-v1.json.txt")
    assert fmt == "nccl-profiler-trace"
    ev = r.rows("live_events")
    assert len(ev) == 1
    assert ev[0]["collective"] == "AllReduce" and ev[0]["arm"] == "Ring/LL" and ev[0]["rank"] == 1
    assert ev[0]["latency_us"] == pytest.approx(772209.317383 - 764237.294922)
    assert ev[0]["size_bytes"] == 32768 * 4


@pytest.mark.parametrize("enum, width", [("ncclUint8", 1), ("ncclUint32", 4), ("ncclUint64", 8), ("ncclInt", 4),
                                          ("ncclHalf", 2), ("ncclBfloat16", 2), ("ncclFloat8e5m2", 1),
                                          ("ncclDouble", 8)])
def test_profiler_trace_sizes_every_nccl_datatype(enum, width):
    """Bytes per element come from names' data-type table (enum names and NCCL's legacy aliases)."""
    args = {"Count": 1000, "Datatype": enum, "Algorithm": "RING", "Protocol": "LL", "Rank": 0}
    events = [{"name": "AllReduce", "cat": "COLL", "ph": "b", "id": 0, "pid": 1, "tid": 1, "ts": 1.0, "args": args},
              {"name": "AllReduce", "cat": "COLL", "ph": "e", "id": 0, "pid": 1, "tid": 1, "ts": 3.5}]
    trace = "[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n"  # one event a line, as NCCL writes
    ev = parse_source("nccl-profiler-trace", trace.encode(), source("trace.json")).rows("live_events")
    assert [(e["size_bytes"], e["latency_us"]) for e in ev] == [(1000 * width, 2.5)]


def test_profiler_trace_new_generation_latency_from_gpu_clocks():
    fmt, r = _parse("C/nccl-ext-profiler-example-trace-readme.json.txt")
    assert fmt == "nccl-profiler-trace"
    ev = r.rows("live_events")
    # COLL id 0 lost its end to the truncation; its KernelCh clocks: 1756135989724672000..732831232 ns
    assert len(ev) == 1 and ev[0]["kind"] == "coll-gpu"
    assert ev[0]["latency_us"] == pytest.approx((1756135989732831232 - 1756135989724672000) / 1000)
    assert (ev[0]["collective"], ev[0]["arm"], ev[0]["size_bytes"]) == ("AllReduce", "Ring/Simple", 262144 * 4)
    assert any(i.line == 43 and "marker" in i.reason for i in r.issues)
    assert any("no end" in i.reason for i in r.issues)


def test_inspector_json_and_prometheus():
    fmt, r = _parse("C/nccl-inspector-plugin-output-v4.json")
    assert fmt == "nccl-inspector-json"
    ev = r.rows("live_events")[0]
    assert (ev["collective"], ev["size_bytes"], ev["latency_us"], ev["rank"], ev["ranks"]) == (
        "AllReduce", 17179869184, 61974, 2, 8)
    fmt, r = _parse("C/nccl-inspector-prometheus-metrics.txt")
    assert fmt == "nccl-inspector-prometheus"
    ev = r.rows("live_events")
    assert len(ev) == 2
    assert (ev[0]["collective"], ev[0]["arm"], ev[0]["latency_us"], ev[0]["size_bytes"]) == (
        "AllReduce", "Ring/LL", 9498.47, 4 << 30)


def test_kineto_metadata_on_kernels_full_trace():
    fmt, r = _parse("C/hta-nccl_parser_config-nccl_data.json.gz")
    assert fmt == "kineto-trace"
    w = r.rows("workload")
    assert sum(x["calls"] for x in w if x["collective"] == "AllReduce") == 15
    assert sum(x["calls"] for x in w if x["collective"] == "Broadcast") == 6
    big = next(x for x in w if x["collective"] == "AllReduce" and x["size_bytes"] == 6637568 * 4)
    assert big["group_size"] == 2 and big["dtype"] == "float" and big["total_us"] > 0


def test_kineto_excerpt_first_kernel():
    _, r = _parse("C/hta-nccl_data-excerpt.json")
    w = r.rows("workload")
    ar = next(x for x in w if x["collective"] == "AllReduce" and x["size_bytes"] == 6637568 * 4)
    assert ar["total_us"] >= 2636.669


@pytest.mark.parametrize("rel,coll", [
    ("C/lp-ddp-rank_0-excerpt.json", "AllReduce"),
    ("C/lp-amp-rank_0-excerpt.json", "AllReduce"),
    ("C/lp-zero1-rank_0-excerpt.json", None),
    ("C/hta-trace_diff-control-excerpt.json", "AllReduce"),
    ("C/hta-negative_queue_rank0-excerpt.json", "SendRecv"),
    ("C/hta-trace_filter-rank0-excerpt.json", "SendRecv"),
    # PyTorch 2.0 with an NCCL that names every kernel SendRecv: the launches tie them to their calls
    ("C/hta-trace_filter-sampled_rank-0.json.gz", "AllReduce"),
    ("C/hta-trace_filter-sampled_rank-1.json.gz", "AllReduce"),
])
def test_kineto_older_traces(rel, coll):
    fmt, r = _parse(rel)
    assert fmt == "kineto-trace"
    w = r.rows("workload")
    assert w and all(x["calls"] >= 1 for x in w)
    if coll:
        assert any(x["collective"] == coll and x["total_us"] for x in w)


def test_kineto_ddp_sizes_from_annotations():
    _, r = _parse("C/lp-ddp-rank_0-excerpt.json")
    ar = [x for x in r.rows("workload") if x["collective"] == "AllReduce"]
    assert any(x["size_bytes"] == 2049000 * 4 and x["total_us"] == pytest.approx(2274) for x in ar)


@pytest.mark.parametrize("rel,size,total,dtype", [
    # annotation nccl:all_reduce Input Dims [[2048000]] float; kernel ncclDevKernel_AllReduce_Sum_f32_RING_LL 35591 us
    ("C/lp-amp-rank_0-excerpt.json", 2048000 * 4, 35591.0, "float"),
    # annotation [[45310188]] float; kernel ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem) 1808 us
    ("C/hta-trace_diff-control-excerpt.json", 45310188 * 4, 1808.0, "float"),
])
def test_kineto_annotation_matched_to_kernel(rel, size, total, dtype):
    _, r = _parse(rel)
    hit = [x for x in r.rows("workload") if x["collective"] == "AllReduce" and x["size_bytes"] == size]
    assert len(hit) == 1 and hit[0]["total_us"] == pytest.approx(total) and hit[0]["dtype"] == dtype


def test_kineto_dtype_spellings_are_normalised():
    _, r = _parse("C/lp-zero1-rank_0-excerpt.json")
    assert {x["dtype"] for x in r.rows("workload")} <= {"bfloat16", "float"}


def test_kernel_names_old_and_new():
    assert kernel_collective("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "AllReduce"
    assert kernel_collective("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)") == "AllReduce"
    assert kernel_collective("ncclDevKernel_Broadcast_RING_LL(x)") == "Broadcast"
    assert kernel_collective("volta_sgemm") is None
    assert torch_collective("nccl:_all_gather_base") == "AllGather"
    assert torch_collective("reduce_scatter_tensor") == "ReduceScatter"
    assert torch_collective("wait") is None


TRACE = """# ncclbot-trace v1
kind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,auto_arm,policy,latency_us,reward,round,sync_us
pull,1000,00000000deadbeef,0,16,2,AllReduce,1048576,1,Ring/LL128,Ring/Simple,ucb1,35.5,0.9,1,
sync,2000,00000000deadbeef,0,16,2,,,,,,,,,1,12.5
pull,3000,00000000deadbeef,0,16,2,AllReduce,1048576,2,bad
"""


def test_plugin_trace():
    assert detect_format(TRACE.encode()) == "ncclbot-trace"
    r = parse_source("ncclbot-trace", TRACE.encode(), source())
    ev = r.rows("live_events")
    assert len(ev) == 2
    assert (ev[0]["arm"], ev[0]["auto_arm"], ev[0]["latency_us"], ev[0]["ranks"], ev[0]["nodes"]) == (
        "Ring/LL128", "Ring/Simple", 35.5, 16, 2)
    assert ev[1]["kind"] == "sync" and ev[1]["sync_us"] == 12.5
    assert [i.line for i in r.issues] == [5]


def test_plugin_trace_wrong_version_header_is_unusable():
    r = parse_source("ncclbot-trace", b"# ncclbot-trace v1\nfoo,bar\n", source())
    assert r.unusable


def test_nchannels_from_channel_lines_and_init_scale():
    text = ("h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"
            "h:1:2 [0] NCCL INFO Channel 00/02 :    0   1\n"
            "h:1:2 [0] NCCL INFO Channel 01/02 :    0   1\n"
            "h:1:2 [0] NCCL INFO Latency/AlgBw |    Tree/    LL |    Ring/Simple |\n"
            "h:1:2 [0] NCCL INFO     AllReduce |     4.4/   1.2 |    18.0/  21.0 |\n")
    result, facts = parse_nccl_log(text, source())
    tt = result.rows("tuning_tables")
    assert [(r["arm"], r["latency_us"], r["algbw_gbs"]) for r in tt] == [("Tree/LL", 4.4, 1.2),
                                                                        ("Ring/Simple", 18.0, 21.0)]
    assert {(r["nchannels"], r["nodes"], r["ranks"]) for r in tt} == {(2, 1, 2)}


def test_stdout_with_debug_lines_feeds_the_log_parser():
    from test_nccltests_text import SYNTH

    log = real("B/ncclebpf-nccl2.29.7-tuning-3block-table-algo-choice.txt").read_text()
    head, rows = SYNTH.split("#       size", 1)
    chatter = "h:1:1 [0] NCCL INFO Init COMPLETE\n" * 50
    text = head + chatter + log + "#       size" + rows
    r = parse_source("nccl-tests-text", text.encode(), source("all_reduce_perf.log"))
    assert len(r.rows("tuning_tables")) == 105 and sum(c["calls"] for c in r.rows("choices")) == 72
    run = r.rows("runs")[0]
    assert run["nccl_version"] == "2.29.7" and "libnccl-tuner.so" in run["plugins"]
    assert len(r.rows("iterations")) == 10
