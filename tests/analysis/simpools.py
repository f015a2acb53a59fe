"""Forced-arm frames generated from the simulator's Python API (no binaries, no ingest)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.sim.fabric import fabric
from ncclbot_sweep.sim.process import SimProcess, derive_seed

SIZES = tuple(2**k for k in range(10, 31, 2))  # 1 KiB .. 1 GiB


def sim_frames(name: str = "sim-h100", *, collectives=("AllGather", "AllReduce", "ReduceScatter"),
               nodes=(4, 8, 16, 32), sizes=SIZES, iters: int = 100, warmup: int = 1):
    """(iterations, cost_tables) of a forced-arm sweep: one process per (collective, nodes, arm)."""
    fab = fabric(name)
    it_rows, cost_rows = [], []
    for coll in collectives:
        for n in nodes:
            ranks = fab.ranks(n)
            arms = fab.valid_arms(coll, n)
            for arm in arms:
                proc = SimProcess(fab, nodes=n, seed=derive_seed(name, coll, n, str(arm)))
                for size in sizes:
                    times = proc.run(coll, arm, size, warmup + iters)[warmup:]
                    it_rows.append(pd.DataFrame({
                        "run_id": f"{coll}-{n}-{arm}", "fabric": name, "collective": coll, "nodes": n,
                        "ranks": ranks, "size_bytes": size, "arm": str(arm),
                        "iteration": np.arange(iters), "time_us": times}))
            for size in sizes:
                costs = fab.cost_table(coll, n, size)
                for arm in arms:
                    value = float(costs[arm.algorithm_index, arm.protocol_index])
                    if value >= 0:
                        cost_rows.append(dict(fabric=name, collective=coll, nodes=n, ranks=ranks, size_bytes=size,
                                              arm=str(arm), predicted_us=value, source="sim"))
    return pd.concat(it_rows, ignore_index=True), pd.DataFrame(cost_rows)


def write_sim_dataset(root, name: str = "sim-h100", *, runs: bool = True, **kwargs):
    """Write :func:`sim_frames` into a dataset root through ``datasets.write_rows``; with ``runs``
    also one ``runs`` row per run saying what ingest says of the simulator's output: synthetic."""
    from ncclbot_sweep.ingest.datasets import write_rows

    it, cost = sim_frames(name, **kwargs)
    it = it.assign(source_path="sim://" + it["run_id"], source_sha256=it["run_id"].map(lambda r: f"{hash(r) & 0xffffffff:08x}"))
    write_rows(root, "iterations", it)
    if runs:
        rows = it.drop_duplicates("run_id")[["run_id", "fabric", "collective", "nodes", "ranks", "arm", "source_path",
                                             "source_sha256"]]
        write_rows(root, "runs", rows.assign(kind="forced", outcome="ok", synthetic=True))
    write_rows(root, "cost_tables", cost.assign(source_sha256="cost"))
    return root
