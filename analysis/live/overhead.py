"""The overhead ladder (paper Tables 18-19): what running the plugin costs against stock.

Rungs are runs of one scenario: stock (no plugin), then each plugin policy's runs by their
``variant`` (sync off, or ``sync-K``: a synchronisation round every K collectives). With
AUTO's selection fixed (policy AUTO through the plugin) the bandwidth gap to stock is pure
overhead, which is Table 18; other policies' rungs are listed too, marked. Per rung:

* nccl-tests' average bus bandwidth and the overhead against stock (%);
* whether the overhead grows with the sync frequency (``monotone``, per policy);
* the implied cost of one sync round: the per-collective time over the same policy's
  sync-off rung times K (mean over sizes: a size holds few rounds at large K, so a median
  would be quantised), beside the rounds' own ``sync_us`` in the trace. A rung no slower
  than its sync-off rung has an implied cost of 0 (the difference is run-to-run noise: a
  round cannot make a collective faster), never a negative one.

How the host time was measured is the data's: on the simulated fabric the simulator's host
charges each plugin call its wall time when it returns within 5 us and its calling thread's
CPU time otherwise (its rank processes share the machine's cores and are not coupled the way
a collective couples real ranks; ``plugin/host/simhost.c``); on a cluster it is nccl-tests'
own timing.

Per size bin (Table 19): the median per-collective time overhead against stock and the
bin's share of the average-bandwidth drop, and the collectives per sync a 1 ms flush rule
would imply at stock latency.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .sizes import SIZE_BINS, average_busbw, bin_of, per_size

__all__ = ["ladder", "ladder_bins"]

_FLUSH_US = 1000.0


def _rungs(runs: pd.DataFrame) -> pd.DataFrame:
    plugin = runs[~runs["is_stock"]].copy()
    plugin["syncs_per_collective"] = [0.0 if pd.isna(k) else 1.0 / k for k in plugin["sync_every"]]
    plugin["policy_key"] = plugin["policy"].fillna("AUTO").str.lower()
    return plugin.sort_values(["is_auto", "policy_key", "syncs_per_collective"], ascending=[False, True, True],
                              kind="stable")


def _sync_off(rungs: pd.DataFrame, policy_key: str) -> pd.Series | None:
    off = rungs[(rungs["policy_key"] == policy_key) & (rungs["syncs_per_collective"] == 0)]
    return off.iloc[0] if len(off) else None


def ladder(runs: pd.DataFrame, stock: pd.Series, *, iterations: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Table 18: one row per rung (stock first) with bandwidth, overhead and sync costs."""
    rungs = _rungs(runs)
    bw = average_busbw(pd.concat([stock.to_frame().T, rungs]), iterations)
    stock_bw = float(bw.get(stock["run_id"], np.nan))
    sizes = per_size(iterations).set_index(["run_id", "size_bytes"])["time_us"]
    syncs = events[events["kind"] == "sync"] if len(events) else pd.DataFrame(columns=["run_id", "sync_us"])
    rows = [{"rung": "stock", "policy": stock["label"], "run_id": stock["run_id"], "selection_fixed": True,
             "sync_every": np.nan, "bus_bw_gbs": stock_bw, "overhead_pct": 0.0}]
    for r in rungs.itertuples():
        off = _sync_off(rungs, r.policy_key)
        implied = np.nan
        if off is not None and r.syncs_per_collective > 0:
            mine, base = sizes.get(r.run_id), sizes.get(off["run_id"])
            if mine is not None and base is not None:
                diff = (mine - base.reindex(mine.index)).dropna()
                implied = max(0.0, float(diff.mean() * r.sync_every)) if len(diff) else np.nan
        measured = syncs.loc[syncs["run_id"] == r.run_id, "sync_us"].astype(float)
        rung_bw = float(bw.get(r.run_id, np.nan))
        rows.append({"rung": r.label, "policy": r.label, "run_id": r.run_id, "selection_fixed": bool(r.is_auto),
                     "sync_every": r.sync_every if pd.notna(r.sync_every) else np.nan, "bus_bw_gbs": rung_bw,
                     "overhead_pct": 100 * (1 - rung_bw / stock_bw),
                     "implied_us_per_sync": implied,
                     "measured_sync_us_median": float(measured.median()) if measured.notna().any() else np.nan})
    out = pd.DataFrame(rows)
    out["monotone"] = _monotone(out, rungs)
    return out.drop(columns=["policy"])


def _monotone(out: pd.DataFrame, rungs: pd.DataFrame) -> list:
    """Per rung: does its policy's overhead grow with the sync frequency (None for stock)?"""
    flags = {}
    keyed = out.merge(rungs[["run_id", "policy_key", "syncs_per_collective"]], on="run_id")
    for key, g in keyed.groupby("policy_key"):
        per_freq = g.groupby("syncs_per_collective")["overhead_pct"].mean().sort_index()
        flags[key] = bool(np.all(np.diff(per_freq.to_numpy()) >= 0)) if len(per_freq) > 1 else None
    lookup = dict(zip(keyed["run_id"], keyed["policy_key"]))
    return [flags.get(lookup.get(run_id)) if run_id in lookup else None for run_id in out["run_id"]]


def ladder_bins(runs: pd.DataFrame, stock: pd.Series, *, iterations: pd.DataFrame) -> pd.DataFrame:
    """Table 19: per rung and size bin, the median time overhead against stock (%), the
    bin's share of the bus-bandwidth drop (%) and the 1 ms flush rule's collectives per sync."""
    sizes = per_size(iterations)
    ref = sizes[sizes["run_id"] == stock["run_id"]].set_index("size_bytes")
    rows = []
    for r in _rungs(runs).itertuples():
        mine = sizes[sizes["run_id"] == r.run_id].set_index("size_bytes")
        common = mine.index.intersection(ref.index)
        if common.empty:
            continue
        time_over = 100 * (mine.loc[common, "time_us"] / ref.loc[common, "time_us"] - 1)
        drop = ref.loc[common, "busbw_gbs"] - mine.loc[common, "busbw_gbs"]
        total = float(drop.sum())
        bins = pd.Series(bin_of(common.to_numpy()), index=common)
        for name, _lo, _hi in SIZE_BINS:
            in_bin = bins.index[bins == name]
            if in_bin.empty:
                continue
            rows.append({"rung": r.label, "run_id": r.run_id, "size_bin": name, "sizes": len(in_bin),
                         "median_time_overhead_pct": float(time_over.loc[in_bin].median()),
                         "share_of_bw_drop_pct": 100 * float(drop.loc[in_bin].sum()) / total if total else np.nan,
                         "flush_1ms_collectives_per_sync": float(np.median(
                             np.ceil(_FLUSH_US / ref.loc[in_bin, "time_us"].to_numpy(float))))})
    return pd.DataFrame(rows)
