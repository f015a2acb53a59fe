"""What every parser shares: the result container, issues for quarantine, number readers.

Parsers are pure: they map text plus source metadata to rows and never
touch the file system. Anything they cannot interpret becomes an :class:`Issue` with a line
number and a reason; ingest writes those to the ``quarantine`` table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "Issue",
    "ParseResult",
    "SourceInfo",
    "nccl_version_from_code",
    "to_float",
    "to_int",
    "FLOAT_RE",
    "normalize_chunks",
    "iter_lines",
    "whole_lines",
    "MAX_LINE_BYTES",
]

#: A decimal or %g number, as a regex fragment (never matches "-", "." or "e" alone).
FLOAT_RE = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def to_float(value) -> float | None:
    """``float(value)``, or None for anything that is not a number (corrupt input never raises).

    NaN and infinities come back as they are: :mod:`ncclbot_sweep.ingest.rowcheck` quarantines them
    with their line where they would be stored.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def to_int(value) -> int | None:
    """An integer field (a fraction is cut), or None when absent or not a number: text, NaN, an
    infinite or huge float (``1e999``, ``inf * 1000``, a float beyond int64).

    Every integer a parser takes from a number it did not write itself goes through here, so
    no input makes ``int()`` raise. An integer too large for its column comes back as it is:
    :func:`ncclbot_sweep.ingest.rowcheck.fit` quarantines it with its line where it would be stored.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        # not through float (a nanosecond timestamp has more digits than a double), and not
        # thousands of digits (int() refuses them)
        return int(value) if len(value.strip()) <= 4000 else None
    out = to_float(value)
    if out is None or not math.isfinite(out) or abs(out) >= 2**63:
        return None
    return int(out)


@dataclasses.dataclass(frozen=True)
class Issue:
    """A part of a file a parser could not use: where, why, and a short excerpt."""

    line: int | None
    reason: str
    excerpt: str = ""


@dataclasses.dataclass
class SourceInfo:
    """What a parser knows about its input besides the text.

    ``meta`` is the step's ``step.json`` when the file came from a campaign step folder
    (fabric, arm, nodes, campaign, ...), else empty. ``run_id`` is the id the first run of
    the file gets; later runs in the same file get ``<run_id>.<k>``.
    """

    path: str
    sha256: str
    run_id: str
    fabric: str = "unknown"
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def run_id_for(self, index: int) -> str:
        return self.run_id if index == 0 else f"{self.run_id}.{index}"


@dataclasses.dataclass
class ParseResult:
    """Rows per table (lists of dicts or Arrow tables), plus issues and an ok/partial flag."""

    tables: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    issues: list[Issue] = dataclasses.field(default_factory=list)
    #: True when nothing usable came out of the file (it goes to quarantine as a whole).
    unusable: bool = False

    def add(self, table: str, rows: Any) -> None:
        self.tables.setdefault(table, []).append(rows)

    def rows(self, table: str) -> list[dict]:
        """All rows of ``table`` as dicts (tests and small files; big files stream instead)."""
        out: list[dict] = []
        for item in self.tables.get(table, []):
            if isinstance(item, dict):
                out.append(item)
            elif isinstance(item, list):
                out.extend(item)
            else:  # an Arrow table
                out.extend(item.to_pylist())
        return out

    def count(self, table: str) -> int:
        total = 0
        for item in self.tables.get(table, []):
            total += 1 if isinstance(item, dict) else (len(item) if isinstance(item, list) else item.num_rows)
        return total

    def merge(self, other: ParseResult) -> None:
        for name, items in other.tables.items():
            self.tables.setdefault(name, []).extend(items)
        self.issues.extend(other.issues)


def nccl_version_from_code(code: int | str | None) -> str | None:
    """NCCL's integer version code to ``X.Y.Z`` (``22907`` -> ``2.29.7``; ``2708`` -> ``2.7.8``)."""
    if code is None:
        return None
    try:
        value = int(code)
    except (TypeError, ValueError):
        return None
    if value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    if value >= 1000:
        return f"{value // 1000}.{value // 100 % 10}.{value % 100}"
    return None


_BOM = b"\xef\xbb\xbf"


