"""NCCL 2.31+'s tuning rewrite as the plugin sees it (docs/nccl-plugin-abi.md sections 3.1,
3.3 and 3.5): the pick after the tuner becomes the last strict minimum over the arms NCCL's
model found valid (ties to the highest (algo, proto), no sign check), the symmetric-kernel
scheduler calls getCollInfo with tables that are all -1.0, and NCCL 2.32.6 loads tuner v7.
nb_host plays both NCCLs: ``nccl_version=23102`` (2.31.2) or ``tuner_version=7`` give the
new scan, the default the old one."""

from __future__ import annotations

import ctypes as C
import math
import random
import re
import struct

import pytest

import nb_host as H
import nb_rank_worker
from nb_coord import Coordinator
from nb_trace import read_trace, trace_path
from test_plugin_ranks import assert_identical, run_job

AR, AG = 4, 2
MIB = 1 << 20
FLT_MIN = struct.unpack("f", struct.pack("I", 0x00800000))[0]
LEARNERS = ["greedy", "ucb1", "etc", "softmax", "thompson", "eps-greedy"]
#: (tuner version, ncclGetVersion's answer or None, the scan that NCCL applies)
NCCLS = {
    "2.30.7-v6": (6, 23007, "first"),
    "2.31.2-v6": (6, 23102, "last"),
    "2.32.6-v7": (7, 23206, "last"),
    "unreadable-v7": (7, None, "last"),
}
ALL_MINUS_ONE = [H.IGNORE] * 21


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def rank(plugin, comm_id, nccl: str, nranks: int = 1) -> H.Rank:
    tuner_version, nccl_version, scan = NCCLS[nccl]
    r = H.Rank(plugin, comm_id, nranks, 1, 0, tuner_version=tuner_version, nccl_version=nccl_version)
    assert r.scan == scan
    return r


def forced_cell(table: list[float], after: list[float]) -> int | None:
    """The cell the plugin forced, after checking what it may write: unavailable cells keep
    their bits, nothing becomes negative, a changed cell is the one 0.0 or a 0 lifted to
    FLT_MIN, and the 0.0 is then the only zero. A table that came back bit for bit the same
    gives None, unless it already had exactly one 0.0 (forcing that cell changes nothing)."""
    bits = [struct.pack("f", v) for v in table]
    for i, (v0, v1) in enumerate(zip(table, after)):
        if not (v0 >= 0.0 and v0 < 3.4028234663852886e38):
            assert bits[i] == struct.pack("f", v1), f"unavailable cell {i} changed"
        elif struct.pack("f", v1) != bits[i]:
            assert v1 == 0.0 or (v0 == 0.0 and v1 == FLT_MIN), f"cell {i}: {v0} -> {v1}"
        assert not v1 < 0.0 or struct.pack("f", v1) == bits[i], f"cell {i} made negative"
    zeros = [i for i, v in enumerate(after) if v == 0.0]
    if [struct.pack("f", v) for v in after] == bits:
        return zeros[0] if len(zeros) == 1 and struct.pack("f", after[zeros[0]]) == struct.pack("f", 0.0) else None
    assert len(zeros) == 1 and struct.pack("f", after[zeros[0]]) == struct.pack("f", 0.0), \
        f"zero cells after forcing: {zeros}"
    return zeros[0]


def assert_wins_under_both_scans(table: list[float], after: list[float], cell: int) -> None:
    assert H.nccl_choice(after, scan="first") == cell
    assert H.nccl_choice(after, scan="last", before=table) == cell


# ---- which scan: NCCL's version, else the tuner version ----

