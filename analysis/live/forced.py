"""Forced arms against stock, and AUTO through the plugin against the offline audit.

The paper's boundary "forcing an arm can change its latency" (sections 1 and 8, appendix
I.1) is measured here, not assumed: where forced-arm runs and a stock run (a stock step, or
a forced sweep's ``baseline: true`` step) share a fabric and context, the ratio of the
forced price of AUTO's arm (the audit's steady mean, :func:`..audit.audit_auto`) to the
stock run's steady mean time. And the live AUTO run's selection TRLT is set beside what
the audit predicts for the same contexts: both price AUTO's arm against the best one, once
on forced pools and once on the live campaign's pooled profiler latencies.
"""

from __future__ import annotations

import pandas as pd

from ncclbot_sweep.names import human_size

from ..pools import CONTEXT_COLUMNS

__all__ = ["stock_steady", "forced_vs_stock", "auto_against_audit"]


def stock_steady(iterations: pd.DataFrame, run_ids, *, window: tuple[int, int] = (11, 99)) -> pd.DataFrame:
    """Steady mean time per (stock run, size) of the out-of-place pass, on the pools' window
    (all iterations when the window holds none), so it compares with forced steady means."""
    it = iterations[iterations["run_id"].isin(list(run_ids)) & iterations["time_us"].notna()]
    if "in_place" in it.columns and it["in_place"].notna().any():
        it = it[~it["in_place"].fillna(False).astype(bool)]
    if it.empty:
        return pd.DataFrame(columns=["run_id", "size_bytes", "stock_us"])
    inside = it["iteration"].between(*window)
    has_inside = inside.groupby([it["run_id"], it["size_bytes"]]).transform("any")
    it = it[inside | ~has_inside]
    out = it.groupby(["run_id", "size_bytes"])["time_us"].mean().rename("stock_us").reset_index()
    return out.astype({"size_bytes": "int64"})


def forced_vs_stock(audit: pd.DataFrame, stock_runs: pd.DataFrame, *, iterations: pd.DataFrame,
                    window: tuple[int, int] = (11, 99)) -> pd.DataFrame:
    """One row per (stock run, context) with forced prices: AUTO's and the best arm's over stock."""
    if audit.empty or stock_runs.empty:
        return pd.DataFrame()
    steady = stock_steady(iterations, stock_runs["run_id"], window=window)
    meta = stock_runs[["run_id", "campaign", "label", "fabric", "collective", "nodes", "ranks"]]
    steady = steady.merge(meta, on="run_id")
    for col in ("nodes", "ranks"):
        steady[col] = steady[col].astype("int64")
    ctx = audit.astype({"nodes": "int64", "ranks": "int64", "size_bytes": "int64"})
    joined = steady.merge(ctx, on=list(CONTEXT_COLUMNS))
    if joined.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "fabric": joined["fabric"], "collective": joined["collective"], "nodes": joined["nodes"],
        "ranks": joined["ranks"], "size_bytes": joined["size_bytes"], "size": joined["size_bytes"].map(human_size),
        "stock_campaign": joined["campaign"], "stock_run_id": joined["run_id"], "stock_us": joined["stock_us"],
        "auto_arm": joined["auto_arm"], "forced_auto_us": joined["auto_us"],
        "forced_auto_over_stock": joined["auto_us"] / joined["stock_us"],
        "best_arm": joined["best_arm"], "forced_best_us": joined["best_us"],
        "forced_best_over_stock": joined["best_us"] / joined["stock_us"],
    }).sort_values(["fabric", "collective", "nodes", "size_bytes", "stock_run_id"]).reset_index(drop=True)


def auto_against_audit(per_size: pd.DataFrame, runs: pd.DataFrame, *, audit: pd.DataFrame) -> pd.DataFrame:
    """Per context of an AUTO-through-plugin run: its live selection TRLT and the audit's (%)."""
    auto_runs = runs[runs["is_auto"]]
    live = per_size[per_size["run_id"].isin(auto_runs["run_id"])]
    if live.empty or audit.empty:
        return pd.DataFrame()
    live = live.merge(auto_runs[["run_id", "fabric", "nodes", "ranks"]], on="run_id")
    live = live.astype({"nodes": "int64", "ranks": "int64", "size_bytes": "int64"})
    ctx = audit.astype({"nodes": "int64", "ranks": "int64", "size_bytes": "int64"})
    joined = live.merge(ctx[[*CONTEXT_COLUMNS, "auto_arm", "best_arm", "trlt_selection"]],
                        on=list(CONTEXT_COLUMNS), suffixes=("_live", "_audit"))
    return pd.DataFrame({
        "policy": joined["policy"], "run_id": joined["run_id"], "fabric": joined["fabric"],
        "collective": joined["collective"], "nodes": joined["nodes"], "size_bytes": joined["size_bytes"],
        "size": joined["size"], "live_auto_arm": joined["auto_arm_live"], "audit_auto_arm": joined["auto_arm_audit"],
        "live_oracle_arm": joined["oracle_arm"], "audit_best_arm": joined["best_arm"],
        "live_selection_trlt_pct": joined["selection_trlt_pct"],
        "audit_selection_trlt_pct": 100 * joined["trlt_selection"],
        "difference_pp": joined["selection_trlt_pct"] - 100 * joined["trlt_selection"],
    })

