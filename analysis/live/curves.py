"""Learning curves (paper Figure 2) and arm-choice timelines (Figure 11) of live runs.

The lost bandwidth of a collective is ``1 - oracle / price`` (bandwidth is inverse time at
a fixed size), its arm priced at the pooled mean as in :mod:`.selection`. A run's curve is
the mean over the sizes where AUTO errs at each collective index, with the SEM across
those sizes; windows summarise it over collectives 1-10, 11-30, 31-100 and the last 100
of each size, beside AUTO's constant loss on the same sizes. The timeline follows every
run at the size of AUTO's largest gap, collectives placed at accumulated served time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.names import human_size

from .selection import LAST_WINDOW

__all__ = ["WINDOWS", "learning_curves", "curve_windows", "timeline"]

#: Figure 2's windows of collective indices (inclusive); the last window is per size.
WINDOWS: tuple[tuple[str, int, int], ...] = (("1-10", 1, 10), ("11-30", 11, 30), ("31-100", 31, 100))


def _err_sizes(priced: pd.DataFrame) -> pd.DataFrame:
    return priced[priced["auto_errs"]]


def learning_curves(priced: pd.DataFrame) -> pd.DataFrame:
    """Per run and collective index: mean lost bandwidth (%) over the sizes where AUTO errs,
    its SEM across sizes, and AUTO's loss on the same sizes."""
    err = _err_sizes(priced)
    if err.empty:
        return pd.DataFrame(columns=["run_id", "collective_index", "lost_bw_pct", "lost_bw_sem_pct",
                                     "auto_lost_bw_pct", "sizes"])
    err = err.assign(auto_loss=100 * (1 - err["oracle_us"] / err["auto_us"]))
    grouped = err.groupby(["run_id", "call"], sort=True)
    out = grouped.agg(lost_bw_pct=("loss_pct", "mean"), sd=("loss_pct", "std"), sizes=("loss_pct", "count"),
                      auto_lost_bw_pct=("auto_loss", "mean")).reset_index()
    out["lost_bw_sem_pct"] = out["sd"] / np.sqrt(out["sizes"])
    out = out.rename(columns={"call": "collective_index"})
    return out[["run_id", "collective_index", "lost_bw_pct", "lost_bw_sem_pct", "auto_lost_bw_pct", "sizes"]]


def curve_windows(priced: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 2's summary: mean lost bandwidth per window, per run, beside AUTO's."""
    err = _err_sizes(priced)
    labels = runs.set_index("run_id")["label"]
    rows = []
    for run_id, g in err.groupby("run_id", sort=False):
        auto = float((100 * (1 - g["oracle_us"] / g["auto_us"])).groupby(g["size_bytes"]).first().mean())
        per_size = {name: g[(g["call"] >= lo) & (g["call"] <= hi)].groupby("size_bytes")["loss_pct"].mean()
                    for name, lo, hi in WINDOWS}
        per_size[f"last {LAST_WINDOW}"] = g.sort_values("call").groupby("size_bytes").tail(LAST_WINDOW) \
            .groupby("size_bytes")["loss_pct"].mean()
        for name, values in per_size.items():
            rows.append({"policy": labels.get(run_id, run_id), "run_id": run_id, "window": name,
                         "lost_bw_pct": float(values.mean()) if len(values) else np.nan,
                         "auto_lost_bw_pct": auto, "sizes": len(values)})
    return pd.DataFrame(rows)


def timeline(priced: pd.DataFrame, oracle: pd.DataFrame, *, runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 11: every run's collectives at the size of AUTO's largest gap, at accumulated time.

    Columns: run, collective index, arm, served latency (merged, us), accumulated time (ms),
    and the finish times of the run, the oracle and AUTO over the same number of collectives.
    """
    gaps = oracle.dropna(subset=["auto_gap_pct"])
    if gaps.empty:
        return pd.DataFrame()
    worst = gaps.loc[gaps["auto_gap_pct"].idxmax()]
    at = priced[(priced["collective"] == worst["collective"]) & (priced["size_bytes"] == worst["size_bytes"])]
    labels = runs.set_index("run_id")["label"]
    parts = []
    for run_id, g in at.groupby("run_id", sort=False):
        g = g.sort_values("call")
        # A stalled pull is charged its arm's price: the toll is the setup part's, not selection's.
        served = g["latency_us"].astype(float).where(~g["stall"].astype(bool)).fillna(g["price_us"])
        n = len(g)
        parts.append(pd.DataFrame({
            "policy": labels.get(run_id, run_id), "run_id": run_id, "collective": worst["collective"],
            "size_bytes": int(worst["size_bytes"]), "size": human_size(worst["size_bytes"]),
            "collective_index": g["call"].to_numpy(), "arm": g["arm"].to_numpy(),
            "latency_us": served.to_numpy(), "accumulated_ms": served.cumsum().to_numpy() / 1e3,
            "finish_ms": served.sum() / 1e3, "oracle_finish_ms": n * worst["oracle_us"] / 1e3,
            "auto_finish_ms": n * worst["auto_us"] / 1e3}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