@pytest.mark.parametrize("tuner_version,nccl_version,word,version_text", [
    (6, 23007, "first", "NCCL 2.30.7, tuner v6"),
    (6, 23102, "last", "NCCL 2.31.2, tuner v6"),
    (5, 22903, "first", "NCCL 2.29.3, tuner v5"),
    (7, 23206, "last", "NCCL 2.32.6, tuner v7"),
    (7, None, "last", "not readable"),
    (6, None, "first", "not readable"),
])
def test_scan_follows_nccls_version_else_the_tuner_version(plugin, nb_env, comm_id, tmp_path, tuner_version,
                                                          nccl_version, word, version_text):
    """Timed AUTO on a tie logs the arm NCCL plays under that NCCL's scan (and the profiler's
    sample, which reports the arm that ran, is matched to it)."""
    nb_env(policy="auto", min_bytes=0, trace_dir=tmp_path)
    r = H.Rank(plugin, comm_id, 1, 1, 0, tuner_version=tuner_version, nccl_version=nccl_version)
    log = H.take_log()
    assert re.search(rf"{version_text}.*takes the {word} minimum", log), log
    table = H.cost_table({H.TREE_SIMPLE: 20.0, H.RING_LL: 10.0, H.RING_SIMPLE: 10.0})
    want = H.RING_SIMPLE if word == "last" else H.RING_LL
    for _ in range(5):
        rc, arm, after, _ = r.call(AR, MIB, table)
        assert (rc, arm, after) == (0, want, table)
        r.measure(AR, MIB, arm, 12.5)
    r.finalize()
    pulls = [x for x in read_trace(trace_path(tmp_path, comm_id, 0)) if x["kind"] == "pull"]
    assert len(pulls) == 5
    assert all(x["arm"] == x["auto_arm"] == H.arm_name(want) and x["reward"] for x in pulls)


def test_learners_trace_nccls_own_choice_under_the_new_scan(plugin, nb_env, comm_id, tmp_path):
    """The auto_arm column is NCCL's pick had the plugin done nothing: on a tie, the highest arm."""
    nb_env(policy="ucb1", min_bytes=0, trace_dir=tmp_path)
    r = rank(plugin, comm_id, "2.31.2-v6")
    table = H.cost_table({H.RING_LL: 10.0, H.RING_LL128: 11.0, H.RING_SIMPLE: 10.0})
    for i in range(30):
        rc, arm, after, _ = r.call(AR, MIB, table)
        assert rc == 0 and forced_cell(table, after) == arm
        r.measure(AR, MIB, arm, 10.0 + arm)
    r.finalize()
    pulls = [x for x in read_trace(trace_path(tmp_path, comm_id, 0)) if x["kind"] == "pull"]
    assert len(pulls) == 30 and {x["auto_arm"] for x in pulls} == {"Ring/Simple"}
    assert len({x["arm"] for x in pulls}) >= 2  # the learner, not NCCL, chose


# ---- forced arms hold under either scan ----

ZERO_TABLES = {  # name -> (entries, target): several 0.0 cells before and after the target, ties
    "zeros-around": ({H.TREE_LL: 0.0, H.RING_LL128: 9.0, H.RING_SIMPLE: 0.0, 14: 0.0, 20: 0.0}, H.RING_LL128),
    "target-zero-too": ({H.TREE_LL: 0.0, H.RING_LL: 0.0, H.RING_SIMPLE: 0.0, 17: 0.0}, H.RING_LL),
    "zero-after-only": ({H.TREE_SIMPLE: 3.0, 20: 0.0}, H.TREE_SIMPLE),
    "tie-around": ({H.TREE_LL: 5.0, H.RING_LL: 5.0, H.RING_SIMPLE: 5.0, 14: 5.0}, H.RING_LL),
    "negative-zero": ({H.TREE_LL: -0.0, H.RING_SIMPLE: 2.0, 20: -0.0}, H.RING_SIMPLE),
    "target-highest": ({H.TREE_LL: 0.0, 8: 0.0, 20: 7.0}, 20),
}


@pytest.mark.parametrize("nccl", ["2.30.7-v6", "2.31.2-v6", "2.32.6-v7"])
@pytest.mark.parametrize("name", sorted(ZERO_TABLES))
def test_static_forced_arm_wins_under_both_scans(plugin, nb_env, comm_id, tmp_path, nccl, name):
    entries, target = ZERO_TABLES[name]
    path = tmp_path / "table.csv"
    path.write_text(f"collective,nodes,ranks,size_bytes,arm\nAllReduce,*,*,0,{H.arm_name(target)}\n")
    nb_env(policy="static", static_table=path, min_bytes=0)
    r = rank(plugin, comm_id, nccl)
    table = H.cost_table(entries)
    rc, arm, after, nch = r.call(AR, MIB, table)
    assert (rc, arm, nch) == (0, target, 0)
    assert forced_cell(table, after) == target
    assert_wins_under_both_scans(table, after, target)
    r.finalize()


