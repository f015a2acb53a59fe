"""Table rows printed with fixed widths, converted by byte arithmetic (the ingest hot path).

nccl-tests prints its rows with printf widths (``%12li %12li %8s ... %7.2f``), so the rows of
a table usually have one length and every column at the same byte offsets. Such rows are
viewed as a 2-D byte array (rows x line length) and each column is converted at once:
numbers from their digit bytes, eight at a time as one 64-bit word; a fixed-point number as
the integer of its digits divided by a power of ten (both exact, so the quotient is the
correctly rounded double of the text, which is what a decimal parser returns); an exponent
form (``%e``: the error column of 2019-2022 builds) as the integer of its digits times or
divided by an exact power of ten (at most 10^22), one rounding again; names as the few
distinct byte strings of their column; a number column that holds ``N/A`` in the template
row (``-c 0`` runs print it in every row's error column) as nulls, in the rows that hold
exactly what the template holds there.

A row is converted here only when it has the shape of a template row of its group: its
values end exactly where the template's do (so each lies in its field, right-aligned), its
number fields hold digits only, with at most a leading ``-`` and the ``.`` where the
template has it. Every other line is left to the CSV path
(:mod:`~ncclbot_sweep.parsers.textblock`), which reads it as it always did; tests check
that both read the same values.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any

import numpy as np
import pyarrow as pa

from ncclbot_sweep.parsers import textblock

__all__ = ["FixedRows", "fixed_rows", "MIN_ROWS"]

#: Rows of one length below this many in a chunk are left to the CSV path (the fixed cost
#: of the vector passes would not be paid back).
MIN_ROWS = 512

#: Column kind by type, from the one table of column types (``textblock.COLUMN_TYPES``).
_KINDS = {pa.int64(): "int", pa.float64(): "float", pa.string(): "str"}
#: Name columns that come dictionary-encoded (as ``textblock.csv_rows`` gives them).
_DICTIONARY = {"type", "redop"}
#: Widest number fields read here: 18 digits fit an int64; 15 digits are exact in a double.
_INT_DIGITS, _FLOAT_DIGITS = 18, 15
_SPACE, _MINUS, _DOT, _NEWLINE = 32, 45, 46, 10
#: Tabs and carriage returns separate values as spaces do (as in ``textblock.csv_form``).
_BLANKS = bytes.maketrans(b"\t\r", b"  ")
_NULL_TOKENS = {text.encode() for text in textblock.NULL_TEXT}
_INT_TOKEN = re.compile(rb"-?\d+")
_FLOAT_TOKEN = re.compile(rb"-?\d+(?:\.\d+)?")
_EXP_TOKEN = re.compile(rb"-?\d+(?:\.\d+)?[eE][+-]\d{2,3}")
#: Powers of ten a double holds exactly (10^22 is the largest).
_EXACT_POWERS = np.array([float(10 ** k) for k in range(23)])
_PLUS = 43
#: Rows per tile: a tile's bytes and flags stay in the CPU's cache between passes.
_TILE_BYTES = 256 << 10

_U = np.uint64
_ALL = (1 << 64) - 1
#: Eight digit bytes (the first digit in the lowest byte, each 0-9) to their number in three
#: steps, each joining neighbours: pairs of digits, pairs of pairs, then the two halves.
_STEPS = ((None, _U(10 * 256 + 1), _U(8)), (_U(0x00FF00FF00FF00FF), _U(100 * 65536 + 1), _U(16)),
          (_U(0x0000FFFF0000FFFF), _U(10000 * (1 << 32) + 1), _U(32)))


def _kind(name: str) -> str:
    column_type = textblock.COLUMN_TYPES.get(name.split(".", 1)[-1])
    return "skip" if column_type is None else _KINDS[column_type]


@dataclasses.dataclass
class FixedRows:
    """The rows of a chunk converted here, and what the CSV path needs for the others."""

    #: The chunk, where its lines start and end (their newlines).
    text: bytes
    starts: np.ndarray
    ends: np.ndarray
    #: Groups of (line indices, ascending; their columns); all their lines, also as a mask.
    parts: list[tuple[np.ndarray, dict[str, Any]]]
    lines: np.ndarray
    mask: np.ndarray

    def rest(self) -> bytes:
        """The chunk with the converted lines emptied (their newlines kept): what is left
        for the CSV path, line ``i`` still line ``i``."""
        kept = np.flatnonzero(~self.mask)
        lengths = np.zeros(len(self.ends), dtype=np.int64)
        lengths[kept] = self.ends[kept] - self.starts[kept]
        lengths += 1
        at = np.cumsum(lengths) - lengths  # where each line starts in the result
        out = np.full(int(at[-1] + lengths[-1]), _NEWLINE, dtype=np.uint8)
        # The kept lines' bytes (few) in one gather and one scatter; the rest are newlines.
        size = lengths[kept] - 1
        first = np.cumsum(size) - size
        step = np.arange(int(size.sum())) - np.repeat(first, size)
        out[np.repeat(at[kept], size) + step] = np.frombuffer(self.text, dtype=np.uint8)[np.repeat(self.starts[kept], size) + step]
        return out.tobytes()

    def merged(self, rest: tuple[np.ndarray, dict[str, Any]] | None = None) -> dict[str, pa.Array]:
        """The columns of every group (and of ``rest``: line indices and columns of the
        other rows), in line order."""
        parts = self.parts + ([rest] if rest is not None else [])
        if len(parts) == 1:
            return {name: _arrow(col) for name, col in parts[0][1].items()}
        n = sum(len(p[0]) for p in parts)
        order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
        where = np.empty(n, dtype=np.int64)
        where[order] = np.arange(n)
        at, k = [], 0
        for p in parts:
            at.append(where[k:k + len(p[0])])
            k += len(p[0])
        # The biggest group's places as a mask: a masked copy costs half a scatter.
        big = max(range(len(parts)), key=lambda i: len(at[i]))
        mask = np.zeros(n, dtype=bool)
        mask[at[big]] = True
        at[big] = mask
        return {name: _merge([p[1][name] for p in parts], at, order) for name in parts[0][1]}


def _arrow(col: Any) -> pa.Array:
    return pa.array(col) if isinstance(col, np.ndarray) else col


def _merge(cols: list[Any], at: list[np.ndarray], order: np.ndarray) -> pa.Array:
    """One column of several groups: each group's values put at its places ``at`` (indices or
    a mask); ``order``: the place of each value of the groups one after the other."""
    if all(isinstance(c, np.ndarray) or (c.null_count == 0 and pa.types.is_primitive(c.type)) for c in cols):
        out = np.empty(len(order), dtype=np.asarray(cols[0]).dtype)
        for col, pos in zip(cols, at):
            out[pos] = np.asarray(col)
        return pa.array(out)
    dictionary = isinstance(cols[0], pa.DictionaryArray)
    if dictionary and all(len(c.dictionary) == 1 and not c.null_count for c in cols):
        values = {c.dictionary[0].as_py() for c in cols}
        if len(values) == 1:  # one name in every group (a table's dtype or redop)
            return textblock.constant(values.pop(), len(order), pa.string())
    col = pa.concat_arrays([_arrow(c) for c in cols]).take(pa.array(order))
    # Names in order of appearance, as Arrow's encoder gives them for the rows read at once.
    return col.dictionary_decode().dictionary_encode() if dictionary else col


def fixed_rows(chunk: bytes, names: list[str]) -> FixedRows | None:
    """Convert the lines of ``chunk`` (whole lines, valid UTF-8) that are table rows of the
    column ``names`` (a layout's) printed with fixed widths; None when there are none.

    Numbers come back as numpy int64/float64 arrays, names as Arrow arrays (type and redop
    dictionary-encoded), as ``textblock.csv_rows`` gives them.
    """
    if len(set(names)) != len(names) or _kind(names[0]) not in ("int", "float"):
        return None
    blanked = chunk.translate(_BLANKS) if b"\t" in chunk or b"\r" in chunk else chunk
    buf = np.frombuffer(blanked, dtype=np.uint8)
    ends = np.flatnonzero(np.equal(buf, _NEWLINE, out=_flags(len(buf))))
    if len(ends) < MIN_ROWS:
        return None
    starts = np.empty(len(ends), dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts
    parts: list[tuple[np.ndarray, dict[str, Any]]] = []
    for length in np.flatnonzero(np.bincount(lengths) >= MIN_ROWS).tolist():
        group = np.flatnonzero(lengths == length)
        for _ in range(3):  # a group may hold rows of two tables of the same width
            got = _convert(buf, starts[group], int(length), names)
            if got is None:
                break
            good, cols = got
            parts.append((group[good], cols))
            rest = np.ones(len(group), dtype=bool)
            rest[good] = False
            group = group[rest]
            if len(group) < MIN_ROWS:
                break
    if not parts:
        return None
    mask = np.zeros(len(ends), dtype=bool)
    for lines, _ in parts:
        mask[lines] = True
    return FixedRows(chunk, starts, ends, parts, np.flatnonzero(mask), mask)


@dataclasses.dataclass
class _Word:
    """Eight bytes of every row (bytes ``start``..``start + 7``), loaded as one uint64."""

    start: int
    #: Bits kept: the low nibble of each digit byte (numbers) or each byte (names).
    keep: int
    #: Byte of the dot in the word, or -1; zero bytes shifted in below the word's first byte.
    dot: int = -1
    pad: int = 0
    digits: int = 0


@dataclasses.dataclass
class _Field:
    name: str
    kind: str
    #: First byte a value may use (one blank at least after the previous one), its last byte.
    first: int
    last: int
    dot: int
    #: Index of each of its words in the loaded words, right to left.
    words: list[int] = dataclasses.field(default_factory=list)
    #: An exponent form: the byte of its ``e`` (``last`` is then the mantissa's last byte),
    #: the exponent's last byte and words; -1 otherwise.
    exp: int = -1
    exp_last: int = -1
    exp_words: list[int] = dataclasses.field(default_factory=list)


def _plan(row: bytes, names: list[str]) -> tuple[list[_Field], list[_Word]] | None:
    """The fields of a template row and the words to load for them; None when the row is not
    a row of ``names`` that this module reads."""
    tokens = [(m.start(), m.end() - 1, m.group()) for m in re.finditer(rb"[^ ]+", row)]
    if len(tokens) != len(names):
        return None
    fields: list[_Field] = []
    words: list[_Word] = []
    prev = -2
    for (start, last, token), name in zip(tokens, names):
        kind, first, dot = _kind(name), prev + 2, -1
        prev = last
        if kind in ("int", "float") and token in _NULL_TOKENS:
            if name == "size":  # a row without a size is no row (the CSV path says so too)
                return None
            kind = "null"
        if kind == "int" and (not _INT_TOKEN.fullmatch(token) or last - first + 1 > _INT_DIGITS):
            return None
        exp = -1
        if kind == "float":
            if _EXP_TOKEN.fullmatch(token):
                exp = start + token.lower().index(b"e")
            elif not _FLOAT_TOKEN.fullmatch(token):
                return None
            dot = row.find(b".", start, last + 1)
            if (exp if exp >= 0 else last + 1) - first - (dot >= 0) > _FLOAT_DIGITS:
                return None
        field = _Field(name, kind, first, last if exp < 0 else exp - 1, dot)
        fields.append(field)
        if kind == "skip":
            continue
        byte = 0x0F if kind in ("int", "float") else 0xFF
        field.words = _words(words, field.first, field.last, dot, byte)
        if exp >= 0:
            field.exp, field.exp_last = exp, last
            field.exp_words = _words(words, exp + 2, last, -1, byte)
    return fields, words


def _words(words: list[_Word], first: int, last: int, dot: int, byte: int) -> list[int]:
    """Append the words that hold bytes ``first``..``last`` (eight each, from the right) to
    ``words``; return their indices."""
    added = []
    end = last
    while end >= first:
        begin = max(end - 7, 0)
        used = [c for c in range(max(begin, first), end + 1) if c != dot]
        keep = sum(byte << (8 * (c - begin)) for c in used)
        added.append(len(words))
        words.append(_Word(begin, keep, dot - begin if begin <= dot <= end else -1, 7 - (end - begin), len(used)))
        end = begin - 1
    return added


_local = threading.local()


def _flags(n: int) -> np.ndarray:
    """This thread's ``n`` booleans for a chunk-sized comparison (fresh memory costs page
    faults: about a thousand for a 4 MB array)."""
    flags = getattr(_local, "flags", None)
    if flags is None or len(flags) < n:
        flags = np.empty(n + n // 8, dtype=bool)
        _local.flags = flags if len(flags) <= 16 << 20 else None
    return flags[:n]


def _space(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's work space for a tile of ``n`` bytes: bytes and two flag arrays."""
    space = getattr(_local, "space", None)
    if space is None or len(space[0]) < n:
        space = (np.empty(n, dtype=np.uint8), np.empty(n, dtype=bool), np.empty(n, dtype=bool))
        _local.space = space
    return space[0][:n], space[1][:n], space[2][:n]


