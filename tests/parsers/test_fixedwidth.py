"""Rows read by their fixed widths (parsers/fixedwidth.py) against the CSV path they stand in
for: every row the fast path converts has the values Arrow's CSV reader reads from its CSV
form, bit for bit; clean tables are converted whole; and the parser's rows, line numbers and
issues do not change when the fast path is on, whatever the table holds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncclbot_sweep.parsers import fixedwidth, textblock
from ncclbot_sweep.parsers.nccltests_text import parse_nccltests_text
from ncclbot_sweep.parsers.prefixes import unglue

from parser_fixtures import source

# Column sets as layouts name them (textblock.csv_rows' names).
_LAYOUTS = [
    (["size", "count", "type", "redop", "root"], ["time", "algbw", "busbw", "wrong"], 2, []),
    (["size", "count", "type", "redop"], ["time", "algbw", "busbw", "error"], 2, []),
    (["size", "count", "type", "root"], ["time", "algbw", "busbw"], 1, []),
    (["size", "count", "type", "redop", "root"], ["time", "algbw", "busbw", "wrong", "extra0"], 1,
     ["ts_date", "ts_time"]),
]
_NAMES = ["float", "half", "bfloat16", "int8", "sum", "prod", "none", "N/A"]
# What nccl-tests prints for no value or something odd, and other texts a number column may hold.
_ODD = [
    "N/A", "-", "nan", "-nan", "inf", "-inf", "1e+06", "1e+300", "5e-324", "2E-07", "1e+6", "1e06",
    "e-07", "-e+00", ".5e+00", "1.e-07", "1e-0", "12.", ".5", "-.5", "+5", "x", "0x1f", "--1", "1-2",
    "-0", "-0.00", "007", "0.000", "\u0661\u0662", "1\t2",
]


def _names(prefix, side, sides, suffix):
    return prefix + [f"s{s}.{c}" for s in range(sides) for c in side] + suffix


@st.composite
def _table(draw, odd: bool = True):
    """A table printed with fixed widths: (column names, lines). With ``odd``, some values do
    not fit their width or are not plain numbers, some rows lack a value or hold a tab. Some
    number columns print N/A in every row (``-c 0`` runs, in-place SendRecv), some print their
    values in exponent form."""
    prefix, side, sides, suffix = draw(st.sampled_from(_LAYOUTS))
    names = _names(prefix, side, sides, suffix)
    numbers = [n for n in names if n != "size" and n.split(".")[-1] in ("count", "root", "wrong", "time", "algbw",
                                                                      "busbw", "error")]
    absent = draw(st.sets(st.sampled_from(numbers), max_size=3))
    # Columns printed in exponent form (the error column of 2019-2022 builds is "%6.0e").
    exponent = draw(st.sets(st.sampled_from([n for n in names if n.split(".")[-1] in ("time", "algbw", "busbw",
                                                                                      "error")]), max_size=2))
    formats = []
    for name in names:
        kind = name.split(".")[-1]
        gap = draw(st.integers(1, 3))
        if kind in ("size", "count", "root", "wrong"):
            formats.append(("int", draw(st.integers(1, 14)), 0, gap))
        elif kind in ("time", "algbw", "busbw", "error"):
            formats.append(("float", draw(st.integers(3, 12)), draw(st.integers(0, 4)), gap))
        else:
            formats.append(("str", draw(st.integers(3, 10)), 0, gap))
    rows = []
    for _ in range(draw(st.integers(1, 24))):
        cells = []
        for name, (kind, width, decimals, gap) in zip(names, formats):
            fits = 10 ** max(width - decimals - 2, 0)
            if odd and draw(st.integers(0, 29)) == 0:
                text = draw(st.sampled_from(_ODD))
            elif name in absent:
                text = "N/A"
            elif kind == "int":
                value = draw(st.one_of(st.integers(0, 10 ** width - 1), st.integers(-9, 9))
                             if odd else st.integers(0, 10 ** width - 1))
                text = str(value)
            elif kind == "float":
                if name in exponent and not odd:  # powers of ten a double holds exactly
                    value = draw(st.one_of(st.just(0.0), st.floats(1e-12, fits)))
                else:
                    value = draw(st.floats(-fits if odd else 0, fits * (10 if odd else 1), allow_nan=False))
                text = f"{value:.{decimals}e}" if name in exponent else f"{value:.{decimals}f}"
            elif name in ("ts_date", "ts_time"):
                text = draw(st.sampled_from(["2024-07-18", "15:41:05", "x"]))
            else:
                text = draw(st.sampled_from(_NAMES))
            if not odd:
                text = text[-width:] if kind == "str" else text
            cells.append(" " * gap + text.rjust(width))
        if odd and draw(st.integers(0, 19)) == 0:  # a blank value (field builds leave redop blank)
            k = draw(st.integers(1, len(cells) - 1))
            cells[k] = " " * len(cells[k])
        rows.append("".join(cells))
    return names, rows


def _check(got: dict, ref: dict) -> None:
    """The fast path's columns are the CSV path's, floats bit for bit (-0.0 is not 0.0)."""
    assert set(got) == set(ref)
    for name, col in got.items():
        col = pa.array(col) if isinstance(col, np.ndarray) else col
        assert col.type == ref[name].type, name
        if pa.types.is_floating(col.type):
            a, b = np.asarray(col), np.asarray(ref[name])
            assert np.array_equal(a.view(np.int64), b.view(np.int64)), (name, a, b)
        else:
            assert col.to_pylist() == ref[name].to_pylist(), name


def _reference(lines: list[str], names: list[str]) -> dict | None:
    prefix = [n for n in names if "." not in n and not n.startswith("ts_")]
    suffix = [n for n in names if n.startswith("ts_")]
    sides: list[list[str]] = []
    for n in names:
        if "." in n:
            s, c = n.split(".", 1)
            while len(sides) <= int(s[1:]):
                sides.append([])
            sides[int(s[1:])].append(c)
    form = textblock.csv_form("".join(line + "\n" for line in lines).encode())[0]
    return textblock.csv_rows(form, len(lines), prefix, sides, suffix)


@settings(max_examples=400, deadline=None)
@given(_table())
def test_converted_rows_read_what_the_csv_reader_reads(table):
    names, rows = table
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixedwidth, "MIN_ROWS", 1)
        got = fixedwidth.fixed_rows("".join(r + "\n" for r in rows).encode(), names)
    if got is None:
        return
    assert list(got.lines) == sorted(set(got.lines.tolist()))
    for lines, cols in got.parts:
        ref = _reference([rows[i] for i in lines.tolist()], names)
        assert ref is not None, [rows[i] for i in lines.tolist()]
        _check(cols, ref)
    _check(got.merged(), _reference([rows[i] for i in got.lines.tolist()], names))


@settings(max_examples=200, deadline=None)
@given(_table(odd=False))
def test_clean_tables_are_converted_whole(table):
    names, rows = table
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixedwidth, "MIN_ROWS", 1)
        got = fixedwidth.fixed_rows("".join(r + "\n" for r in rows).encode(), names)
    width = {len(r) for r in rows}
    if len(width) > 1:  # values wider than their fields: the longer rows are other groups
        return
    assert got is not None and got.lines.tolist() == list(range(len(rows)))
    _check(got.merged(), _reference(rows, names))


def test_the_values_of_a_clean_table():
    rows = [f"{8 << k:12d}  {2 << k:12d}     float     sum      -1  {k * 1.5:7.2f}  {k - 0.25:6.1f}    0" for k in range(6)]
    names = _names(["size", "count", "type", "redop", "root"], ["time", "algbw", "wrong"], 1, [])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixedwidth, "MIN_ROWS", 1)
        got = fixedwidth.fixed_rows("".join(r + "\n" for r in rows).encode(), names)
    cols = got.merged()
    assert cols["size"].to_pylist() == [8, 16, 32, 64, 128, 256] and cols["root"].to_pylist() == [-1] * 6
    assert cols["s0.time"].to_pylist() == [0.0, 1.5, 3.0, 4.5, 6.0, 7.5]
    assert cols["s0.algbw"].to_pylist() == [-0.2, 0.8, 1.8, 2.8, 3.8, 4.8]  # -0.25 prints -0.2
    assert cols["type"].type == pa.dictionary(pa.int32(), pa.string()) and cols["type"].to_pylist() == ["float"] * 6



def test_the_values_of_an_exponent_column():
    """The error column of 2019-2022 builds ("%6.0e"): each value the correctly rounded
    double of its text, signs and negative zero kept; an exponent past 10^22, or one without
    a mantissa, falls back."""
    errors = ["0e+00", "1e-07", "2e+05", "-3e-01", "-0e+00", "7E-22", "9e-23", "5e+00", "e-07", "1e*07"]
    rows = [f"{8 << k:12d}  {2 << k:12d}     float     sum  {k * 1.5:7.2f}  {e:>6s}" for k, e in enumerate(errors)]
    names = _names(["size", "count", "type", "redop"], ["time", "error"], 1, [])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixedwidth, "MIN_ROWS", 1)
        got = fixedwidth.fixed_rows("".join(r + "\n" for r in rows).encode(), names)
    assert got.lines.tolist() == [0, 1, 2, 3, 4, 5, 7]  # 9e-23: 10^23 is no exact double
    assert _reference(rows[8:9], names) is None and _reference(rows[9:], names) is None
    values = got.merged()["s0.error"].to_pylist()
    assert values == [0.0, 1e-07, 2e+05, -0.3, -0.0, 7e-22, 5.0]
    assert np.signbit(values[4]) and not np.signbit(values[0])


HEADER = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
          "agg iters: 1 validation: 1 graph: 0\n#\n"
          "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
_INFO = "node-a:6899:6899 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE"


def _row(size: int, time: str, wrong: str = "0") -> str:
    return (f"{size:12d}  {size // 4:12d}     float     sum      -1  {time:>7s} {size / 1e9:7.2f} {size / 5e8:7.2f}"
            f"  {wrong:>5s}  {time:>7s} {size / 1e9:7.2f} {size / 5e8:7.2f}  {wrong:>5s}")


def _parse(chunks: list[bytes], min_rows: int):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixedwidth, "MIN_ROWS", min_rows)
        result = parse_nccltests_text(iter(chunks), source("all_reduce_perf.txt"))
    rows = result.rows("iterations")
    return rows, [(i.line, i.reason, i.excerpt) for i in result.issues], result.rows("runs")


def _same_parse(chunks: list[bytes]) -> list[dict]:
    fast, fast_issues, fast_runs = _parse(chunks, 1)
    slow, slow_issues, slow_runs = _parse(chunks, 10 ** 9)
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow):
        assert a.keys() == b.keys()
        for key in a:
            x, y = a[key], b[key]
            assert x == y or (x != x and y != y), (key, a, b)  # NaN equals NaN here
            if isinstance(x, float) and x == 0:
                assert np.signbit(x) == np.signbit(y), (key, a, b)
    assert fast_issues == slow_issues and fast_runs == slow_runs
    return fast


@st.composite
def _log(draw):
    """A header chunk, then table rows (a few odd), NCCL lines and blank lines, cut into chunks
    at random lines; sometimes every line has a launcher prefix."""
    lines = []
    sizes = draw(st.lists(st.integers(0, 40), min_size=1, max_size=60))
    for k in sizes:
        size = 8 << k if k < 34 else 8 << (k - 34)
        roll = draw(st.integers(0, 39))
        if roll == 0:
            lines.append(_row(size, draw(st.sampled_from(_ODD))))
        elif roll == 1:
            lines.append(_row(size, "1.00", draw(st.sampled_from(["N/A", "-1", "x", "12345678"]))))
        elif roll == 2:
            lines.append(_INFO)
        elif roll == 3:
            lines.append(_row(-size, "5.00"))
        elif roll == 4:
            lines.append(_row(size, "1.00").replace("     sum", "        "))
        elif roll == 5:
            lines.append("")
        else:
            lines.append(_row(size, f"{draw(st.floats(0, 2e5, allow_nan=False)):.2f}"))
    prefix = draw(st.sampled_from(["", "[0] ", "0: "]))
    text = [prefix + line for line in lines]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(text)), max_size=3))))
    chunks = [("".join(prefix + h + "\n" for h in HEADER.splitlines())).encode()]
    for a, b in zip([0] + cuts, cuts + [len(text)]):
        if b > a:
            chunks.append("".join(t + "\n" for t in text[a:b]).encode())
    return chunks


@settings(max_examples=150, deadline=None)
@given(_log())
def test_the_parser_reads_the_same_rows_with_or_without_fixed_widths(chunks):
    _same_parse(chunks)


def test_a_row_that_does_not_fit_keeps_its_line_and_the_others_are_converted():
    """One row of a run holds a value wider than its field and one holds N/A: both are read
    by the CSV path with their line numbers; every other row by its widths."""
    rows = [_row(8 << k, f"{10 + k:.2f}") for k in range(36)]
    rows[17] = _row(8 << 17, "12345678.25")  # wider than %7.2f: the line is longer
    rows[23] = _row(8 << 23, "N/A")
    body = "".join(r + "\n" for r in rows).encode()
    names = _names(["size", "count", "type", "redop", "root"], ["time", "algbw", "busbw", "wrong"], 2, [])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixedwidth, "MIN_ROWS", 8)
        got = fixedwidth.fixed_rows(body, names)
    assert got.lines.tolist() == [k for k in range(36) if k not in (17, 23)]
    rows_read = _same_parse([HEADER.encode(), body])
    first = len(HEADER.splitlines()) + 1
    out = [r for r in rows_read if not r["in_place"]]
    assert [r["line"] for r in out] == [first + k for k in range(36)]
    assert out[17]["time_us"] == 12345678.25 and out[23]["time_us"] is None
    assert [r["size_bytes"] for r in out] == [8 << k for k in range(36)]


def test_signs_dots_and_names_fall_back_row_by_row():
    """A negative time and size, nan, an exponent and a blank redop in a run of fixed-width
    rows: those rows reach the parser (and so the impossible-value check) with their lines."""
    rows = [_row(8 << k, f"{10 + k:.2f}") for k in range(30)]
    rows[3] = _row(8 << 3, "-3.00")
    rows[5] = _row(-(8 << 5), "5.00")
    rows[7] = _row(8 << 7, "nan")
    rows[9] = _row(8 << 9, "1e+06")
    body = "".join(r + "\n" for r in rows).encode()
    out = [r for r in _same_parse([HEADER.encode(), body]) if not r["in_place"]]
    first = len(HEADER.splitlines()) + 1
    assert [r["line"] for r in out] == [first + k for k in range(30)]
    assert out[3]["time_us"] == -3.0 and out[5]["size_bytes"] == -(8 << 5) and out[7]["time_us"] != out[7]["time_us"]
    assert out[9]["time_us"] == 1e6




def _text_fixtures() -> list:
    from ncclbot_sweep.parsers.detect import detect_format

    from parser_fixtures import FIELD, REAL

    paths = [p for d in (REAL, FIELD) for p in d.rglob("*.txt")]
    return sorted(p for p in paths if detect_format(p.read_bytes()[:65536]) == "nccl-tests-text")


def _chunks(path, size: int) -> list[bytes]:
    lines = path.read_bytes().splitlines(keepends=True)
    return [b"".join(lines[k:k + size]) for k in range(0, len(lines), size)]


@pytest.mark.parametrize("path", _text_fixtures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_outputs_from_the_field_read_the_same_with_or_without_fixed_widths(path):
    """Real outputs (tests/fixtures/real) and the field shapes (tests/fixtures/field) are too
    small for ingest to try the fast path; cut into chunks (so that the layout is known when a
    chunk is prepared) and with the fast path on for every row group, each row alone and rows
    against one another, they read exactly as through the CSV path alone."""
    for size in (1, 7):
        _same_parse(_chunks(path, size))


def test_most_rows_from_the_field_take_the_fast_path(monkeypatch):
    """The fast path is not only correct but used: rows that print ``N/A`` for the error
    column (``-c 0``), the exponent error column of 2019-2022 builds, negative roots, in-place
    N/A of SendRecv and launcher prefixes all take it; a blank redop, and rows with launcher labels
    glued inside them (torchrun's ``-1[0]``, never printed with fixed widths), are left to the slower paths."""
    fixed_rows = fixedwidth.fixed_rows
    converted = []

    def counting(chunk, names):
        got = fixed_rows(chunk, names)
        converted.append(0 if got is None else len(got.lines))
        return got

    monkeypatch.setattr(fixedwidth, "fixed_rows", counting)
    monkeypatch.setattr(fixedwidth, "MIN_ROWS", 1)
    lines = 0
    for path in _text_fixtures():
        if unglue(path.read_text()) != path.read_text():
            continue
        result = parse_nccltests_text(iter(_chunks(path, 1)), source(path.name))
        lines += len({r["line"] for r in result.rows("iterations")})
    assert lines > 300 and sum(converted) >= 0.95 * lines, (sum(converted), lines)
