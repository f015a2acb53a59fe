"""Per-collective latency traces -> ``live_events`` rows.

* the ncclbot plugin trace (architecture section 8): ``# ncclbot-trace v2`` (or v1) then a
  CSV header; ``pull`` rows (arm played, AUTO's arm, local latency, reward, and from v2 the
  reward's lag in collectives), ``sync`` rows and, from v2, ``samples`` rows at finalize
  (how many pulls were applied with a reward, reason ``used``, and without, by reason); a
  later version may add columns at the end, which are ignored;
* NCCL's example profiler traces (both generations): ``COLL`` begin/end pairs give one
  latency per collective with its algorithm, protocol and channels;
* NCCL Inspector JSON records (``coll_perf``) and its Prometheus exposition.

``live_events.source`` says which of these a row came from (``ncclbot``, ``nccl-profiler``,
``nccl-inspector``, ``nccl-inspector-prometheus``).
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from ncclbot_sweep.names import (Arm, canonical_algorithm, canonical_collective, canonical_protocol, dtype_bytes,
                                 parse_size)
from ncclbot_sweep.parsers.common import FLOAT_RE, Issue, ParseResult, SourceInfo, to_float, to_int
from ncclbot_sweep.parsers.jsonfix import load_lenient, load_truncated

__all__ = ["parse_ncclbot_trace", "parse_profiler_trace", "parse_inspector_json", "parse_inspector_prometheus",
           "TRACE_COLUMNS"]

#: Header of a v1 plugin trace, in order (architecture section 8); v2 appends TRACE_COLUMNS_V2.
TRACE_COLUMNS = ("kind", "t_ns", "comm_id", "rank", "nranks", "nnodes", "collective", "size_bytes", "pull",
                 "arm", "auto_arm", "policy", "latency_us", "reward", "round", "sync_us")
TRACE_COLUMNS_V2 = ("reward_lag", "samples", "reason")
_TRACE_MAGIC = re.compile(r"^# ncclbot-trace v(\d+)\s*$")
_INT = {"t_ns", "rank", "nranks", "nnodes", "size_bytes", "pull", "round", "reward_lag", "samples"}
_FLOAT = {"latency_us", "reward", "sync_us"}
_KINDS = ("pull", "sync", "samples")


def _base(source: SourceInfo) -> dict[str, Any]:
    return {"run_id": source.run_id, "fabric": source.meta.get("fabric") or source.fabric,
            "source_path": source.path, "source_sha256": source.sha256}


def _arm(text: str | None) -> str | None:
    if not text:
        return None
    try:
        return str(Arm.parse(text.replace("_", "/", 1) if "/" not in text else text))
    except ValueError:
        return None


def _coll(text: Any) -> str | None:
    try:
        return canonical_collective(str(text))
    except ValueError:
        return str(text) if text else None


def parse_ncclbot_trace(text: str, source: SourceInfo) -> ParseResult:
    """Parse one plugin trace file (one rank, one communicator)."""
    result = ParseResult()
    lines = text.splitlines()
    magic = _TRACE_MAGIC.match(lines[0]) if lines else None
    if magic is None:
        result.unusable = True
        result.issues.append(Issue(1, "first line is not '# ncclbot-trace v<N>'", lines[0][:200] if lines else ""))
        return result
    columns = TRACE_COLUMNS + (TRACE_COLUMNS_V2 if int(magic.group(1)) >= 2 else ())
    reader = csv.reader(io.StringIO("\n".join(lines[1:])))
    header = next(reader, None)
    if header is None or tuple(header[: len(columns)]) != columns:
        result.unusable = True
        result.issues.append(Issue(2, f"trace header row differs from the v{magic.group(1)} columns",
                                   ",".join(header or [])[:200]))
        return result
    base = _base(source)
    for offset, fields in enumerate(reader, 3):
        if not fields or all(not f for f in fields):
            continue
        if len(fields) < len(columns):
            result.issues.append(Issue(offset, f"row has {len(fields)} fields, expected {len(columns)}",
                                       ",".join(fields)[:200]))
            continue
        row = dict(zip(columns, fields))
        try:
            out = {**base, "source": "ncclbot", "line": offset, "kind": row["kind"] or None,
                   "comm_id": row["comm_id"] or None, "collective": _coll(row["collective"]) if row["collective"] else None,
                   "arm": _arm(row["arm"]), "auto_arm": _arm(row["auto_arm"]), "policy": row["policy"] or None,
                   "reason": row.get("reason") or None}
            for key in _INT & row.keys():
                out["ranks" if key == "nranks" else "nodes" if key == "nnodes" else key] = _cell(row[key], int)
            for key in _FLOAT:
                out[key] = _cell(row[key], float)
        except ValueError as exc:
            result.issues.append(Issue(offset, f"bad value: {exc}", ",".join(fields)[:200]))
            continue
        if out["kind"] not in _KINDS:
            result.issues.append(Issue(offset, f"kind must be one of {', '.join(_KINDS)}, got {out['kind']!r}"))
            continue
        result.add("live_events", out)
    if not result.count("live_events") and not result.issues:
        result.issues.append(Issue(None, "trace has a header but no rows"))
    return result


def _cell(text: str, kind: type) -> int | float | None:
    """A trace cell as ``kind`` (empty: None); raises ValueError naming a cell that is not one."""
    if not text:
        return None
    value = to_int(text) if kind is int and text.lstrip("-").isdigit() else to_float(text) if kind is float else None
    if value is None:
        raise ValueError(f"{text[:40]!r} is not {'an integer' if kind is int else 'a number'} in range")
    return value


def _delta(start: Any, end: Any) -> float | None:
    a, b = to_float(start), to_float(end)
    return None if a is None or b is None else b - a


def _profiler_row(base: dict, start: dict, latency: float | None, kind: str) -> dict[str, Any]:
    args = start.get("args") or {}
    count = args.get("Count")
    width = dtype_bytes(str(args.get("Datatype", "")))
    arm = None
    if args.get("Algorithm") and args.get("Protocol"):
        try:
            arm = str(Arm(canonical_algorithm(str(args["Algorithm"])), canonical_protocol(str(args["Protocol"]))))
        except ValueError:
            arm = None
    start_ts = to_float(start.get("ts"))
    return {
        **base, "source": "nccl-profiler", "kind": kind, "collective": _coll(start.get("name")),
        "rank": to_int(args.get("Rank")), "comm_id": str(args["CommHash"]) if "CommHash" in args else None,
        "size_bytes": count * width if isinstance(count, int) and width else None,
        "arm": arm, "latency_us": latency, "round": to_int(args.get("SeqNum")),
        "t_ns": to_int(start_ts * 1000) if start_ts is not None else None,
    }


def parse_profiler_trace(text: str, source: SourceInfo) -> ParseResult:
    """NCCL example profiler trace: ``COLL`` begin/end pairs give per-collective latencies.

    A ``COLL`` whose end was cut from the trace still gets a latency when its ``KernelCh``
    events carry GPU clocks (``StartGpuClk``/``StopGpuClk``, ns): the span from the first
    start to the last stop, with ``kind`` ``coll-gpu`` instead of ``coll``.
    """
    result = ParseResult()
    events, skipped = load_lenient(text)
    for lineno, reason in skipped:
        result.issues.append(Issue(lineno, reason))
    begins: dict[tuple, dict] = {}
    gpu: dict[tuple, list[float]] = {}
    current: tuple | None = None
    base = _base(source)
    for ev in events:
        if not isinstance(ev, dict):
            continue
        if ev.get("name") == "KernelCh" and ev.get("ph") == "b" and current is not None:
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            lo, hi = to_float(args.get("StartGpuClk")), to_float(args.get("StopGpuClk"))
            if lo is not None and hi is not None and hi >= lo:
                span = gpu.setdefault(current, [lo, hi])
                span[0], span[1] = min(span[0], lo), max(span[1], hi)
            continue
        if ev.get("cat") != "COLL":
            continue
        key = (ev.get("pid"), ev.get("tid"), ev.get("id"), ev.get("name"))
        if ev.get("ph") == "b":
            begins[key] = ev
            current = key
        elif ev.get("ph") == "e" and key in begins:
            start = begins.pop(key)
            gpu.pop(key, None)
            result.add("live_events", _profiler_row(base, start, _delta(start.get("ts"), ev.get("ts")), "coll"))
    for key, start in begins.items():
        if key in gpu:
            lo, hi = gpu[key]
            result.add("live_events", _profiler_row(base, start, (hi - lo) / 1000.0, "coll-gpu"))
    if begins:
        result.issues.append(Issue(None, f"{len(begins)} COLL events have no end (trace truncated)"))
    if not result.count("live_events"):
        result.unusable = True
        result.issues.append(Issue(None, "no complete COLL begin/end pair in the profiler trace"))
    return result


def parse_inspector_json(text: str, source: SourceInfo) -> ParseResult:
    """NCCL Inspector output: one JSON record per collective (several records may follow)."""
    result = ParseResult()
    decoder = json.JSONDecoder()
    pos, records = 0, []
    body = text.strip()
    while pos < len(body):
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError:
            try:
                obj, _ = load_truncated(body[pos:])
                result.issues.append(Issue(body.count("\n", 0, pos) + 1, "last record truncated"))
            except ValueError:
                result.issues.append(Issue(body.count("\n", 0, pos) + 1, "not JSON"))
                break
            records.append(obj)
            break
        records.append(obj)
        pos = end
        while pos < len(body) and body[pos] in " \t\r\n,":
            pos += 1
    base = _base(source)
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("coll_perf"), dict):
            continue
        head, perf = rec.get("header") or {}, rec["coll_perf"]
        result.add("live_events", {
            **base, "source": "nccl-inspector", "kind": "coll", "collective": _coll(perf.get("coll")),
            "rank": to_int(head.get("rank")), "ranks": to_int(head.get("n_ranks")),
            "nodes": to_int(head.get("nnodes")), "comm_id": str(head.get("id")) if head.get("id") else None,
            "size_bytes": to_int(perf.get("coll_msg_size_bytes")),
            "latency_us": to_float(perf.get("coll_exec_time_us")), "round": to_int(perf.get("coll_sn")),
        })
    if not result.count("live_events"):
        result.unusable = True
        result.issues.append(Issue(None, "no Inspector record with coll_perf"))
    return result


_PROM_RE = re.compile(r'^(nccl_\w+)\{(.*)\}\s+(' + FLOAT_RE + r'|NaN|[+-]Inf)\s*$')
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _bucket_low(text: str | None) -> int | None:
    m = re.match(r"^(\d+)(?:-\d+)?\s*([KMGT]?B)$", text or "")
    return parse_size(m.group(1) + m.group(2)) if m else None


def parse_inspector_prometheus(text: str, source: SourceInfo) -> ParseResult:
    """Inspector's Prometheus exposition: collective execution-time samples per bucket.

    ``size_bytes`` is the lower bound of the message-size bucket (``4-5GB`` -> 4 GiB).
    """
    result = ParseResult()
    base = _base(source)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _PROM_RE.match(line.strip())
        if m is None:
            result.issues.append(Issue(lineno, "not a Prometheus sample line", line[:200]))
            continue
        if m.group(1) not in ("nccl_collective_exec_time_microseconds", "nccl_p2p_exec_time_microseconds"):
            continue
        labels = dict(_LABEL_RE.findall(m.group(2)))
        result.add("live_events", {
            **base, "source": "nccl-inspector-prometheus", "kind": "coll",
            "collective": _coll(labels.get("collective") or labels.get("p2p_operation")),
            "ranks": int(labels["nranks"]) if labels.get("nranks", "").isdigit() else None,
            "nodes": int(labels["n_nodes"]) if labels.get("n_nodes", "").isdigit() else None,
            "comm_id": labels.get("comm_name"), "size_bytes": _bucket_low(labels.get("message_size")),
            "arm": _arm(labels.get("algo_proto")), "latency_us": to_float(m.group(3)), "line": lineno,
        })
    if not result.count("live_events"):
        result.unusable = True
        result.issues.append(Issue(None, "no execution-time samples"))
    return result
