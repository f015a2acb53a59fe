"""Selection quality of live runs (paper Tables 20-21): selection-priced TRLT per size.

Each collective a run played is charged its arm's pooled mean (:mod:`.oracle`), so the
TRLT of a size is ``sum(price) / (T * oracle mean) - 1`` over the run's ``T`` collectives
there (paper eq. 3); exploration counts, setup does not. A run that plays the oracle arm
throughout scores exactly 0. Summaries are over sizes: mean, p99 and worst size; the share
of the last 100 collectives on the oracle arm; the collective at which the run last played
AUTO's arm (over the sizes where AUTO errs); and the mean rank among the scenario's runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.names import human_size

__all__ = ["LAST_WINDOW", "price_pulls", "selection_per_size", "selection_summary"]

#: The closing window of Table 20 ("share of the last 100 collectives on the oracle arm").
LAST_WINDOW = 100


def price_pulls(pulls: pd.DataFrame, pooled: pd.DataFrame, *, oracle: pd.DataFrame) -> pd.DataFrame:
    """The pulls of contexts with an oracle, with ``price_us`` (the arm's pooled mean),
    ``oracle_arm``, ``oracle_us``, ``auto_arm_ctx``, ``auto_us`` and ``loss_pct`` (lost
    bandwidth against the oracle, ``100 * (1 - oracle / price)``)."""
    priced = pulls.merge(pooled[["collective", "size_bytes", "arm", "mean_us"]], how="left",
                         on=["collective", "size_bytes", "arm"]).rename(columns={"mean_us": "price_us"})
    ctx = oracle[["collective", "size_bytes", "oracle_arm", "oracle_us", "auto_arm", "auto_us", "auto_errs"]]
    priced = priced.merge(ctx.rename(columns={"auto_arm": "auto_arm_ctx"}), on=["collective", "size_bytes"])
    priced["loss_pct"] = 100 * (1 - priced["oracle_us"] / priced["price_us"])
    return priced


def selection_per_size(priced: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, size): TRLT (%), collectives, last-100 share and last AUTO collective."""
    rows = []
    labels = runs.set_index("run_id")["label"]
    for (run_id, coll, size), g in priced.groupby(["run_id", "collective", "size_bytes"], sort=True):
        g = g.sort_values("call")
        price = g["price_us"].to_numpy(float)
        ok = np.isfinite(price)
        oracle_us = float(g["oracle_us"].iloc[0])
        last = g.tail(LAST_WINDOW)
        on_auto = g.loc[g["arm"] == g["auto_arm_ctx"], "call"]
        rows.append({
            "run_id": run_id, "policy": labels.get(run_id, run_id), "collective": coll, "size_bytes": int(size),
            "size": human_size(size), "collectives": len(g), "oracle_arm": g["oracle_arm"].iloc[0],
            "auto_arm": g["auto_arm_ctx"].iloc[0], "auto_errs": bool(g["auto_errs"].iloc[0]),
            "selection_trlt_pct": 100 * (price[ok].mean() / oracle_us - 1) if ok.any() else np.nan,
            "last100_on_oracle_pct": 100 * float((last["arm"] == last["oracle_arm"]).mean()),
            "last_auto_collective": int(on_auto.max()) if len(on_auto) else 0,
            "distinct_arms": int(g["arm"].nunique()),
        })
    return pd.DataFrame(rows)


def selection_summary(per_size: pd.DataFrame) -> pd.DataFrame:
    """One row per run: TRLT mean, p99 and worst size over sizes, and the behaviour columns."""
    if per_size.empty:
        return pd.DataFrame()
    ranked = per_size.assign(rank=per_size.groupby(["collective", "size_bytes"])["selection_trlt_pct"]
                             .rank(method="average"))
    rows = []
    for (run_id, policy), g in ranked.groupby(["run_id", "policy"], sort=False):
        v = g["selection_trlt_pct"].to_numpy(float)
        worst = g.loc[g["selection_trlt_pct"].idxmax()] if np.isfinite(v).any() else None
        errs = g[g["auto_errs"]]
        rows.append({
            "policy": policy, "run_id": run_id, "sizes": len(g),
            "selection_trlt_mean_pct": float(np.nanmean(v)), "selection_trlt_p99_pct": float(np.nanpercentile(v, 99)),
            "selection_trlt_worst_pct": float(np.nanmax(v)), "worst_size": worst["size"] if worst is not None else None,
            "mean_rank": float(g["rank"].mean()),
            "last100_on_oracle_pct": float(g["last100_on_oracle_pct"].mean()),
            "sizes_where_auto_errs": len(errs),
            "last_auto_collective_median": float(errs["last_auto_collective"].median()) if len(errs) else np.nan,
            "last_auto_collective_max": float(errs["last_auto_collective"].max()) if len(errs) else np.nan,
        })
    return pd.DataFrame(rows).sort_values("selection_trlt_mean_pct", kind="stable").reset_index(drop=True)
