"""A small fixed live campaign written through the dataset writer, for the live-analysis tests.

It emulates what a live campaign on the simulated fabric leaves in a dataset, call by call:
one :class:`~ncclbot_sweep.sim.SimProcess` per run serves the latencies (noise, lazy-connection
transients, the first-use NVLS stall), a :class:`~ncclbot_sweep.analysis.policies.StepPolicy`
(or a fixed rule) chooses each call's arm, and the rows go to ``runs``, ``iterations`` (rank
0's nccl-tests per-iteration times, both passes) and ``live_events`` (every rank's trace).

The runs (campaign ``live-synth``, AllReduce on 2 nodes of ``sim-h100``, 16 ranks):

* ``stock``: NCCL's own choice, no plugin, no trace;
* ``AUTO`` with variants ``default`` (profiling, sync off), ``sync-4``, ``sync-16``, ``sync-64``:
  the same process seed as stock, so each call is served exactly stock's latency and the
  host time adds the known overhead :data:`PROFILE_US` per call and :data:`SYNC_US` per round;
* ``static``: plays the simulator's best arm at every size (never NVLS here, so no stall);
* ``ucb1``: the champion UCB1, learning from each call at once;
* ``greedy``: Greedy with a pseudo-count so large it never leaves AUTO's arm.

nccl-tests runs without warm-up (``-w 0``), ``ITERS`` timed iterations and one check call per
pass, so the first NVLSTree call (4 MiB, AUTO's arm) stalls inside the timed pass.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

import numpy as np
import pandas as pd

from ncclbot_sweep.analysis.policies import StepPolicy, make_policy
from ncclbot_sweep.ingest.datasets import write_rows
from ncclbot_sweep.sim import SimProcess, fabric
from ncclbot_sweep.sim.process import derive_seed

FABRIC, COLLECTIVE, NODES, GPUS = "sim-h100", "AllReduce", 2, 8
RANKS = NODES * GPUS
CAMPAIGN = "live-synth"
SIZES = tuple(2**k for k in range(14, 31, 2))  # 16 KiB .. 1 GiB
ITERS = 60
PROFILE_US = 4.0  # host time the plugin adds to every call
SYNC_US = 600.0  # host time of one synchronisation round
T0_NS = 1_780_000_000 * 10**9


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One step of the synthetic campaign: policy and variant as ``runs`` has them."""

    policy: str
    variant: str = "default"
    chooser: str = "auto"  # auto | best | ucb1 | stubborn
    seed_key: str = "stock"  # runs with one key are served identical latencies
    sync_every: int | None = None

    @property
    def run_id(self) -> str:
        return f"{CAMPAIGN}.{self.policy}.{self.variant}".lower()

    @property
    def plugin(self) -> bool:
        return self.policy != "stock"


RUNS: tuple[RunSpec, ...] = (
    RunSpec("stock"),
    RunSpec("AUTO"),
    RunSpec("AUTO", "sync-4", sync_every=4),
    RunSpec("AUTO", "sync-16", sync_every=16),
    RunSpec("AUTO", "sync-64", sync_every=64),
    RunSpec("static", chooser="best", seed_key="static", sync_every=64),
    RunSpec("ucb1", chooser="ucb1", seed_key="ucb1", sync_every=64),
    RunSpec("greedy", chooser="stubborn", seed_key="greedy", sync_every=64),
)


def _chooser(spec: RunSpec) -> Callable[[int], tuple[Callable[[], int], Callable[[int, float], None], list]]:
    """Per size: (select() -> arm index, update(arm, latency), arms) for the run's rule."""
    fab = fabric(FABRIC)
    arms = fab.valid_arms(COLLECTIVE, NODES)

    def make(size: int):
        costs = fab.cost_table(COLLECTIVE, NODES, size)
        pred = [float(costs[a.algorithm_index, a.protocol_index]) for a in arms]
        pred = [p if p >= 0 else None for p in pred]
        if spec.chooser in ("ucb1", "stubborn"):
            stubborn = make_policy("eps-greedy", pseudo_count=1e9, estimator={"kind": "mean"})  # never leaves AUTO
            policy = make_policy("UCB1") if spec.chooser == "ucb1" else stubborn
            step = StepPolicy(policy, pred)
            return step.select, step.update, arms
        rule = fab.best_arm if spec.chooser == "best" else fab.auto_arm
        target = rule(COLLECTIVE, NODES, size)
        index = arms.index(target)
        return (lambda: index), (lambda arm, lat: None), arms

    return make


def _play(spec: RunSpec):
    """Every call of one nccl-tests process: (size, in_place, iteration or None, arm, latency, host time)."""
    fab = fabric(FABRIC)
    proc = SimProcess(fab, nodes=NODES, seed=derive_seed(CAMPAIGN, spec.seed_key))
    make = _chooser(spec)
    calls, timed = [], 0
    for size in SIZES:
        select, update, arms = make(size)
        auto = str(fab.auto_arm(COLLECTIVE, NODES, size))
        for in_place in (False, True):
            for iteration in [*range(ITERS), None]:  # None: the check call after the timed ones
                k = select()
                latency = float(proc.run(COLLECTIVE, arms[k], size, 1)[0])
                update(k, latency)
                host = latency
                if spec.plugin:
                    host += PROFILE_US
                    timed += 1
                    if spec.sync_every and timed % spec.sync_every == 0:
                        host += SYNC_US
                calls.append((size, in_place, iteration, str(arms[k]), auto, latency, host))
    return pd.DataFrame(calls, columns=["size_bytes", "in_place", "iteration", "arm", "auto_arm", "latency_us",
                                        "host_us"])


