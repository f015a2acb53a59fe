"""Table copies of the report and the studies: CSV, Markdown and the HTML the page embeds.

The CSV copy is for scripts (every value as computed); the Markdown and HTML copies are for
people and share one cell format (:func:`cell_text`): about three significant digits,
p-values with two, and a dash for a missing value, explained in a note under the table.
Markdown lines stay within :data:`MARKDOWN_WIDTH` characters, so a copy reads in a terminal
and in a diff (:func:`to_markdown`: constant identity columns said once above the table,
wide tables split into parts that repeat their identity columns, a table too wide even for
that written long). The CSV and Markdown copies keep the snake_case column names that
scripts, the CLI's printed tables and the study commands use; the HTML the page shows
carries the readable headers of :mod:`.headers`.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from .headers import readable_columns

__all__ = ["MARKDOWN_WIDTH", "MISSING", "MISSING_NOTE", "cell_text", "p_value", "to_markdown", "write_table"]

#: The widest line of a Markdown table (copies in ``tables/`` and the CLI's printed tables).
MARKDOWN_WIDTH = 120
#: What a missing value (NaN, None, NA) prints as in Markdown and HTML.
MISSING = "-"
#: The note under a table that shows :data:`MISSING`.
MISSING_NOTE = f"{MISSING}: no value (nothing measured there, or not defined for that row)."

#: Integer columns that name a row rather than count something: kept beside every part of a split table.
_IDENTITY_INTS = frozenset({"nodes", "ranks", "size_bytes", "rank", "seed", "step", "iteration", "trial", "number"})
_P_COLUMN = re.compile(r"p|p_.+|.+_p")


def _missing(value) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def p_value(value) -> str:
    """A p-value as every table and sentence prints it: two significant digits (``0.031``, ``9.5e-07``)."""
    if value is None or pd.isna(value):
        return MISSING
    return f"{float(value):#.2g}".rstrip(".")


def _number(value: float, digits: int = 3) -> str:
    """About ``digits`` significant digits without an exponent between 0.001 and 10^9; integral values as integers."""
    if not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e9:
        decimals = max(digits - 1 - math.floor(math.log10(magnitude)), 0)
        return f"{value:.{decimals}f}"
    return f"{value:.{digits - 1}e}"


def cell_text(value, column: str = "") -> str:
    """One cell as people read it: :func:`p_value` in p-value columns (``p``, ``p_*``, ``*_p``),
    numbers to about three significant digits, :data:`MISSING` for a missing value, text on one line."""
    if isinstance(value, np.generic):
        value = value.item()
    if _missing(value):
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return p_value(value) if _P_COLUMN.fullmatch(column) else _number(float(value))
    return " ".join(str(value).split())


def _texts(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every cell turned into its text (:func:`cell_text`), columns named as strings."""
    return pd.DataFrame({str(c): [cell_text(v, str(c)) for v in frame[c]] for c in frame.columns},
                        columns=[str(c) for c in frame.columns], dtype=object)


def _is_identity(frame: pd.DataFrame, column) -> bool:
    dtype = frame[column].dtype
    if pd.api.types.is_bool_dtype(dtype):
        return False
    return not pd.api.types.is_numeric_dtype(dtype) or str(column) in _IDENTITY_INTS


def _pipe(cells: pd.DataFrame, right: set) -> list[str]:
    """A GitHub pipe table of ``cells`` (text), numbers right-aligned."""
    columns = [str(c) for c in cells.columns]
    widths = [max([len(c), 3, *(len(v) for v in cells[c])]) for c in columns]

    def row(values):
        return "| " + " | ".join(v.rjust(w) if c in right else v.ljust(w)
                                 for c, v, w in zip(columns, values, widths)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if c in right else (":" + "-" * (w + 1))
                          for c, w in zip(columns, widths)) + "|"
    return [row(columns), rule, *(row(values) for values in cells.itertuples(index=False))]


def _width(cells: pd.DataFrame, columns: list[str]) -> int:
    """The line width of a pipe table of ``columns``."""
    return 1 + sum(3 + max([len(c), 3, *(len(v) for v in cells[c])]) for c in columns)


