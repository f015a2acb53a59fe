"""The cost-model prior: NCCL's predicted time per context and arm, aligned to the pools.

The cost model plays three roles in NCCL-BOT (paper section 4): arm filter (``rho_max``),
warm-start prior and reward scale. Predictions come, in order of preference, from

1. the ``cost_tables`` table (per-call predictions NCCL logged, or a plugin dump), or
2. the ``tuning_tables`` table (NCCL's per-communicator latency/bandwidth table), turned into
   per-call predictions with NCCL's time formula and corrections, implemented once in
   :mod:`ncclbot_sweep.costmodel` (``docs/nccl-cost-model.md``).

Both are keyed by context; duplicate rows (several runs or sources) are averaged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np
import pandas as pd

from ncclbot_sweep.names import Arm

from .pools import CONTEXT_COLUMNS, Pools

__all__ = ["CallParams", "call_params_from_runs", "align_predictions", "predictions_from_cost_tables", "predictions_from_tuning_tables", "load_prior"]

log = logging.getLogger(__name__)


def align_predictions(pools: Pools, frame: pd.DataFrame, *, column: str = "predicted_us") -> np.ndarray:
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
    return int(value) if isinstance(value, (int, np.integer)) else value


def predictions_from_cost_tables(pools: Pools, cost_tables: pd.DataFrame) -> np.ndarray:
    """Predictions from a ``cost_tables`` frame (architecture section 5)."""
    return align_predictions(pools, cost_tables)


@dataclasses.dataclass(frozen=True)
class CallParams:
    """Per-communicator facts NCCL's per-call formula needs beyond the tuning table.

    ``comm_channels`` (runtime channels, ring plateau check), ``comp_cap`` (90 = Hopper,
    100 = Blackwell), ``model_nodes`` (NVLink domains; None = physical nodes), ``x86_cpu``.
    When ``comm_channels`` is None the largest ``nchannels`` of the run's table rows is used,
    else 16.
    """

    comm_channels: int | None = None
    comp_cap: int = 90
    model_nodes: int | None = None
    x86_cpu: bool = True


# GPU name fragments -> (compute capability, x86 host). Grace-based superchips (GH200, GB200,
# GB300) have ARM hosts, which skip NCCL's x86-only NVLSTree correction.
_GPU_FACTS = (("GB300", 100, False), ("GB200", 100, False), ("GH200", 90, False), ("B300", 100, True),
              ("B200", 100, True), ("H200", 90, True), ("H100", 90, True), ("H800", 90, True),
              ("A100", 80, True), ("A800", 80, True))


def call_params_from_runs(runs: pd.DataFrame | None, choices: pd.DataFrame | None
                          ) -> Callable[[str, int, int], CallParams]:
    """Call facts per communicator from the ``runs`` and ``choices`` tables.

    ``comp_cap`` and ``x86_cpu`` come from ``runs.gpu_name`` (default Hopper, x86);
    ``comm_channels`` is the largest per-call channel count NCCL logged (``choices.channels``)
    for that (fabric, nodes, ranks), else the tuning table's ``nchannels``, else 16.
    ``model_nodes`` stays the physical node count: an MNNVL clique counted as one node by
    NCCL is not recorded in the dataset.
    """
    gpu, channels = {}, {}
    if runs is not None and not runs.empty and "gpu_name" in runs:
        for key, g in runs.dropna(subset=["gpu_name"]).groupby(["fabric", "nodes", "ranks"]):
            gpu[tuple(_norm(v) for v in key)] = str(g["gpu_name"].iloc[0])
    if choices is not None and not choices.empty and "channels" in choices:
        for key, g in choices.dropna(subset=["channels"]).groupby(["fabric", "nodes", "ranks"]):
            channels[tuple(_norm(v) for v in key)] = int(g["channels"].max())

    def params(fabric: str, nodes: int, ranks: int) -> CallParams:
        key = (fabric, int(nodes), int(ranks))
        name = gpu.get(key, "").upper()
        cap, x86 = next(((c, x) for frag, c, x in _GPU_FACTS if frag in name), (90, True))
        return CallParams(comm_channels=channels.get(key), comp_cap=cap, x86_cpu=x86)

    return params


def predictions_from_tuning_tables(pools: Pools, tuning_tables: pd.DataFrame, *,
                                   params: Callable[[str, int, int], CallParams] | None = None) -> np.ndarray:
    """Per-call predictions derived from NCCL's init tuning tables via :mod:`ncclbot_sweep.costmodel`.

    One table per (fabric, nodes, ranks) (the first ``run_id`` if several runs printed one);
    ``params(fabric, nodes, ranks)`` gives the call facts (default :class:`CallParams`).
    Unavailable entries (bandwidth 0) stay NaN.
    """
    from ncclbot_sweep import costmodel

    out = np.full(pools.depth.shape, np.nan)
    if tuning_tables.empty:
        return out
    arms = [Arm.parse(a) for a in pools.arms]
    tables = _tables_by_communicator(tuning_tables)
    for c, (fabric, coll, nodes, ranks, size) in enumerate(pools.context_keys()):
        found = tables.get((fabric, int(nodes), int(ranks)))
        if found is None:
            continue
        table, nch = found
        p = params(fabric, int(nodes), int(ranks)) if params else CallParams()
        ctx = costmodel.CallContext(
            collective=coll, n_bytes=int(size), nodes=p.model_nodes or int(nodes), ranks=int(ranks),
            comm_channels=p.comm_channels or nch or 16, min_comp_cap=p.comp_cap, x86_cpu=p.x86_cpu)
        for k, arm in enumerate(arms):
            value = costmodel.algo_time_us(table, ctx, arm)
            if value >= 0:
                out[c, k] = value
    return out


def _tables_by_communicator(tuning_tables: pd.DataFrame) -> dict:
    from ncclbot_sweep import costmodel

    tables = {}
    df = tuning_tables.dropna(subset=["fabric", "nodes", "ranks", "arm"])
    for (fabric, nodes, ranks), g in df.groupby(["fabric", "nodes", "ranks"], sort=True):
        first = g[g["run_id"] == sorted(g["run_id"].astype(str))[0]] if "run_id" in g else g
        cells = {(row.collective, str(row.arm)): (float(row.latency_us), float(row.algbw_gbs))
                 for row in first.itertuples(index=False)}
        nch = first["nchannels"].max() if "nchannels" in first and first["nchannels"].notna().any() else None
        tables[(fabric, int(nodes), int(ranks))] = (costmodel.TuningTable.from_cells(cells),
                                                   None if nch is None else int(nch))
    return tables


def load_prior(pools: Pools, *, cost_tables: pd.DataFrame | None = None,
               tuning_tables: pd.DataFrame | None = None,
               params: Callable[[str, int, int], CallParams] | None = None) -> np.ndarray:
    """Best available ``[C, K]`` predictions: cost tables first, tuning tables to fill gaps."""
    pred = np.full(pools.depth.shape, np.nan)
    if cost_tables is not None and not cost_tables.empty:
        pred = predictions_from_cost_tables(pools, cost_tables)
    missing = pools.measured & ~np.isfinite(pred)
    if missing.any() and tuning_tables is not None and not tuning_tables.empty:
        derived = predictions_from_tuning_tables(pools, tuning_tables, params=params)
        pred = np.where(np.isfinite(pred), pred, derived)
    covered = (pools.measured & np.isfinite(pred)).any(axis=1)
    log.info("cost-model prior covers %d of %d contexts", int(covered.sum()), len(pools))
    return pred
