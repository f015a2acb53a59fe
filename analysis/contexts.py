"""The ``contexts`` table: one row per analysed context, written back into the dataset.

So that "which arm is fastest for AllReduce at 16 nodes and 64 MiB, and what did NCCL pick"
is one query over the dataset (DuckDB, polars, pyarrow), without running the analysis:

    select best_arm, auto_arm, auto_loss from read_parquet('DS/contexts/**/*.parquet', hive_partitioning=true)
    where collective = 'AllReduce' and nodes = 16 and size_bytes = 64 * 1024 * 1024

Rows come from the audit (:func:`~.audit.audit_auto`): the measured-best arm on the steady
window, AUTO's arm (the cost model's argmin over the offered arms), AUTO's selection-priced
loss, the runner-up margin; plus every measured arm's steady mean and prediction, bus
bandwidths and the degenerate-context flags (:mod:`.degenerate`). The table is written
through the dataset's one writer (:func:`ncclbot_sweep.ingest.datasets.replace_table`), which
replaces the previous rows: re-running with other settings (window, ``rho_max``) leaves the
table of the last run, whose settings are in its columns.
"""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.names import bus_bandwidth_gbs

from .degenerate import context_flags
from .pools import CONTEXT_COLUMNS
from .replay import ReplayProblem

__all__ = ["PRODUCER", "contexts_frame", "write_contexts"]

#: ``source_path`` of every row: what produced the table.
PRODUCER = "ncclbot-sweep analyze"

log = logging.getLogger(__name__)


def _arm_map(problem: ReplayProblem, values: np.ndarray, c: int) -> list[tuple[str, float]]:
    """``[(arm, value)]`` over the measured arms of context ``c`` with a finite value."""
    row, measured = values[c], problem.pools.measured[c]
    return [(arm, float(row[k])) for k, arm in enumerate(problem.pools.arms) if measured[k] and math.isfinite(row[k])]


def contexts_frame(problem: ReplayProblem, audit: pd.DataFrame) -> pd.DataFrame:
    """The ``contexts`` rows of ``problem`` (``audit`` = :func:`~.audit.audit_auto` of it), in audit order."""
    pools = problem.pools
    keys = list(CONTEXT_COLUMNS)
    index = {key: c for c, key in enumerate(pools.context_keys())}
    flags = context_flags(problem).set_index(keys)["flags"]
    synthetic = pools.contexts["synthetic"].fillna(False).astype(bool).to_numpy()
    rows = []
    for r in audit.itertuples(index=False):
        key = tuple(getattr(r, k) for k in keys)
        c = index[key]
        auto_k = pools.arms.index(r.auto_arm)
        busbw = {arm: bus_bandwidth_gbs(r.collective, r.ranks, r.size_bytes, us)
                 for arm, us in ((r.best_arm, r.best_us), (r.auto_arm, r.auto_us))}
        rows.append({
            **dict(zip(keys, key)), "n_arms": int(r.n_arms), "n_offered": int(r.n_offered),
            "best_arm": r.best_arm, "best_us": float(r.best_us), "best_busbw_gbs": busbw[r.best_arm],
            "auto_arm": r.auto_arm, "auto_us": float(r.auto_us), "auto_busbw_gbs": busbw[r.auto_arm],
            "auto_predicted_us": float(problem.predicted[c, auto_k]), "auto_errs": bool(r.error),
            "auto_loss": float(r.trlt_selection), "margin": float(r.margin) if math.isfinite(r.margin) else None,
            "steady_us": _arm_map(problem, pools.steady, c), "predicted_us": _arm_map(problem, problem.predicted, c),
            "flags": flags.loc[key], "synthetic": synthetic[c],
            "window_first": int(pools.window[0]), "window_last": int(pools.window[1]),
            "rho_max": float(problem.rho_max), "keep_warmup": bool(pools.keep_warmup),
        })
    frame = pd.DataFrame(rows)
    digest = hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest()
    return frame.assign(source_path=PRODUCER, source_sha256=digest)


def write_contexts(dataset: str | Path, problem: ReplayProblem, audit: pd.DataFrame) -> int:
    """Replace the dataset's ``contexts`` table with ``problem``'s rows; return rows newly written
    (0 when the table already holds exactly these rows). A value :mod:`ncclbot_sweep.ingest.rowcheck`
    finds impossible (a NaN loss, an infinite time) is stored as null and logged, never stored."""
    from ncclbot_sweep.ingest.datasets import replace_table, to_table
    from ncclbot_sweep.ingest.rowcheck import split_impossible

    table, impossible = split_impossible("contexts", to_table("contexts", contexts_frame(problem, audit)))
    for issue in impossible:  # the analysis computed them: a bug to report, never a value to store
        log.warning("contexts table: %s", issue.reason)
    return replace_table(dataset, "contexts", table)
