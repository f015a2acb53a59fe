"""Vectorised handling of nccl-tests table rows that are not read by their fixed widths
(:mod:`~ncclbot_sweep.parsers.fixedwidth` reads most rows of a clean table).

A chunk of text becomes *CSV form* in a few C passes (:func:`csv_form`): the first blank
after every token turns into a comma and every other blank goes, so each line is its tokens
joined by commas and a run of table rows is valid input for Arrow's C++ CSV reader, which
converts every column at once (:func:`csv_rows`). Newlines stay where they were, so line
``i`` of the CSV form is line ``i`` of the text. Rows that do not fit go through
:func:`convert_rows` (Arrow split on whitespace), and only what still does not fit is looked
at line by line in Python. See ``benchmarks/ingest.py`` for the figures.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["COLUMN_TYPES", "NULL_TEXT", "csv_form", "collapse_line", "join_lines", "csv_rows", "boring_info_lines", "convert_rows", "constant"]

#: What nccl-tests prints for "no value" (``-c 0``, in-place of SendRecv). ``nan`` is not one of
#: them: a NaN time is an impossible measurement that ingest must see and quarantine.
NULL_TEXT = ("N/A", "-")
_NULL_TOKENS = pa.array(list(NULL_TEXT), pa.large_string())
#: The type of every table column the parsers keep, by its name (a side's columns are
#: prefixed ``s0.``, ``s1.``); the CSV path and :mod:`.fixedwidth` both read it.
COLUMN_TYPES = {"size": pa.int64(), "count": pa.int64(), "root": pa.int64(), "type": pa.string(),
                "redop": pa.string(), "ts_date": pa.string(), "ts_time": pa.string(), "time": pa.float64(),
                "algbw": pa.float64(), "busbw": pa.float64(), "error": pa.float64(), "wrong": pa.int64()}
_INT = {name for name, kind in COLUMN_TYPES.items() if kind == pa.int64()}
_FLOAT = {name for name, kind in COLUMN_TYPES.items() if kind == pa.float64()}

#: Tabs and carriage returns separate tokens as spaces do (``bytes.translate`` table).
_BLANKS = bytes.maketrans(b"\t\r", b"  ")
_SPACE, _NEWLINE, _COMMA = 32, 10, 44
_BLANK_RUN = re.compile("[ \t\r]+")


def csv_form(chunk: bytes) -> tuple[bytearray, np.ndarray, np.ndarray]:
    """``chunk`` (whole lines) with each line's tokens joined by commas and no blanks left,
    and where its lines start and end (the newline's position).

    The first blank (space, tab, CR) after a token becomes a comma and the others are
    deleted: ``"   8  2 float  \\n"`` gives ``"8,2,float\\n"``. For a line without a comma of
    its own this is exact (its text as the parser reads it, :func:`collapse_line`, is its
    CSV form with commas read as spaces); callers keep the other lines away from the CSV
    reader (a comma that ended such a line is gone).
    """
    if b"\t" in chunk or b"\r" in chunk:
        chunk = chunk.translate(_BLANKS)
    buf = np.frombuffer(chunk, dtype=np.uint8)
    n = len(buf)
    if n == 0:
        return bytearray(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    mark, tmp, marked = _scratch(n)
    if n > 1:
        # A blank right after a token: not after another blank, nor at the start of its line.
        np.equal(buf[1:], _SPACE, out=mark[: n - 1])
        np.not_equal(buf[:-1], _SPACE, out=tmp[: n - 1])
        mark[: n - 1] &= tmp[: n - 1]
        np.not_equal(buf[:-1], _NEWLINE, out=tmp[: n - 1])
        mark[: n - 1] &= tmp[: n - 1]
    # A marked byte is a space (32); adding 12 makes it a comma (44).
    out = np.frombuffer(marked, dtype=np.uint8, count=n)
    out[:1] = buf[:1]
    np.multiply(mark[: n - 1].view(np.uint8), np.uint8(_COMMA - _SPACE), out=out[1:])
    out[1:] += buf[1:]
    del out  # (the scratch bytearray cannot be resized while viewed)
    form = marked.translate(None, b" ")
    starts, ends = _bounds(form, tmp)
    # Blanks that ended a line left their comma before the newline.
    last = np.frombuffer(form, dtype=np.uint8)[ends - 1]
    if len(ends) and (last[ends > 0] == _COMMA).any():
        form = form.replace(b",\n", b"\n")
        starts, ends = _bounds(form, tmp)
    return form, starts, ends


def join_lines(form: bytes | bytearray, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray, *,
               transient: bool = False) -> bytes | np.ndarray:
    """Lines ``lines`` (ascending indices) of ``form`` with their newlines, one after the other.

    ``transient``: into this thread's work space, valid until its next :func:`csv_form` or
    :func:`join_lines` (a chunk's rows are read at once; fresh memory costs page faults).
    """
    if len(lines) == 0:
        return b""
    # Rows come in long runs between the few other lines: one slice per run.
    change = np.flatnonzero(np.diff(lines) != 1)
    firsts = starts[np.concatenate(([lines[0]], lines[change + 1]))].tolist()
    stops = (ends[np.concatenate((lines[change], [lines[-1]]))] + 1).tolist()
    if not transient:
        return b"".join(form[a:b] for a, b in zip(firsts, stops))
    buf = np.frombuffer(form, dtype=np.uint8)
    total = sum(stops) - sum(firsts)
    out = _space(total)[0].view(np.uint8)[:total]
    np.concatenate([buf[a:b] for a, b in zip(firsts, stops)], out=out)
    return out


_local = threading.local()
#: Work space up to this size is kept between calls (ingest reads 4 MB chunks).
_KEEP = 8 << 20


def _space(n: int) -> tuple[np.ndarray, np.ndarray, bytearray]:
    """This thread's work space, at least ``n`` bytes of each kind. Each thread keeps its own
    (up to :data:`_KEEP`): a fresh chunk-sized array costs about a thousand page faults."""
    space = getattr(_local, "space", None)
    if space is None or len(space[0]) < n:
        size = n + n // 8
        space = (np.empty(size, dtype=bool), np.empty(size, dtype=bool), bytearray(n))
        _local.space = space if size <= _KEEP else None
    return space


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray, bytearray]:
    """:func:`_space` with its bytearray exactly ``n`` bytes long (for :func:`csv_form`)."""
    space = _space(n)
    try:
        if len(space[2]) > n:
            del space[2][n:]  # within its allocation: no copy
        else:
            space[2].extend(bytes(n - len(space[2])))
    except BufferError:  # still viewed (an error left a view alive): start afresh
        space = (space[0], space[1], bytearray(n))
        _local.space = space if len(space[0]) <= _KEEP else None
    return space


def _bounds(text: bytes | bytearray, tmp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every line of ``text`` (which ends with a newline); ``tmp`` is scratch."""
    hit = tmp[: len(text)]
    np.equal(np.frombuffer(text, dtype=np.uint8), _NEWLINE, out=hit)
    ends = np.flatnonzero(hit)
    starts = np.empty(len(ends), dtype=np.int64)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    return starts, ends


def collapse_line(line: str) -> str:
    """One line as the text parser reads it: runs of blanks made one space, none at either end."""
    return _BLANK_RUN.sub(" ", line).strip(" ")


def csv_rows(data: bytes | np.ndarray, n: int, prefix: list[str], sides: list[list[str]],
             suffix: list[str] = ()) -> dict[str, Any] | None:
    """``n`` rows in CSV form (:func:`csv_form`, newline-terminated, valid UTF-8) to columns
    via Arrow's CSV reader.

    Same result shape as :func:`convert_rows`, but names come back dictionary-encoded (a
    table has a handful of dtype and redop values, and the dataset writer stores them so);
    None when the rows do not fit the layout.
    """
    import pyarrow.csv as pcsv

    names = list(prefix) + [f"s{s}.{c}" for s, side in enumerate(sides) for c in side] + list(suffix)
    if len(set(names)) != len(names):
        return None
    types = {name: COLUMN_TYPES[name.split(".", 1)[-1]] for name in names if name.split(".", 1)[-1] in COLUMN_TYPES}
    try:
        table = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(data)),
            read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + 1),
            parse_options=pcsv.ParseOptions(delimiter=",", quote_char=False, double_quote=False),
            convert_options=pcsv.ConvertOptions(column_types=types, null_values=list(NULL_TEXT), check_utf8=False,
                                                strings_can_be_null=False, include_columns=list(types)),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != n or table.column("size").null_count:
        return None
    cols = {name: _array(table.column(name)) for name in table.column_names}
    for name in ("type", "redop"):
        if name in cols:
            cols[name] = _names(cols[name])
    return cols


