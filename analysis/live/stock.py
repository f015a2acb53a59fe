"""Live runs against stock NCCL (paper Table 17 and section 6.5, "Against stock").

Per size, the speed ratio ``stock time / run time`` of the nccl-tests out-of-place timed
pass (above 1: the run is faster). Each run's stalled size (its setup toll, :mod:`.setup`)
and the stock run's are removed first, so a one-time setup stall in a timed pass does not
pose as selection. Per band: the median ratio over sizes with its range, and the band's
average bus bandwidth over stock's (``busbw_ratio``, the band's sizes weighted as nccl-tests'
average weighs them); over all sizes: the average bus-bandwidth ratio and the sizes more than
5% faster or slower than stock.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.names import human_size

from .sizes import STOCK_BANDS, bin_of, per_size

__all__ = ["MARGIN", "stock_per_size", "stock_bands"]

#: A size is faster (slower) than stock when its time is below (above) stock's by this factor.
MARGIN = 1.05


def stock_per_size(runs: pd.DataFrame, stock: pd.Series, *, iterations: pd.DataFrame,
                   stalled: dict[str, set[int]]) -> pd.DataFrame:
    """One row per (run, size): times, ratio, verdict; stalled sizes dropped (``stalled``
    maps a run id to the sizes its processes stalled at)."""
    sizes = per_size(iterations)
    ref = sizes[sizes["run_id"] == stock["run_id"]].set_index("size_bytes")
    drop_ref = stalled.get(stock["run_id"], set())
    rows = []
    for r in runs.itertuples():
        mine = sizes[sizes["run_id"] == r.run_id].set_index("size_bytes")
        removed = drop_ref | stalled.get(r.run_id, set())
        for size in mine.index.intersection(ref.index):
            if size in removed:
                continue
            ratio = ref.at[size, "time_us"] / mine.at[size, "time_us"]
            rows.append({"policy": r.label, "run_id": r.run_id, "size_bytes": int(size), "size": human_size(size),
                         "band": bin_of([size], STOCK_BANDS)[0], "stock_time_us": ref.at[size, "time_us"],
                         "time_us": mine.at[size, "time_us"], "speed_vs_stock": ratio,
                         "stock_busbw_gbs": ref.at[size, "busbw_gbs"], "busbw_gbs": mine.at[size, "busbw_gbs"],
                         "verdict": "faster" if ratio > MARGIN else "slower" if ratio < 1 / MARGIN else "on par"})
    return pd.DataFrame(rows)


def stock_bands(per_size_rows: pd.DataFrame) -> pd.DataFrame:
    """Table 17: per run and band the median speed ratio and its range; per run the average
    bus-bandwidth ratio over all kept sizes and the counts of faster/slower sizes."""
    rows = []
    for (policy, run_id), g in per_size_rows.groupby(["policy", "run_id"], sort=False):
        base = {"policy": policy, "run_id": run_id,
                "avg_busbw_ratio": float(g["busbw_gbs"].mean() / g["stock_busbw_gbs"].mean()),
                "sizes": len(g), "sizes_faster": int((g["verdict"] == "faster").sum()),
                "sizes_slower": int((g["verdict"] == "slower").sum())}
        for name, _lo, _hi in STOCK_BANDS:
            in_band = g[g["band"] == name]
            b = in_band["speed_vs_stock"]
            base[f"{name} median"] = float(b.median()) if len(b) else np.nan
            base[f"{name} min"] = float(b.min()) if len(b) else np.nan
            base[f"{name} max"] = float(b.max()) if len(b) else np.nan
            base[f"{name} sizes"] = len(b)
            base[f"{name} busbw_ratio"] = (float(in_band["busbw_gbs"].mean() / in_band["stock_busbw_gbs"].mean())
                                           if len(b) else np.nan)
        rows.append(base)
    return pd.DataFrame(rows)
