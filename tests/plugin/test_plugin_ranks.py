"""Rank consistency: 8 processes on loopback, each its own rank with its own
noisy latencies and delivery lag, synchronised through the coordinator, must
choose identical arms on every call; also when the coordinator is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nb_coord import Coordinator, Proxy
from nb_trace import read_trace, trace_path

WORKER = Path(__file__).with_name("nb_rank_worker.py")
COLLECTIVES = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"]  # NCCL's ncclFunc_t order
SCALE = float(os.environ.get("NBTEST_SCALE", "1"))


def run_job(tmp_path, coord, *, nranks=8, calls=20000, contexts=50, comm_id=0xC0FFEE, env=None,
            during=None, rank_env=None, crashed=()):
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCLBOT_")}
    base.update(NCCLBOT_POLICY="ucb1", NCCLBOT_MIN_BYTES="0", NCCLBOT_SYNC_ADDR=coord.addr,
                NCCLBOT_SYNC_TOKEN=coord.token, NCCLBOT_SYNC_EVERY="64", NCCLBOT_UCB_ALPHA="0.3",
                NCCLBOT_TRACE_DIR=str(tmp_path), NCCLBOT_SYNC_TIMEOUT_MS="20000")
    base.update(env or {})
    procs = []
    for rank in range(nranks):
        out = tmp_path / f"rank{rank}.json"
        env_r = dict(base, **(rank_env or {}).get(rank, {}))
        procs.append((subprocess.Popen([sys.executable, str(WORKER), str(rank), str(nranks), str(comm_id),
                                        str(calls), str(contexts), str(out)], env=env_r,
                                       stderr=subprocess.PIPE, text=True), out))
    if during:
        during()
    results = []
    for rank, (p, out) in enumerate(procs):
        _, err = p.communicate(timeout=600)
        if rank in crashed:
            continue
        assert p.returncode == 0, err
        results.append(json.loads(out.read_text()))
    return results


def assert_identical(results):
    first = results[0]["arms"]
    for rank, res in enumerate(results[1:], 1):
        diff = [t for t, (a, b) in enumerate(zip(first, res["arms"])) if a != b]
        assert not diff, f"rank {rank} differs from rank 0 first at call {diff[0]}"


def test_eight_ranks_choose_identical_arms(tmp_path):
    calls = int(20000 * SCALE)
    coord = Coordinator()
    try:
        results = run_job(tmp_path, coord, calls=calls)
    finally:
        err = coord.stop()
    assert_identical(results)
    arms = results[0]["arms"]
    assert all(rc == 0 for res in results for rc in res["rc"])
    assert len(set(arms)) > 3, "the bandit never moved: nothing was tested"
    traces = [read_trace(trace_path(tmp_path, 0xC0FFEE, r)) for r in range(8)]
    syncs = [x for x in traces[0] if x["kind"] == "sync"]
    assert len(syncs) >= calls // 64 - 3 and all(float(x["sync_us"]) >= 0 for x in syncs)
    rewards = [[x["reward"] for x in t if x["kind"] == "pull"] for t in traces]
    assert all(rw == rewards[0] for rw in rewards), "merged rewards differ between ranks"
    filled = sum(1 for x in rewards[0] if x)
    assert filled > 0.8 * len(rewards[0]), f"only {filled} of {len(rewards[0])} pulls got a reward"
    lat0 = [x["latency_us"] for x in traces[0] if x["kind"] == "pull"]
    lat1 = [x["latency_us"] for x in traces[1] if x["kind"] == "pull"]
    assert lat0 != lat1, "local latencies should differ between ranks"
    colls = {x["collective"] for x in traces[0] if x["kind"] == "pull" and x["reward"]}
    assert {"AllGather", "ReduceScatter", "AllReduce"} <= colls  # byte convention joins AG/RS
    assert "different pulls" not in err  # the coordinator never saw diverging pull logs


@pytest.mark.parametrize("mode", ["freeze", "fail"])
def test_coordinator_killed_mid_run_no_divergence(tmp_path, mode):
    """fail mode: killed at any point. freeze mode: killed between rounds; a kill half way
    through one round's broadcast can leave ranks one round apart (README, "Limit")."""
    coord = Coordinator()

    calls = int(8000 * SCALE)

    def kill_later():  # once rank 0 is a third of the way through
        progress = tmp_path / "rank0.progress"
        deadline = time.time() + 300
        while time.time() < deadline:
            if progress.exists() and int(progress.read_text()) >= calls // 3:
                break
            time.sleep(0.01)
        coord.kill_between_rounds() if mode == "freeze" else coord.kill()

    try:
        results = run_job(tmp_path, coord, calls=calls, env={"NCCLBOT_SYNC_ON_FAILURE": mode},
                          comm_id=0xBAD, during=kill_later)
    finally:
        coord.stop()
    n = len(results[0]["arms"])
    for t in range(n):
        ok = {res["arms"][t] for res in results if res["rc"][t] == 0}
        assert len(ok) <= 1, f"ranks chose {ok} at call {t}"
    failed = [sum(1 for rc in res["rc"] if rc != 0) for res in results]
    if mode == "freeze":
        assert failed == [0] * 8
        traces = [read_trace(trace_path(tmp_path, 0xBAD, r)) for r in range(8)]
        last = [max(int(x["round"]) for x in t if x["kind"] == "sync") for t in traces]
        assert len(set(last)) == 1 and last[0] < n // 64 - 2, f"rounds {last}: the kill came too late"
    else:
        assert all(f > 0 for f in failed), f"every rank fails its collectives after the kill: {failed}"