def _convert(buf: np.ndarray, line_starts: np.ndarray, length: int,
             names: list[str]) -> tuple[np.ndarray, dict[str, Any]] | None:
    """One group of lines of one length: (indices of the rows that fit, their columns)."""
    m, width = len(line_starts), length + 1
    if width < 9:  # a word of eight bytes must fit in a row
        return None
    plan = None
    for template in (0, m // 2, m - 1):
        begin = int(line_starts[template])
        plan = _plan(buf[begin:begin + length].tobytes(), names)
        if plan is not None:
            break
    if plan is None:
        return None
    windows = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - width + 1, width), strides=(1, 1))
    block = windows[line_starts]
    fields, words = plan
    bad, negative, loaded = _scan(block, template, fields, words)
    cols: dict[str, Any] = {}
    for k, field in enumerate(fields):
        if field.kind in ("int", "float"):
            cols[field.name] = _number(field, [loaded[i] for i in field.words], [words[i] for i in field.words],
                                       negative.get(k), bad)
            if field.exp >= 0:
                _scale(cols[field.name], field, block, _digits([loaded[i] for i in field.exp_words],
                                                               [words[i] for i in field.exp_words], bad), bad)
        elif field.kind == "null":  # N/A in the template: the same text in every row read here
            bad |= ~_as_template(field, [loaded[i] for i in field.words], words, template)
    good = np.flatnonzero(~bad)
    if len(good) == 0:
        return None
    if len(good) < m:
        cols = {name: col[good] for name, col in cols.items()}
    for field in fields:  # names last: only the rows that fit count
        if field.kind == "str":
            cols[field.name] = _names(block, field, [loaded[i] for i in field.words], words, template, good)
        elif field.kind == "null":
            cols[field.name] = pa.nulls(len(good), pa.int64() if _kind(field.name) == "int" else pa.float64())
    return good, cols