def test_static_never_writes_a_negative_and_wins_on_random_tables(plugin, nb_env, comm_id, tmp_path):
    """2.31+ hands the tuner only -1.0 and positive times (a model time <= 0 is not valid,
    src/tuning/cost_model.cc); zeros, ties, NaN and infinities are added to be hard."""
    path = tmp_path / "table.csv"
    path.write_text("collective,nodes,ranks,size_bytes,arm\n" +
                    "".join(f"AllReduce,*,*,{(a + 1) * MIB},{H.arm_name(a)}\n" for a in range(21)))
    nb_env(policy="static", static_table=path, min_bytes=0)
    r = rank(plugin, comm_id, "2.31.2-v6")
    rng = random.Random(231)
    specials = [-1.0, -1.0, 0.0, 0.0, 5.0, 5.0, math.nan, math.inf, 3.4028234663852886e38]
    for _ in range(400):
        table = [f32(rng.choice(specials) if rng.random() < 0.6 else rng.uniform(0.0, 20.0)) for _ in range(21)]
        target = rng.randrange(21)
        rc, arm, after, _ = r.call(AR, (target + 1) * MIB, table)
        cell = forced_cell(table, after)
        if table[target] >= 0.0 and table[target] < 3.4028234663852886e38:
            assert cell == target and arm == target
            assert_wins_under_both_scans(table, after, target)
        else:  # unavailable: NCCL decides, the table is untouched
            assert [struct.pack("f", v) for v in after] == [struct.pack("f", v) for v in table]
    r.finalize()


@pytest.mark.parametrize("nccl", ["2.30.7-v6", "2.31.2-v6", "2.32.6-v7"])
@pytest.mark.parametrize("policy", LEARNERS)
def test_every_learners_forced_arm_wins_under_both_scans(plugin, nb_env, comm_id, nccl, policy):
    """A context first seen on a plain table, then played on tables with ties and several
    0.0 cells (its own arms among them): every forced arm is NCCL's pick under either scan."""
    nb_env(policy=policy, min_bytes=0, epsilon=0.3, **({} if policy == "etc" else {"pseudo_count": 0.5}))
    r = rank(plugin, comm_id, nccl)
    arms = [H.TREE_SIMPLE, H.RING_LL, H.RING_LL128, H.RING_SIMPLE, 14]
    first = H.cost_table({a: 10.0 + i for i, a in enumerate(arms)})
    variants = [
        first,
        H.cost_table({a: 10.0 for a in arms}),                                       # all tied
        H.cost_table({H.TREE_LL: 0.0, **{a: 10.0 for a in arms}, 20: 0.0}),          # zeros outside the arms
        H.cost_table({H.TREE_SIMPLE: 0.0, H.RING_LL: 10.0, H.RING_LL128: 0.0, H.RING_SIMPLE: 10.0, 14: 0.0}),
        H.cost_table({H.RING_LL: 0.0, H.RING_SIMPLE: 0.0}),                         # only two arms left, both 0
    ]
    truth = {a: 10.0 + 3.0 * i for i, a in enumerate(arms)}
    forced = set()
    for i in range(200):
        table = first if i == 0 else variants[i % len(variants)]
        rc, arm, after, _ = r.call(AR, 8 * MIB, table)
        assert rc == 0
        cell = forced_cell(table, after)
        assert cell is not None, f"call {i}: the learner left NCCL's choice"
        assert arm == cell
        assert_wins_under_both_scans(table, after, cell)
        forced.add(cell)
        r.measure(AR, 8 * MIB, arm, truth[arm])
    assert len(forced) >= 2, forced
    r.finalize()


# ---- symmetric-kernel passes: tables of -1.0 only ----

