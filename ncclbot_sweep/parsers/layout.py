"""nccl-tests table rows: which token is which column, and what pieces of a row look like.

A table's layout comes from its column header (``size count type redop root time algbw busbw
#wrong ...``, any generation) or, in fragments without one, from its first row
(:meth:`Layout.infer`). Rows reach the slow path of :mod:`~ncclbot_sweep.parsers.nccltests_text`
in pieces (nccl-tests prints a row in three writes, and whatever else is printed meanwhile
lands between them): :func:`starts_row`, :func:`is_piece` and :func:`row_trouble` say what a
piece is, and :data:`OVER_THRESHOLD` and :data:`EMBEDDED_LOG` what else a row may carry.
"""

from __future__ import annotations

import dataclasses
import re

from ncclbot_sweep.parsers import textblock

__all__ = ["Layout", "is_num", "is_int", "is_cell", "starts_row", "is_piece", "row_trouble", "OVER_THRESHOLD",
           "EMBEDDED_LOG"]

# Column names as printed, normalised to ours.
_NAME_MAP = {
    "bytes": "size", "size": "size", "n": "count", "count": "count", "type": "type",
    "op": "redop", "redop": "redop", "root": "root", "time": "time", "algbw": "algbw",
    "busbw": "busbw", "#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error",
    "timestamp": "timestamp",
}


@dataclasses.dataclass
class Layout:
    """Which token of a data row is which column.

    ``prefix`` are the leading columns (``size count type [redop] [root]``, ``timestamp``
    first with ``-S``); ``sides`` are the out-of-place and in-place groups, each starting
    with ``time``. ``time_scale`` converts the printed unit to microseconds.
    """

    prefix: list[str]
    sides: list[list[str]]
    time_scale: float = 1.0
    #: Trailing columns: ``-S`` prints a timestamp as two tokens (date and time).
    suffix: list[str] = dataclasses.field(default_factory=list)

    def without_redop(self) -> Layout | None:
        """This layout without its ``redop`` column (rows that leave it blank), or None."""
        if "redop" not in self.prefix:
            return None
        return Layout([c for c in self.prefix if c != "redop"], [list(s) for s in self.sides],
                      self.time_scale, list(self.suffix))

    @property
    def ncols(self) -> int:
        return len(self.prefix) + sum(len(s) for s in self.sides) + len(self.suffix)

    @classmethod
    def from_header(cls, tokens: list[str]) -> Layout | None:
        names = [_NAME_MAP.get(t.lower(), t.lower()) for t in tokens]
        if "size" not in names or "time" not in names:
            return None
        suffix: list[str] = []
        if names[-1] == "timestamp":
            names, suffix = names[:-1], ["ts_date", "ts_time"]
        if names[0] == "timestamp":
            names = ["ts_date", "ts_time"] + names[1:]
        starts = [i for i, n in enumerate(names) if n == "time"]
        prefix = names[: starts[0]]
        sides = [names[a:b] for a, b in zip(starts, starts[1:] + [len(names)])]
        return cls(prefix, sides, suffix=suffix)

    @classmethod
    def infer(cls, tokens: list[str]) -> Layout | None:
        """Guess the layout from one data row (fragments without a header)."""
        if len(tokens) < 6 or not tokens[0].isdigit() or not tokens[1].isdigit() or is_num(tokens[2]):
            return None
        prefix = ["size", "count", "type"]
        i = 3
        if i < len(tokens) and not is_num(tokens[i]) and tokens[i] != "N/A":
            prefix.append("redop")
            i += 1
        if i < len(tokens) and is_int(tokens[i]) and len(tokens) - i - 1 in (8, 6, 4, 2) and "." not in tokens[i]:
            # A bare integer before the times is the root (times carry a decimal point).
            prefix.append("root")
            i += 1
        rest = len(tokens) - i
        if rest < 3:
            return None
        nside = 2 if rest % 2 == 0 and rest >= 6 else 1
        width = rest // nside
        side = ["time", "algbw", "busbw"]
        if width >= 4:
            last = tokens[i + 3]
            side.append("error" if ("e" in last.lower() and last != "N/A") or "." in last else "wrong")
        side += [f"extra{k}" for k in range(width - len(side))]
        return cls(prefix, [list(side) for _ in range(nside)])


def is_num(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def is_int(tok: str) -> bool:
    return tok.lstrip("-").isdigit()


def is_cell(tok: str) -> bool:
    """A token a row may hold after its size and count: a number, ``N/A`` or a name."""
    return is_num(tok) or tok == "N/A" or tok.isalnum()


def starts_row(tokens: list[str]) -> bool:
    """The first piece of a row: size, count, then the type's name (more may follow)."""
    return len(tokens) > 3 and is_int(tokens[0]) and is_int(tokens[1]) and not is_num(tokens[2])


def is_piece(tokens: list[str]) -> bool:
    """A later piece of a row: numbers (or ``N/A``) only."""
    return bool(tokens) and all(is_num(t) or t in textblock.NULL_TEXT for t in tokens)


def row_trouble(tokens: list[str], ncols: int) -> str | None:
    """Why a line that looks like (part of) a table row could not be one; None if it does not."""
    if len(tokens) >= 2 and is_int(tokens[0]) and is_int(tokens[1]):
        if len(tokens) < ncols:
            return f"data row cut short: {len(tokens)} of {ncols} fields"
        if len(tokens) > ncols:
            return f"data row has {len(tokens)} fields, the table header has {ncols}"
        return "data row has a field that is not a number where the table header expects one"
    if len(tokens) >= 3 and is_piece(tokens):
        return "numbers without a size and count: the rest of a table row whose start is not in the output"
    return None


#: rccl-tests marks an error beyond its threshold with ``*`` after the value (its footer says
#: so: "Errors with asterisks indicate errors that have exceeded the maximum threshold").
OVER_THRESHOLD = re.compile(r"(?<=[\d.A])\*(?=\s|$)")
#: An NCCL log line (``host:pid:tid [dev] NCCL INFO ...``) that starts inside another line;
#: the host must start with a letter, so that the row's last number is not taken for it.
EMBEDDED_LOG = re.compile(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] (?:[\d.]+ \S+ )?NCCL (?:INFO|WARN|TRACE)")
