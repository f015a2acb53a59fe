"""The reconstructed oracle of a live campaign (paper Tables 20-21, Figure 2).

Each arm's mean profiler latency per size, pooled over every run of the scenario (the
learners' included) with the first-use setup stall excluded; the oracle arm of a size is
the lowest pooled mean among arms with at least ``min_pulls`` samples (ties to NCCL's scan
order). AUTO's arm is the one the plugin logged as ``auto_arm`` (the cost model's choice).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..pools import arm_order

__all__ = ["MIN_PULLS", "pooled_means", "reconstruct_oracle"]

#: Samples an arm needs at a size to be the oracle there.
MIN_PULLS = 5


def pooled_means(pulls: pd.DataFrame) -> pd.DataFrame:
    """Mean merged latency per ``(collective, size_bytes, arm)`` over the pulls given
    (stalled pulls left out), with the sample count ``n``."""
    keep = pulls[~pulls["stall"] & pulls["latency_us"].notna() & pulls["arm"].notna()]
    if keep.empty:
        return pd.DataFrame(columns=["collective", "size_bytes", "arm", "mean_us", "n"])
    out = keep.groupby(["collective", "size_bytes", "arm"], sort=True)["latency_us"].agg(["mean", "size"])
    return out.rename(columns={"mean": "mean_us", "size": "n"}).reset_index()


def reconstruct_oracle(pulls: pd.DataFrame, pooled: pd.DataFrame, *, min_pulls: int = MIN_PULLS) -> pd.DataFrame:
    """One row per ``(collective, size_bytes)``: oracle and AUTO arms and their pooled means.

    ``auto_gap_pct`` is AUTO's selection loss there (its pooled mean over the oracle's, %);
    ``scorable`` is true when every arm seen at the size has ``min_pulls`` samples.
    """
    rows = []
    autos = pulls.dropna(subset=["auto_arm"]).groupby(["collective", "size_bytes"])["auto_arm"].agg(
        lambda s: s.mode().iloc[0])
    for (coll, size), g in pooled.groupby(["collective", "size_bytes"], sort=True):
        order = {a: i for i, a in enumerate(arm_order(g["arm"]))}
        g = g.assign(_o=g["arm"].map(order)).sort_values("_o")
        eligible = g[g["n"] >= min_pulls]
        if eligible.empty:
            continue
        best = eligible.loc[eligible["mean_us"].idxmin()]
        auto = autos.get((coll, size))
        means = dict(zip(g["arm"], g["mean_us"]))
        auto_us = means.get(auto, np.nan)
        rows.append({"collective": coll, "size_bytes": int(size), "oracle_arm": best["arm"],
                     "oracle_us": float(best["mean_us"]), "auto_arm": auto, "auto_us": auto_us,
                     "auto_gap_pct": 100 * (auto_us / best["mean_us"] - 1) if np.isfinite(auto_us) else np.nan,
                     "auto_errs": auto is not None and auto != best["arm"],
                     "arms_sampled": len(g), "scorable": bool((g["n"] >= min_pulls).all())})
    return pd.DataFrame(rows)
