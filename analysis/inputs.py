"""Read a dataset root into a replay problem (the edge where Parquet meets the analysis).

Everything else in :mod:`ncclbot_sweep.analysis` works on frames and arrays; this module is
the one place that reads ``iterations``, ``cost_tables``, ``tuning_tables``, ``runs`` (call
parameters, provenance, and whether the simulator produced the data) and ``workload`` through
:func:`ncclbot_sweep.ingest.datasets.read_table`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd

from ncclbot_sweep.errors import AnalysisError, did_you_mean

from .pools import build_pools
from .prior import call_params_from_runs, load_prior
from .replay import ReplayProblem, make_problem

__all__ = ["is_synthetic", "load_problem", "load_provenance", "load_first_calls", "load_workload", "natural_key",
           "read_dataset_table", "with_synthetic"]

log = logging.getLogger(__name__)


def _root(dataset: str | Path) -> Path:
    """The dataset folder, or :class:`AnalysisError` naming it when it does not exist."""
    root = Path(dataset)
    if not root.is_dir():
        raise AnalysisError("dataset folder does not exist", path=root,
                            hint="pass the folder 'ncclbot-sweep ingest' wrote (--dataset DIR)")
    return root


def read_dataset_table(dataset: str | Path, name: str, *, filters=None) -> pd.DataFrame:
    """One table of ``dataset`` as a frame (``filters`` as :func:`ncclbot_sweep.ingest.datasets.read_table`'s),
    for the analysis stages that read more than a replay problem (the live analysis)."""
    from ncclbot_sweep.ingest.datasets import read_table

    return read_table(Path(dataset), name, filters=filters)


def load_problem(dataset: str | Path, *, fabric: str | None = None, window: tuple[int, int] = (11, 99),
                 rho_max: float = 2.0, min_arms: int = 2, keep_warmup: bool = False) -> ReplayProblem:
    """Pools, cost-model prior and arm filter for every context of a dataset (one fabric or all).

    Pools follow the paper's convention (iteration 0 dropped unless ``keep_warmup``; see
    :mod:`.pools`).

    Raises :class:`AnalysisError` naming the dataset when it holds no usable iterations or
    no prediction for any context.
    """
    from ncclbot_sweep.ingest.datasets import partition_values, read_table

    root = _root(dataset)
    filters = [("fabric", "=", fabric)] if fabric else None
    iterations = read_table(root, "iterations", filters=filters)
    if iterations.empty and fabric:
        fabrics = partition_values(root, "iterations", "fabric")
        raise AnalysisError(f"dataset has no iterations for fabric {fabric!r}{did_you_mean(fabric, fabrics)}",
                            path=root, hint=f"fabrics in this dataset: {', '.join(fabrics) or 'none'}")
    if iterations.empty:
        raise AnalysisError("dataset has no iterations", path=root,
                            hint="ingest a forced-arm sweep first (ncclbot-sweep ingest)")
    runs = read_table(root, "runs", filters=filters)
    pools = build_pools(with_synthetic(iterations, runs), window=window, min_arms=min_arms, keep_warmup=keep_warmup)
    cost = read_table(root, "cost_tables", filters=filters)
    tuning = read_table(root, "tuning_tables", filters=filters)
    params = None
    if not tuning.empty:
        # ``choices`` (one row per logged call) can be large; the runs table is enough.
        params = call_params_from_runs(runs, None)
    try:
        predicted = load_prior(pools, cost_tables=cost, tuning_tables=tuning, params=params)
        return make_problem(pools, predicted, rho_max=rho_max)
    except AnalysisError as exc:
        raise AnalysisError(exc.reason, path=root, hint=exc.hint) from exc


def with_synthetic(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``synthetic`` column: true on rows whose run the simulator produced.

    The flag is ``runs.synthetic`` (ingest sets it from the simulator's stamp in the output),
    matched on ``run_id``; a fabric's name says nothing (architecture section 5.3).
    """
    stamped = runs.loc[runs["synthetic"].fillna(False).astype(bool), "run_id"].astype(str)
    return frame.assign(synthetic=frame["run_id"].astype(str).isin(set(stamped)).to_numpy())


