"""Timed AUTO (the overhead ladder's rungs): NCCL's choice kept on every call, every
collective at or above NCCLBOT_MIN_BYTES timed and traced as policy `auto`, and with a
coordinator the learners' synchronisation rounds, on real rank processes."""

from __future__ import annotations

import random

import nb_host as H
import nb_rank_worker
from nb_coord import Coordinator
from nb_trace import read_trace, trace_path
from test_plugin_ranks import assert_identical, run_job

AR, AG = 4, 2
MIB = 1 << 20


def test_auto_times_every_collective_and_keeps_nccls_choice(plugin, nb_env, comm_id, tmp_path):
    nb_env(policy="auto", min_bytes=MIB, trace_dir=tmp_path)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    assert r.active
    tables = {  # (collective, bytes) -> table; a one-arm context and a small one too
        (AR, 4 * MIB): H.cost_table({H.TREE_LL128: 30.0, H.RING_LL128: 21.0, H.RING_SIMPLE: 20.0}),
        (AG, 2 * MIB): H.cost_table({H.RING_SIMPLE: 12.0}),
        (AR, MIB // 2): H.cost_table({H.RING_LL: 3.0, H.RING_SIMPLE: 4.0}),
    }
    rng = random.Random(1)
    served = []
    for i in range(300):
        coll, nbytes = list(tables)[i % 3]
        rc, arm, after, nch = r.call(coll, nbytes, tables[(coll, nbytes)])
        assert (rc, nch) == (0, 0) and after == tables[(coll, nbytes)], "auto touched the cost table"
        assert arm == H.nccl_choice(tables[(coll, nbytes)])
        lat = round(rng.uniform(10.0, 20.0), 3)
        r.measure(coll, nbytes, arm, lat)
        if nbytes >= MIB:
            served.append((H.COLLS[coll], str(nbytes), H.arm_name(arm), int(lat * 1000) / 1000))  # whole ns
    r.finalize()
    rows = read_trace(trace_path(tmp_path, comm_id, 0))
    pulls = [x for x in rows if x["kind"] == "pull"]
    assert not [x for x in rows if x["kind"] == "sync"]
    assert [(x["collective"], x["size_bytes"], x["arm"], float(x["latency_us"])) for x in pulls] == served
    assert all(x["auto_arm"] == x["arm"] and x["policy"] == "auto" and x["reward"] for x in pulls)


def expected_auto_arms(calls: int, contexts: int) -> list[int]:
    """NCCL's own choice for each call of the rank workers' shared schedule."""
    shared = random.Random(1234)
    ctxs = nb_rank_worker.contexts(contexts, shared)
    schedule = [shared.randrange(contexts) for _ in range(calls)]
    return [H.nccl_choice(ctxs[k][2]) for k in schedule]


def test_auto_runs_the_learners_rounds_with_a_coordinator(tmp_path):
    coord = Coordinator()
    calls, every = 2000, 16
    try:
        results = run_job(tmp_path, coord, nranks=4, calls=calls, contexts=20, comm_id=0xA070,
                          env={"NCCLBOT_POLICY": "auto", "NCCLBOT_SYNC_EVERY": str(every)})
    finally:
        err = coord.stop()
    assert all(res["active"] for res in results)
    assert_identical(results)
    assert results[0]["arms"] == expected_auto_arms(calls, 20)
    traces = [read_trace(trace_path(tmp_path, 0xA070, r)) for r in range(4)]
    syncs = [x for x in traces[0] if x["kind"] == "sync"]
    assert len(syncs) >= calls // every - 3, f"{len(syncs)} rounds for {calls} timed pulls every {every}"
    rewards = [[x["reward"] for x in t if x["kind"] == "pull"] for t in traces]
    assert all(rw == rewards[0] for rw in rewards), "merged rewards differ between ranks"
    assert sum(1 for x in rewards[0] if x) > 0.8 * len(rewards[0])
    assert all(x["policy"] == "auto" and x["arm"] == x["auto_arm"] for t in traces for x in t if x["kind"] == "pull")
    assert "different pulls" not in err


def test_auto_with_sync_off_times_without_rounds(tmp_path):
    class NoCoordinator:
        addr, token = "", ""
    results = run_job(tmp_path, NoCoordinator, nranks=2, calls=300, contexts=6, comm_id=0xA071,
                      env={"NCCLBOT_POLICY": "auto"})
    assert all(res["active"] for res in results)
    assert results[0]["arms"] == expected_auto_arms(300, 6)
    for r in range(2):
        rows = read_trace(trace_path(tmp_path, 0xA071, r))
        assert not [x for x in rows if x["kind"] == "sync"]
        assert len([x for x in rows if x["kind"] == "pull"]) == 300


def test_auto_without_a_reachable_coordinator_still_times(tmp_path):
    class Nowhere:
        addr, token = "127.0.0.1:9", "t"
    results = run_job(tmp_path, Nowhere, nranks=2, calls=200, contexts=6, comm_id=0xA072,
                      env={"NCCLBOT_POLICY": "auto", "NCCLBOT_SYNC_INIT_TIMEOUT_MS": "300"})
    assert all(res["active"] for res in results)
    assert all("AUTO is timed without synchronisation rounds: cannot connect" in res["log"] for res in results)
    assert results[0]["arms"] == expected_auto_arms(200, 6)
