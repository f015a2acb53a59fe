"""``results.json``: the machine-readable summary ``analyze report`` writes beside ``index.html``.

What a script or a dashboard reads after a sweep instead of scraping the page: per context
the steady mean of every measured arm, AUTO's arm, the measured-best arm, AUTO's loss, the
runner-up margin, each replayed policy's TRLT and the degenerate-context flags
(:mod:`..degenerate`); per policy the Table-1 summary and the
tests against AUTO; the provenance of the data; ``headline``, every number the page's headline
box and the demo's summary say (:func:`.headline.headline_numbers`: percentages there, as on the
page); and :data:`SCHEMA_VERSION`, raised whenever
a key is renamed or its meaning changes (adding keys keeps the version).

Values are plain JSON: fractions (not percent) for losses and TRLT, as in the audit rows;
microseconds for latencies; a missing or infinite value (no runner-up prediction, an arm not
measured) is ``null``, never ``NaN``, so strict JSON readers load the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..degenerate import context_flags
from ..pools import CONTEXT_COLUMNS, Pools
from ..summary import per_context

__all__ = ["RESULTS_FILE", "SCHEMA_VERSION", "results_document", "write_results"]

#: Version of the ``results.json`` layout.
SCHEMA_VERSION = 1
#: File name inside the report folder.
RESULTS_FILE = "results.json"


def _plain(value):
    """A JSON-safe scalar: numpy types unwrapped, NaN and infinities as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _records(frame: pd.DataFrame | None) -> list[dict]:
    if frame is None or not len(frame):
        return []
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _arm_values(pools: Pools, values: np.ndarray) -> dict[tuple, dict[str, float]]:
    """Per context key, ``{arm: value}`` over the measured arms with a finite value."""
    keys = pools.context_keys()
    out: dict[tuple, dict[str, float]] = {}
    for c, key in enumerate(keys):
        row = values[c]
        out[key] = {arm: float(row[k]) for k, arm in enumerate(pools.arms)
                    if pools.measured[c, k] and np.isfinite(row[k])}
    return out


def _policy_trlt(replay: pd.DataFrame) -> dict[tuple, dict]:
    """Per context key, the seed-averaged realized and selection-priced TRLT of every policy."""
    rows = per_context(replay, part=None)
    parts = replay.groupby(list(CONTEXT_COLUMNS), sort=False)["part"].first()
    out: dict[tuple, dict] = {key: {"part": part, "trlt": {}} for key, part in parts.items()}
    for row in rows.itertuples(index=False):
        key = tuple(getattr(row, c) for c in CONTEXT_COLUMNS)
        out[key]["trlt"][row.policy] = {"realized": _plain(row.trlt_realized), "selection": _plain(row.trlt_selection)}
    return out


def context_results(problem, audit: pd.DataFrame, replay: pd.DataFrame) -> list[dict]:
    """One entry per audited context (two or more measured arms), in the audit's row order."""
    steady = _arm_values(problem.pools, problem.pools.steady)
    predicted = _arm_values(problem.pools, problem.predicted)
    trlt = _policy_trlt(replay)
    flags = {tuple(row[:-1]): row[-1] for row in
             context_flags(problem)[[*CONTEXT_COLUMNS, "flags"]].itertuples(index=False, name=None)}
    entries = []
    for row in audit.itertuples(index=False):
        key = tuple(getattr(row, c) for c in CONTEXT_COLUMNS)
        scored = trlt.get(key, {"part": None, "trlt": {}})
        entries.append({
            **{c: _plain(v) for c, v in zip(CONTEXT_COLUMNS, key)},
            "steady_us": steady[key], "predicted_us": predicted[key],
            "auto_arm": row.auto_arm, "best_arm": row.best_arm, "auto_errs": bool(row.error),
            "loss": _plain(row.trlt_selection), "loss_realized": _plain(row.trlt_realized),
            "margin": _plain(row.margin), "part": scored["part"], "trlt": scored["trlt"],
            "flags": [f for f in flags.get(key, "").split(";") if f],
        })
    return entries


def policy_results(summary: pd.DataFrame, tests: pd.DataFrame | None) -> dict[str, dict]:
    """Per policy its Table-1 summary row and the tests that compare it with AUTO (empty for AUTO)."""
    tests = tests if tests is not None else pd.DataFrame(columns=["a", "b"])
    return {row["policy"]: {"summary": row, "tests": _records(tests[(tests["b"] == row["policy"])])}
            for row in _records(summary)}


def results_document(*, problem, audit, replay: pd.DataFrame, summary: pd.DataFrame, tests: pd.DataFrame | None,
                     provenance: dict, headline: dict, options: dict) -> dict:
    """The whole ``results.json`` object (see the module docstring for its keys and units)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "provenance": provenance,
        "options": options,
        "headline": headline,
        "audit": _records(audit.summary),
        "policies": policy_results(summary, tests),
        "contexts": context_results(problem, audit.contexts, replay),
    }


def write_results(path: str | Path, document: dict) -> Path:
    """Write ``document`` as strict JSON (``NaN`` refused) into ``path``; idempotent."""
    out = Path(path)
    out.write_text(json.dumps(document, indent=1, allow_nan=False, default=_plain) + "\n")
    return out