@pytest.mark.parametrize("stalled", [0, 5])
def test_a_stalled_rank_makes_everyone_freeze_on_the_same_round(tmp_path, stalled):
    """One rank stops longer than the timeout: the others time out, the coordinator relays
    their freeze, the late rank adopts it; every call still has one arm on all ranks."""
    coord = Coordinator()
    calls = int(4000 * SCALE)
    try:
        results = run_job(tmp_path, coord, nranks=6, calls=calls, comm_id=0x57A11 + stalled,
                          env={"NCCLBOT_SYNC_TIMEOUT_MS": "400", "NCCLBOT_SYNC_ON_FAILURE": "freeze",
                               "NBTEST_STALL": f"{stalled}:{calls // 3}:2.0"})
    finally:
        err = coord.stop()
    assert_identical(results)
    assert all(rc == 0 for res in results for rc in res["rc"])
    assert "frozen at round" in err
    traces = [read_trace(trace_path(tmp_path, 0x57A11 + stalled, r)) for r in range(6)]
    rounds = [[x["round"] for x in t if x["kind"] == "pull"] for t in traces]
    assert all(r == rounds[0] for r in rounds), "ranks applied different rounds"
    assert all(int(x) <= (calls // 3) // 64 + 1 for x in rounds[0] if x), "learning went on after the stall"
    assert any("synchronisation stopped" in res["log"] for res in results)


def test_ranks_with_different_settings_all_stay_auto(tmp_path):
    coord = Coordinator()
    try:
        results = run_job(tmp_path, coord, nranks=3, calls=300, comm_id=0xD1FF,
                          rank_env={2: {"NCCLBOT_UCB_ALPHA": "0.5"}})
    finally:
        coord.stop()
    assert [res["active"] for res in results] == [False] * 3
    assert all("NCCLBOT_* settings or saved state differ from those of the ranks before it" in res["log"]
               for res in results)
    assert_identical(results)


def test_an_invalid_setting_on_one_rank_stops_every_rank_at_once_naming_it(tmp_path):
    """One rank's invalid NCCLBOT_* value: it tells the coordinator why, and every rank stays
    AUTO within seconds with that rank and setting in its WARN, not after its init timeout."""
    coord = Coordinator()
    t0 = time.monotonic()
    try:
        results = run_job(tmp_path, coord, nranks=4, calls=200, comm_id=0xBADC0F,
                          rank_env={2: {"NCCLBOT_UCB_ALPHA": "fast"}},
                          env={"NCCLBOT_SYNC_INIT_TIMEOUT_MS": "120000"})
    finally:
        err = coord.stop()
    elapsed = time.monotonic() - t0
    assert [res["active"] for res in results] == [False] * 4
    assert "NCCLBOT_UCB_ALPHA=\"fast\" is invalid" in results[2]["log"]
    assert "the coordinator was told" in results[2]["log"]
    for rank in (0, 1, 3):
        log = results[rank]["log"]
        assert "rank 2 cannot learn" in log and "NCCLBOT_UCB_ALPHA" in log, log
    assert elapsed < 30, f"peers waited {elapsed:.0f} s"
    assert "rank 2 cannot learn" in err
    assert_identical(results)


@pytest.mark.parametrize("lag", [1, 64, 400, 1000])
def test_a_gpu_far_behind_its_host_loses_no_sample(tmp_path, lag):
    """NCCL launches asynchronously: here each rank's GPU runs 300 us per collective while its
    host launches faster, so the host gets up to `lag` collectives ahead (CUDA's queue is at
    most 1,024 deep). Every pull still gets its own collective's latency (each GPU time is
    unique), no rank diverges, and the host never runs more than (A+1) x m = 128 timed
    collectives ahead of its samples: at a boundary it waits for them."""
    calls = int(3000 * SCALE)
    coord = Coordinator()
    try:
        results = run_job(tmp_path, coord, nranks=8, calls=calls, contexts=12, comm_id=0x1A6 + lag,
                          env={"NBTEST_LAG": str(lag), "NBTEST_GPU_US": "300"})
    finally:
        err = coord.stop()
    assert_identical(results)
    assert all(rc == 0 for res in results for rc in res["rc"])
    assert "different pulls" not in err
    for rank, res in enumerate(results):
        rows = [x for x in read_trace(trace_path(tmp_path, 0x1A6 + lag, rank)) if x["kind"] == "pull"]
        wrong = measured = 0
        for row in rows:
            if not row["latency_us"]:
                continue
            measured += 1
            key = f"{COLLECTIVES.index(row['collective'])}:{row['size_bytes']}:{row['pull']}"
            wrong += round(float(row["latency_us"]) * 1000) != res["served"][key]
        assert wrong == 0, f"rank {rank}: {wrong} pulls got another collective's latency"
        assert measured >= 0.99 * len(rows), f"rank {rank}: {measured} of {len(rows)} pulls got their latency"
        lags = sorted(int(row["reward_lag"]) for row in rows if row["reward_lag"])
        assert lags[-1] <= 2 * 64 + 8, f"rank {rank}: a reward came {lags[-1]} collectives late"
        if lag >= 400:
            assert lags[len(lags) // 2] > 32, f"rank {rank}: the host never ran ahead (median lag {lags[len(lags) // 2]})"
        samples = {x["reason"]: int(x["samples"]) for x in read_trace(trace_path(tmp_path, 0x1A6 + lag, rank))
                   if x["kind"] == "samples"}
        assert samples.get("used", 0) >= 0.99 * len(rows) and "lost" not in samples, samples


def test_a_refused_rank_makes_its_peers_give_up_promptly(tmp_path):
    """One rank's bad token refuses the whole communicator at once: its peers do not sit
    out their init timeout (two minutes here) waiting for a START that cannot come."""
    coord = Coordinator(token="right")
    t0 = time.monotonic()
    try:
        results = run_job(tmp_path, coord, nranks=3, calls=100, comm_id=0x70C,
                          rank_env={1: {"NCCLBOT_SYNC_TOKEN": "wrong"}},
                          env={"NCCLBOT_SYNC_INIT_TIMEOUT_MS": "120000"})
    finally:
        err = coord.stop()
    elapsed = time.monotonic() - t0
    assert [res["active"] for res in results] == [False] * 3
    assert "bad token" in results[1]["log"]
    for res in (results[0], results[2]):
        assert "refused this communicator: a rank presented a bad token" in res["log"], res["log"]
    assert elapsed < 60, f"peers waited {elapsed:.0f} s"
    assert "refused" in err


def first_failure(res):
    return next((t for t, rc in enumerate(res["rc"]) if rc != 0), None)


@pytest.mark.parametrize("how", ["stall", "crash"])
def test_fail_mode_fails_every_rank_from_the_same_call(tmp_path, how):
    """A rank stalls past the timeout, or dies: the coordinator's FAIL verdict makes every
    (surviving) rank fail from one and the same call, and every call after it."""
    coord = Coordinator()
    calls = int(4000 * SCALE)
    env = {"NCCLBOT_SYNC_ON_FAILURE": "fail", "NCCLBOT_SYNC_TIMEOUT_MS": "400"}
    if how == "stall":
        env["NBTEST_STALL"] = f"2:{calls // 3}:2.0"
    else:
        env["NBTEST_CRASH"] = f"2:{calls // 3}"
    try:
        results = run_job(tmp_path, coord, nranks=6, calls=calls, comm_id=0xFA11 + len(how), env=env,
                          crashed={2} if how == "crash" else ())
    finally:
        err = coord.stop()
    first = [first_failure(res) for res in results]
    assert first[0] is not None and len(set(first)) == 1, f"first failing call per rank: {first}"
    for res in results:  # the WARN names why, never "synchronisation failed ()"
        reason = res["log"].split("synchronisation failed (", 1)[1].split(")", 1)[0]
        assert len(reason) > 10, res["log"]
    assert all(all(rc != 0 for rc in res["rc"][first[0]:]) for res in results)
    assert_identical([{"arms": res["arms"][:first[0]]} for res in results])
    assert "failed at round" in err


@pytest.mark.parametrize("mode", ["freeze", "fail"])
def test_a_rank_that_missed_start_never_diverges_cold_start(tmp_path, mode):
    """Rank 0's START is held past its init timeout, so it stays AUTO while the others
    start; with a cold start (pseudo-count 0) they must still play NCCL's choice on every
    call: until a round proves every rank started they do, and the coordinator's verdict
    when rank 0 leaves keeps it that way."""
    coord = Coordinator()
    proxy = Proxy(coord, nranks=4, hold_start={0: 12.0})
    try:
        results = run_job(tmp_path, proxy, nranks=4, calls=int(3000 * SCALE), comm_id=0x57A7 + len(mode),
                          env={"NCCLBOT_PSEUDO_COUNT": "0", "NCCLBOT_SYNC_INIT_TIMEOUT_MS": "8000",
                               "NCCLBOT_SYNC_ON_FAILURE": mode})
    finally:
        proxy.close()
        coord.stop()
    assert [res["active"] for res in results] == [False, True, True, True]
    assert "no START from the coordinator" in results[0]["log"]
    assert_identical(results)
    assert all(rc == 0 for res in results for rc in res["rc"])
    assert all("keeps NCCL's own choice" in res["log"] for res in results[1:])


def test_freeze_after_the_coordinator_dies_mid_broadcast(tmp_path):
    """The coordinator dies after sending round 20's result to ranks 0 and 1 only. No rank
    can know which rounds the others hold, so every rank says so and plays NCCL's choice:
    ranks differ for at most the one round in flight, never for the rest of the run."""
    coord = Coordinator()
    proxy = Proxy(coord, nranks=4, die_at_result=(20, {0, 1}))
    calls = 4000
    try:
        results = run_job(tmp_path, proxy, nranks=4, calls=calls, comm_id=0xD1ED,
                          env={"NCCLBOT_SYNC_ON_FAILURE": "freeze"})
    finally:
        proxy.close()
        coord.stop()
    assert proxy.dead, "the relay never saw round 20"
    assert all(rc == 0 for res in results for rc in res["rc"])
    differ = [t for t in range(calls) if len({res["arms"][t] for res in results}) > 1]
    assert not differ or differ[-1] - differ[0] < 64, f"ranks differ at {len(differ)} calls: {differ[:5]}..."
    assert all("keeps NCCL's own choice" in res["log"] for res in results)


def test_no_coordinator_listening_is_inert(tmp_path):
    class Nowhere:
        addr, token = "127.0.0.1:9", "t"
    results = run_job(tmp_path, Nowhere, nranks=2, calls=50, comm_id=0xA0,
                      env={"NCCLBOT_SYNC_INIT_TIMEOUT_MS": "300"})
    assert [res["active"] for res in results] == [False, False]
    assert all("cannot connect to the coordinator at 127.0.0.1:9" in res["log"] for res in results)


def test_coordinator_survives_garbage_clients(tmp_path):
    import random as _r
    import socket
    import struct

    coord = Coordinator()
    host, port = coord.addr.split(":")
    rng = _r.Random(9)
    socks = []
    try:
        for payload in [b"GET / HTTP/1.0\r\n\r\n", bytes(rng.randrange(256) for _ in range(5000)),
                        struct.pack("<IIqQII", 0x544F424E, 1, 0, 0, 1 << 30, 1),   # huge length
                        struct.pack("<IIqQII", 0x544F424E, 4, 2, 0, 256, 1) + b"\0" * 256,  # SUBMIT first
                        struct.pack("<IIqQII", 0x544F424E, 1, 0, 0, 8, 1) + b"short!!!"]:  # bad HELLO
            s = socket.create_connection((host, int(port)))
            s.sendall(payload)
            socks.append(s)
        half = socket.create_connection((host, int(port)))
        half.sendall(b"\x4e\x42")  # a header that never completes
        socks.append(half)
        results = run_job(tmp_path, coord, nranks=2, calls=2000, comm_id=0x6A5)
        assert coord.proc.poll() is None, "the coordinator died"
    finally:
        for s in socks:
            s.close()
        coord.stop()
    assert all(res["active"] for res in results)
    assert_identical(results)