def _provenance(spec: RunSpec) -> dict:
    return {"source_path": f"synthetic://{spec.run_id}", "source_sha256": spec.run_id.replace(".", "-")}


def _iterations(spec: RunSpec, calls: pd.DataFrame) -> pd.DataFrame:
    timed = calls[calls["iteration"].notna()]
    algbw = timed["size_bytes"] / timed["host_us"] / 1e3
    return pd.DataFrame({
        "run_id": spec.run_id, "fabric": FABRIC, "collective": COLLECTIVE, "nodes": NODES, "ranks": RANKS,
        "size_bytes": timed["size_bytes"], "count": timed["size_bytes"] // 4, "dtype": "float", "redop": "sum",
        "in_place": timed["in_place"], "arm": None, "policy": spec.policy,
        "iteration": timed["iteration"].astype(int), "n_iters": 1, "time_us": timed["host_us"],
        "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (RANKS - 1) / RANKS, "wrong": 0, **_provenance(spec)})


def _trace(spec: RunSpec, calls: pd.DataFrame, ranks) -> pd.DataFrame:
    """Every rank's pull rows (local latency a little below the merged max) and sync rows."""
    n = len(calls)
    t_ns = T0_NS + np.cumsum(calls["host_us"].to_numpy() * 1e3).astype(np.int64)
    pull = calls.groupby("size_bytes").cumcount().to_numpy()
    fab_min = {s: min(v for v in fabric(FABRIC).cost_table(COLLECTIVE, NODES, s).ravel() if v >= 0) for s in SIZES}
    reward = calls["size_bytes"].map(fab_min).to_numpy() / calls["latency_us"].to_numpy()
    frames = []
    for rank in ranks:
        local = calls["latency_us"].to_numpy() * (1 - 0.01 * ((rank + pull) % RANKS) / RANKS)
        frames.append(pd.DataFrame({
            "kind": "pull", "t_ns": t_ns + rank, "rank": rank, "size_bytes": calls["size_bytes"].to_numpy(),
            "pull": pull, "arm": calls["arm"].to_numpy(), "auto_arm": calls["auto_arm"].to_numpy(),
            "latency_us": local, "reward": reward,
            "round": np.arange(n) // spec.sync_every if spec.sync_every else None, "line": np.arange(n) + 3}))
        if spec.sync_every:
            rounds = np.arange(spec.sync_every - 1, n, spec.sync_every)
            frames.append(pd.DataFrame({"kind": "sync", "t_ns": t_ns[rounds] + rank, "rank": rank,
                                        "round": rounds // spec.sync_every, "sync_us": SYNC_US}))
    trace = pd.concat(frames, ignore_index=True)
    return trace.assign(run_id=spec.run_id, fabric=FABRIC, comm_id="00000000000000ab", collective=COLLECTIVE,
                        ranks=RANKS, nodes=NODES, policy=spec.policy.lower(), source="ncclbot", **_provenance(spec))


def _run_row(spec: RunSpec, calls: pd.DataFrame, order: int) -> dict:
    timed = calls[calls["iteration"].notna()]
    busbw = (timed["size_bytes"] / timed["host_us"] / 1e3 * 2 * (RANKS - 1) / RANKS)
    avg = float(busbw.groupby([timed["size_bytes"], timed["in_place"]]).mean().mean())
    return {"run_id": spec.run_id, "campaign": CAMPAIGN, "fabric": FABRIC, "synthetic": True, "kind": "live",
            "collective": COLLECTIVE, "binary": "all_reduce_perf", "nodes": NODES, "ranks": RANKS,
            "gpus_per_node": GPUS, "arm": None, "policy": spec.policy, "variant": spec.variant, "outcome": "ok",
            "started_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=order),
            "avg_busbw_gbs": avg, "warmup_iters": 0, "iters": ITERS, **_provenance(spec)}


def write_live_dataset(root, *, runs=RUNS, no_trace=(), drop_ranks: dict[str, set[int]] | None = None) -> dict:
    """Write the campaign into ``root``; return ``{run_id: calls frame}`` (what each run played).

    ``no_trace`` lists policies whose traces are left out; ``drop_ranks`` maps a policy to
    ranks whose traces are left out (the bad-input cases).
    """
    played = {}
    drop_ranks = drop_ranks or {}
    for order, spec in enumerate(runs):
        calls = _play(spec)
        played[spec.run_id] = calls
        write_rows(root, "runs", [_run_row(spec, calls, order)])
        write_rows(root, "iterations", _iterations(spec, calls))
        if spec.plugin and spec.policy not in no_trace:
            ranks = [r for r in range(RANKS) if r not in drop_ranks.get(spec.policy, set())]
            write_rows(root, "live_events", _trace(spec, calls, ranks))
    return played
