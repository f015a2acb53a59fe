"""The ingest hot path (parsers/textblock.py) against the slow paths it stands in for: the CSV
form is the collapsed text with commas for the blanks, Arrow's CSV reader on it gives what
the whitespace split gives, and the boring-line filter decides as it would on the text."""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ncclbot_sweep.parsers import textblock
from ncclbot_sweep.parsers.nccl_log import INFO_OF_INTEREST
from ncclbot_sweep.parsers.nccltests_text import parse_nccltests_text

from parser_fixtures import FIELD, source

_BLANK_RUN = st.text(alphabet=" \t\r", min_size=1, max_size=4)
# Tokens hold anything but blanks, newlines and commas (lines with commas never reach the
# CSV reader): digits, signs, letters, control and non-ASCII characters.
_TOKEN = st.text(alphabet=st.characters(blacklist_characters=" \t\r\n,", blacklist_categories=("Cs",)),
                 min_size=1, max_size=8)


@st.composite
def _line(draw) -> tuple[str, list[str]]:
    tokens = draw(st.lists(_TOKEN, max_size=6))
    text = draw(st.one_of(st.just(""), _BLANK_RUN))
    for k, token in enumerate(tokens):
        text += (draw(_BLANK_RUN) if k else "") + token
    return text + draw(st.one_of(st.just(""), _BLANK_RUN)), tokens


@settings(max_examples=300, deadline=None)
@given(st.lists(_line(), min_size=1, max_size=12))
def test_csv_form_is_each_line_tokens_joined_by_commas(lines):
    chunk = "".join(text + "\n" for text, _ in lines).encode("utf-8")
    form, starts, ends = textblock.csv_form(chunk)
    assert [form[a:b] for a, b in zip(starts, ends)] == form.split(b"\n")[:-1]
    form = form.decode("utf-8").split("\n")
    assert form[-1] == "" and len(form) == len(lines) + 1
    for (text, tokens), got in zip(lines, form):
        assert got == ",".join(tokens)
        # What the parser reads for a line is its CSV form with the commas read as spaces.
        assert textblock.collapse_line(text) == " ".join(tokens) == got.replace(",", " ")


_PREFIX, _SIDES = ["size", "count", "type", "redop", "root"], [["time", "algbw", "busbw", "wrong"]] * 2
_INT = st.integers(-10, 10**12).map(str)
_FLOAT = st.one_of(st.floats(0, 1e7, allow_nan=False).map(lambda v: f"{v:.2f}"),
                   st.floats(0, 1e7, allow_nan=False).map(lambda v: f"{v:g}"))
# Mostly what nccl-tests prints, now and then what it prints for no value or something odd.
_ODD = st.sampled_from(["N/A", "-", "nan", "inf", "1e+06", "-0.5", "12.", "x"])


def _cell(kind):
    return st.integers(0, 39).flatmap(lambda k: _ODD if k == 0 else kind)


@st.composite
def _row(draw) -> str:
    cells = [draw(st.integers(0, 2**40).map(str)), draw(_cell(_INT)), draw(st.sampled_from(["float", "half", "N/A"])),
             draw(st.sampled_from(["sum", "prod", "N/A"])), draw(_cell(_INT))]
    cells += [draw(_cell(_INT if k % 4 == 3 else _FLOAT)) for k in range(8)]
    return "".join(draw(_BLANK_RUN) + cell for cell in cells)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x == y or (isinstance(x, float) and isinstance(y, float)
                                               and math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


@settings(max_examples=300, deadline=None)
@given(st.lists(_row(), min_size=1, max_size=8))
def test_csv_rows_read_what_the_whitespace_split_reads(rows):
    csv = textblock.csv_form("".join(r + "\n" for r in rows).encode())[0]
    fast = textblock.csv_rows(csv, len(rows), _PREFIX, _SIDES)
    slow = textblock.convert_rows(pa.array([textblock.collapse_line(r) for r in rows], pa.large_string()),
                                  _PREFIX, _SIDES)
    if fast is None:
        return  # the parser then uses the whitespace split: nothing to compare
    assert slow is not None and set(fast) == set(slow)
    for name in fast:
        assert _same(fast[name].to_pylist(), slow[name].to_pylist()), name


_INFO_WORDS = ["NCCL", "INFO", "WARN", "Bytes", "->", "Algo", "1", "proto", "2", "time", "23.3", "NCCL version",
               "2.21.5", "Channel", "00/02", ":", "0", "|", "opCount", "nRanks", "nranks", "coll", "channels",
               "Init", "COMPLETE", "set by environment", "Enabled NCCL Func/Proto/Algo Matrix", "comm", "0x1",
               "node-a:1:1", "[0]", "/Plugin", "lgorithm/protocol"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_INFO_WORDS), max_size=9), min_size=1, max_size=10), st.data())
