"""nccl-tests results of live, stock and overhead runs, per size (host clock, timed pass).

Stock comparison and overhead ladder read the ``iterations`` rows of a run: per message
size, the mean time per collective and the mean bus bandwidth of the out-of-place pass
(paper Table 17: "nccl-tests out-of-place timed pass, host clock"). Per-iteration rows win
over averaged ones when a run has both. :data:`SIZE_BINS` and :data:`STOCK_BANDS` are the
paper's size groupings (Tables 19 and 17).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.names import human_size

from .setup import STALL_MIN_S

__all__ = ["MIB", "GIB", "SIZE_BINS", "STOCK_BANDS", "per_size", "average_busbw", "bin_of", "size_range",
           "stalled_sizes"]

MIB, GIB = 1 << 20, 1 << 30
#: Table 19's bins (lower bound inclusive, upper exclusive).
SIZE_BINS: tuple[tuple[str, int, float], ...] = (
    ("<1 MiB", 0, MIB), ("1-32 MiB", MIB, 64 * MIB), ("64-512 MiB", 64 * MIB, GIB), (">=1 GiB", GIB, np.inf))
#: Table 17's bands (on a factor-2 sweep: below 1 MiB, 1-8 MiB, 16 MiB and up).
STOCK_BANDS: tuple[tuple[str, int, float], ...] = (
    ("<1 MiB", 0, MIB), ("1-8 MiB", MIB, 16 * MIB), (">=16 MiB", 16 * MIB, np.inf))


def bin_of(size_bytes, bins=SIZE_BINS) -> list[str]:
    """The bin label of each size."""
    out = []
    for size in np.atleast_1d(size_bytes):
        out.append(next(name for name, lo, hi in bins if lo <= size < hi))
    return out


def size_range(lo: int, hi: int) -> str:
    """The sizes from ``lo`` to ``hi`` as a person writes them: ``16-64 MiB``, ``512 KiB-2 MiB``, ``8 MiB``."""
    low, high = human_size(int(lo)), human_size(int(hi))
    if low == high:
        return low
    (low_n, low_unit), (high_n, high_unit) = low.split(" "), high.split(" ")
    return f"{low_n}-{high}" if low_unit == high_unit else f"{low}-{high}"


def _timed(iterations: pd.DataFrame) -> pd.DataFrame:
    """Rows of the timed pass worth averaging: per-iteration rows if any, else averaged rows."""
    it = iterations[iterations["time_us"].notna() & (iterations["size_bytes"] > 0)]
    per_iter = it["iteration"].notna()
    has_iter = per_iter.groupby(it["run_id"]).transform("any")
    return it[per_iter | ~has_iter]


def per_size(iterations: pd.DataFrame, *, in_place: bool = False) -> pd.DataFrame:
    """``run_id, size_bytes, time_us, busbw_gbs, n`` of one pass (out-of-place by default)."""
    cols = ["run_id", "size_bytes", "time_us", "busbw_gbs", "max_time_us", "n"]
    if iterations is None or iterations.empty:
        return pd.DataFrame(columns=cols)
    it = _timed(iterations)
    if it["in_place"].notna().any():
        it = it[it["in_place"].fillna(False).astype(bool) == in_place]
    if it.empty:
        return pd.DataFrame(columns=cols)
    it = it.astype({"time_us": float, "busbw_gbs": float, "size_bytes": "int64"})
    out = it.groupby(["run_id", "size_bytes"], sort=True).agg(
        time_us=("time_us", "mean"), busbw_gbs=("busbw_gbs", "mean"), max_time_us=("time_us", "max"),
        n=("time_us", "size")).reset_index()
    return out[cols]


def average_busbw(runs: pd.DataFrame, iterations: pd.DataFrame) -> pd.Series:
    """nccl-tests' average bus bandwidth per run: ``runs.avg_busbw_gbs`` (the "Avg bus
    bandwidth" line) where present, else the mean over sizes of both passes' bus bandwidth."""
    given = runs.set_index("run_id")["avg_busbw_gbs"].astype(float)
    both = pd.concat([per_size(iterations, in_place=False), per_size(iterations, in_place=True)])
    derived = both.groupby("run_id")["busbw_gbs"].mean() if len(both) else pd.Series(dtype=float)
    return given.fillna(derived.reindex(given.index))


def stalled_sizes(iterations: pd.DataFrame, *, min_stall_s: float = STALL_MIN_S) -> dict[str, set[int]]:
    """Sizes whose timed pass holds a setup stall: one iteration at least ``min_stall_s``
    above the size's median. This finds the stall of runs without a trace (stock); a stall
    in nccl-tests' warm-up leaves no mark here, and none is needed."""
    if iterations is None or iterations.empty:
        return {}
    it = _timed(iterations).astype({"time_us": float, "size_bytes": "int64"})
    per = it.groupby(["run_id", "size_bytes"])["time_us"].agg(["max", "median"])
    hit = per[(per["max"] - per["median"]) >= min_stall_s * 1e6].reset_index()
    return {run_id: set(g["size_bytes"]) for run_id, g in hit.groupby("run_id")}
