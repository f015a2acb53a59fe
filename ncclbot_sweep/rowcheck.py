"""Impossible measurements never become rows (architecture section 5).

Ingest calls :func:`split_impossible` on every batch just before it is written: a NaN,
infinite, negative or zero time, a negative size or an infinite trace duration is not a
measurement but a corrupt or misparsed input, so the row goes to quarantine with its line
instead of into the table, where one such value would poison every mean computed from it.
Nulls are not impossible (a column the format does not print); they pass.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ncclbot_sweep.parsers.common import Issue

__all__ = ["RULES", "split_impossible"]

#: Per table, each checked column and what its values must be. ``positive``: finite and
#: above zero (a measured time); ``non-negative``: finite and at least zero (sizes, counts,
#: bandwidths, predictions, durations); ``finite``: not NaN or infinite; ``size``: present
#: and non-negative (a measurement without its size, or with one out of range, means nothing).
RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "iterations": (("time_us", "positive"), ("size_bytes", "size"), ("count", "non-negative"),
                   ("algbw_gbs", "non-negative"), ("busbw_gbs", "non-negative")),
    "live_events": (("latency_us", "positive"), ("size_bytes", "non-negative"), ("sync_us", "non-negative"),
                    ("reward", "finite")),
    "workload": (("total_us", "non-negative"), ("size_bytes", "non-negative"), ("calls", "non-negative")),
    "choices": (("size_bytes", "non-negative"), ("predicted_us", "non-negative")),
    "cost_tables": (("predicted_us", "non-negative"), ("size_bytes", "non-negative")),
    "tuning_tables": (("latency_us", "finite"), ("algbw_gbs", "finite")),
}

_WHY = {"positive": "a finite number above 0", "non-negative": "a finite number, 0 or more",
        "finite": "a finite number", "size": "present, in range and 0 or more"}
#: Rows quarantined one by one per (table, column); beyond this one issue counts the rest.
_MAX_LISTED = 100


def _bad(col: pa.ChunkedArray | pa.Array, rule: str) -> pa.Array:
    """True where a value breaks ``rule`` (nulls never do; integers are always finite)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if rule == "finite":
        ok = pc.is_finite(col) if pa.types.is_floating(col.type) else pc.is_valid(col)
    elif rule == "size":
        return pc.fill_null(pc.less(col, 0), True)
    else:
        ok = pc.greater(col, 0) if rule == "positive" else pc.greater_equal(col, 0)
        if pa.types.is_floating(col.type):
            ok = pc.and_(ok, pc.is_finite(col))
    return pc.fill_null(pc.invert(ok), False)


def split_impossible(name: str, table: pa.Table) -> tuple[pa.Table, list[Issue]]:
    """Rows of ``table`` (table ``name``) that may be stored, and the impossible ones.

    Each broken rule of a row is reported once, with the row's ``line`` when the table has
    one; after :data:`_MAX_LISTED` rows per column a single issue says how many more there
    were, so a file of a million NaN rows costs one quarantine row per kind, not a million.
    """
    rules = [(c, r) for c, r in RULES.get(name, ()) if c in table.column_names]
    if not rules or table.num_rows == 0:
        return table, []
    bad_any = None
    issues: list[Issue] = []
    lines = table.column("line") if "line" in table.column_names else None
    for column, rule in rules:
        bad = _bad(table.column(column), rule)
        count = pc.sum(bad).as_py() or 0
        if not count:
            continue
        bad_any = bad if bad_any is None else pc.or_(bad_any, bad)
        index = pc.indices_nonzero(bad).to_pylist()
        values = table.column(column).take(pa.array(index[:_MAX_LISTED])).to_pylist()
        at = lines.take(pa.array(index[:_MAX_LISTED])).to_pylist() if lines is not None else [None] * len(values)
        for line, value in zip(at, values):
            issues.append(Issue(line, f"impossible {column} {value!r} in {name}: it must be {_WHY[rule]}",
                                     f"{column}={value!r}"))
        if count > _MAX_LISTED:
            issues.append(Issue(at[-1], f"{count - _MAX_LISTED} more {name} rows with an impossible "
                                             f"{column} (must be {_WHY[rule]}) were quarantined", ""))
    if bad_any is None:
        return table, []
    return table.filter(pc.invert(bad_any)), issues
