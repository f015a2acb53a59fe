"""The setup toll: the first-use NVLS stall of each process (paper section 6.5, appendix F).

In the live traces the stall is the single largest gap between consecutive collectives of
a process (a rank), when it is at least one second, attributed to the arm played right
after it (paper section 7: "we did not separate it from other arms' lazy initialization").
Where the stall lands inside the collective's own profiler time instead (the simulated
fabric serves it as GPU time, since nothing there sleeps), that latency is the candidate: a
pull's candidate is the longer of the gap before it and its own latency, and a process's
wall time is at least the GPU time of its collectives.
A gap is measured between trace timestamps (``t_ns``) of one rank's pull rows in time
order, over all its communicators and contexts; a stall on a process's very first traced
collective has no gap before it and is not found. The plugin writes a pull row when its
reward is applied (at a synchronisation round), so on its traces ``t_ns`` can trail the
collective by up to ``1 + NCCLBOT_SYNC_LAG`` rounds: the gap still holds the stall, charged to
the first row written after it.

The stall is charged once per process: its share of the run's wall time, and the steady
collectives needed to amortise it to 1% (``stall / (0.01 * mean collective latency)``).
The stalled pull is left out of the oracle's pooled means (:mod:`.oracle`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.names import Arm, algorithm_family

from .pulls import PULL_KEYS

__all__ = ["STALL_MIN_S", "AMORTISE_SHARE", "find_stalls", "mark_stalls", "setup_toll"]

#: A gap between collectives at least this long (s) is a setup stall.
STALL_MIN_S = 1.0
#: The share of run time a stall is amortised to.
AMORTISE_SHARE = 0.01


def _is_nvls(arm) -> bool:
    """True for arms of the NVLS family (NVLS, NVLSTree), whose first use stalls."""
    return isinstance(arm, str) and algorithm_family(Arm.parse(arm).algorithm) == "nvls"


def find_stalls(events: pd.DataFrame, *, min_gap_s: float = STALL_MIN_S) -> pd.DataFrame:
    """One row per process (``run_id``, ``rank``): its largest gap and, when >= ``min_gap_s``,
    the stalled pull (``comm_id``, ``collective``, ``size_bytes``, ``pull``, ``arm``)."""
    cols = ["run_id", "rank", "used_nvls", "stall_found", "gap_s", *PULL_KEYS[1:], "arm", "wall_s"]
    if events is None or events.empty:
        return pd.DataFrame(columns=cols)
    ev = events[events["kind"] == "pull"].copy()
    if ev.empty:
        return pd.DataFrame(columns=cols)
    ev["comm_id"] = ev["comm_id"].fillna("")
    ev["t_s"] = ev["t_ns"].astype("float64") / 1e9
    sort = ["run_id", "rank", "t_s"] + (["line"] if "line" in ev.columns else [])
    ev = ev.sort_values(sort, kind="stable").reset_index(drop=True)
    grouped = ev.groupby(["run_id", "rank"], sort=False)
    latency_s = ev["latency_us"].astype("float64").fillna(0.0) / 1e6
    ev["gap_s"] = np.fmax(grouped["t_s"].diff().to_numpy(float), latency_s.to_numpy(float))
    first_latency_s = grouped["latency_us"].transform("first").fillna(0.0) / 1e6
    traced_s = grouped["t_s"].transform("max") - grouped["t_s"].transform("min") + first_latency_s
    ev["wall_s"] = np.maximum(traced_s, latency_s.groupby([ev["run_id"], ev["rank"]]).transform("sum"))
    nvls = {arm: _is_nvls(arm) for arm in ev["arm"].dropna().unique()}
    ev["nvls"] = ev["arm"].map(nvls).fillna(False).astype(bool)
    rows = []
    for (run_id, rank), g in ev.groupby(["run_id", "rank"], sort=False):
        gaps = g["gap_s"].to_numpy(float)
        at = int(np.nanargmax(gaps)) if np.isfinite(gaps).any() else None
        found = at is not None and gaps[at] >= min_gap_s
        hit = g.iloc[at] if found else None
        rows.append({"run_id": run_id, "rank": int(rank), "used_nvls": bool(g["nvls"].any()), "stall_found": found,
                     "gap_s": float(gaps[at]) if at is not None else np.nan,
                     **{k: (hit[k] if found else None) for k in (*PULL_KEYS[1:], "arm")},
                     "wall_s": float(g["wall_s"].iloc[0])})
    return pd.DataFrame(rows, columns=cols)


def mark_stalls(pulls: pd.DataFrame, stalls: pd.DataFrame) -> pd.Series:
    """Boolean mask of the merged pulls that some process found stalled."""
    if pulls.empty or stalls.empty or not stalls["stall_found"].any():
        return pd.Series(False, index=pulls.index)
    keys = stalls[stalls["stall_found"]][PULL_KEYS].drop_duplicates()
    keys = keys.astype({"size_bytes": "int64", "pull": "int64"}).assign(_stall=True)
    flag = pulls[PULL_KEYS].merge(keys, on=PULL_KEYS, how="left")["_stall"]
    return pd.Series(flag.fillna(False).to_numpy(bool), index=pulls.index)


def setup_toll(runs: pd.DataFrame, stalls: pd.DataFrame, *, pulls: pd.DataFrame, pooled: pd.DataFrame) -> pd.DataFrame:
    """Per traced run: processes, stalls found, stall seconds (median and range over its
    processes), the arm and size after it, share of wall time and the amortisation figures.

    The stall is the gap less the steady latency of the collective after it (its arm's
    pooled mean at that size); ``pulls`` carries ``stall`` (see :func:`mark_stalls`).
    """
    out = []
    steady = pooled.set_index(["collective", "size_bytes", "arm"])["mean_us"] if len(pooled) else pd.Series(dtype=float)
    for run in runs.itertuples():
        g = stalls[stalls["run_id"] == run.run_id]
        if g.empty:
            continue
        hit = g[g["stall_found"]]
        after = [steady.get((r.collective, int(r.size_bytes), r.arm), 0.0) for r in hit.itertuples()]
        stall = hit["gap_s"].to_numpy(float) - np.nan_to_num(np.array(after, dtype=float)) / 1e6
        share = stall / hit["wall_s"].to_numpy(float) if len(hit) else np.array([])
        mine = pulls[(pulls["run_id"] == run.run_id) & ~pulls["stall"]]["latency_us"].astype(float)
        mean_us = float(mine.mean()) if mine.notna().any() else np.nan
        med = float(np.median(stall)) if len(stall) else np.nan
        out.append({
            "campaign": run.campaign, "run_id": run.run_id, "policy": run.label,
            "processes": len(g), "processes_using_nvls": int(g["used_nvls"].sum()), "stalls_found": len(hit),
            "stall_median_s": med, "stall_min_s": float(stall.min()) if len(stall) else np.nan,
            "stall_max_s": float(stall.max()) if len(stall) else np.nan,
            "stall_arm": hit["arm"].mode().iloc[0] if len(hit) else None,
            "stall_size_bytes": int(hit["size_bytes"].mode().iloc[0]) if len(hit) else None,
            "wall_median_s": float(g["wall_s"].median()),
            "stall_share_of_wall_pct": 100 * float(np.median(share)) if len(share) else np.nan,
            "mean_collective_us": mean_us,
            "collectives_to_amortise_1pct": (med / (AMORTISE_SHARE * mean_us / 1e6)
                                             if len(stall) and mean_us > 0 else np.nan),
            "collective_time_to_amortise_1pct_s": med / AMORTISE_SHARE if len(stall) else np.nan,
        })
    frame = pd.DataFrame(out)
    return frame.astype({"stall_size_bytes": "Int64"}) if len(frame) else frame