def is_synthetic(frame: pd.DataFrame) -> bool:
    """True when any row of ``frame`` comes from the simulator, as its ``synthetic`` column says.

    The one test behind every "synthetic" stamp of the report and the live analysis; frames
    carry the column from :func:`with_synthetic` (pools, audit, figure data) or from ``runs``.
    """
    return "synthetic" in frame.columns and bool(frame["synthetic"].fillna(False).astype(bool).any())


#: ``runs`` columns the provenance block lists (distinct values, sorted), by the key it uses.
_PROVENANCE_COLUMNS = {"campaigns": "campaign", "campaign_keys": "campaign_key", "nccl_versions": "nccl_version",
                       "nccl_tests_versions": "nccl_tests_version", "gpu_models": "gpu_name", "nodes": "nodes"}


def natural_key(text: str) -> tuple:
    """Sort key that orders the digits in a name as numbers: ``local2`` before ``local10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(text)))


def load_provenance(dataset: str | Path, *, fabric: str | None = None) -> dict:
    """Where a dataset's forced-arm measurements came from, read from its ``runs`` table.

    Called by the report for its provenance block and ``results.json``. Each entry is the
    sorted list of distinct non-null values (empty when the dataset has no ``runs`` rows, as
    for frames written straight into ``iterations``); ``hosts`` splits the comma-joined
    host lists of the runs and sorts them naturally (:func:`natural_key`).
    """
    from ncclbot_sweep.ingest.datasets import read_table

    runs = read_table(Path(dataset), "runs", filters=[("fabric", "=", fabric)] if fabric else None)
    out = {key: sorted({v.item() if hasattr(v, "item") else v for v in runs[col].dropna()})
           for key, col in _PROVENANCE_COLUMNS.items()}
    out["hosts"] = sorted({h.strip() for joined in runs["hosts"].dropna() for h in str(joined).split(",") if h.strip()},
                          key=natural_key)
    out["runs"] = len(runs)
    return out


def load_first_calls(dataset: str | Path, *, fabric: str | None = None):
    """Iteration 0 of every forced-arm run (out of place): where a first-use stall lands.

    The pools drop it (the paper's convention); the NVLS toll ablation measures the stall from
    it. Columns: the context, ``arm``, ``run_id`` and ``time_us``; empty when the dataset's runs
    start after a warm-up.
    """
    from ncclbot_sweep.ingest.datasets import read_table

    filters = [("iteration", "=", 0)] + ([("fabric", "=", fabric)] if fabric else [])
    frame = read_table(Path(dataset), "iterations", filters=filters)
    frame = frame[frame["arm"].notna() & (frame["time_us"] > 0)]
    if frame["in_place"].notna().any():
        frame = frame[~frame["in_place"].fillna(False).astype(bool)]
    return frame[["fabric", "collective", "nodes", "ranks", "size_bytes", "arm", "run_id", "time_us"]].reset_index(
        drop=True)


def load_workload(dataset: str | Path, trace_id: str):
    """The ``workload`` rows of one Kineto trace; raises :class:`AnalysisError` listing the traces present."""
    from ncclbot_sweep.ingest.datasets import read_table

    root = _root(dataset)
    frame = read_table(root, "workload")
    known = sorted(frame["trace_id"].dropna().astype(str).unique())
    if trace_id not in known:
        listed = ", ".join(known) if known else "none: ingest a PyTorch/Kineto trace into this dataset first"
        raise AnalysisError(f"trace {trace_id!r} is not in the workload table (traces: {listed})", path=root,
                            hint="pass --trace with one of the trace ids listed")
    return frame[frame["trace_id"] == trace_id].reset_index(drop=True)
