"""Synthetic forced-arm frames for the analysis tests (no simulator needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd

ARMS = ("Tree/LL", "Tree/LL128", "Tree/Simple", "Ring/LL", "Ring/LL128", "Ring/Simple", "NVLSTree/Simple")


def synth_frames(*, seed: int = 0, collectives=("AllReduce", "AllGather"), nodes=(2, 4, 8, 16),
                 sizes=(2**10, 2**16, 2**20, 2**24), iters: int = 40, transient: int = 6,
                 model_noise: float = 0.25):
    """Return (iterations, cost_tables) frames with a transient and an imperfect cost model.

    Each arm has a true steady latency; the first ``transient`` iterations are slower; the
    cost model's prediction is the true latency times a log-normal error, so its argmin is
    wrong on some contexts.
    """
    rng = np.random.default_rng(seed)
    it_rows, cost_rows = [], []
    for coll in collectives:
        arms = ARMS if coll == "AllReduce" else ARMS[3:6]
        for n in nodes:
            for size in sizes:
                for arm in arms:
                    if arm.startswith("NVLSTree") and n < 2:
                        continue
                    true = 10.0 + size / 1e4 * rng.uniform(0.5, 2.0) + n * rng.uniform(0.5, 2.0)
                    times = true * (1 + 0.03 * rng.standard_normal(iters))
                    times[:transient] *= 1 + rng.exponential(1.0, transient)
                    for i, value in enumerate(times):
                        it_rows.append(dict(run_id=f"{coll}-{n}-{arm}", fabric="sim-test", collective=coll,
                                            nodes=n, ranks=8 * n, size_bytes=size, arm=arm, iteration=i,
                                            time_us=float(abs(value))))
                    cost_rows.append(dict(fabric="sim-test", collective=coll, nodes=n, ranks=8 * n,
                                          size_bytes=size, arm=arm, source="synthetic",
                                          predicted_us=float(true * np.exp(model_noise * rng.standard_normal()))))
    return pd.DataFrame(it_rows), pd.DataFrame(cost_rows)
