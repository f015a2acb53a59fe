"""Vectorised handling of nccl-tests table rows (the ingest hot path).

A chunk of text has its blanks collapsed to single spaces in one numpy pass, so that every
line starts with its first token: a table row is then a line whose first byte is a digit,
and a run of rows is valid input for Arrow's C++ CSV reader with a space delimiter, which
converts every column at once. Rows that do not fit go through :func:`convert_rows`
(Arrow split on whitespace), and only what still does not fit is looked at line by line in
Python. See ``benchmarks/ingest.py`` for the figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["collapse_blanks", "line_bounds", "csv_rows", "boring_info_lines", "convert_rows", "constant"]

#: What nccl-tests prints for "no value" (``-c 0``, in-place of SendRecv). ``nan`` is not one of
#: them: a NaN time is an impossible measurement that ingest must see and quarantine.
_NULL_TEXT = ("N/A", "-")
_NULL_TOKENS = pa.array(list(_NULL_TEXT), pa.large_string())
_INT = {"size", "count", "root"}
_FLOAT = {"time", "algbw", "busbw", "error"}
_STR = {"type", "redop", "ts_date", "ts_time"}


def collapse_blanks(chunk: bytes) -> bytes:
    """Collapse runs of blanks (space, tab, CR) to one space and drop them at line starts."""
    buf = np.frombuffer(chunk, dtype=np.uint8)
    if len(buf) == 0:
        return chunk
    if b"\t" in chunk or b"\r" in chunk:
        buf = np.where((buf == 9) | (buf == 13), np.uint8(32), buf)
    blank = buf == 32
    after = np.empty(len(buf), dtype=bool)
    after[0] = True
    np.logical_or(blank[:-1], buf[:-1] == 10, out=after[1:])
    after &= blank
    # Blanks just before a newline go too (trailing spaces would add an empty column).
    after[:-1] |= blank[:-1] & (buf[1:] == 10)
    return buf[~after].tobytes()


def line_bounds(chunk: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (the newline's position) of every line of a chunk ending with a newline."""
    ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    starts = np.empty(len(ends), dtype=np.int64)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    return starts, ends


# Names come back dictionary-encoded (a table has a handful of dtype and redop values), the
# form the dataset writer stores them in anyway.
_NAME = pa.dictionary(pa.int32(), pa.string())
_CSV_TYPES = {"size": pa.int64(), "count": pa.int64(), "root": pa.int64(), "type": _NAME,
              "redop": _NAME, "ts_date": pa.string(), "ts_time": pa.string(), "time": pa.float64(),
              "algbw": pa.float64(), "busbw": pa.float64(), "error": pa.float64(), "wrong": pa.int64()}


def csv_rows(data: bytes, n: int, prefix: list[str], sides: list[list[str]],
             suffix: list[str] = ()) -> dict[str, Any] | None:
    """``n`` collapsed rows (single spaces, newline-terminated) to columns via Arrow's CSV reader.

    Same result shape as :func:`convert_rows`; None when the rows do not fit the layout.
    """
    import io

    import pyarrow.csv as pcsv

    names = list(prefix) + [f"s{s}.{c}" for s, side in enumerate(sides) for c in side] + list(suffix)
    if len(set(names)) != len(names):
        return None
    types = {name: _CSV_TYPES[name.split(".", 1)[-1]] for name in names if name.split(".", 1)[-1] in _CSV_TYPES}
    try:
        table = pcsv.read_csv(
            io.BytesIO(data),
            read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + 1),
            parse_options=pcsv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False),
            convert_options=pcsv.ConvertOptions(column_types=types, null_values=list(_NULL_TEXT),
                                                strings_can_be_null=False, include_columns=list(types)),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != n or table.column("size").null_count:
        return None
    return {name: table.column(name).combine_chunks() for name in table.column_names}


def boring_info_lines(chunk: bytes, starts: np.ndarray, ends: np.ndarray, candidates: np.ndarray,
                      interesting: str) -> np.ndarray:
    """Mask of ``NCCL INFO`` lines (among ``candidates``) that match nothing in ``interesting``.

    A debug log is mostly init chatter; dropping it here, in C++, keeps Python for the lines
    that say something.
    """
    out = np.zeros(len(starts), dtype=bool)
    idx = np.flatnonzero(candidates)
    if len(idx) == 0:
        return out
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = ends[-1] + 1 if len(ends) else 0
    lines = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(chunk))
    sub = lines.take(pa.array(idx))
    info = pc.match_substring(sub, "NCCL INFO")
    keep = pc.match_substring_regex(sub, interesting)
    out[idx] = pc.and_(info, pc.invert(keep)).to_numpy(zero_copy_only=False)
    return out


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


def convert_rows(rows: pa.Array, prefix: list[str], sides: list[list[str]],
                 suffix: list[str] = ()) -> dict[str, Any] | None:
    """Split rows into columns named ``size``... and ``s<side>.<name>``; None if they do not fit.

    Integer columns come back as int64, times and bandwidths as float64 (``N/A`` -> null),
    names as strings. Unknown extra columns (``-I`` statistics) are skipped.
    """
    ncols = len(prefix) + sum(len(s) for s in sides) + len(suffix)
    if len(rows) == 0:
        return None
    tokens = pc.ascii_split_whitespace(pc.ascii_trim_whitespace(rows))
    lengths = pc.min_max(pc.list_value_length(tokens)).as_py()
    if lengths["min"] != ncols or lengths["max"] != ncols:
        return None
    names = list(prefix) + [f"s{s}.{c}" for s, side in enumerate(sides) for c in side] + list(suffix)
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
    # int32 indices: the dataset writer's dictionary type, so storing it needs no cast.
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], typ))
