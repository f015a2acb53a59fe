"""nccl-tests text output (stdout) -> ``runs`` and ``iterations`` rows, streaming.

Handles every generation of the format (see ``tests/fixtures/real/INDEX.md``): the 2017
layout without ``#`` (``bytes N type op``, times in ms), the 2019-2022 per-collective columns
with the float ``error`` column, the 2.13+ unified columns with ``#wrong``, and the 2.17-2.19
additions (version line, ``Collective test starting/concluded``, ``unalign``, ``-I`` extra
columns, ``-S`` timestamps, ``-N`` cycles as repeated tables). Launcher prefixes, NCCL
INFO/WARN lines and shell noise may be interleaved anywhere; lines whose leading ``#`` was
stripped by a document renderer are recognised too.

The table layout comes from the column header when there is one, else it is inferred from
the first data row. Rows are converted in blocks: those printed with fixed widths by byte
arithmetic (:mod:`~ncclbot_sweep.parsers.fixedwidth`), the others by
:mod:`~ncclbot_sweep.parsers.textblock` (each chunk put in CSV form with numpy, the rows read
by Arrow's CSV reader; with
:meth:`TextParser.feed_all` worker threads do this for the next chunks while the main
thread handles the few other lines and the batches); a block that does not fit the layout
falls back to Arrow's whitespace split, then to row-by-row parsing, and a row that still
does not fit becomes an :class:`Issue` with its line number.
Memory stays bounded: rows leave the parser in batches of at most ``batch_rows`` through
``on_rows``; runs and issues (small) are returned by :meth:`TextParser.close`.

Row order in the batches: for each block, the out-of-place rows, then the in-place rows.
Runs in one file get ``run_id`` ``<id>``, ``<id>.1``, ... (:meth:`SourceInfo.run_id_for`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ncclbot_sweep.names import BINARY_COLLECTIVE, collective_in_text
from ncclbot_sweep.outcomes import mentions_invalid_arm
from ncclbot_sweep.parsers import fixedwidth, textblock
from ncclbot_sweep.parsers.common import (
    FLOAT_RE,
    Issue,
    ParseResult,
    SourceInfo,
    nccl_version_from_code,
    normalize_chunks,
)
from ncclbot_sweep.parsers.detect import HEADER_RE
from ncclbot_sweep.parsers.footer import ELISION_RE, FooterCheck
from ncclbot_sweep.parsers.infer import infer_collective
from ncclbot_sweep.parsers.layout import (
    EMBEDDED_LOG,
    OVER_THRESHOLD,
    Layout,
    is_cell,
    is_int,
    is_piece,
    row_trouble,
    starts_row,
)
from ncclbot_sweep.parsers.library import (
    RCCL_TESTS_ONLY,
    TESTS_VERSION_RE,
    VERSION_RE,
    library_of_gpu,
    library_of_version,
)
from ncclbot_sweep.parsers.nccl_log import INFO_OF_INTEREST
from ncclbot_sweep.parsers.prefixes import PREFIX_RE_B, strip_prefix, unglue

__all__ = ["TextParser", "parse_nccltests_text", "collective_from_name"]

log = logging.getLogger(__name__)

#: Header fields, in both spellings: ``nThread 1 nGpus 8 ... warmup iters: 5`` and old
#: rccl-tests' ``nThreads: 1 nGpus: 4 nRanks: 1 ... warmupIters: 5``.
_HEADER_KEYS = {
    "nthread": re.compile(r"nThreads?:?\s+(\d+)"),
    "ngpus": re.compile(r"nGpus:?\s+(\d+)"),
    "min_bytes": re.compile(r"minBytes:?\s+(\d+)"),
    "max_bytes": re.compile(r"maxBytes:?\s+(\d+)"),
    "step": re.compile(r"step:\s*(\S+)"),
    "warmup_iters": re.compile(r"warmup ?[iI]ters:\s*(\d+)"),
    "iters": re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)"),
    "agg_iters": re.compile(r"agg iters:\s*(\d+)"),
    "validation": re.compile(r"validation:\s*(\d+)"),
    "graph": re.compile(r"graph:\s*(\d+)"),
    "unalign": re.compile(r"unalign:\s*(\d+)"),
}
_RANK_RE = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_COLL_TEST_RE = re.compile(r"Collective test (starting|concluded):\s*(\S+)")
_BINARY_RE = re.compile(r"\b(" + "|".join(sorted(BINARY_COLLECTIVE, key=len, reverse=True)) + r")(?:_mpi)?\b")
_FAILURE_RE = re.compile(r"Test (?:CUDA |HIP |NCCL |RCCL |NVML )?failure\b.*")
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
#: The footer's number in any spelling printf gives a non-number (glibc ``-nan``, ``inf``; ``NaN``
#: elsewhere): parsed, then quarantined by ingest as impossible, never silently null.
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*(" + FLOAT_RE + r"|[-+]?(?:nan|inf(?:inity)?)\b)", re.I)

@dataclasses.dataclass
class _Run:
    """What the parser has learnt about the current run so far."""

    index: int
    first_line: int
    header: dict[str, Any] = dataclasses.field(default_factory=dict)
    header_text: str | None = None
    ranks: dict[int, tuple] = dataclasses.field(default_factory=dict)
    rank_lines: int = 0
    binary: str | None = None
    nccl_version: str | None = None
    nccl_tests_version: str | None = None
    #: ``nccl`` or ``rccl`` (:mod:`~ncclbot_sweep.parsers.library`); RCCL's marks win.
    library: str | None = None
    failures: list[str] = dataclasses.field(default_factory=list)
    oob: int | None = None
    oob_failed: bool = False
    avg_busbw: float | None = None
    #: The line of the ``# Avg bus bandwidth`` footer (where an impossible value is reported).
    avg_busbw_line: int | None = None
    #: The stored rows' bus bandwidths, for whether the footer is their mean.
    footer: FooterCheck = dataclasses.field(default_factory=FooterCheck)
    rows: int = 0
    cycle: int = 0
    last_size: int = -1
    concluded: bool = False
    duplicate_headers: int = 0
    invalid_arm: bool = False
    dtype: str | None = None
    redop: str | None = None
    #: The simulated fabric's stamp on the version line (:data:`~ncclbot_sweep.names.SIMULATOR`).
    simulator: str | None = None
    #: ``(collective, ranks)`` when nothing names the binary: the collective NCCL's COLL lines
    #: call (``opCount``), else read from the rows (:mod:`~ncclbot_sweep.parsers.infer`);
    #: False when tried and undecided.
    inferred: tuple[str, int | None] | bool | None = None


_BATCH_ROWS = 50_000


class TextParser:
    """Streaming parser: call :meth:`feed` with bytes as they arrive, then :meth:`close`.

    ``on_rows(table)`` receives ``iterations`` batches (Arrow tables in the dataset schema's
    column names); runs and issues are kept (they are small) and returned by :meth:`close`.
    """

    def __init__(self, source: SourceInfo, *, on_rows: Callable[[pa.Table], None] | None = None,
                 batch_rows: int = _BATCH_ROWS) -> None:
        self.source = source
        self.result = ParseResult()
        self._on_rows = on_rows or (lambda t: self.result.add("iterations", t))
        self._batch_rows = batch_rows
        self._tail = b""
        self._lineno = 0
        self._run: _Run | None = None
        self._runs: list[_Run] = []
        self._layout: Layout | None = None
        # Data rows waiting for conversion (see :meth:`_queue`) and their line numbers.
        self._pend_blocks: list[list | str] = []
        self._pend_nums: list[np.ndarray] = []
        self._pend_rows = 0
        #: Called with every line that is not a table row (the NCCL log parser listens here).
        self.on_other: Callable[[str, int], None] | None = None
        #: The collective the NCCL COLL lines seen so far call (set with ``on_other``).
        self.coll_hint: Callable[[], str | None] = lambda: None
        self._prefixed = False
        self._units_next = False
        self._pending_binary: str | None = None

    # ---------------------------------------------------------------- input
    def feed(self, data: bytes) -> None:
        """Parse as many whole lines of ``data`` (plus any carried-over tail) as there are."""
        whole = self._whole_lines(data)
        if whole is not None:
            self._consume(self._prepare(whole, self._prefix_state(whole), self._layout))

    def feed_all(self, chunks: Iterable[bytes], *, workers: int = 1) -> None:
        """Feed many chunks, preparing the next ones in worker threads while this one is parsed.

        The preparation (prefix removal, CSV form, line classification and, once the layout
        is known, row conversion) is numpy and Arrow work that mostly releases the GIL, so
        the cores work on the next chunks while this thread handles the other lines and the
        batches (which ingest writes as they come). Same result as calling :meth:`feed` on
        each chunk; at most ``workers + 1`` chunks are in memory at once.
        """
        import collections
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="ncclbot-ingest") as pool:
            pending: collections.deque = collections.deque()
            for data in chunks:
                whole = self._whole_lines(data)
                if whole is None:
                    continue
                # Workers convert a chunk's rows with the layout known now; the main thread
                # uses that only if the layout is still the same when it gets there.
                pending.append(pool.submit(self._prepare, whole, self._prefix_state(whole), self._layout))
                if len(pending) > max(1, workers):
                    self._consume(pending.popleft().result())
            while pending:
                self._consume(pending.popleft().result())

    def close(self) -> ParseResult:
        """Finish the last line and the last run; return runs, issues (and rows if collected)."""
        if self._tail:
            whole = self._tail + b"\n"
            self._tail = b""
            self._consume(self._prepare(whole, self._prefix_state(whole), self._layout))
        self._flush()
        # A "run" with no header, no rows and no Rank line is only words that
        # looked like ours (documentation, a failure message quoted in a mail): not a run.
        runs = [r for r in self._runs if r.header_text or r.rows or r.ranks]
        for run in runs:
            self.result.add("runs", self._run_row(run))
        if not runs:
            self.result.unusable = True
            self.result.issues.append(Issue(None, "no nccl-tests header or table found"))
        return self.result

    def _whole_lines(self, data: bytes) -> bytes | None:
        cut = data.rfind(b"\n")
        if cut < 0:
            self._tail += data
            return None
        # One copy at most: the carried-over tail joined to this chunk's whole lines.
        whole = b"".join((self._tail, memoryview(data)[: cut + 1])) if self._tail or cut + 1 < len(data) else data
        self._tail = data[cut + 1:]
        return whole

    def _prefix_state(self, chunk: bytes) -> bool:
        """Launcher prefixes, once seen, are stripped from every later chunk."""
        if not self._prefixed and PREFIX_RE_B.search(chunk, 0, 65536):
            self._prefixed = True
        return self._prefixed

    @staticmethod
    def _prepare(chunk: bytes, prefixed: bool, layout: Layout | None) -> _Prepared:
        """Pure, thread-safe: strip prefixes, put the lines in CSV form, mark table rows;
        with a known ``layout``, also convert all of the chunk's rows at once (rows printed
        with fixed widths by byte arithmetic, the others by Arrow's CSV reader)."""
        if prefixed:
            chunk = PREFIX_RE_B.sub(b"", chunk)
        if not chunk.isascii():
            chunk = chunk.decode("utf-8", "replace").encode("utf-8")
        fixed = None
        if layout is not None and b"," not in chunk:
            fixed = fixedwidth.fixed_rows(chunk, _column_names(layout))
        form, starts, ends = textblock.csv_form(chunk if fixed is None else fixed.rest())
        buf = np.frombuffer(form, dtype=np.uint8)
        first = buf[starts]
        second = buf[np.minimum(starts + 1, len(buf) - 1)]
        # A row starts with its size; a negative size ("-8") is a row too, so that it reaches
        # the impossible-value check with its line instead of vanishing as a comment.
        is_row = ((first >= 48) & (first <= 57)) | ((first == 45) & (second >= 48) & (second <= 57))
        if fixed is not None:
            is_row[fixed.lines] = True
        prepared = _Prepared(form, starts, ends, is_row, np.flatnonzero(is_row), fixed=fixed)
        if b"," in chunk:
            text = np.frombuffer(chunk, dtype=np.uint8)
            prepared.text, prepared.text_ends = chunk, np.flatnonzero(text == 10)
            prepared.own = np.zeros(len(ends), dtype=bool)
            prepared.own[np.searchsorted(prepared.text_ends, np.flatnonzero(text == _COMMA))] = True
        prepared.skip = textblock.boring_info_lines(form, ends, ~is_row, INFO_OF_INTEREST)
        if prepared.own is not None:
            # Lines with commas of their own: decided on their text.
            for i in np.flatnonzero(prepared.own & ~is_row).tolist():
                line = prepared.line(i)
                prepared.skip[i] = "NCCL INFO" in line and _INTERESTING.search(line) is None
        row_lines = prepared.row_lines
        if layout is not None and len(row_lines) and prepared.csv_ok:
            # Rows holding commas of their own never reach the CSV reader.
            rest = row_lines if fixed is None else row_lines[~fixed.mask[row_lines]]
            cols: dict[str, Any] | None = None
            if len(rest):
                csv = textblock.join_lines(form, starts, ends, rest, transient=True)
                cols = textblock.csv_rows(csv, len(rest), layout.prefix, layout.sides, layout.suffix)
            if fixed is not None and (cols is not None or not len(rest)):
                cols = fixed.merged((rest, cols) if len(rest) else None)
            if cols is not None:
                prepared.layout, prepared.cols = layout, cols
        return prepared

    def _consume(self, prepared: _Prepared) -> None:
        """Queue the chunk's table rows in runs; hand every other line (but the boring NCCL
        INFO ones) to :meth:`_other`, in order."""
        n = len(prepared.ends)
        if n == 0:
            return
        base = self._lineno
        self._lineno += n
        row_lines = prepared.row_lines
        events = np.flatnonzero(~prepared.is_row & ~prepared.skip)
        done = 0
        for line, cut in zip(events.tolist(), np.searchsorted(row_lines, events).tolist()):
            if cut > done:
                self._rows(prepared, done, cut, base)
                done = cut
            self._other(prepared.line(line), base + line + 1)
        if done < len(row_lines):
            self._rows(prepared, done, len(row_lines), base)

    def _rows(self, prepared: _Prepared, first: int, stop: int, base: int) -> None:
        """The chunk's rows ``first``..``stop``: one by one through :meth:`_other` while no
        layout is known (the first may tell it), then queued at once."""
        while first < stop and self._layout is None:
            line = int(prepared.row_lines[first])
            self._other(prepared.line(line), base + line + 1)
            first += 1
        if first < stop:
            self._queue(prepared, first, stop, base + 1 + prepared.row_lines[first:stop])

    def _queue(self, prepared: _Prepared | str, first: int, stop: int, nums: np.ndarray) -> None:
        """Queue rows ``first``..``stop`` of a chunk, as ``[prepared, first, stop, converted]``
        (consecutive ones merge), or one row's text (from :meth:`_other`); ``nums`` are their
        line numbers. ``converted``: the worker's columns for them are the current layout's."""
        if isinstance(prepared, str):
            self._pend_blocks.append(prepared)
        else:
            converted = prepared.cols is not None and prepared.layout is self._layout
            last = self._pend_blocks[-1] if self._pend_blocks else None
            if isinstance(last, list) and last[0] is prepared and last[2] == first and last[3] == converted:
                last[2] = stop
            else:
                self._pend_blocks.append([prepared, first, stop, converted])
        self._pend_nums.append(nums)
        self._pend_rows += len(nums)
        if self._pend_rows >= self._batch_rows:
            self._flush()

    # ---------------------------------------------------------------- non-data lines
    def _other(self, line: str, lineno: int) -> None:
        if "NCCL INFO" in line and "|" not in line:
            # The bulk of a debug log: only the version line matters here; the log parser
            # (if listening) gets every such line.
            if self.on_other is not None:
                self.on_other(line, lineno)
            if "CL version" in line and self._run is not None and (m := VERSION_RE.search(line)):
                _library_version(self._run, m, keep=True)
            return
        text = strip_prefix(line).rstrip()
        body = text.lstrip()
        if not body:
            return
        core = body.lstrip("#").strip()
        if "nThread" in core and HEADER_RE.search(core):
            self._header(core, lineno)
            return
        if self._units_next and core.startswith("("):
            self._units_next = False
            if self._layout and "(ms)" in core:
                self._layout.time_scale = 1000.0
            return
        tokens = core.split()
        if tokens and tokens[0] in ("size", "bytes") and ("time" in tokens or "timestamp" in tokens):
            self._column_header(tokens, lineno)
            return
        run = self._ensure_run(lineno) if core.startswith(("Rank", "Using devices")) else self._run
        match = _RANK_RE.search(core) if "Rank" in core and "Pid" in core else None
        if match and run is not None:
            rank = int(match.group(1))
            run.ranks.setdefault(rank, (match.group(4), match.group(3), match.group(7)))
            run.rank_lines += 1
            return
        if tokens and tokens[0][:1].isdigit():
            tokens = unglue(core).split()
            if self._layout is not None:
                self._queue(" ".join(tokens), 0, 1, np.array([lineno]))
                return
            if (layout := Layout.infer(tokens)) is not None:
                self._ensure_run(lineno)
                self._layout = layout
                self._queue(" ".join(tokens), 0, 1, np.array([lineno]))
                return
            if len(tokens) >= 3 and is_piece(tokens):
                self.result.issues.append(Issue(lineno, row_trouble(tokens, 0) or "", core[:200]))
                return
        if self.on_other is not None:
            self.on_other(line, lineno)
        self._annotation(core, lineno)

    def _annotation(self, core: str, lineno: int) -> None:
        """Lines that say something about the run: versions, failures, footers, noise.

        Each pattern is guarded by a substring test: debug logs put thousands of such lines
        between table rows, and most of them say nothing to this parser.
        """
        run = self._run
        if "NCCL INFO" in core or "NCCL WARN" in core:
            if "CL version" in core and run is not None and (m := VERSION_RE.search(core)):
                _library_version(run, m, keep=True)
            elif mentions_invalid_arm(core):
                run = self._ensure_run(lineno)
                run.invalid_arm = True
                run.failures.append(core[:300])
            return
        if "ccl-tests" in core and (m := TESTS_VERSION_RE.search(core)):
            run = self._ensure_run(lineno, fresh=bool(run and run.rows))
            run.library = "rccl" if run.library == "rccl" else library_of_version(m)
            run.nccl_tests_version = m.group(2) if m.group(1) == "n" else f"rccl-tests {m.group(2)}"
            run.nccl_version = run.nccl_version or nccl_version_from_code(m.group(4) or m.group(3))
            run.simulator = m.group(5)
        elif "Collective test" in core and (m := _COLL_TEST_RE.search(core)):
            if m.group(1) == "starting":
                # The version line, or a command line naming this binary, may have started the run.
                other = run is not None and run.binary is not None and _base(run.binary) != _base(m.group(2))
                run = self._ensure_run(lineno, fresh=bool(run and (run.rows or run.header_text or other)))
                run.binary = run.binary or m.group(2)
            elif run is not None:
                run.binary = run.binary or m.group(2)
                run.concluded = True
        elif "CL version" in core and (m := VERSION_RE.search(core)):
            if run is not None:
                _library_version(run, m, keep=False)
        elif "Out of bounds" in core and (m := _OOB_RE.search(core)):
            self._flush()
            if run is not None:
                run.oob = int(m.group(1))
                run.oob_failed = m.group(2) == "FAILED"
            self._layout = None
        elif "Avg bus bandwidth" in core and (m := _AVG_RE.search(core)):
            self._flush()
            if run is not None:
                run.avg_busbw, run.avg_busbw_line = float(m.group(1)), lineno
            self._layout = None
        elif mentions_invalid_arm(core):
            run = self._ensure_run(lineno)
            run.invalid_arm = True
            run.failures.append(core[:300])
        elif RCCL_TESTS_ONLY in core:
            if run is not None:
                run.library = "rccl"
        elif run is not None and self._layout is not None and ELISION_RE.match(core):
            run.footer.elision_line = run.footer.elision_line or lineno
        elif "failure" in core and _FAILURE_RE.search(core):
            self._ensure_run(lineno).failures.append(core[:300])
        elif "_perf" in core and (m := _BINARY_RE.search(core)):
            # A command line naming the binary (shell noise worth keeping; ``-x NCCL_DEBUG=INFO``
            # and the like on it too): it may start a run. NCCL's own lines returned above.
            if run is None or run.rows or run.header_text:
                self._pending_binary = m.group(1)
            elif run.binary is None:
                run.binary = m.group(1)

    # ---------------------------------------------------------------- runs and tables
    def _ensure_run(self, lineno: int, *, fresh: bool = False) -> _Run:
        if self._run is None or fresh:
            self._flush()
            self._run = _Run(index=len(self._runs), first_line=lineno)
            self._runs.append(self._run)
            self._layout = None
            binary = self._pending_binary
            if binary:
                self._run.binary = binary
                self._pending_binary = None
        return self._run

    def _header(self, core: str, lineno: int) -> None:
        run = self._run
        if run is not None and run.header_text == core and not run.rows:
            # Builds without MPI: every process prints its own header (issue ncclt107).
            run.duplicate_headers += 1
            return
        fresh = run is not None and (run.header_text is not None or run.rows > 0)
        run = self._ensure_run(lineno, fresh=fresh)
        run.header_text = core
        for key, rx in _HEADER_KEYS.items():
            m = rx.search(core)
            if m:
                run.header[key] = m.group(1) if key == "step" else int(m.group(1))

    def _column_header(self, tokens: list[str], lineno: int) -> None:
        self._flush()
        layout = Layout.from_header(tokens)
        if layout is None:
            self.result.issues.append(Issue(lineno, "column header not understood", " ".join(tokens)[:200]))
            return
        run = self._ensure_run(lineno)
        if self._layout is not None and run.rows:
            run.cycle += 1  # another table in the same run: a -N cycle
            run.last_size = -1
        self._layout = layout
        self._units_next = True

    def _flush(self) -> None:
        """Convert and emit the queued rows, group by group (worker-converted or not)."""
        if not self._pend_blocks:
            return
        blocks = list(self._pend_blocks)
        nums = np.concatenate(self._pend_nums)
        self._pend_blocks.clear()
        self._pend_nums.clear()
        self._pend_rows = 0
        run = self._run if self._run is not None else self._ensure_run(int(nums[0]))
        offset = 0
        k = 0
        while k < len(blocks):
            converted = _converted(blocks[k])
            j = k
            while j < len(blocks) and _converted(blocks[j]) == converted:
                j += 1
            group = blocks[k:j]
            size = sum(b[2] - b[1] if isinstance(b, list) else 1 for b in group)
            part = nums[offset: offset + size]
            offset += size
            if converted:
                self._emit(_slice_columns(group), part, self._layout, run)
            else:
                self._convert(group, part, run)
            k = j

    def _convert(self, group: list[list | str], nums: np.ndarray, run: _Run) -> None:
        """Queued rows the worker did not convert: Arrow's CSV reader on their CSV form (or,
        when a row holds a comma of its own, Arrow's whitespace split on their text), with the
        layout and then without its redop column, then the whitespace split, then
        :meth:`_slow_block`."""
        layout = self._layout
        lines = _texts(group) if (form := _csv_of(group)) is None else None
        if layout is None:
            for text, num in zip(lines if lines is not None else _texts(group), nums.tolist()):
                self._annotation(text.strip(), num)
            return

        def convert(lay: Layout) -> dict[str, Any] | None:
            if form is not None:
                return textblock.csv_rows(form, len(nums), lay.prefix, lay.sides, lay.suffix)
            return textblock.convert_rows(pa.array(lines, pa.large_string()), lay.prefix, lay.sides, lay.suffix)

        cols = convert(layout)
        if cols is None and (blank := layout.without_redop()) is not None:
            # A redop column in the header that the rows leave blank (field builds print none
            # for collectives without a reduction): the rows fit the header minus redop.
            cols = convert(blank)
            if cols is not None:
                self._layout = layout = blank
        if cols is None and form is not None:
            lines = _texts(group)
            cols = textblock.convert_rows(pa.array(lines, pa.large_string()), layout.prefix, layout.sides,
                                          layout.suffix)
        if cols is None:
            self._slow_block(lines, nums.tolist(), layout, run)
            return
        self._emit(cols, nums, layout, run)

    def _slow_block(self, lines: list[str], nums: list[int], layout: Layout, run: _Run) -> None:
        """A block that did not convert at once: keep the rows that fit, explain the rest.

        nccl-tests prints a row in three writes (size to root, then each side after its
        timed calls), so whatever else is printed meanwhile lands inside it: NCCL log lines
        (their text goes to the log parser), other ranks' lines, launcher labels glued to a
        value (``-1[0]``). A row left short is completed by the pieces that follow it, each
        all numbers, however many lines apart; a piece that completes no row, or a row that
        stays short, is an issue with its line.
        """
        good: list[str] = []
        good_nums: list[int] = []
        partial: tuple[list[str], int] | None = None
        for raw, num in zip(lines, nums):
            text = strip_prefix(raw).strip()
            if (m := EMBEDDED_LOG.search(text)) is not None and m.start() > 0:
                if self.on_other is not None:
                    self.on_other(text[m.start():], num)
                text = text[: m.start()]
            text = OVER_THRESHOLD.sub("", unglue(text)).strip()
            tokens = text.split()
            if partial is not None:
                if is_piece(tokens) and len(partial[0]) + len(tokens) <= layout.ncols:
                    tokens, num = partial[0] + tokens, partial[1]
                    text = " ".join(tokens)
                else:
                    self._cut_row(partial, layout)
                partial = None
            if len(tokens) < layout.ncols and starts_row(tokens) and all(map(is_cell, tokens[3:])):
                partial = (tokens, num)
                continue
            fits = len(tokens) == layout.ncols and is_int(tokens[0]) and textblock.convert_rows(
                pa.array([text], pa.large_string()), layout.prefix, layout.sides, layout.suffix) is not None
            if fits:
                good.append(text)
                good_nums.append(num)
            elif (why := row_trouble(tokens, layout.ncols)) is not None and text.count(":") <= 1:
                self.result.issues.append(Issue(num, why, text[:200]))
            else:
                if self.on_other is not None:
                    self.on_other(raw, num)
                self._annotation(text.lstrip("#").strip(), num)
        if partial is not None:
            self._cut_row(partial, layout)
        if good:
            cols = textblock.convert_rows(pa.array(good, pa.large_string()), layout.prefix, layout.sides, layout.suffix)
            self._emit(cols, np.asarray(good_nums, dtype=np.int64), layout, run)

    def _cut_row(self, partial: tuple[list[str], int], layout: Layout) -> None:
        tokens, num = partial
        self.result.issues.append(Issue(num, f"data row cut short: {len(tokens)} of {layout.ncols} fields",
                                        " ".join(tokens)[:200]))

    def _emit(self, cols: dict[str, Any], nums: np.ndarray, layout: Layout, run: _Run) -> None:
        sizes = cols["size"].to_numpy()
        n = len(sizes)
        # Cycles: sizes only grow within a table; a drop starts the next -N cycle.
        cycle = np.full(n, run.cycle, dtype=np.int32)
        if n:
            drops = np.zeros(n, dtype=np.int32)
            drops[0] = 1 if sizes[0] < run.last_size else 0
            drops[1:] = sizes[1:] < sizes[:-1]
            cycle += np.cumsum(drops, dtype=np.int32)
            run.cycle = int(cycle[-1])
            run.last_size = int(sizes[-1])
        run.rows += n
        if n and run.dtype is None and "type" in cols:
            run.dtype = cols["type"][0].as_py()
        if n and run.redop is None and "redop" in cols:
            run.redop = cols["redop"][0].as_py()
        if run.inferred is None and n and _collective(run, self.source.meta, self.source.path) is None:
            run.inferred = self._infer(cols, layout, run) or False
        consts = self._row_constants(run)
        const = textblock.constant

        def col(name: str, typ: pa.DataType) -> pa.Array:
            return cols[name] if name in cols else const(None, n, typ)

        shared: dict[str, Any] = {
            "run_id": const(consts["run_id"], n, pa.string()),
            "size_bytes": cols["size"],
            "count": col("count", pa.int64()),
            "dtype": col("type", pa.string()),
            "redop": col("redop", pa.string()),
            "root": cols["root"].cast(pa.int32()) if "root" in cols else const(None, n, pa.int32()),
            "cycle": pa.array(cycle),
            # With -n 1 every printed row is one measured iteration: -N cycles are then the
            # per-iteration series (architecture section 4), indexed by cycle.
            "iteration": pa.array(cycle) if run.header.get("iters") == 1 else const(None, n, pa.int32()),
            "n_iters": const(run.header.get("iters"), n, pa.int32()),
            "timestamp": (pc.binary_join_element_wise(cols["ts_date"], cols["ts_time"], " ")
                          if "ts_date" in cols and "ts_time" in cols else const(None, n, pa.string())),
            "line": pa.array(nums),
        }
        for key in ("fabric", "collective", "arm", "policy", "source_path", "source_sha256"):
            shared[key] = const(consts[key], n, pa.string())
        for key in ("nodes", "ranks"):
            shared[key] = const(consts[key], n, pa.int32())
        sides = []
        for side_index in range(len(layout.sides)):
            pre = f"s{side_index}."
            data = dict(shared)
            data["in_place"] = const(side_index == 1, n, pa.bool_())
            time_col = cols[pre + "time"]
            data["time_us"] = pc.multiply(time_col, layout.time_scale) if layout.time_scale != 1.0 else time_col
            for name, out in (("algbw", "algbw_gbs"), ("busbw", "busbw_gbs"), ("error", "error")):
                data[out] = col(pre + name, pa.float64())
            run.footer.add(pc.fill_null(data["busbw_gbs"], float("nan")).to_numpy(zero_copy_only=False))
            data["wrong"] = col(pre + "wrong", pa.int64())
            sides.append(pa.table(data))
        # One batch for both sides (the columns they share are not copied).
        self._on_rows(sides[0] if len(sides) == 1 else pa.concat_tables(sides))

    def _infer(self, cols: dict[str, Any], layout: Layout, run: _Run) -> tuple[str, int | None] | None:
        """The collective of rows that name no binary (the first batch of the run decides): the
        one NCCL's COLL lines call, else what the numbers, columns and checks of the rows say."""
        ranks = self.source.meta.get("ranks") or _scale(run)[1]
        if (logged := self.coll_hint()) is not None:
            return logged, ranks
        if "s0.algbw" not in cols or "s0.busbw" not in cols or "count" not in cols:
            return None
        first = {k: cols[k][0].as_py() for k in ("type", "redop", "root") if k in cols}
        return infer_collective(cols["size"].to_numpy(zero_copy_only=False),
                                cols["count"].to_numpy(zero_copy_only=False), first.get("type"),
                                first.get("redop"), first.get("root"),
                                cols["s0.algbw"].to_numpy(zero_copy_only=False),
                                cols["s0.busbw"].to_numpy(zero_copy_only=False), ranks,
                                columns=frozenset(layout.prefix), in_place_checked=_in_place_checked(cols))

    def _row_constants(self, run: _Run) -> dict[str, Any]:
        meta = self.source.meta
        nodes, ranks, _ = _scale(run)
        inferred = run.inferred if isinstance(run.inferred, tuple) else (None, None)
        return {
            "run_id": self.source.run_id_for(run.index),
            "fabric": meta.get("fabric") or self.source.fabric,
            "collective": _collective(run, meta, self.source.path) or inferred[0],
            "arm": meta.get("arm"),
            "policy": meta.get("policy"),
            "nodes": meta.get("nodes") or nodes,
            "ranks": meta.get("ranks") or ranks or inferred[1],
            "source_path": self.source.path,
            "source_sha256": self.source.sha256,
        }

    def _run_row(self, run: _Run) -> dict[str, Any]:
        consts = self._row_constants(run)
        nodes, ranks, hosts = _scale(run)
        h = run.header
        failure = "; ".join(run.failures[:5]) or None
        if run.duplicate_headers:
            note = (f"{run.duplicate_headers + 1} processes printed their own header (binary built "
                    "without MPI?): they ran as independent single-rank jobs")
            failure = f"{failure}; {note}" if failure else note
        if run.oob_failed:
            failure = (failure + "; " if failure else "") + f"{run.oob} out-of-bounds values (FAILED)"
        if run.invalid_arm:
            outcome = "invalid_arm"
        elif run.failures or run.oob_failed or (run.rows == 0):
            outcome = "failed"
        else:
            outcome = "ok"
        if failure is None and run.rows == 0:
            failure = "no result rows (the run stopped before its table)"
        gpus = h.get("ngpus", 1) * h.get("nthread", 1)
        return {
            "run_id": consts["run_id"], "fabric": consts["fabric"], "collective": consts["collective"],
            "binary": run.binary, "nodes": consts["nodes"], "ranks": consts["ranks"],
            "collective_inferred": (True if isinstance(run.inferred, tuple) and consts["collective"]
                                    and _collective(run, self.source.meta, self.source.path) is None else None),
            "gpus_per_node": (consts["ranks"] // consts["nodes"]) if consts["ranks"] and consts["nodes"] else None,
            "nccl_version": run.nccl_version, "nccl_tests_version": run.nccl_tests_version,
            "library": run.library or library_of_gpu(next((r[2] for r in run.ranks.values() if r[2]), None)),
            "hosts": ",".join(hosts) if hosts else None, "n_hosts": len(hosts) if hosts else None,
            "gpu_name": next((r[2] for r in run.ranks.values() if r[2]), None),
            "outcome": outcome, "failure": failure, "dtype": run.dtype, "redop": run.redop,
            "min_bytes": h.get("min_bytes"), "max_bytes": h.get("max_bytes"),
            "warmup_iters": h.get("warmup_iters"), "iters": h.get("iters"), "agg_iters": h.get("agg_iters"),
            "validation": h.get("validation"), "graph": h.get("graph"), "cycles": run.cycle + 1 if run.rows else 0,
            "oob_values": run.oob, "avg_busbw_gbs": run.avg_busbw, "avg_busbw_elided": run.footer.elided(run.avg_busbw),
            "header": run.header_text if run.header_text else None,
            "source_format": "nccl-tests-text", "arm": consts["arm"], "policy": consts["policy"],
            "synthetic": True if run.simulator else None,
            "source_path": self.source.path, "source_sha256": self.source.sha256,
            "_gpus_per_process": gpus, "_rows": run.rows, "_lines": {"avg_busbw_gbs": run.avg_busbw_line},
        }


@dataclasses.dataclass
class _Prepared:
    """One chunk after the worker thread's pass (see :meth:`TextParser._prepare`)."""

    #: The chunk in CSV form (:func:`~ncclbot_sweep.parsers.textblock.csv_form`), and where
    #: its lines start and end (the same lines as the chunk's).
    form: bytearray
    starts: np.ndarray
    ends: np.ndarray
    is_row: np.ndarray
    #: Line index of each table row.
    row_lines: np.ndarray
    #: Lines that hold a comma of their own (their CSV form is not their text), and the
    #: chunk's text and line ends for them; None when no line does.
    own: np.ndarray | None = None
    text: bytes | None = None
    text_ends: np.ndarray | None = None
    #: NCCL INFO lines that neither this parser nor the NCCL log parser would use.
    skip: np.ndarray | None = None
    #: All rows converted with ``layout`` (None when the layout was unknown or did not fit).
    layout: Layout | None = None
    cols: dict[str, Any] | None = None
    #: Rows converted by their fixed widths (their lines are empty in ``form``), or None.
    fixed: fixedwidth.FixedRows | None = None

    @property
    def csv_ok(self) -> bool:
        """No row holds a comma of its own: the rows may go to the CSV reader."""
        return self.own is None or not self.own[self.row_lines].any()

    def csv(self, first: int, stop: int) -> bytes:
        """Rows ``first``..``stop`` in CSV form, one after the other."""
        lines = self.row_lines[first:stop]
        if self.fixed is not None and self.fixed.mask[lines].any():
            fixed = self.fixed
            return bytes(textblock.csv_form(textblock.join_lines(fixed.text, fixed.starts, fixed.ends, lines))[0])
        return textblock.join_lines(self.form, self.starts, self.ends, lines)

    def line(self, index: int) -> str:
        """Line ``index`` of the chunk as the parser reads it (blanks collapsed)."""
        if self.fixed is not None and self.fixed.mask[index]:
            fixed = self.fixed
            text = fixed.text[int(fixed.starts[index]):int(fixed.ends[index])]
            return textblock.collapse_line(text.decode("utf-8", "replace"))
        if self.own is not None and self.own[index]:
            start = int(self.text_ends[index - 1]) + 1 if index else 0
            return textblock.collapse_line(self.text[start:int(self.text_ends[index])].decode("utf-8", "replace"))
        return self.form[self.starts[index]:self.ends[index]].decode("utf-8", "replace").replace(",", " ")


def _column_names(layout: Layout) -> list[str]:
    """A layout's columns as ``textblock.csv_rows`` names them."""
    return (list(layout.prefix) + [f"s{s}.{c}" for s, side in enumerate(layout.sides) for c in side]
            + list(layout.suffix))


_COMMA = 44
_INTERESTING = re.compile(INFO_OF_INTEREST)


def _converted(block: list | str) -> bool:
    return isinstance(block, list) and block[3]


def _slice_columns(blocks: list[list]) -> dict[str, Any]:
    """Columns of queued rows the worker already converted: slices of each chunk's arrays
    (chunked, not copied, when the rows span chunks)."""
    out = {}
    for name in blocks[0][0].cols:
        parts = [prep.cols[name].slice(first, stop - first) for prep, first, stop, _ in blocks]
        out[name] = parts[0] if len(parts) == 1 else pa.chunked_array(parts)
    return out


def _texts(group: list[list | str]) -> list[str]:
    """The text of queued rows, one line each, blanks collapsed."""
    out: list[str] = []
    for block in group:
        if isinstance(block, str):
            out.append(block)
        else:
            prep, first, stop, _ = block
            out.extend(prep.line(i) for i in prep.row_lines[first:stop].tolist())
    return out


def _csv_of(group: list[list | str]) -> bytes | None:
    """Queued rows in CSV form; None when a row holds a comma of its own."""
    parts: list[bytes] = []
    for block in group:
        if isinstance(block, str):
            if "," in block:
                return None
            parts.append((block.replace(" ", ",") + "\n").encode("utf-8"))
        else:
            prep, first, stop, _ = block
            if not prep.csv_ok:
                return None
            parts.append(prep.csv(first, stop))
    return b"".join(parts)


def _in_place_checked(cols: dict[str, Any]) -> bool | None:
    """Whether the rows' in-place results were checked: nccl-tests checks both sides of every
    collective but SendRecv and AlltoAll, whose in-place ``#wrong`` is ``N/A`` beside a number
    (``reportErrors``); None when the rows cannot tell (no ``#wrong`` column, nothing checked)."""
    out, inp = cols.get("s0.wrong"), cols.get("s1.wrong")
    if out is None or inp is None or out.null_count == len(out):
        return None
    return inp.null_count < len(inp)


def _library_version(run: _Run, match: re.Match, *, keep: bool) -> None:
    """Note a library version line (``NCCL version ...``, ``RCCL version : ...``) on ``run``;
    ``keep``: a version already known stays (NCCL INFO lines repeat it per rank)."""
    run.library = "rccl" if run.library == "rccl" else library_of_version(match)
    if not (keep and run.nccl_version):
        run.nccl_version = match.group(2)


def _scale(run: _Run) -> tuple[int | None, int | None, list[str]]:
    """(nodes, ranks, hosts) from the ``Rank`` lines: ranks = highest rank + 1; nodes only when
    every rank was listed (an elided list says nothing about the hosts not shown)."""
    if not run.ranks:
        return None, None, []
    ranks = max(run.ranks) + 1
    hosts: list[str] = []
    for rank in sorted(run.ranks):
        host = run.ranks[rank][0]
        if host not in hosts:
            hosts.append(host)
    complete = len(run.ranks) == ranks
    if run.duplicate_headers:
        ranks = 1
    return (len(hosts) if complete else None), ranks, hosts


def _base(binary: str) -> str:
    """A binary's name without its folder and the ``_mpi`` suffix of MPI builds."""
    name = binary.rsplit("/", 1)[-1]
    return name[:-4] if name.endswith("_mpi") else name


def _collective(run: _Run, meta: Any, path: str) -> str | None:
    if meta.get("collective"):
        return meta["collective"]
    binary = run.binary or meta.get("binary")
    if binary and _base(binary) in BINARY_COLLECTIVE:
        return BINARY_COLLECTIVE[_base(binary)]
    return collective_from_name(path)


def collective_from_name(path: str) -> str | None:
    """A collective named in a file name (``nccl_allgather.log``), or None."""
    return collective_in_text(path.replace("\\", "/").rsplit("/", 1)[-1])


# ------------------------------------------------------------------ numeric block conversion
def parse_nccltests_text(data: bytes | str | Iterable[bytes], source: SourceInfo) -> ParseResult:
    """Parse a whole nccl-tests output (bytes, str, or an iterable of byte chunks).

    Rows are collected in the result (use :class:`TextParser` directly to stream). Never
    raises on malformed input: what it cannot use is in ``result.issues``.
    """
    parser = TextParser(source)
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    for chunk in normalize_chunks([data] if isinstance(data, bytes) else data):
        parser.feed(chunk)
    result = parser.close()
    for row in result.tables.get("runs", []):
        row.pop("_gpus_per_process", None)
        row.pop("_rows", None)
    return result