def _array(col: pa.ChunkedArray) -> pa.Array:
    """One array (a copy only when the column came in several chunks)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _names(col: pa.Array) -> pa.Array:
    """A column of names, dictionary-encoded; at almost no cost when it holds one name only."""
    if len(col) and pc.all(pc.equal(col, col[0])).as_py():
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(col), dtype=np.int32)), col.slice(0, 1))
    return col.dictionary_encode()


def boring_info_lines(form: bytes | bytearray, form_ends: np.ndarray, candidates: np.ndarray,
                      interesting: str) -> np.ndarray:
    """Mask of ``NCCL INFO`` lines (among ``candidates``) that match nothing in ``interesting``.

    A debug log is mostly init chatter; dropping it here, in C++, keeps Python for the lines
    that say something. Lines are matched in CSV form (``form``, :func:`csv_form`;
    ``form_ends`` from it) with each space of the patterns read as a comma:
    exact for lines without a comma of their own (callers decide those).
    """
    out = np.zeros(len(candidates), dtype=bool)
    idx = np.flatnonzero(candidates)
    if len(idx) == 0:
        return out
    offsets = np.zeros(len(form_ends) + 1, dtype=np.int64)
    offsets[1:] = form_ends + 1
    lines = pa.LargeStringArray.from_buffers(len(form_ends), pa.py_buffer(offsets), pa.py_buffer(form))
    lines = lines.take(pa.array(idx))
    info = pc.match_substring(lines, "NCCL,INFO")
    keep = pc.match_substring_regex(lines, interesting.replace(" ", ","))
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
            if kind not in COLUMN_TYPES:
                continue
            col = pc.list_element(tokens, k)
            if kind in _INT:
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
    """An array of ``n`` copies of ``value`` (None, or a number that does not fit ``typ``: nulls;
    the run's own row, whose columns ingest checks, then says why).

    Strings come dictionary-encoded with int32 indices, the dataset writer's form, so storing
    them costs neither a cast nor a hash. The index arrays and the other types' arrays are
    cached: batches have a few lengths, the values are a run's constants, and Arrow builds
    even an array of nulls slowly.
    """
    if pa.types.is_string(typ):
        values = pa.array([] if value is None else [value], typ)
        return pa.DictionaryArray.from_arrays(_indices(n, value is None), values, safe=False)
    return _repeat(value, n, typ)


@functools.lru_cache(maxsize=8)
def _indices(n: int, null: bool) -> pa.Array:
    return pa.nulls(n, pa.int32()) if null else pa.array(np.zeros(n, dtype=np.int32))


@functools.lru_cache(maxsize=32)
def _repeat(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    try:
        one = pa.array([value], typ)
    except (OverflowError, pa.ArrowInvalid):
        one = pa.nulls(1, typ)
    if one.null_count:
        return pa.nulls(n, typ)
    return pa.DictionaryArray.from_arrays(_indices(n, False), one, safe=False).dictionary_decode()
