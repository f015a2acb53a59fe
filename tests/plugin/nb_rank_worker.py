"""One rank of a simulated job for the rank-consistency tests: it loads the
plugin, drives getCollInfo and the profiler like NCCL for a shared schedule of
calls, with its own noisy latencies, and writes the arms NCCL would have run (one
per call) as JSON.

    python nb_rank_worker.py RANK NRANKS COMM_ID CALLS CONTEXTS OUT.json

By default the proxy thread reports each collective a few calls later (from this, the
calling thread) and loses a channel event now and then. NBTEST_GPU_US=d instead runs a
GPU thread, as NCCL's launches are asynchronous: the host launches without waiting, a
launch blocks while NBTEST_LAG collectives are pending, the GPU runs them in order, d us
each, and its thread reports each one's kernel events when it ends. Each collective's GPU
time is then unique (a whole number of ns that encodes its call), and the JSON lists, per
(context, pull), the ns served, so a test can check every trace row's attribution.
(NCCLBOT_* settings come from the environment. NBTEST_NCCL_VERSION / NBTEST_TUNER_VERSION
make the stand-in another NCCL (nb_host.Rank); NBTEST_SYM_PASSES=n precedes every call
with n all -1.0 calls, as NCCL 2.31+'s symmetric-kernel scheduler may; NBTEST_TIES=1 gives
every context a cost tie at its minimum between its lowest and its highest arm.)"""

from __future__ import annotations

import json
import os
import queue
import random
import sys
import threading
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


class Gpu:
    """A stream far behind its host: launches queue up to ``depth`` deep, kernels run in
    order for ``dur_s`` each, and this thread (NCCL's proxy) reports a kernel's channel events
    when it ends (ctypes releases the GIL, so it runs while the host waits in the plugin)."""

    def __init__(self, rank: H.Rank, depth: int, dur_s: float) -> None:
        self.rank, self.dur = rank, dur_s
        self.pending: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def launch(self, handle, durations_ns: list[int]) -> None:
        self.pending.put((handle, durations_ns))  # blocks while the queue is full

    def _run(self) -> None:
        free_at = time.monotonic()
        while (item := self.pending.get()) is not None:
            handle, durations = item
            free_at = max(free_at, time.monotonic()) + self.dur
            time.sleep(max(0.0, free_at - time.monotonic()))
            for ch, d in enumerate(durations):
                self.rank.channel(handle, ch, 1000, 1000 + d)

    def close(self) -> None:
        self.pending.put(None)
        self.thread.join()


def main() -> None:
    rank, nranks, comm_id, calls, nctx, out = sys.argv[1:7]
    rank, nranks, comm_id, calls, nctx = int(rank), int(nranks), int(comm_id), int(calls), int(nctx)
    shared = random.Random(1234)          # the job's schedule: identical on all ranks
    own = random.Random(1000 + rank)      # this rank's noise and timing
    ctxs = contexts(nctx, shared, ties=os.environ.get("NBTEST_TIES") == "1")
    gpu_us = os.environ.get("NBTEST_GPU_US")
    if gpu_us:  # one table per (collective, bytes): every call is then a pull of its own context
        ctxs = list({(c[0], c[1]): c for c in reversed(ctxs)}.values())[::-1]
        nctx = len(ctxs)
    schedule = [shared.randrange(nctx) for _ in range(calls)]
    plugin = H.Plugin()
    version = os.environ.get("NBTEST_NCCL_VERSION")
    r = H.Rank(plugin, comm_id, nranks, 1, rank, tuner_version=int(os.environ.get("NBTEST_TUNER_VERSION", "6")),
               nccl_version=int(version) if version else None)
    sym_passes = int(os.environ.get("NBTEST_SYM_PASSES", "0"))
    active = r.active
    pending: list[tuple[int, object, list[int]]] = []
    arms, rcs = [], []
    served: dict[str, int] = {}  # "collective:bytes:pull" -> GPU ns (GPU mode)
    pulls: dict[tuple[int, int], int] = {}  # the plugin's context is (collective, bytes)
    progress = Path(out).with_suffix(".progress")
    lag = int(os.environ.get("NBTEST_LAG", "0"))  # collectives the GPU may run behind the host
    gpu = Gpu(r, lag, float(gpu_us) / 1e6) if gpu_us else None
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
            if gpu is not None:
                ns = int(lat) * 1000 + t % 1000  # unique per call: the ns digits are the call
                pull = pulls.get((coll, nbytes), 0)
                served[f"{coll}:{nbytes}:{pull}"] = ns
                pulls[(coll, nbytes)] = pull + 1
                gpu.launch(h, [ns, ns * 9 // 10])
                continue
            pending.append((t + lag + own.randint(0, 3), h, [int(lat * 1000), int(lat * 900)]))
        while pending and pending[0][0] <= t:  # the proxy thread reports a few calls later
            _, h, durs = pending.pop(0)
            for ch, d in enumerate(durs):
                if own.random() < 0.005:
                    continue  # a channel event lost now and then
                r.channel(h, ch, 1000, 1000 + d)
    if gpu is not None:
        gpu.close()
    r.finalize()
    Path(out).write_text(json.dumps({"arms": arms, "rc": rcs, "active": active, "log": H.take_log(),
                                     "served": served}))


if __name__ == "__main__":
    main()
