"""The cost-model prior: NCCL's predicted time per context and arm, aligned to the pools.

The cost model plays three roles in NCCL-BOT (paper section 4): arm filter (``rho_max``),
warm-start prior and reward scale. Predictions come, in order of preference, from

1. the ``cost_tables`` table (per-call predictions NCCL logged, or a plugin dump), or
2. the ``tuning_tables`` table (NCCL's per-communicator latency/bandwidth table), turned into
   per-call predictions with NCCL's time formula and corrections, implemented once in
   :mod:`ncclbot_sweep.costmodel` (``shared/reference/nccl-cost-model.md``).

Both are keyed by context; duplicate rows (several runs or sources) are averaged.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.names import Arm

from .pools import CONTEXT_COLUMNS, Pools

__all__ = ["align_predictions", "predictions_from_cost_tables", "predictions_from_tuning_tables", "load_prior"]

log = logging.getLogger(__name__)


def align_predictions(pools: Pools, frame: pd.DataFrame, column: str = "predicted_us") -> np.ndarray:
    """Return ``[C, K]`` predictions for the pools' contexts and arms (NaN where absent)."""
    out = np.full(pools.depth.shape, np.nan)
    if frame.empty:
        return out
    df = frame[[*CONTEXT_COLUMNS, "arm", column]].dropna(subset=[column]).copy()
    df["arm"] = [str(Arm.parse(str(a))) for a in df["arm"]]
    for col in ("nodes", "ranks", "size_bytes"):
        df[col] = df[col].astype("int64")
    mean = df.groupby([*CONTEXT_COLUMNS, "arm"], sort=False)[column].mean()
    ctx_index = {key: c for c, key in enumerate(pools.context_keys())}
    arm_index = {a: k for k, a in enumerate(pools.arms)}
    for (*key, arm), value in mean.items():
        c = ctx_index.get(tuple(_norm(v) for v in key))
        k = arm_index.get(arm)
        if c is not None and k is not None and value > 0:
            out[c, k] = float(value)
    return out


def _norm(value):
    return int(value) if isinstance(value, (np.integer,)) else value


def predictions_from_cost_tables(pools: Pools, cost_tables: pd.DataFrame) -> np.ndarray:
    """Predictions from a ``cost_tables`` frame (architecture section 5)."""
    return align_predictions(pools, cost_tables, "predicted_us")


def predictions_from_tuning_tables(pools: Pools, tuning_tables: pd.DataFrame) -> np.ndarray:
    """Per-call predictions derived from NCCL's init tuning tables via :mod:`ncclbot_sweep.costmodel`.

    Raises :class:`AnalysisError` when the cost-model module is not available.
    """
    try:
        from ncclbot_sweep import costmodel
    except ImportError as exc:  # the simulator engineer's module; optional at import time
        raise AnalysisError("ncclbot_sweep.costmodel is not available to derive predictions",
                            hint="ingest NCCL logs with cost tables (NCCL_DEBUG_SUBSYS=TUNING)") from exc
    if tuning_tables.empty:
        return np.full(pools.depth.shape, np.nan)
    rows = costmodel.predict_from_tuning_tables(tuning_tables, pools.contexts[list(CONTEXT_COLUMNS)])
    return align_predictions(pools, rows, "predicted_us")


def load_prior(pools: Pools, *, cost_tables: pd.DataFrame | None = None,
               tuning_tables: pd.DataFrame | None = None) -> np.ndarray:
    """Best available ``[C, K]`` predictions: cost tables first, tuning tables to fill gaps."""
    pred = np.full(pools.depth.shape, np.nan)
    if cost_tables is not None and not cost_tables.empty:
        pred = predictions_from_cost_tables(pools, cost_tables)
    missing = pools.measured & ~np.isfinite(pred)
    if missing.any() and tuning_tables is not None and not tuning_tables.empty:
        derived = predictions_from_tuning_tables(pools, tuning_tables)
        pred = np.where(np.isfinite(pred), pred, derived)
    covered = (pools.measured & np.isfinite(pred)).any(axis=1)
    log.info("cost-model prior covers %d of %d contexts", int(covered.sum()), len(pools))
    return pred
