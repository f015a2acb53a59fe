"""One rank of a simulated job for the rank-consistency tests: it loads the
plugin, drives getCollInfo and the profiler like NCCL for a shared schedule of
calls, with its own noisy latencies and its own random delivery lag, and writes
the arms NCCL would have run (one per call) as JSON.

    python nb_rank_worker.py RANK NRANKS COMM_ID CALLS CONTEXTS OUT.json
(NCCLBOT_* settings come from the environment. NBTEST_NCCL_VERSION / NBTEST_TUNER_VERSION
make the stand-in another NCCL (nb_host.Rank); NBTEST_SYM_PASSES=n precedes every call
with n all -1.0 calls, as NCCL 2.31+'s symmetric-kernel scheduler may; NBTEST_TIES=1 gives
every context a cost tie at its minimum between its lowest and its highest arm.)"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nb_host as H  # noqa: E402

ARMS = {
    4: [H.TREE_LL, H.TREE_LL128, H.TREE_SIMPLE, H.RING_LL, H.RING_LL128, H.RING_SIMPLE, 14],
    2: [H.RING_LL, H.RING_LL128, H.RING_SIMPLE, 14],
    3: [H.RING_LL, H.RING_LL128, H.RING_SIMPLE, 14],
    0: [H.RING_LL, H.RING_LL128, H.RING_SIMPLE],
    1: [H.RING_LL, H.RING_LL128, H.RING_SIMPLE],
}


def contexts(n: int, shared: random.Random, ties: bool = False):
    """n contexts (collective, bytes, cost table, true mean latency per arm), same on every rank."""
    out = []
    for i in range(n):
        coll = [4, 4, 2, 3, 0, 1][i % 6]
        nbytes = (1 << 20) << (i // 6)
        table = H.cost_table({})
        truth = {}
        for arm in ARMS[coll]:
            cost = shared.uniform(10.0, 30.0) * (1 + i // 6)
            table[arm] = cost
            truth[arm] = cost * shared.uniform(0.5, 1.6)
        if ties:  # at the minimum, so that the scan order decides NCCL's pick
            lo = min(table[a] for a in ARMS[coll])
            table[ARMS[coll][0]] = table[ARMS[coll][-1]] = lo
        out.append((coll, nbytes, table, truth))
    return out


def main() -> None:
    rank, nranks, comm_id, calls, nctx, out = sys.argv[1:7]
    rank, nranks, comm_id, calls, nctx = int(rank), int(nranks), int(comm_id), int(calls), int(nctx)
    shared = random.Random(1234)          # the job's schedule: identical on all ranks
    own = random.Random(1000 + rank)      # this rank's noise and timing
    ctxs = contexts(nctx, shared, ties=os.environ.get("NBTEST_TIES") == "1")
    schedule = [shared.randrange(nctx) for _ in range(calls)]
    plugin = H.Plugin()
    version = os.environ.get("NBTEST_NCCL_VERSION")
    r = H.Rank(plugin, comm_id, nranks, 1, rank, tuner_version=int(os.environ.get("NBTEST_TUNER_VERSION", "6")),
               nccl_version=int(version) if version else None)
    sym_passes = int(os.environ.get("NBTEST_SYM_PASSES", "0"))
    active = r.active
    pending: list[tuple[int, object, list[int]]] = []
    arms, rcs = [], []
    progress = Path(out).with_suffix(".progress")
    lag = int(os.environ.get("NBTEST_LAG", "0"))  # calls the GPU runs behind the host
    stall = os.environ.get("NBTEST_STALL", "")  # "rank:call:seconds": this rank stops a while
    stall_rank, stall_call, stall_s = (stall.split(":") + ["-1", "-1", "0"])[:3] if stall else ("-1", "-1", "0")
    for t, k in enumerate(schedule):
        if rank == int(stall_rank) and t == int(stall_call):
            time.sleep(float(stall_s))
        if f"{rank}:{t}" == os.environ.get("NBTEST_CRASH"):  # "rank:call": this rank dies there
            os._exit(3)
        if t % 250 == 0:  # atomically, the test polls it
            progress.with_suffix(".tmp").write_text(str(t))
            progress.with_suffix(".tmp").replace(progress)
        coll, nbytes, table, truth = ctxs[k]
        for _ in range(sym_passes):
            r.call(coll, nbytes, [H.IGNORE] * 21)
        rc, arm, _, _ = r.call(coll, nbytes, table)
        arms.append(arm)
        rcs.append(rc)
        if rc == 0 and arm is not None:
            h = r.coll_start(coll, nbytes, arm, 2)
            lat = truth[arm] * own.uniform(0.85, 1.15) * (1.0 + 0.02 * rank)
            pending.append((t + lag + own.randint(0, 3), h, [int(lat * 1000), int(lat * 900)]))
        while pending and pending[0][0] <= t:  # the proxy thread reports a few calls later
            _, h, durs = pending.pop(0)
            for ch, d in enumerate(durs):
                if own.random() < 0.005:
                    continue  # a channel event lost now and then
                r.channel(h, ch, 1000, 1000 + d)
    r.finalize()
    Path(out).write_text(json.dumps({"arms": arms, "rc": rcs, "active": active, "log": H.take_log()}))


if __name__ == "__main__":
    main()