def _scan(block: np.ndarray, template: int, fields: list[_Field],
          words: list[_Word]) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]:
    """Check every row's shape against the template row's, read the signs and load the words,
    tile by tile: (rows that do not fit, negative rows of each field, the words)."""
    m, width = block.shape
    tile = max(64, _TILE_BYTES // width)
    row = block[template]
    blank = row == _SPACE
    blank[-1] = True  # the newline: a blank after the last value
    ends = np.zeros(width, dtype=bool)
    ends[:-1] = ~blank[:-1] & blank[1:]  # where the template's values end
    # Number fields hold digits, a leading minus and the template's dot only.
    digit_cols = np.zeros(width, dtype=bool)
    field_of = np.full(width, -1)
    for k, f in enumerate(fields):
        if f.kind in ("int", "float"):
            digit_cols[f.first:f.last + 1] = True
            field_of[f.first:f.last + 1] = k
            if f.dot >= 0:
                digit_cols[f.dot] = False
            if f.exp >= 0:
                digit_cols[f.exp + 2:f.exp_last + 1] = True
                field_of[f.exp + 2:f.exp_last + 1] = k
    # Minus signs are looked for where the template has them (``-1`` roots) first.
    signs = [c for c in np.flatnonzero(row == _MINUS).tolist() if digit_cols[c]]
    rows = min(tile, m)
    ends, digit_cols = np.tile(ends, rows), np.tile(digit_cols, rows)
    bad = np.zeros(m, dtype=bool)
    negative: dict[int, np.ndarray] = {}
    loaded = np.empty((len(words), m), dtype=np.uint64)
    sources = [np.ndarray((m,), dtype="<u8", buffer=block, offset=w.start, strides=(width,)) for w in words]
    for a in range(0, m, tile):
        b = min(m, a + tile)
        part = block[a:b]
        part[:, -1] = _SPACE  # the newline: a blank after the last value
        flat = part.reshape(-1)
        n = len(flat)
        digits, nonblank, flags = _space(n)
        np.not_equal(flat, _SPACE, out=nonblank)
        # Where values end (a non-blank byte before a blank): every row must end its values
        # exactly where the template does; then each lies in its field.
        np.greater(nonblank[:-1], nonblank[1:], out=flags[:-1])
        flags[-1] = False
        np.not_equal(flags, ends[:n], out=flags)
        if flags.any():
            bad[a:b] |= flags.reshape(b - a, width).any(axis=1)
        odd = np.greater(np.subtract(flat, 48, out=digits), 9, out=flags)  # not a digit
        odd &= nonblank
        odd &= digit_cols[:n]
        if flags.any():
            _signs(part, odd.reshape(b - a, width), signs, fields, field_of, bad[a:b], negative, a, m)
        for i, source in enumerate(sources):
            np.copyto(loaded[i, a:b], source[a:b])
    return bad, negative, loaded


def _signs(part: np.ndarray, odd: np.ndarray, signs: list[int], fields: list[_Field], field_of: np.ndarray,
           bad: np.ndarray, negative: dict[int, np.ndarray], offset: int, m: int) -> None:
    """Rows of a tile whose number fields hold something else than digits: a minus that
    starts its value (and is followed by a digit) is the value's sign, noted in
    ``negative[field]`` and blanked in ``part``; anything else marks the row ``bad``.
    ``signs``: the columns where the template row has a minus."""
    rows, width = part.shape
    counts = [np.count_nonzero(odd[:, c]) for c in signs]
    if sum(counts) == np.count_nonzero(odd):  # nothing odd but in those columns
        for c, count in zip(signs, counts):
            if not count:
                continue
            k = int(field_of[c])
            cell = part[:, c]
            minus = cell == _MINUS
            if np.count_nonzero(minus) != count:
                bad |= odd[:, c] & ~minus
            if c < fields[k].last:
                ok = np.subtract(part[:, c + 1], 48, dtype=np.uint8) <= 9
                if c > 0:
                    ok &= part[:, c - 1] == _SPACE
                bad |= minus & ~ok
            else:
                bad |= minus
            cell[minus] = _SPACE
            neg = negative.setdefault(k, np.zeros(m, dtype=bool))
            neg[offset:offset + rows] |= minus
        return
    flat = part.reshape(-1)
    at = np.flatnonzero(odd.reshape(-1))
    row, col = np.divmod(at, width)
    field = field_of[col]
    lasts = np.array([f.last for f in fields])
    # A sign starts its value (a blank before it: the previous row's newline is one too)
    # and a digit follows it.
    minus = (flat[at] == _MINUS) & (col < lasts[field]) & (flat[at - 1] == _SPACE)
    minus[minus] &= np.subtract(flat[at[minus] + 1], 48, dtype=np.uint8) <= 9
    bad[row[~minus]] = True
    flat[at[minus]] = _SPACE
    for k in np.flatnonzero(np.bincount(field[minus], minlength=len(fields))).tolist():
        neg = negative.setdefault(k, np.zeros(m, dtype=bool))
        neg[offset + row[minus & (field == k)]] = True


def _number(field: _Field, loaded: list[np.ndarray], words: list[_Word], negative: np.ndarray | None,
            bad: np.ndarray) -> np.ndarray:
    """A number field's values from its words (right to left): int64 or float64 (for an
    exponent form, its mantissa's digits as an integer, scaled by :func:`_scale`)."""
    total = _digits(loaded, words, bad)
    if field.kind == "int":
        out = total.astype(np.int64)
    else:
        out = total.astype(np.float64)
        if field.dot >= 0 and field.exp < 0:
            out /= float(10 ** (field.last - field.dot))
    if negative is not None:
        # A sign flip: exact, and "-0.00" gives -0.0 as a decimal parser does.
        np.negative(out, out=out, where=negative)
    return out


def _scale(values: np.ndarray, field: _Field, block: np.ndarray, exponent: np.ndarray, bad: np.ndarray) -> None:
    """Values of an exponent form from their mantissa digits (in place): times or divided by
    one exact power of ten, so one rounding, as a decimal parser does; rows whose power is
    beyond 10^22, whose ``e`` and exponent sign are not where the template has them, or
    whose mantissa is missing, are ``bad``."""
    e = block[:, field.exp]
    sign = block[:, field.exp + 1]
    bad |= ((e != ord("e")) & (e != ord("E"))) | ((sign != _PLUS) & (sign != _MINUS))
    bad |= block[:, field.exp - 1] == _SPACE  # "e-07" has no mantissa
    power = np.where(sign == _MINUS, -exponent.astype(np.int64), exponent.astype(np.int64))
    if field.dot >= 0:
        power -= field.last - field.dot
    bad |= np.abs(power) > len(_EXACT_POWERS) - 1
    exact = _EXACT_POWERS[np.clip(np.abs(power), 0, len(_EXACT_POWERS) - 1)]
    np.multiply(values, exact, out=values, where=power >= 0)
    np.divide(values, exact, out=values, where=power < 0)


def _digits(loaded: list[np.ndarray], words: list[_Word], bad: np.ndarray) -> np.ndarray:
    """The digits of a number's words (right to left) as one uint64 per row; rows whose dot
    is not where the template has it are ``bad``."""
    total = None
    scale = 1
    for value, word in zip(loaded, words):
        if word.dot >= 0:
            bad |= (value & _U(0xFF << (8 * word.dot))) != _U(_DOT << (8 * word.dot))
        np.bitwise_and(value, _U(word.keep), out=value)
        if word.dot >= 0:
            # Drop the dot's byte (not kept): the bytes below it move up by one.
            low = value & _U((1 << (8 * word.dot)) - 1)
            np.left_shift(low, _U(8), out=low)
            np.bitwise_and(value, _U(_ALL ^ ((1 << (8 * word.dot)) - 1)), out=value)
            np.bitwise_or(value, low, out=value)
        if word.pad:
            np.left_shift(value, _U(8 * word.pad), out=value)
        for mask, mul, shift in _STEPS:
            if mask is not None:
                np.bitwise_and(value, mask, out=value)
            np.multiply(value, mul, out=value)
            np.right_shift(value, shift, out=value)
        if total is None:
            total = value
        else:
            np.multiply(value, _U(scale), out=value)
            np.add(total, value, out=total)
        scale *= 10 ** word.digits
    return total


def _as_template(field: _Field, loaded: list[np.ndarray], words: list[_Word], template: int) -> np.ndarray:
    """Rows whose field holds the same bytes as the template row's."""
    same = None
    for value, index in zip(loaded, field.words):
        np.bitwise_and(value, _U(words[index].keep), out=value)
        equal = value == value[template]
        same = equal if same is None else same & equal
    return same


def _names(block: np.ndarray, field: _Field, loaded: list[np.ndarray], words: list[_Word], template: int,
           good: np.ndarray) -> pa.Array:
    """A name field's values in rows ``good``, dictionary-encoded when ``textblock.csv_rows``
    gives them so."""
    same = _as_template(field, loaded, words, template)
    dictionary = field.name in _DICTIONARY
    if same[good].all():
        text = block[template, field.first:field.last + 1].tobytes().lstrip(b" ").decode("utf-8", "replace")
        if dictionary:
            return textblock.constant(text, len(good), pa.string())
        return pa.repeat(pa.scalar(text, pa.string()), len(good))
    cells = np.ascontiguousarray(block[good, field.first:field.last + 1])
    keys = cells.view(f"V{cells.shape[1]}").reshape(-1)
    unique, first_at, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first_at)  # values in order of appearance, as Arrow's encoder gives them
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    values = [unique[i].tobytes().lstrip(b" ").decode("utf-8", "replace") for i in order.tolist()]
    col = pa.DictionaryArray.from_arrays(pa.array(rank[inverse.reshape(-1)]), pa.array(values, pa.string()),
                                         safe=False)
    return col if dictionary else col.dictionary_decode()
