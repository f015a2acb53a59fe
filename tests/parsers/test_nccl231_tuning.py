"""NCCL 2.31+'s per-call TUNING pairs (``Input: {...}`` / ``Best tuning {...}``) -> ``choices``
rows of kind ``tuning`` with NCCL's predicted time. The two fixtures in tests/fixtures/field are
built from NCCL's format strings (README there names the commits)."""

from __future__ import annotations

import pytest

from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest
from ncclbot_sweep.parsers import detect_format, parse_source
from ncclbot_sweep.parsers.nccl_log import parse_nccl_log

from parser_fixtures import FIELD, source

TWO_RANKS = "nccl2.31.2-tuning-pairs-2rank-symmetric.txt"
DEV_TUNER = "nccl2.31-dev-tuning-pairs-binary-mask-tuner-cut.txt"
GENERAL, SYMMETRIC = (1 << 21) - 1, (1 << 39) - (1 << 21)
PREFIX = "h:7:7 [0] NCCL INFO "


def _parse(name: str):
    data = (FIELD / name).read_bytes()
    fmt = detect_format(data[:65536])
    assert fmt == "nccl-log"
    return parse_source(fmt, data, source(name))


def _tuning(result, comm=None):
    return [r for r in result.rows("choices") if r["kind"] == "tuning" and comm in (None, r["comm"])]


def test_two_ranks_every_pass_of_every_collective():
    r = _parse(TWO_RANKS)
    assert not r.issues
    rank0 = _tuning(r, "0x55d0c0a1b2c0")
    got = [(x["collective"], x["size_bytes"], x["arm"], x["sym_kernel"], x["tuning_mask"], x["predicted_us"],
            x["channels"], x["calls"]) for x in rank0]
    assert got == [
        ("AllReduce", 1048576, "Ring/Simple", None, GENERAL, 24.412001, 2, 3),  # three identical calls
        ("AllGather", 8388608, "Ring/LL128", None, GENERAL, 61.25, 4, 1),       # nBytes: the full buffer
        ("AllReduce", 262144, None, "AllReduce_RSxLD_AGxST", SYMMETRIC, 9.871234, 16, 1),
        ("AllReduce", 4194304, "Ring/Simple", None, SYMMETRIC, 58.112, 4, 1),  # fell back: nested pass folded
        ("AllReduce", 4194304, "Ring/Simple", None, GENERAL, 58.112, 4, 1),    # ... then the regular pass
    ]
    assert [x["line"] for x in rank0] == [5, 26, 33, 38, 45]
    assert {(x["count"], x["datatype"], x["ranks"]) for x in rank0[:1]} == {(262144, "float", 2)}
    rank1 = _tuning(r, "0x5612f3e4d5a0")
    assert [x[1:] for x in got] == [(x["size_bytes"], x["arm"], x["sym_kernel"], x["tuning_mask"],
                                     x["predicted_us"], x["channels"], x["calls"]) for x in rank1]
    algo = [x for x in r.rows("choices") if x["kind"] == "algo"]  # rank 0's "Bytes -> Algo" lines
    assert [(x["collective"], x["size_bytes"], x["arm"], x["channels"], x["calls"]) for x in algo] == [
        ("AllReduce", 1048576, "Ring/Simple", 2, 3), ("AllGather", 8388608, "Ring/LL128", 4, 1),
        ("AllReduce", 4194304, "Ring/Simple", 4, 1)]
    seqs = [x["seq"] for x in r.rows("choices")]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    cost = r.rows("cost_tables")  # general passes only, once per (context, arm)
    assert [(c["collective"], c["size_bytes"], c["arm"], c["predicted_us"], c["source"]) for c in cost] == [
        ("AllReduce", 1048576, "Ring/Simple", 24.412001, "nccl-log-choice"),
        ("AllGather", 8388608, "Ring/LL128", 61.25, "nccl-log-choice"),
        ("AllReduce", 4194304, "Ring/Simple", 58.112, "nccl-log-choice")]
    run = r.rows("runs")[0]
    assert run["nccl_version"] == "2.31.2" and run["arm_observed"] == "Ring/Simple"


def test_dev_format_binary_mask_tuner_and_a_cut_end():
    r = _parse(DEV_TUNER)
    rows = _tuning(r)
    assert [(x["collective"], x["size_bytes"], x["arm"], x["tuning_mask"], x["predicted_us"], x["calls"])
            for x in rows] == [("AllReduce", 16777216, "Ring/LL128", GENERAL, 0.0, 2),
                               ("Broadcast", 65536, "Ring/LL", GENERAL, 9.625, 1)]
    assert not r.rows("cost_tables"), "a tuner's 0.0 (or its untouched value) is no prediction of NCCL's model"
    assert [i.reason for i in r.issues] == [
        "1 TUNING Input line(s) without their Best tuning line (log cut short, or the call failed)"]
    assert r.rows("runs")[0]["nccl_version"] == "2.31.0"


