"""Degenerate contexts: the ones whose numbers need a caveat, and the ones left out.

Decisions (architecture section 6; every flag is named, never a silent drop):

Left out of the analysis (:attr:`.pools.Pools.excluded`), so they appear in no table:

* ``zero_elements``: the message is 0 elements per rank (nccl-tests prints size 0), nothing
  moves and nothing can be selected;
* ``one_measured_arm``: fewer than two arms measured, nothing to compare;
* ``no_prediction``: no cost-model prediction for any measured arm, so no AUTO and no warm
  start.

Kept, with a flag (in the audit rows, ``results.json``, the ``contexts`` table and the report):

* ``one_offered_arm``: the cost-model filter (``rho_max``) leaves one arm; every policy
  plays it, so its TRLT measures the filter, not learning;
* ``no_steady_samples``: a measured arm has no sample inside the steady window (its pool ends
  before the window starts); it is ranked on all its samples, transient included;
* ``short_window``: a measured arm has fewer samples inside the steady window than the
  window spans (a campaign with fewer iterations than the window's end); its steady mean
  rests on fewer samples than the analysis asks for.

A pool shorter than the horizon is not flagged: wrapping its steady part is the paper's
convention (:mod:`.pools`), and a 100-iteration sweep replayed over T=100 always wraps once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .pools import CONTEXT_COLUMNS
from .replay import ReplayProblem

__all__ = ["FLAGS", "context_flags", "flag_table", "flag_summary"]

#: Every flag with what it means, in report order (left-out flags first).
FLAGS: dict[str, str] = {
    "zero_elements": "left out: 0 elements per rank, nothing to select",
    "one_measured_arm": "left out: fewer than two measured arms, nothing to compare",
    "no_prediction": "left out: no cost-model prediction, so no AUTO and no warm start",
    "one_offered_arm": "kept: the cost-model filter leaves one arm, every policy plays it",
    "no_steady_samples": "kept: an arm has no sample in the steady window, ranked on all its samples",
    "short_window": "kept: an arm has fewer samples in the steady window than it spans",
}


def _arms_where(problem: ReplayProblem, mask: np.ndarray) -> list[str]:
    arms = np.asarray(problem.pools.arms)
    return [", ".join(arms[row]) for row in mask]


def context_flags(problem: ReplayProblem) -> pd.DataFrame:
    """One row per kept context: ``CONTEXT_COLUMNS``, ``flags`` (``;``-joined, empty when none)
    and ``flag_note`` (the arms concerned)."""
    pools = problem.pools
    measured = pools.measured
    span = pools.window[1] - pools.window[0] + 1
    steady_n = pools.steady_n if pools.steady_n is not None else np.where(measured, span, 0)
    checks = {
        "one_offered_arm": (problem.offered.sum(axis=1) == 1)[:, None] & problem.offered,
        "no_steady_samples": measured & (steady_n == 0),
        "short_window": measured & (steady_n > 0) & (steady_n < span),
    }
    frame = pools.contexts[list(CONTEXT_COLUMNS)].copy()
    flags = [[] for _ in range(len(frame))]
    notes = [[] for _ in range(len(frame))]
    for name, mask in checks.items():
        hit = mask.any(axis=1)
        for c, arms in zip(np.nonzero(hit)[0], _arms_where(problem, mask[hit])):
            flags[c].append(name)
            notes[c].append(f"{name}: {arms}")
    frame["flags"] = [";".join(f) for f in flags]
    frame["flag_note"] = ["; ".join(n) for n in notes]
    return frame


def flag_table(problem: ReplayProblem) -> pd.DataFrame:
    """Long rows, one per (context, flag), the left-out contexts first: ``CONTEXT_COLUMNS``,
    ``flag``, ``status`` (``left out`` or ``kept``) and ``note``."""
    excluded = problem.pools.excluded
    left = excluded.assign(status="left out")[[*CONTEXT_COLUMNS, "flag", "status", "note"]] if len(excluded) else None
    kept = context_flags(problem)
    rows = []
    for row in kept.itertuples(index=False):
        for flag, note in zip(row.flags.split(";") if row.flags else [], row.flag_note.split("; ")):
            rows.append({**{c: getattr(row, c) for c in CONTEXT_COLUMNS}, "flag": flag, "status": "kept",
                         "note": note.partition(": ")[2]})
    frames = [f for f in (left, pd.DataFrame(rows)) if f is not None and len(f)]
    columns = [*CONTEXT_COLUMNS, "flag", "status", "note"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def flag_summary(table: pd.DataFrame, *, examples: int = 3) -> pd.DataFrame:
    """Per flag (in :data:`FLAGS` order): how many contexts, what it means, a few examples."""
    rows = []
    for flag, meaning in FLAGS.items():
        g = table[table["flag"] == flag]
        if not len(g):
            continue
        shown = [f"{r.collective} {r.nodes}n {r.size_bytes} B" for r in g.head(examples).itertuples(index=False)]
        rows.append({"flag": flag, "contexts": len(g), "meaning": meaning,
                     "examples": ", ".join(shown) + (", ..." if len(g) > examples else "")})
    return pd.DataFrame(rows, columns=["flag", "contexts", "meaning", "examples"])