def test_boring_lines_are_found_in_csv_form_as_in_the_text(lines, data):
    texts = ["".join(data.draw(_BLANK_RUN) + word for word in words) + data.draw(st.sampled_from(["", " ", "\t "]))
             for words in lines]
    chunk = "".join(t + "\n" for t in texts).encode()
    form, _, ends = textblock.csv_form(chunk)
    got = textblock.boring_info_lines(form, ends, np.ones(len(texts), dtype=bool), INFO_OF_INTEREST)
    collapsed = [textblock.collapse_line(t) for t in texts]
    assert got.tolist() == ["NCCL INFO" in c and re.search(INFO_OF_INTEREST, c) is None for c in collapsed]


TABLE = """# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    10.00    0.00    0.00       0    11.00    0.00    0.00       0
16             4     float     sum      -1    12.00    0.00    0.00       0    13.00    0.00    0.00       0
          32             8\tfloat     sum      -1    14.00    0.00    0.00       0    15.00    0.00    0.00       0\t  
          64            16     float     sum      -1    1,6.0    0.00    0.00       0    17.00    0.00    0.00       0
         128            32     float     sum      -1    18.00    0.01    0.01       0    19.00    0.01    0.01     N/A   
# Out of bounds values : 0 OK
"""


def test_indents_trailing_blanks_tabs_and_a_comma_in_one_table():
    """Rows without indent, with trailing blank runs or tabs are rows; the row with a comma is
    quarantined with its line and the other rows of its chunk are kept."""
    result = parse_nccltests_text(TABLE, source())
    rows = [r for r in result.rows("iterations") if not r["in_place"]]
    assert [(r["size_bytes"], r["time_us"], r["line"]) for r in rows] == [
        (8, 10.0, 4), (16, 12.0, 5), (32, 14.0, 6), (128, 18.0, 8)]
    assert [r["wrong"] for r in result.rows("iterations") if r["in_place"]] == [0, 0, 0, None]
    assert [(i.line, "not a number" in i.reason) for i in result.issues] == [(7, True)]


def test_blank_redop_rows_with_trailing_blanks_are_all_read():
    """Trailing blank runs leave nothing (the old blank collapse kept one, which made every
    row of a blank-redop table one field too long)."""
    text = (FIELD / "redop-blank-allgather-16rank.txt").read_text()
    padded = "\n".join(line + "   " if line.strip()[:1].isdigit() else line for line in text.split("\n"))
    result = parse_nccltests_text(padded, source())
    assert len(result.rows("iterations")) == 16 and not result.issues
    assert {r["redop"] for r in result.rows("iterations")} == {None}


def test_a_comma_in_a_blank_redop_table_keeps_every_row():
    """A row with a comma of its own skips the CSV reader; its block still gets the header's
    layout without redop, as on the CSV path."""
    text = (FIELD / "redop-blank-allgather-16rank.txt").read_text().replace("  float  ", "  flo,at  ", 1)
    result = parse_nccltests_text(text, source())
    rows = result.rows("iterations")
    assert len(rows) == 16 and not result.issues
    assert sorted({r["dtype"] for r in rows}) == ["flo,at", "float"] and {r["redop"] for r in rows} == {None}