@pytest.mark.parametrize("best,expected", [
    ("timeUs = -1.000000,  .algo = RING, .proto = SIMPLE", (None, "Ring/Simple")),  # one rank: no model ran
    ("timeUs = nan,  .algo = RING, .proto = SIMPLE", (None, "Ring/Simple")),
    ("timeUs = inf,  .algo = TREE, .proto = LL", (None, "Tree/LL")),
    ("timeUs = 3.5,  .algo = Unknown, .proto = Unknown", (3.5, None)),
    ("timeUs = oops,  .algo = NOPE, .proto = SIMPLE", (None, None)),
])
def test_odd_best_lines_give_nulls_not_errors(best, expected):
    text = (PREFIX + "Input: { .comm = (nil), .tuningMask = 0x1fffff, .func = AllReduce, .nBytes = 4096, .count = 1024, "
            ".dataType = 7 }\n" + PREFIX + "Best tuning { .id = 5, " + best + ", nChannels = -1 }\n")
    result, _ = parse_nccl_log(text, source())
    (row,) = result.rows("choices")
    assert (row["predicted_us"], row["arm"], row["channels"]) == (*expected, None)
    assert not result.rows("cost_tables") or expected[0] is not None


def test_malformed_and_unpaired_lines():
    text = "".join(PREFIX + line + "\n" for line in [
        "Best tuning { .id = 1, timeUs = 2.0,  .algo = TREE, .proto = LL }",          # its Input came before
        "Best tuning, algorithm, RING, protocol, SIMPLE",                                # enqueue's echo: not a pair
        "Input: { .comm = 0x1, .tuningMask = garbage, .func = AllGatherV, .nBytes = x, .count = 7 }",
        "Best tuning { .id = 4, .valid = 1, timeUs = 1.25,  .algo = RING, .proto = LL128 }",
        "Input: { truncated",
    ])
    result, _ = parse_nccl_log(text, source())
    (row,) = result.rows("choices")
    assert (row["collective"], row["size_bytes"], row["tuning_mask"], row["arm"], row["predicted_us"]) == (
        None, None, None, "Ring/LL128", 1.25)
    assert len(result.issues) == 1 and "without their Best tuning line" in result.issues[0].reason


def test_threads_are_paired_apart():
    """Two threads of one process (two communicators) print their pairs interleaved."""
    a, b = "h:7:7 [0] NCCL INFO ", "h:7:9 [1] NCCL INFO "
    inp = "Input: { .comm = 0x{c}, .tuningMask = 0x1fffff, .func = AllReduce, .nBytes = {n}, .count = 1, .dataType = 7 }"
    best = "Best tuning { .id = {i}, .valid = 1, timeUs = {t},  .algo = RING, .proto = {p} }"
    text = "\n".join([a + inp.replace("{c}", "a").replace("{n}", "100"), b + inp.replace("{c}", "b").replace("{n}", "200"),
                      b + best.replace("{i}", "3").replace("{t}", "2.0").replace("{p}", "LL"),
                      a + best.replace("{i}", "5").replace("{t}", "9.0").replace("{p}", "SIMPLE")]) + "\n"
    result, _ = parse_nccl_log(text, source())
    assert [(x["comm"], x["size_bytes"], x["arm"], x["predicted_us"]) for x in result.rows("choices")] == [
        ("0xb", 200, "Ring/LL", 2.0), ("0xa", 100, "Ring/Simple", 9.0)]


def test_pairs_inside_nccl_tests_stdout_reach_the_log_parser():
    """The text parser drops uninteresting INFO lines in bulk; these (with commas of their own) stay."""
    from test_nccltests_text import SYNTH

    head, rows = SYNTH.split("#       size", 1)
    text = head + (FIELD / TWO_RANKS).read_text() + "#       size" + rows
    r = parse_source("nccl-tests-text", text.encode(), source("all_reduce_perf.log"))
    assert len(_tuning(r)) == 10 and sum(x["calls"] for x in _tuning(r)) == 14
    assert len(r.rows("iterations")) == 10


def test_ingest_stores_the_new_columns(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / TWO_RANKS).write_bytes((FIELD / TWO_RANKS).read_bytes())
    ingest([src], tmp_path / "ds")
    frame = datasets.read_table(tmp_path / "ds", "choices")
    tuning = frame[frame["kind"] == "tuning"]
    assert len(tuning) == 10
    assert set(tuning["sym_kernel"].dropna()) == {"AllReduce_RSxLD_AGxST"}
    assert set(tuning["tuning_mask"]) == {GENERAL, SYMMETRIC} and tuning["predicted_us"].notna().all()
    assert frame[frame["kind"] == "algo"]["tuning_mask"].isna().all()
    assert list(datasets.SCHEMAS["choices"].names[-4:-2]) == ["tuning_mask", "sym_kernel"]  # then provenance
