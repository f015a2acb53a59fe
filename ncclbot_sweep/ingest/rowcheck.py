"""Impossible values never become rows (architecture section 5): the one place that decides them.

Ingest calls :func:`fit` and then :func:`split_impossible` on every batch just before it is
written; the analysis calls them on the one table it derives (``contexts``). Two kinds of
value are impossible:

* a value that does not fit its column (a list where a string belongs, a node count beyond
  int32, text where a number belongs): it comes from a corrupt or hostile input, and would
  otherwise fail the whole batch;
* a measurement that cannot be one: a NaN, infinite, negative or zero time, a negative size,
  an infinite bandwidth. One such value would poison every mean computed from it.

Either goes to quarantine with its line instead of into the table. In a table of
measurements (``iterations``, ``live_events``, ...) the whole row goes; in a table of records
(:data:`RECORD_TABLES`: a ``runs`` row is the record of a run and holds its iterations
together, a ``contexts`` row is an analysed context) only the value goes, as a null. Nulls
are not impossible (a column the format does not print); they pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.parsers.common import Issue

__all__ = ["RECORD_TABLES", "RULES", "MAX_GBS", "Lines", "fit", "split_impossible"]

#: Per table, each float column (and each other checked column) and what its values must be.
#: ``positive``: finite and above zero (a measured time); ``non-negative``: finite and at least
#: zero (sizes, counts, predictions, durations, losses); ``bandwidth``: non-negative and below
#: :data:`MAX_GBS`; ``finite``: not NaN or infinite; ``size``: present and non-negative (a
#: measurement without its size, or with one out of range, means nothing). Every float column of every table has a rule
#: (``tests/datasets/test_rowcheck.py`` holds :data:`ncclbot_sweep.ingest.datasets.SCHEMAS` to it).
RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "runs": (("avg_busbw_gbs", "bandwidth"),),
    "iterations": (("time_us", "positive"), ("size_bytes", "size"), ("count", "non-negative"),
                   ("algbw_gbs", "bandwidth"), ("busbw_gbs", "bandwidth"), ("error", "non-negative")),
    "live_events": (("latency_us", "positive"), ("size_bytes", "non-negative"), ("sync_us", "non-negative"),
                    ("reward", "finite")),
    "workload": (("total_us", "non-negative"), ("size_bytes", "non-negative"), ("calls", "non-negative")),
    "workload_steps": (("step_time_s", "positive"),),
    "choices": (("size_bytes", "non-negative"), ("predicted_us", "non-negative")),
    "cost_tables": (("predicted_us", "non-negative"), ("size_bytes", "non-negative")),
    # NCCL prints -1 in its init table for an arm it disables: negative is a value there.
    "tuning_tables": (("latency_us", "finite"), ("algbw_gbs", "finite")),
    "contexts": (("best_us", "positive"), ("best_busbw_gbs", "bandwidth"), ("auto_us", "positive"),
                 ("auto_busbw_gbs", "bandwidth"), ("auto_predicted_us", "non-negative"),
                 ("auto_loss", "non-negative"), ("margin", "non-negative"), ("rho_max", "positive"),
                 ("steady_us", "positive"), ("predicted_us", "non-negative")),
}
#: Tables whose rows are records, not measurements: an impossible value there is nulled, the row kept.
RECORD_TABLES = frozenset({"runs", "contexts"})
#: No bandwidth (GB/s) at or above this was measured: 1 TiB moved in 0.01 us, the shortest time
#: nccl-tests prints, is 1.1e8 GB/s (a one-rank in-place copy prints tens of thousands).
MAX_GBS = 1e9

_WHY = {"positive": "a finite number above 0", "non-negative": "a finite number, 0 or more",
        "bandwidth": f"a finite number of GB/s, 0 or more and below {MAX_GBS:g}",
        "finite": "a finite number", "size": "present, in range and 0 or more"}
#: Rows quarantined one by one per (table, column); beyond this one issue counts the rest.
_MAX_LISTED = 100
#: Where a value of a row came from, per column, for tables without a ``line`` column (``runs``).
Lines = Sequence[Mapping[str, int | None]]


# --------------------------------------------------------------------------- values that do not fit


def fit(name: str, rows: Any) -> tuple[pa.Table, list[Issue]]:
    """Rows (dicts, or an Arrow table) as an Arrow table of table ``name``, and the values that did not fit.

    Arrow tables come from parsers that typed their columns already and pass as they are.
    Dict rows are converted as a batch; when that fails, each value is converted alone and
    the ones that do not fit their column's type are left out (null), each with an issue
    naming the column, the value and the row's ``line``. Unknown columns still raise
    :class:`~ncclbot_sweep.errors.DatasetError` (a producer's bug, not an input's).
    """
    if isinstance(rows, pa.Table):
        return datasets.to_arrow(name, rows), []
    rows = list(rows)
    try:
        return datasets.to_arrow(name, rows), []
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass
    schema = datasets.SCHEMAS[name]
    issues: list[Issue] = []
    fitted = []
    for row in rows:
        clean = {}
        for key, value in row.items():
            if value is not None and key in schema.names and not _fits(value, schema.field(key).type):
                issues.append(Issue(_row_line(row), f"{key} {_show(value)} in {name} does not fit the column "
                                                    f"({schema.field(key).type}): left out", f"{key}={_show(value)}"))
                value = None
            clean[key] = value
        fitted.append(clean)
    return datasets.to_arrow(name, fitted), issues


def _fits(value: Any, typ: pa.DataType) -> bool:
    if isinstance(value, bool) and not pa.types.is_boolean(typ):
        return False  # True is not a count, a size or a name
    try:
        pa.array([value], type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError, ValueError):
        return False
    return True


def _row_line(row: Mapping[str, Any]) -> int | None:
    line = row.get("line")
    return line if isinstance(line, int) and not isinstance(line, bool) else None


def _show(value: Any) -> str:
    return repr(value)[:80]


# --------------------------------------------------------------------------- impossible measurements


def _values(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def _bad(col: pa.ChunkedArray | pa.Array, rule: str) -> pa.Array:
    """True where a value breaks ``rule`` (nulls never do; integers are always finite; a map
    is bad when any of its values is)."""
    col = _values(col)
    if pa.types.is_map(col.type):
        offsets = col.offsets.to_numpy()  # (not list_parent_indices: it aborts on a map in pyarrow 26)
        items = col.items.slice(offsets[0], offsets[-1] - offsets[0])
        bad_items = np.asarray(_bad(items, rule).to_numpy(zero_copy_only=False), dtype=bool)
        parents = np.repeat(np.arange(len(col)), np.diff(offsets))
        rows = np.zeros(len(col), dtype=bool)
        rows[parents[bad_items]] = True
        return pa.array(rows)
    if rule == "finite":
        ok = pc.is_finite(col) if pa.types.is_floating(col.type) else pc.is_valid(col)
    elif rule == "size":
        return pc.fill_null(pc.less(col, 0), True)
    else:
        ok = pc.greater(col, 0) if rule == "positive" else pc.greater_equal(col, 0)
        if pa.types.is_floating(col.type):
            ok = pc.and_(ok, pc.is_finite(col))
        if rule == "bandwidth":
            ok = pc.and_(ok, pc.less(col, MAX_GBS))
    return pc.fill_null(pc.invert(ok), False)


def split_impossible(name: str, table: pa.Table, *, lines: Lines | None = None) -> tuple[pa.Table, list[Issue]]:
    """Rows of ``table`` (table ``name``) that may be stored, and the impossible values as issues.

    Each broken rule of a row is reported once, with the row's ``line`` when the table has
    one, else with ``lines[row][column]`` (where the producer read that value). After
    :data:`_MAX_LISTED` rows per column a single issue says how many more there were, so a
    file of a million NaN rows costs one quarantine row per kind, not a million. Rows of a
    measurement table with an impossible value are dropped; in :data:`RECORD_TABLES` the
    value becomes null and the row stays.
    """
    rules = [(c, r) for c, r in RULES.get(name, ()) if c in table.column_names]
    if not rules or table.num_rows == 0:
        return table, []
    bad_any = None
    issues: list[Issue] = []
    for column, rule in rules:
        bad = _bad(table.column(column), rule)
        count = pc.sum(bad).as_py() or 0
        if not count:
            continue
        index = pc.indices_nonzero(bad).to_pylist()
        issues.extend(_issues(name, table, column, rule, index, lines))
        if name in RECORD_TABLES:
            position = table.schema.get_field_index(column)
            nulls = pa.nulls(table.num_rows, table.schema.field(column).type)
            kept = pc.if_else(bad, nulls, _values(table.column(column)))
            table = table.set_column(position, table.schema.field(column), kept)
        else:
            bad_any = bad if bad_any is None else pc.or_(bad_any, bad)
    if bad_any is None:
        return table, issues
    return table.filter(pc.invert(bad_any)), issues


def _issues(name: str, table: pa.Table, column: str, rule: str, index: list[int], lines: Lines | None) -> list[Issue]:
    """One issue per impossible value (up to :data:`_MAX_LISTED`), then one counting the rest."""
    listed = index[:_MAX_LISTED]
    values = table.column(column).take(pa.array(listed)).to_pylist()
    if "line" in table.column_names:
        at = table.column("line").take(pa.array(listed)).to_pylist()
    elif lines is not None:
        at = [lines[i].get(column) if i < len(lines) else None for i in listed]
    else:
        at = [None] * len(listed)
    outcome = "left out (null)" if name in RECORD_TABLES else "row quarantined"
    issues = [Issue(line, f"impossible {column} {_show(value)} in {name}: it must be {_WHY[rule]}; {outcome}",
                    f"{column}={_show(value)}") for line, value in zip(at, values)]
    if len(index) > _MAX_LISTED:
        issues.append(Issue(at[-1], f"{len(index) - _MAX_LISTED} more {name} rows with an impossible "
                                    f"{column} (must be {_WHY[rule]}) were quarantined", ""))
    return issues