def _parts(cells: pd.DataFrame, keys: list[str], rest: list[str], width: int) -> list[list[str]] | None:
    """``rest`` in order, in as few parts as fit ``width`` beside ``keys``, as even in columns as
    they fit (no part of one column left over); None if one column cannot fit."""
    parts: list[list[str]] = [[]]
    for column in rest:
        if _width(cells, [*keys, *parts[-1], column]) <= width:
            parts[-1].append(column)
        elif parts[-1] and _width(cells, [*keys, column]) <= width:
            parts.append([column])
        else:
            return None
    size = -(-len(rest) // len(parts))
    even = [rest[i:i + size] for i in range(0, len(rest), size)]
    fits = len(even) == len(parts) and all(_width(cells, [*keys, *part]) <= width for part in even)
    return even if fits else parts


def _long(cells: pd.DataFrame, keys: list[str], rest: list[str], right: set, width: int) -> list[str]:
    """The table transposed per row: its ``keys``, then one line per other column (``column``,
    ``value``), a long value wrapped onto lines of its own."""
    room = max(width - _width(cells, keys) - 7 - max(len(c) for c in rest), 20)
    rows = []
    for values in cells.to_dict("records"):
        first = True
        for column in rest:
            for piece in textwrap.wrap(values[column], room) or [""]:
                rows.append({**{k: values[k] if first else "" for k in keys}, "column": column if piece else "",
                             "value": piece})
                first = False
    return _pipe(pd.DataFrame(rows, columns=[*keys, "column", "value"]), right & set(keys))


def to_markdown(frame: pd.DataFrame, *, width: int = MARKDOWN_WIDTH) -> str:
    """``frame`` as Markdown whose lines stay within ``width`` characters.

    Identity columns (text, and integers such as ``nodes`` that name a row) lead each part.
    With two or more rows, an identity column that holds one value throughout is said once
    above the table (``All rows: campaign = demo-live, ...``). A table still too wide is split
    into parts, each repeating the identity columns; one whose single column cannot fit
    beside them is written long (one line per row and column). A missing value is
    :data:`MISSING`, with :data:`MISSING_NOTE` under the table.
    """
    cells = _texts(frame).map(lambda text: text.replace("|", "\\|"))
    columns = list(cells.columns)
    right = {str(c) for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c].dtype)
             and not pd.api.types.is_bool_dtype(frame[c].dtype)}
    lead = []
    for c in frame.columns:
        if not _is_identity(frame, c):
            break
        lead.append(str(c))
    lines: list[str] = []
    if len(frame) >= 2:
        constant = [c for c in lead if cells[c].nunique() == 1 and cells[c].iat[0] != MISSING]
        if constant and len(constant) < len(columns):
            said = ", ".join(f"{c} = {cells[c].iat[0]}" for c in constant)
            lines += [*textwrap.wrap(f"All rows: {said}.", width), ""]
            cells = cells.drop(columns=constant)
            lead = [c for c in lead if c not in constant]
    keys = lead if _width(cells, lead) <= width // 2 else lead[:1]
    rest = [c for c in cells.columns if c not in keys]
    parts = _parts(cells, keys, rest, width) if rest else [[]]
    if parts is None:
        lines += _long(cells, keys, rest, right, width)
    else:
        for i, part in enumerate(parts):
            lines += ([""] if i else []) + _pipe(cells[[*keys, *part]], right)
    if (cells == MISSING).to_numpy().any():
        lines += ["", *textwrap.wrap(MISSING_NOTE, width)]
    return "\n".join(lines) + "\n"


def _html(frame: pd.DataFrame) -> str:
    """The page's copy: readable headers (:mod:`.headers`) over the cells of :func:`cell_text`."""
    shown = _texts(frame)
    shown.columns = readable_columns(frame).columns
    return shown.to_html(index=False, border=0, classes="t")


def write_table(frame: pd.DataFrame, out: Path, *, name: str) -> dict:
    """Write ``<name>.csv`` and ``<name>.md`` into ``out/tables``; return what the template needs
    (``note``: :data:`MISSING_NOTE` when the table shows a missing value, else None)."""
    folder = out / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / f"{name}.csv", index=False)
    (folder / f"{name}.md").write_text(to_markdown(frame))
    missing = bool(len(frame)) and bool(frame.isna().to_numpy().any())
    return {"name": name, "html": _html(frame), "csv": f"tables/{name}.csv", "md": f"tables/{name}.md",
            "rows": len(frame), "columns": len(frame.columns), "note": MISSING_NOTE if missing else None}