def normalize_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Byte chunks with ``\\n`` line ends only and no UTF-8 BOM, for every line-based parser.

    Files from the field end lines with CR LF (Windows editors) or CR alone (old Mac tools,
    some terminal captures); without this a CR-only file is one long line and loses every
    row. A CR at the end of a chunk is held back until the next one shows whether a LF
    follows, so line numbers never depend on where chunks are cut.
    """
    held = b""
    first = True
    for chunk in chunks:
        if first and chunk:
            chunk = chunk[len(_BOM):] if chunk.startswith(_BOM) else chunk
            first = False
        chunk = held + chunk
        held = b""
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk, held = chunk[:-1], b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if chunk:
            yield chunk
    if held:
        yield b"\n"


#: The longest line a line-based parser reads. nccl-tests rows and NCCL log lines are a few
#: hundred bytes; a longer "line" is binary data or a file without line ends, and holding it
#: whole would grow memory with the file.
MAX_LINE_BYTES = 1 << 20


def whole_lines(chunks: Iterable[bytes], issues: list[Issue], *, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Normalised chunks (:func:`normalize_chunks`) cut at line ends, no line longer than ``limit``.

    Every chunk but the last ends with a newline. A longer line is left out, an empty line
    standing in its place so that later line numbers stay right, and an issue gives its line
    number, its length and its first bytes; memory stays within about ``limit`` plus a chunk
    whatever the input.
    """
    bound = _LineBound(issues, limit)
    for chunk in normalize_chunks(chunks):
        yield from bound.feed(chunk)
    yield from bound.close()


class _LineBound:
    """:func:`whole_lines`' state: the start of the open line, or how much of a long one was left out."""

    def __init__(self, issues: list[Issue], limit: int) -> None:
        self.issues, self.limit = issues, limit
        self.held = b""
        #: Bytes of the open line left out once it is longer than the limit (else None), and its start.
        self.dropped: int | None = None
        self.head = b""
        #: Newlines handed on so far (the open line's number is one more).
        self.lines = 0

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        pos = 0
        while pos < len(chunk):
            if self.dropped is not None:
                end = chunk.find(b"\n", pos)
                self.dropped += (len(chunk) if end < 0 else end) - pos
                if end < 0:
                    return
                self._report()
                pos = end  # this newline ends the empty line that stands in for the long one
                continue
            end = chunk.find(b"\n", pos, pos + self.limit - len(self.held) + 1)
            if end < 0:
                if len(chunk) - pos + len(self.held) <= self.limit:
                    self.held += chunk[pos:]
                    return
                self.head, self.dropped = (self.held + chunk[pos:pos + 200])[:200], len(self.held)
                self.held = b""
                continue
            stop = self._short_lines_end(chunk, end)
            piece = self.held + chunk[pos:stop]
            self.held = b""
            self.lines += piece.count(b"\n")
            yield piece
            pos = stop

    def _short_lines_end(self, chunk: bytes, end: int) -> int:
        """Where the run of lines that starts after ``end`` (a newline) stops being short: just
        after the last newline of the chunk, or at the start of a line longer than the limit.
        Hops of up to ``limit`` bytes, so a chunk of short lines costs a few searches."""
        last = chunk.rfind(b"\n")
        while last - end > self.limit:
            hop = chunk.rfind(b"\n", end + 1, end + self.limit + 2)
            if hop < 0:
                return end + 1
            end = hop
        return last + 1

    def _report(self) -> None:
        why = f"line of {self.dropped} bytes, longer than the {self.limit} bytes a line may hold: not read"
        self.issues.append(Issue(self.lines + 1, why, self.head.decode("utf-8", "replace")))
        self.dropped, self.head = None, b""

    def close(self) -> Iterator[bytes]:
        if self.dropped is not None:
            self._report()
        elif self.held:
            yield self.held


def iter_lines(chunks: Iterable[bytes], issues: list[Issue]) -> Iterator[str]:
    """Decoded lines (without their newline) of :func:`whole_lines`, streamed."""
    tail = b""
    for chunk in whole_lines(chunks, issues):
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            yield line.decode("utf-8", "replace")
    if tail:
        yield tail.decode("utf-8", "replace")