def finalize_counters(log: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+) calls, (\d+) timed pulls, (\d+) rewards applied", log)
    assert m, log
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def play(plugin, comm_id, tmp_path, policy: str, passes: int) -> tuple[list, list[dict], tuple]:
    """60 collectives over three contexts, each preceded by `passes` all -1.0 calls of the
    same collective and bytes (the first call of every context is such a pass), each followed
    by the general pass nested in the symmetric scheduler's fallback (numPipeOps 0)."""
    folder = tmp_path / f"{policy}-{passes}"
    folder.mkdir()
    r = rank(plugin, comm_id, "2.31.2-v6")
    tables = {(AR, 4 * MIB): H.cost_table({H.RING_LL: 10.0, H.RING_SIMPLE: 11.0, 14: 12.0}),
              (AG, 2 * MIB): H.cost_table({H.RING_LL: 8.0, H.RING_SIMPLE: 8.0}),
              (AR, MIB): H.cost_table({H.TREE_LL: 3.0, H.RING_LL: 4.0})}
    played = []
    for i in range(60):
        coll, nbytes = list(tables)[i % 3]
        table = tables[(coll, nbytes)]
        for _ in range(passes):
            rc, arm, after, nch = r.call(coll, nbytes, ALL_MINUS_ONE, num_pipe_ops=0)
            assert (rc, arm, after, nch) == (0, None, ALL_MINUS_ONE, 0)
            rc, arm, after, nch = r.call(coll, nbytes, table, num_pipe_ops=0)  # nested: NCCL decides
            assert (rc, after, nch) == (0, table, 0), "the plugin wrote into the symmetric scheduler's pass"
        rc, arm, after, _ = r.call(coll, nbytes, table)
        assert rc == 0
        if policy != "auto":
            assert forced_cell(table, after) == arm, "a learned context was left to NCCL"
        played.append(arm)
        r.measure(coll, nbytes, arm, 10.0 + arm + i % 5)
    H.take_log()
    r.finalize()
    counters = finalize_counters(H.take_log())
    rows = [{k: v for k, v in x.items() if k not in ("t_ns", "comm_id")}
            for x in read_trace(trace_path(folder, comm_id, 0))]
    return played, rows, counters


@pytest.mark.parametrize("policy", ["ucb1", "thompson", "auto"])
def test_all_minus_one_tables_create_nothing_and_count_no_pull(plugin, nb_env, comm_id, tmp_path, policy):
    runs = {}
    for passes in (0, 2):
        nb_env(policy=policy, min_bytes=0, trace_dir=tmp_path / f"{policy}-{passes}")
        runs[passes] = play(plugin, comm_id, tmp_path, policy, passes)  # same id: same draws
    (arms0, rows0, (calls0, pulls0, applied0)), (arms2, rows2, (calls2, pulls2, applied2)) = runs[0], runs[2]
    assert arms2 == arms0, "the all -1.0 calls changed later choices"
    assert rows2 == rows0, "the all -1.0 calls changed the trace"
    assert (pulls2, applied2) == (pulls0, applied0) == (60, 60)
    assert (calls0, calls2) == (60, 300)  # counted as calls, never as pulls
    assert len([x for x in rows2 if x["kind"] == "pull"]) == 60


