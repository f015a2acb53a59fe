"""NCCL debug logs (``NCCL_DEBUG=INFO``) -> ``tuning_tables``, ``choices`` and run facts.

What is read, in any NCCL version the fixtures cover (2.3 to 2.31):

* the init latency/bandwidth table, in its three layouts: the single-line
  ``Latency/AlgBw | Tree/ LL | ...`` header (9 columns, ``CollNet`` meaning CollNetDirect),
  the two-row ``Algorithm``/``Protocol`` header, and the 2.29+ layout of three such blocks;
* per-call choice lines, named (``Broadcast: 1024 Bytes -> Algo RING proto LL
  channel{Lo..Hi}={0..0}``) and numeric (``805306368 Bytes -> Algo 1 proto 2 time 3970.68``);
  identical consecutive lines become one ``choices`` row whose ``calls`` counts them (``seq``
  is the first call's index), since NCCL prints one line per call;
* ``COLL`` lines (``AllReduce: opCount 1a ... count 64 datatype 7 ... [nranks=2]``), opCount hex;
* NCCL 2.31+'s per-call ``TUNING`` pair (``src/tuning/tuning.cc``, ``ncclTuningCompute``),
  printed by every rank: ``Input: { .comm = ..., .tuningMask = ..., .func = AllReduce, ...,
  .nBytes = N, ... }`` then ``Best tuning { .id = ..., timeUs = T, .algo = RING, .proto =
  SIMPLE, .symKernelId = ..., nChannels = C, ... }``; see :meth:`LogParser._tuning_best`;
* the NCCL version, plugin load lines, ``NCCL_ALGO``/``NCCL_PROTO`` set by environment,
  the ``Enabled NCCL Func/Proto/Algo Matrix`` and ``nRanks/nNodes`` of the init line;
* the ``No algorithm/protocol available`` warning, which makes the run ``invalid_arm``.

Lines of other ranks may be interleaved anywhere; lines that are not understood are not
errors (a debug log is mostly other things), but a table row cut short is an issue.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from collections.abc import Iterable
from typing import Any

from ncclbot_sweep.names import (
    ALL_COLLECTIVES,
    COLLECTIVES,
    Arm,
    canonical_algorithm,
    canonical_collective,
    canonical_protocol,
    dtype_bytes,
    full_buffer_bytes,
    nccl_datatype,
)
from ncclbot_sweep.outcomes import mentions_invalid_arm
from ncclbot_sweep.parsers.choices import Choice, PendingColls, parse_choice, thread_of
from ncclbot_sweep.parsers.common import FLOAT_RE, Issue, ParseResult, SourceInfo
from ncclbot_sweep.parsers.library import VERSION_RE, library_of_version
from ncclbot_sweep.parsers.prefixes import strip_prefix

__all__ = ["LogFacts", "LogParser", "parse_nccl_log", "INFO_OF_INTEREST"]

_MSG_RE = re.compile(r"NCCL (INFO|WARN|TRACE|ERROR) ?(.*)$")
_STREAM_RE = re.compile(r"\S+:\d+:\d+ \[\d+\]")
_COLL_RE = re.compile(
    r"^(?P<coll>[A-Za-z]+): opCount (?P<op>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count (?P<count>\d+) "
    r"datatype (?P<dt>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) comm (?P<comm>\S+)"
    r"(?: \[nranks=(?P<nranks>\d+)\])?"
)
_INIT_RE = re.compile(r"nRanks (\d+) nNodes (\d+)")
_CHANNELS_RE = re.compile(r"^(\d+) coll channels")
_CHANNEL_RING_RE = re.compile(r"^Channel \d+/(\d+) :")
_ENV_RE = re.compile(r"NCCL_(ALGO|PROTO) set by environment to (\S+)")
_PLUGIN_RE = re.compile(r"^(?:(TUNER|PROFILER|NET|ENV|Net)/Plugin|NET/\w+ ?: ?Using|Using network|.*plugin).*", re.I)
_CELL_RE = re.compile(r"^\s*(" + FLOAT_RE + r")\s*/\s*(" + FLOAT_RE + r")\s*$")
#: The general (algorithm x protocol) bits of a 2.31+ tuning mask: ids 0..20 are algo * 3 +
#: proto; symmetric kernels (and later copy-engine methods) follow (src/include/tuning.h).
_GENERAL_TUNING_MASK = (1 << 21) - 1
#: A TUNING Input line waits for its Best line; a symmetric pass nests a general one inside.
_TUNING_DEPTH = 4

#: What makes an ``NCCL INFO`` line worth a look, for every test in :meth:`LogParser.line`
#: (the text parser drops the others in bulk, before Python sees them). Keep in step.
INFO_OF_INTEREST = (r"\||Bytes -> | proto |opCount|CL version|set by environment|Enabled NCCL|nRanks|coll channels"
                    r"|Channel \d|/Plugin|lgorithm/protocol|Input: \{|Best tuning \{")



@dataclasses.dataclass
class LogFacts:
    """Run-level facts a log gives; ingest merges them into the ``runs`` row."""

    nccl_version: str | None = None
    #: ``nccl`` or ``rccl`` (:mod:`~ncclbot_sweep.parsers.library`).
    library: str | None = None
    plugins: list[str] = dataclasses.field(default_factory=list)
    algo_env: str | None = None
    proto_env: str | None = None
    func_matrix: dict[str, Any] = dataclasses.field(default_factory=dict)
    invalid_arm: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    #: The communicator's collective channels ("16 coll channels, ..."), else the ring count.
    nchannels: int | None = None
    ring_channels: int | None = None
    observed_arms: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def as_run_columns(self, forced_arm: str | None) -> dict[str, Any]:
        """Columns for ``runs``; flags a forced arm that did not run (choices show another)."""
        observed = self.observed_arms.most_common(1)[0][0] if self.observed_arms else None
        mismatch = None
        if forced_arm and self.observed_arms:
            mismatch = any(arm != forced_arm for arm in self.observed_arms)
        return {
            "nccl_version": self.nccl_version, "library": self.library,
            "plugins": json.dumps(self.plugins) if self.plugins else None,
            "func_matrix": json.dumps(self.func_matrix) if self.func_matrix else None,
            "nccl_algo_env": self.algo_env, "nccl_proto_env": self.proto_env,
            "arm_observed": observed, "arm_mismatch": mismatch,
        }


@dataclasses.dataclass
class _Table:
    layout: str
    arms: list[str | None]
    nthreads: list[int | None] = dataclasses.field(default_factory=list)
    algos: list[str] = dataclasses.field(default_factory=list)
    group: int = 0


def _cells(rest: str) -> list[str]:
    parts = rest.split("|")
    if parts and not parts[-1].strip():
        parts = parts[:-1]
    return [p.strip() for p in parts]


def _arm_name(algo: str, proto: str) -> str | None:
    """The arm of an algorithm and a protocol as NCCL prints them: names (``RING``, ``LL128``)
    or its enum ids (``Algo 1 proto 2``, names.ALGORITHMS/PROTOCOLS order); None if neither."""
    try:
        if algo.isdigit() and proto.isdigit():
            return str(Arm.from_indices(int(algo), int(proto)))
        return str(Arm(canonical_algorithm(algo), canonical_protocol(proto)))
    except ValueError:
        return None


def _tuning_fields(msg: str) -> dict[str, str]:
    """``Input: { .a = 1, .b = x }`` / ``Best tuning { .id = 5, timeUs = 1.5, ... }`` -> {a: "1", ...}.

    Read by name, so that a field NCCL adds or drops between versions (``.ceMethodId``)
    changes nothing; values hold no comma (pointers, numbers, names).
    """
    body = msg[msg.find("{") + 1:]
    body = body[:body.rfind("}")] if "}" in body else body
    out = {}
    for part in body.split(","):
        key, eq, value = part.partition("=")
        if eq:
            out[key.strip().lstrip(".")] = value.strip()
    return out


def _int_field(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _tuning_mask(value: str | None) -> int | None:
    """The mask as NCCL printed it: ``0x%lx`` (2.31.2), or ``%lb`` binary digits (dev @1fc949c5)."""
    if not value:
        return None
    try:
        if value.lower().startswith("0x"):
            return int(value, 16)
        return int(value, 2) if set(value) <= {"0", "1"} else None
    except ValueError:
        return None


def _stream(head: str) -> str:
    """The printing thread and device of a line (``host:pid:tid [dev]``): TUNING pairs are
    matched per stream, whatever launcher labels or TRACE timestamps surround it."""
    m = _STREAM_RE.search(head)
    return m.group(0) if m else head.strip()


class LogParser:
    """Line-at-a-time NCCL log parser: :meth:`line` for each line, then :meth:`finish`."""

    def __init__(self, source: SourceInfo) -> None:
        self.source = source
        self.facts = LogFacts()
        self.result = ParseResult()
        self.table: _Table | None = None
        self.pending_algos: list[str] | None = None
        self.matrix_header: list[str] | None = None
        self.seq = 0
        self.any_nccl = False
        self.group = -1
        #: The last choice row: its merge key, the row, the line's message and thread.
        self._last_choice: tuple[tuple, dict, str, str] | None = None
        #: COLL rows waiting for the choice line of their call, per thread.
        self._pending = PendingColls()
        #: Per thread, the last INFO choice a 2.19+ TRACE ``Collective ...`` line would repeat.
        self._echo: dict[str, tuple] = {}
        self.blocks: dict[int, int] = {}
        #: The rank count of the last COLL line (``[nranks=N]``), for choice sizes.
        self.coll_ranks: int | None = None
        #: The collective the last COLL line called (what an nccl-tests run calls, when its
        #: output names no binary).
        self.last_coll: str | None = None
        #: Per printing thread (the line's ``host:pid:tid [dev]`` prefix): open TUNING Input
        #: lines, innermost last, and the last tuning row with the lines it came from.
        self._tuning_open: dict[str, list[tuple[dict[str, str], str, int]]] = {}
        self._last_tuning: dict[str, tuple[tuple[str, str], dict]] = {}

    def finish(self, *, ranks: int | None = None, collective: str | None = None) -> tuple[ParseResult, LogFacts]:
        """Close the log: stamp the NCCL version on table rows, report cut tables; return rows and facts.

        ``ranks`` is the rank count when the output around the log gives it (nccl-tests' Rank
        lines). Choice lines printed before the log said its rank count get their AllGather
        and ReduceScatter full-buffer sizes here, from whatever the whole log told.
        ``collective`` is the one collective the output around the log runs (an nccl-tests
        binary calls nothing else): choice lines that name none and that no COLL line
        explained are its calls.
        """
        result, facts = self.result, self.facts
        if collective is not None:
            for row in result.tables.get("choices", []):
                if row["kind"] == "algo" and row["collective"] is None:
                    row["collective"] = collective
        self._late_sizes(self.source.meta.get("ranks") or facts.ranks or self.coll_ranks or ranks)
        channels = facts.nchannels or facts.ring_channels
        for row in result.tables.get("tuning_tables", []):
            row["nccl_version"] = facts.nccl_version
            row["nchannels"] = channels
            row["nodes"] = row["nodes"] or facts.nodes
            row["ranks"] = row["ranks"] or facts.ranks
            group = row.pop("_group", None)
            if self.blocks.get(group, 0) > 1:
                row["layout"] = "three-block"
        self._cost_rows()
        open_inputs = sum(len(stack) for stack in self._tuning_open.values())
        if open_inputs:
            result.issues.append(Issue(None, f"{open_inputs} TUNING Input line(s) without their Best tuning line "
                                             "(log cut short, or the call failed)"))
        if self.group >= 0 and not result.tables.get("tuning_tables"):
            result.issues.append(Issue(None, "tuning table header without rows (log cut short)"))
        if not self.any_nccl:
            result.unusable = True
            result.issues.append(Issue(None, "no NCCL log line (NCCL INFO/WARN) found"))
        return result, facts

    def _late_sizes(self, ranks: int | None) -> None:
        if not ranks:
            return
        for row in self.result.tables.get("choices", []):
            if row["ranks"] is None:
                row["ranks"] = ranks
            if row["size_bytes"] is None and row.get("log_bytes") is not None:
                row["size_bytes"] = full_buffer_bytes(row["collective"], row["log_bytes"], row["ranks"])

    def _cost_rows(self) -> None:
        """``cost_tables`` rows from choice lines that print NCCL's predicted time (``time T``,
        2.31+'s ``Best tuning`` of a general pass): what the cost model predicted for the arm it
        picked, one row per context and arm. With a tuner plugin loaded, 2.31+ prints the time
        the plugin left in the table (0.0 for a forced arm): no prediction, no row."""
        seen: set[tuple] = set()
        tuner = any(p.startswith(("TUNER/Plugin: Using", "Successfully loaded external tuner"))
                    for p in self.facts.plugins)
        for row in self.result.tables.get("choices", []):
            if row.get("predicted_us") is None or row.get("arm") is None:
                continue
            if row["kind"] == "tuning" and (tuner or (row["tuning_mask"] or 0) & ~_GENERAL_TUNING_MASK):
                continue
            key = (row["collective"], row["size_bytes"], row["arm"])
            if key in seen:
                continue
            seen.add(key)
            self.result.add("cost_tables", {
                "run_id": row["run_id"], "fabric": row["fabric"], "collective": row["collective"],
                "nodes": row["nodes"], "ranks": row["ranks"], "size_bytes": row["size_bytes"], "arm": row["arm"],
                "predicted_us": row["predicted_us"], "source": "nccl-log-choice",
                "nccl_version": self.facts.nccl_version,
                "source_path": row["source_path"], "source_sha256": row["source_sha256"]})

    def base(self) -> dict[str, Any]:
        meta = self.source.meta
        return {"run_id": self.source.run_id, "fabric": meta.get("fabric") or self.source.fabric,
                "nodes": meta.get("nodes") or self.facts.nodes, "ranks": meta.get("ranks") or self.facts.ranks,
                "source_path": self.source.path, "source_sha256": self.source.sha256}

    def line(self, raw: str, lineno: int) -> None:
        text = raw.rstrip("\r\n")
        if "NCCL " not in text:
            self._continuation(strip_prefix(text), lineno)
            return
        at = text.find("NCCL INFO")
        if at >= 0:
            level, msg = "INFO", text[at + 9:]
        else:
            m = _MSG_RE.search(text)
            if m is None:
                self._continuation(text, lineno)
                return
            level, msg, at = m.group(1), m.group(2), m.start()
        self.any_nccl = True
        if mentions_invalid_arm(msg):
            self.facts.invalid_arm = msg.strip()[:300]
        if level == "WARN":
            return
        self.matrix_header = None
        stripped = msg.strip()
        if "|" in stripped and self._table_line(stripped, lineno):
            return
        # Substring guards first: a debug log is long and most of its lines match nothing here.
        if " Bytes -> " in stripped or " proto " in stripped or stripped.startswith("Collective "):
            self._choice_line(thread_of(text[:at]), stripped, lineno)
        elif stripped.startswith("Input: {"):
            self._tuning_input(_stream(text[:at]), stripped, lineno)
        elif stripped.startswith("Best tuning {"):
            self._tuning_best(_stream(text[:at]), stripped, lineno)
        elif "opCount" in stripped and (c := _COLL_RE.match(stripped)) is not None:
            self._coll(c, lineno, thread_of(text[:at]))
        elif "CL version" in stripped and (v := VERSION_RE.search(stripped)) is not None:
            self.facts.nccl_version = self.facts.nccl_version or v.group(2)
            self.facts.library = "rccl" if self.facts.library == "rccl" else library_of_version(v)
        elif "set by environment" in stripped and (e := _ENV_RE.search(stripped)) is not None:
            setattr(self.facts, "algo_env" if e.group(1) == "ALGO" else "proto_env", e.group(2))
        elif stripped.startswith("Enabled NCCL Func/Proto/Algo Matrix"):
            self.matrix_header = []
        elif "nRanks" in stripped and (i := _INIT_RE.search(stripped)) is not None:
            self.facts.ranks, self.facts.nodes = int(i.group(1)), int(i.group(2))
        elif "coll channels" in stripped and (c := _CHANNELS_RE.match(stripped)) is not None:
            self.facts.nchannels = int(c.group(1))
        elif stripped.startswith("Channel ") and (c := _CHANNEL_RING_RE.match(stripped)) is not None:
            # Older NCCL: "Channel 00/02 : 0 1" -- the count after the slash.
            self.facts.ring_channels = max(self.facts.ring_channels or 0, int(c.group(1)))
        elif "/Plugin" in stripped and _PLUGIN_RE.match(stripped):
            if stripped not in self.facts.plugins and len(self.facts.plugins) < 50:
                self.facts.plugins.append(stripped)

    def _continuation(self, text: str, lineno: int) -> None:
        """Lines without an NCCL prefix: the Func/Proto/Algo matrix body."""
        if self.matrix_header is None or "|" not in text:
            self.matrix_header = None
            return
        head, _, rest = text.partition("|")
        groups = [g.split() for g in rest.split("|")]
        if head.strip() == "Function":
            self.matrix_header = [tok for g in groups for tok in g]
            return
        try:
            coll = canonical_collective(head.strip())
        except ValueError:
            return
        values = [tok for g in groups for tok in g]
        names = self.matrix_header or []
        self.facts.func_matrix[coll] = {n: int(v) for n, v in zip(names, values) if v.lstrip("-").isdigit()}

    def _table_line(self, msg: str, lineno: int) -> bool:
        head, sep, rest = msg.partition("|")
        if not sep:
            return False
        key = head.strip()
        if key == "Latency/AlgBw":
            arms = []
            for cell in _cells(rest):
                algo, _, proto = cell.partition("/")
                arms.append(_arm_name(algo.strip(), proto.strip()))
            self.group += 1
            self.table = _Table("single-line", arms, group=self.group)
            return True
        if key == "Algorithm":
            self.pending_algos = [c for c in _cells(rest) if c]
            return True
        if key == "Protocol":
            algos = self.pending_algos or []
            protos = _cells(rest)[: 3 * len(algos)]
            arms = [_arm_name(algos[i // 3], p) for i, p in enumerate(protos)]
            # A table starts with the Tree block; 2.29+ prints it as several blocks.
            if not algos or algos[0] == "Tree" or self.group < 0:
                self.group += 1
            self.blocks[self.group] = self.blocks.get(self.group, 0) + 1
            self.table = _Table("two-row", arms, algos=algos, group=self.group)
            self.pending_algos = None
            return True
        if self.table is None:
            return False
        if key == "Max NThreads":
            self.table.nthreads = [int(c) if c.isdigit() else None for c in _cells(rest)]
            return True
        try:
            coll = canonical_collective(key)
        except ValueError:
            return False
        if coll not in COLLECTIVES:
            return False
        self._table_row(coll, _cells(rest), lineno)
        return True

    def _table_row(self, coll: str, cells: list[str], lineno: int) -> None:
        table = self.table
        rows = []
        for i, cell in enumerate(cells):
            if i >= len(table.arms):
                break
            arm = table.arms[i]
            m = _CELL_RE.match(cell)
            if m is None:
                self.result.issues.append(Issue(lineno, f"tuning table cell {i} of {coll} is cut short", cell))
                continue
            if arm is None:
                continue
            nthreads = table.nthreads[i] if i < len(table.nthreads) else None
            rows.append({**self.base(), "collective": coll, "arm": arm, "latency_us": float(m.group(1)),
                         "algbw_gbs": float(m.group(2)), "max_nthreads": nthreads,
                         "layout": table.layout, "line": lineno, "_group": table.group})
        for row in rows:
            self.result.add("tuning_tables", row)

    def _choice_line(self, thread: str, msg: str, lineno: int) -> None:
        """A per-call choice line (:mod:`~ncclbot_sweep.parsers.choices`): one ``choices`` row,
        or one more call of the row before when nothing changed (NCCL prints one line per call:
        a sweep's repeated calls become a count, which keeps the sequence and not millions of
        copies)."""
        last = self._last_choice
        if last is not None and last[2] == msg and last[3] == thread and not self._pending.waiting(thread):
            last[1]["calls"] += 1  # the same call again (the common case in a sweep)
            self.facts.observed_arms[last[1]["arm"]] += 1
            self.seq += 1
            self._echo[thread] = last[0][:4]
            return
        choice = parse_choice(msg)
        if choice is None:
            return
        arm = self._arm(choice, lineno)
        if arm is None:
            return
        if choice.trace and self._echo.pop(thread, None) == (choice.collective, arm, choice.lo, choice.hi):
            return  # the TRACE line that repeats the INFO line of the same call
        row = self._choice_row(choice, arm, self._pending.match(thread, choice), lineno)
        self.facts.observed_arms[arm] += 1
        self.seq += 1
        key = (row["collective"], arm, row["channel_lo"], row["channel_hi"], row["size_bytes"], row["channels"],
               row["predicted_us"], row["datatype"])
        if not choice.trace:
            self._echo[thread] = key[:4]
        if last is not None and last[0] == key:
            last[1]["calls"] += 1
            self._last_choice = (key, last[1], msg, thread)
            return
        row["seq"] = self.seq - 1
        self._last_choice = (key, row, msg, thread)
        self.result.add("choices", row)

    def _arm(self, choice: Choice, lineno: int) -> str | None:
        arm = _arm_name(choice.algo, choice.proto)
        if arm is None:
            self.result.issues.append(Issue(lineno, f"unknown algorithm/protocol {choice.algo}/{choice.proto}"))
        return arm

    def _choice_row(self, choice: Choice, arm: str, coll_row: dict | None, lineno: int) -> dict[str, Any]:
        """A choice line's row, its missing facts taken from the COLL row of its call."""
        known = coll_row or {}
        coll = choice.collective or known.get("collective")
        datatype = choice.datatype or known.get("datatype")
        count = choice.count if choice.count is not None else known.get("count")
        log_bytes = choice.nbytes
        if log_bytes is None and count is not None and datatype and (width := dtype_bytes(datatype)):
            log_bytes = count * width
        base = self.base()
        base["ranks"] = base["ranks"] or known.get("ranks")
        size = log_bytes if choice.whole else (
            full_buffer_bytes(coll, log_bytes, base["ranks"]) if log_bytes is not None else None)
        lo, hi = choice.lo, choice.hi
        channels = choice.nchannels or (hi - lo + 1 if lo is not None and hi is not None else None)
        return {**base, "collective": coll, "size_bytes": size, "log_bytes": log_bytes, "count": count,
                "datatype": datatype, "arm": arm, "channels": channels, "channel_lo": lo, "channel_hi": hi,
                "predicted_us": choice.predicted_us,
                "op_count": choice.op_count if choice.op_count is not None else known.get("op_count"),
                "comm": choice.comm or known.get("comm"), "kind": "algo", "line": lineno, "calls": 1}

    def _tuning_input(self, stream: str, msg: str, lineno: int) -> None:
        stack = self._tuning_open.setdefault(stream, [])
        if len(stack) >= _TUNING_DEPTH:
            del stack[0]  # its Best line never came (a failed call); counted at finish
        stack.append((_tuning_fields(msg), msg, lineno))

    def _tuning_best(self, stream: str, msg: str, lineno: int) -> None:
        """A ``Best tuning`` line closes the thread's innermost open ``Input`` line.

        Only an outermost pair becomes a ``choices`` row (``kind`` ``tuning``): a pair nested
        inside another is the general pass a symmetric-kernel pass runs to decide whether to
        fall back, and the outer ``Best`` line shows what it decided. A symmetric pass
        (``tuning_mask`` beyond the 21 general bits) that fell back is followed by the
        general pass of the same collective: both are rows, told apart by the mask.
        Identical consecutive pairs of one thread are one row whose ``calls`` counts them.
        """
        stack = self._tuning_open.get(stream)
        if not stack:
            return  # its Input line came before the excerpt starts
        fields, input_msg, input_line = stack.pop()
        if stack:
            return
        self.seq += 1
        last = self._last_tuning.get(stream)
        if last is not None and last[0] == (input_msg, msg):
            last[1]["calls"] += 1
            return
        row = self._tuning_row(fields, _tuning_fields(msg), input_line)
        self._last_tuning[stream] = ((input_msg, msg), row)
        self.result.add("choices", row)

    def _tuning_row(self, inp: dict[str, str], best: dict[str, str], lineno: int) -> dict[str, Any]:
        try:
            coll: str | None = canonical_collective(inp.get("func", ""))
        except ValueError:
            coll = None
        mask = _tuning_mask(inp.get("tuningMask"))
        nbytes, count = _int_field(inp.get("nBytes")), _int_field(inp.get("count"))
        dt = _int_field(inp.get("dataType"))
        datatype = nccl_datatype(dt) if dt is not None else None
        sym = best.get("symKernelId")
        sym = None if sym in (None, "", "Unknown") else sym
        arm = _arm_name(best.get("algo", ""), best.get("proto", ""))
        try:
            predicted: float | None = float(best.get("timeUs", ""))
        except ValueError:
            predicted = None
        if predicted is not None and not (0.0 <= predicted < float("inf")):
            predicted = None  # -1: NCCL's "no time" (one rank: no model ran)
        channels = _int_field(best.get("nChannels"))
        base = self.base()
        size = nbytes
        if nbytes is not None and ((mask or 0) & ~_GENERAL_TUNING_MASK or (mask is None and sym)):
            # A symmetric pass: .nBytes is the batch's per-rank bytes, rounded up to the kernel's cell.
            size = full_buffer_bytes(coll, nbytes, base["ranks"])
        return {**base, "seq": self.seq - 1, "collective": coll, "size_bytes": size, "log_bytes": nbytes,
                "count": count, "datatype": datatype[0] if datatype else None, "arm": arm,
                "channels": channels if channels and channels > 0 else None, "predicted_us": predicted,
                "comm": inp.get("comm"), "kind": "tuning", "line": lineno, "calls": 1,
                "tuning_mask": mask, "sym_kernel": sym}

    def _coll(self, m: re.Match, lineno: int, thread: str) -> None:
        try:
            coll = canonical_collective(m.group("coll"))
        except ValueError:
            coll = m.group("coll")
        count, dt = int(m.group("count")), int(m.group("dt"))
        nranks = int(m.group("nranks")) if m.group("nranks") else None
        self.coll_ranks = nranks or self.coll_ranks
        datatype = nccl_datatype(dt)
        # nccl-tests' size column is the full buffer for AllGather/ReduceScatter (section 3),
        # while NCCL's count there is per rank; an unknown rank count keeps the per-rank bytes.
        size = None
        if datatype is not None:
            per_rank = count * datatype[1]
            size = full_buffer_bytes(coll, per_rank, nranks) if nranks else per_rank
        base = self.base()
        base["ranks"] = base["ranks"] or nranks
        row = {
            **base, "seq": self.seq, "collective": coll, "size_bytes": size, "count": count,
            "datatype": datatype[0] if datatype else str(dt), "op_count": int(m.group("op"), 16),
            "comm": m.group("comm"), "kind": "coll", "line": lineno, "calls": 1,
        }
        self.result.add("choices", row)
        self._pending.add(thread, row)
        self._last_choice = None
        self.seq += 1
        self.last_coll = coll if coll in ALL_COLLECTIVES else self.last_coll


def parse_nccl_log(lines: Iterable[str] | str, source: SourceInfo) -> tuple[ParseResult, LogFacts]:
    """Parse an NCCL debug log; return rows (``tuning_tables``, ``choices``) and run facts.

    Never raises on malformed input. A file with no NCCL line at all is ``unusable``.
    """
    parser = LogParser(source)
    if isinstance(lines, str):
        lines = lines.splitlines()
    for lineno, raw in enumerate(lines, 1):
        parser.line(raw, lineno)
    return parser.finish()
