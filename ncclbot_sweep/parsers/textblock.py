"""Vectorised handling of nccl-tests table rows with Arrow compute (the ingest hot path).

A chunk of text becomes an Arrow string array of its lines without copying (offsets from
the newline positions); a regex marks the table rows (first non-blank character a digit);
runs of rows are split on whitespace and each column is cast in C++. Python only touches
the few lines that are not rows. See ``benchmarks/ingest.py`` for the figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["lines_array", "row_mask", "convert_rows", "constant"]

_NULL_TOKENS = pa.array(["N/A", "nan", "-nan", "NaN", "-"], pa.large_string())
_INT = {"size", "count", "root"}
_FLOAT = {"time", "algbw", "busbw", "error"}
_STR = {"type", "redop", "timestamp"}


def lines_array(chunk: bytes) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Lines of ``chunk`` (which ends with a newline, valid UTF-8) as a zero-copy Arrow array.

    Returns the array and each line's start and end (exclusive of the newline) offsets.
    """
    buf = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    offsets = np.empty(len(ends) + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = ends + 1
    lines = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(chunk))
    return lines, offsets[:-1], ends


def row_mask(lines: pa.Array) -> np.ndarray:
    """True for lines whose first non-blank character is a digit (candidate table rows)."""
    return pc.match_substring_regex(lines, r"^[ \t]*[0-9]").to_numpy(zero_copy_only=False)


def _numeric(col: pa.Array, typ: pa.DataType) -> pa.Array:
    try:
        return col.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    cleaned = pc.if_else(pc.is_in(col, value_set=_NULL_TOKENS), pa.scalar(None, pa.large_string()), col)
    if pa.types.is_integer(typ):
        # %g forms (1e+06) parse as floats first.
        return cleaned.cast(pa.float64()).cast(typ)
    return cleaned.cast(typ)


def convert_rows(rows: pa.Array, prefix: list[str], sides: list[list[str]]) -> dict[str, Any] | None:
    """Split rows into columns named ``size``... and ``s<side>.<name>``; None if they do not fit.

    Integer columns come back as int64, times and bandwidths as float64 (``N/A`` -> null),
    names as strings. Unknown extra columns (``-I`` statistics) are skipped.
    """
    ncols = len(prefix) + sum(len(s) for s in sides)
    if len(rows) == 0:
        return None
    tokens = pc.ascii_split_whitespace(pc.ascii_trim_whitespace(rows))
    lengths = pc.min_max(pc.list_value_length(tokens)).as_py()
    if lengths["min"] != ncols or lengths["max"] != ncols:
        return None
    names = list(prefix) + [f"s{s}.{c}" for s, side in enumerate(sides) for c in side]
    cols: dict[str, Any] = {}
    try:
        for k, name in enumerate(names):
            kind = name.split(".", 1)[-1]
            if kind not in _INT | _FLOAT | _STR | {"wrong"}:
                continue
            col = pc.list_element(tokens, k)
            if kind in _INT or kind == "wrong":
                cols[name] = _numeric(col, pa.int64())
            elif kind in _FLOAT:
                cols[name] = _numeric(col, pa.float64())
            else:
                cols[name] = col.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if "size" not in cols or cols["size"].null_count or any(f"s{s}.time" not in cols for s in range(len(sides))):
        return None
    return cols


def constant(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    """An array of ``n`` copies of ``value``, dictionary-encoded so it costs almost nothing."""
    if value is None:
        return pa.nulls(n, typ)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int8)), pa.array([value], typ))