def test_all_minus_one_tables_leave_static_and_inert_alone(plugin, nb_env, comm_id, tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("collective,nodes,ranks,size_bytes,arm\nAllReduce,*,*,0,Ring/LL\n")
    nb_env(policy="static", static_table=path, min_bytes=0)
    r = rank(plugin, comm_id, "2.31.2-v6")
    assert r.call(AR, MIB, ALL_MINUS_ONE)[:3] == (0, None, ALL_MINUS_ONE)
    table = H.cost_table({H.RING_LL: 9.0, H.RING_SIMPLE: 1.0})
    assert r.call(AR, MIB, table)[1] == H.RING_LL
    r.finalize()


# ---- tuner v7 ----

def test_v7_inits_with_v7_constants_and_leaves_them_alone(plugin, nb_env, comm_id):
    assert C.sizeof(H.TunerV7) == 40 and H.CONSTANTS_V7_DOUBLES == 159 and H.CONSTANTS_V5_DOUBLES == 144
    nb_env(policy="greedy", min_bytes=0)
    consts = (C.c_double * (H.CONSTANTS_V7_DOUBLES + 1))(*[1.5 * i for i in range(H.CONSTANTS_V7_DOUBLES + 1)])
    before = list(consts)
    ctx, pctx, mask = C.c_void_p(), C.c_void_p(), C.c_int(0)
    assert plugin.profiler.init(C.byref(pctx), comm_id, C.byref(mask), b"v7", 1, 1, 0, H.logger_ptr()) == 0
    nvl = (C.c_int * 3)(1, 1, 1)
    H.set_nccl_version(None)
    assert plugin.tuner_v7.init(C.byref(ctx), comm_id, 1, 1, H.logger_ptr(), C.addressof(nvl),
                                C.addressof(consts)) == 0
    assert ctx.value, H.take_log()
    assert list(consts) == before  # NCCL's model is the prior: read and written by nobody
    table = (C.c_float * 21)(*H.cost_table({H.RING_LL: 10.0, H.RING_SIMPLE: 10.0}))
    before_table = list(table)
    assert plugin.tuner_v7.getCollInfo(ctx, AR, MIB, 1, table, 7, 3, 0, C.byref(C.c_int())) == 0
    cell = forced_cell(before_table, list(table))
    assert cell in (H.RING_LL, H.RING_SIMPLE)
    assert_wins_under_both_scans(before_table, list(table), cell)
    assert plugin.tuner_v7.finalize(ctx) == 0 and plugin.profiler.finalize(pctx) == 0


# ---- several ranks: the synchronisation gate and symmetric passes under 2.31 ----

def test_ranks_on_nccl_2_31_agree_and_the_gate_plays_nccls_last_minimum(tmp_path):
    """Until every rank is known to have started, each plays NCCL's own choice and logs it as
    its pull: with ties at the minimum, that is the highest tied arm on 2.31, and the
    profiler's samples (of the arm that ran) must match those pulls. Every call is preceded
    by two all -1.0 calls, which must add no pull."""
    coord = Coordinator()
    calls, nctx, every = 1200, 12, 16
    try:
        results = run_job(tmp_path, coord, nranks=4, calls=calls, contexts=nctx, comm_id=0x231,
                          env={"NBTEST_NCCL_VERSION": "23102", "NBTEST_SYM_PASSES": "2", "NBTEST_TIES": "1",
                               "NCCLBOT_SYNC_EVERY": str(every)})
    finally:
        err = coord.stop()
    assert all(res["active"] for res in results)
    assert_identical(results)
    shared = random.Random(1234)
    ctxs = nb_rank_worker.contexts(nctx, shared, ties=True)
    schedule = [shared.randrange(nctx) for _ in range(calls)]
    nccl = {(H.COLLS[c], str(b)): H.arm_name(H.nccl_choice(t, scan="last")) for c, b, t, _ in ctxs}
    assert all(H.nccl_choice(t, scan="last") != H.nccl_choice(t) for _, _, t, _ in ctxs)  # ties decide
    gate = 2 * every  # the pulls before the first merged result are NCCL's own choice
    assert [H.arm_name(a) for a in results[0]["arms"][:gate]] == \
        [nccl[(H.COLLS[ctxs[k][0]], str(ctxs[k][1]))] for k in schedule[:gate]]
    traces = [[x for x in read_trace(trace_path(tmp_path, 0x231, r)) if x["kind"] == "pull"] for r in range(4)]
    for rows in traces:
        assert calls - 4 * every <= len(rows) <= calls, "all -1.0 calls were counted as pulls"  # last rounds unapplied
        assert all(x["auto_arm"] == nccl[(x["collective"], x["size_bytes"])] for x in rows)
        first = rows[:gate]
        assert all(x["arm"] == x["auto_arm"] for x in first)
        assert sum(1 for x in first if x["reward"]) >= gate - 4, "gated pulls got no sample: wrong arm logged"
    assert all([x["reward"] for x in t] == [x["reward"] for x in traces[0]] for t in traces)
    assert "different pulls" not in err
