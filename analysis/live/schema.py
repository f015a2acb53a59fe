"""The columns and types of every table ``analyze live`` writes, empty or not.

A part that has no input still writes its table (a scenario without a stock run has no
ladder), and a reader must not have to guess its columns: DuckDB, polars and pandas read an
empty table's Parquet and CSV with the same columns and types as a full one. This module is
the contract; :func:`conform` holds every table to it before it leaves the analysis, so a
producer that adds or drops a column fails loudly instead of drifting from what is written.
"""

from __future__ import annotations

import pandas as pd

from .sizes import STOCK_BANDS

__all__ = ["TABLE_COLUMNS", "conform"]

_STR, _INT, _FLOAT, _BOOL = "string", "int64", "float64", "boolean"
_SCENARIO = {"campaign": _STR, "fabric": _STR, "collective": _STR, "nodes": _INT, "ranks": _INT}
_BAND_STATS = {f"{name} {stat}": (_INT if stat == "sizes" else _FLOAT)
               for name, _lo, _hi in STOCK_BANDS for stat in ("median", "min", "max", "sizes", "busbw_ratio")}

#: Per table, its columns in order with their pandas dtype (``string``, ``int64``, ``float64``,
#: nullable ``boolean`` and ``Int64``).
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "selection_summary": {**_SCENARIO, "policy": _STR, "run_id": _STR, "sizes": _INT,
                          "selection_trlt_mean_pct": _FLOAT, "selection_trlt_p99_pct": _FLOAT,
                          "selection_trlt_worst_pct": _FLOAT, "worst_size": _STR, "mean_rank": _FLOAT,
                          "last100_on_oracle_pct": _FLOAT, "sizes_where_auto_errs": _INT,
                          "last_auto_collective_median": _FLOAT, "last_auto_collective_max": _FLOAT},
    "selection_per_size": {"campaign": _STR, "fabric": _STR, "run_id": _STR, "nodes": _INT, "ranks": _INT,
                           "policy": _STR, "collective": _STR, "size_bytes": _INT, "size": _STR, "collectives": _INT,
                           "oracle_arm": _STR, "auto_arm": _STR, "auto_errs": _BOOL, "selection_trlt_pct": _FLOAT,
                           "last100_on_oracle_pct": _FLOAT, "last_auto_collective": _INT, "distinct_arms": _INT},
    "oracle": {**_SCENARIO, "size_bytes": _INT, "oracle_arm": _STR, "oracle_us": _FLOAT, "auto_arm": _STR,
               "auto_us": _FLOAT, "auto_gap_pct": _FLOAT, "auto_errs": _BOOL, "arms_sampled": _INT,
               "scorable": _BOOL},
    "learning_windows": {**_SCENARIO, "policy": _STR, "run_id": _STR, "window": _STR, "lost_bw_pct": _FLOAT,
                         "auto_lost_bw_pct": _FLOAT, "sizes": _INT},
    "learning_curves": {**_SCENARIO, "run_id": _STR, "collective_index": _INT, "lost_bw_pct": _FLOAT,
                        "lost_bw_sem_pct": _FLOAT, "auto_lost_bw_pct": _FLOAT, "sizes": _INT, "policy": _STR},
    "timeline": {"campaign": _STR, "fabric": _STR, "policy": _STR, "nodes": _INT, "ranks": _INT, "run_id": _STR,
                 "collective": _STR, "size_bytes": _INT, "size": _STR, "collective_index": _INT, "arm": _STR,
                 "latency_us": _FLOAT, "accumulated_ms": _FLOAT, "finish_ms": _FLOAT, "oracle_finish_ms": _FLOAT,
                 "auto_finish_ms": _FLOAT},
    "overhead_ladder": {**_SCENARIO, "rung": _STR, "run_id": _STR, "selection_fixed": _BOOL, "sync_every": _FLOAT,
                        "bus_bw_gbs": _FLOAT, "overhead_pct": _FLOAT, "implied_us_per_sync": _FLOAT,
                        "measured_sync_us_median": _FLOAT, "monotone": _BOOL},
    "overhead_bins": {**_SCENARIO, "rung": _STR, "run_id": _STR, "size_bin": _STR, "sizes": _INT,
                      "median_time_overhead_pct": _FLOAT, "share_of_bw_drop_pct": _FLOAT,
                      "flush_1ms_collectives_per_sync": _FLOAT},
    "setup_toll": {**_SCENARIO, "run_id": _STR, "policy": _STR, "processes": _INT, "processes_using_nvls": _INT,
                   "stalls_found": _INT, "stall_median_s": _FLOAT, "stall_min_s": _FLOAT, "stall_max_s": _FLOAT,
                   "stall_arm": _STR, "stall_size_bytes": "Int64", "wall_median_s": _FLOAT,
                   "stall_share_of_wall_pct": _FLOAT, "mean_collective_us": _FLOAT,
                   "collectives_to_amortise_1pct": _FLOAT, "collective_time_to_amortise_1pct_s": _FLOAT},
    "reward_lag": {**_SCENARIO, "run_id": _STR, "policy": _STR, "pulls": _INT, "samples_used": _INT,
                   "samples_dropped": _INT, "dropped_pct": _FLOAT, "drop_reasons": _STR, "lag_median": _FLOAT,
                   "lag_p99": _FLOAT, "lag_max": _FLOAT, "old_deadline": _INT, "old_deadline_dropped_pct": _FLOAT},
    "setup_processes": {"campaign": _STR, "fabric": _STR, "run_id": _STR, "nodes": _INT, "ranks": _INT,
                        "rank": _INT, "used_nvls": _BOOL, "stall_found": _BOOL, "gap_s": _FLOAT, "comm_id": _STR,
                        "collective": _STR, "size_bytes": _INT, "pull": _INT, "arm": _STR, "wall_s": _FLOAT},
    "stock_bands": {**_SCENARIO, "policy": _STR, "run_id": _STR, "avg_busbw_ratio": _FLOAT, "sizes": _INT,
                    "sizes_faster": _INT, "sizes_slower": _INT, **_BAND_STATS},
    "stock_per_size": {**_SCENARIO, "policy": _STR, "run_id": _STR, "size_bytes": _INT, "size": _STR, "band": _STR,
                       "stock_time_us": _FLOAT, "time_us": _FLOAT, "speed_vs_stock": _FLOAT,
                       "stock_busbw_gbs": _FLOAT, "busbw_gbs": _FLOAT, "verdict": _STR},
    "forced_vs_stock": {"fabric": _STR, "collective": _STR, "nodes": _INT, "ranks": _INT, "size_bytes": _INT,
                        "size": _STR, "stock_campaign": _STR, "stock_run_id": _STR, "stock_us": _FLOAT,
                        "auto_arm": _STR, "forced_auto_us": _FLOAT, "forced_auto_over_stock": _FLOAT,
                        "best_arm": _STR, "forced_best_us": _FLOAT, "forced_best_over_stock": _FLOAT},
    "auto_vs_audit": {"campaign": _STR, "policy": _STR, "run_id": _STR, "fabric": _STR, "ranks": _INT,
                      "collective": _STR, "nodes": _INT, "size_bytes": _INT, "size": _STR, "live_auto_arm": _STR,
                      "audit_auto_arm": _STR, "live_oracle_arm": _STR, "audit_best_arm": _STR,
                      "live_selection_trlt_pct": _FLOAT, "audit_selection_trlt_pct": _FLOAT,
                      "difference_pp": _FLOAT},
    "issues": {"part": _STR, "campaign": _STR, "run_id": _STR, "what": _STR, "hint": _STR},
}


def conform(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as table ``name`` is written: its columns in the contract's order; an empty
    frame becomes zero rows of the contract's columns and types.

    Raises ``ValueError`` naming the table and the columns when a non-empty frame's columns
    differ from the contract (a producer changed without this module).
    """
    columns = TABLE_COLUMNS[name]
    if frame.empty:
        return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in columns.items()})
    if set(frame.columns) != set(columns):
        missing, extra = sorted(set(columns) - set(frame.columns)), sorted(set(frame.columns) - set(columns))
        raise ValueError(f"live table {name!r} does not match its schema (analysis/live/schema.py): "
                         f"missing {missing}, unexpected {extra}")
    return frame[list(columns)]
