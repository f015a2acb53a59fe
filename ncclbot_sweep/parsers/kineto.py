"""PyTorch/Kineto traces -> ``workload`` rows (what collectives a training job issues).

One row per (collective, group size, message size, dtype, process group) with the number of
calls, their total GPU time and ``call_seq``, the positions of those calls in the trace's
issue order (0-based over every collective call the trace counts), so the job's sequence of
collectives can be rebuilt (``analyze workload``). Message sizes follow section 3: the full
buffer for AllGather/ReduceScatter (``max(in, out) nelems x dtype size``).

Where the facts come from, best first:

1. NCCL kernels whose args carry ``record_param_comms`` metadata (PyTorch >= 2.3);
2. ``record_param_comms`` CPU ops with ``Collective name`` (or ``nccl:<op>`` annotations with
   ``Input Dims``), their GPU time taken from the NCCL kernels of the same collective in
   issue order;
3. NCCL kernels alone (old and new names: ``ncclKernel_AllReduce_RING_LL_Sum_float``,
   ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``): collective and time, size unknown.

``nccl:<op>`` annotations carry only the input tensor's shape, so their ``size_bytes`` is the
input size (for AllGather that is one rank's shard); ``group_size`` is then unknown (null).
dtypes use the nccl-tests spelling (``float``, ``half``, ``bfloat16``, ``int8``...).
"""

from __future__ import annotations

import collections
import math
import re
from typing import Any

from ncclbot_sweep.names import canonical_dtype, dtype_bytes, torch_collective
from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo, to_float, to_int
from ncclbot_sweep.parsers.jsonfix import load_document

__all__ = ["parse_kineto", "kernel_collective", "dtype_name"]

_KERNEL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def kernel_collective(name: str) -> str | None:
    """Collective of an NCCL kernel name, old or new form; None if not an NCCL kernel."""
    m = _KERNEL_RE.match(name)
    if not m:
        return None
    return torch_collective(m.group(1))


def dtype_name(dtype: Any) -> str | None:
    """The nccl-tests spelling of a dtype (``c10::BFloat16``, ``bf16`` -> ``bfloat16``)."""
    if dtype is None:
        return None
    key = str(dtype).strip().lower()
    return canonical_dtype(key) or key or None


def _width(dtype: Any) -> int | None:
    return dtype_bytes(str(dtype)) if dtype is not None else None


def _kernel_dtype(name: str) -> str | None:
    head = name.split("(", 1)[0].split("_")
    for tok in reversed(head):
        if dtype_bytes(tok) is not None:
            return tok
    return None


def parse_kineto(text: str, source: SourceInfo) -> ParseResult:
    """Parse one Kineto trace (already decompressed). Never raises on malformed input."""
    result = ParseResult()
    doc, truncated = load_document(text, result)
    if result.unusable:
        return result
    if truncated:
        result.issues.append(Issue(None, "trace JSON truncated; complete events were kept"))
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        result.unusable = True
        result.issues.append(Issue(None, "no traceEvents list"))
        return result
    dist = doc.get("distributedInfo") if isinstance(doc, dict) else None
    rank = dist.get("rank") if isinstance(dist, dict) else None
    trace_id = f"{source.run_id}" + (f":rank{rank}" if rank is not None else "")
    kernels, calls = _collect(events)
    groups = _aggregate(kernels, calls)
    base = {"trace_id": trace_id, "fabric": source.meta.get("fabric") or source.fabric, "source": "kineto",
            "source_path": source.path, "source_sha256": source.sha256}
    for key, (ncalls, total, seq) in groups.items():
        coll, group_size, size, dtype, pg = key
        result.add("workload", {**base, "collective": coll, "group_size": group_size, "size_bytes": size,
                                "dtype": dtype, "calls": ncalls, "total_us": total, "process_group": pg,
                                "call_seq": seq})
    if not groups:
        result.unusable = True
        result.issues.append(Issue(None, "no NCCL kernels or communication ops in the trace"))
    return result


def _call_from_args(coll: str, args: dict) -> tuple:
    width = _width(args.get("dtype"))
    nelems = max(to_int(args.get("In msg nelems")) or 0, to_int(args.get("Out msg nelems")) or 0)
    size = nelems * width if width else None
    return coll, to_int(args.get("Group size")), size, dtype_name(args.get("dtype")), \
        str(args["Process Group Name"]) if args.get("Process Group Name") is not None else None


def _collect(events: list) -> tuple[list[tuple[tuple, float, float]], dict[str, list[tuple[float, tuple]]]]:
    """Kernels as (key-or-partial-key, ts, dur) and CPU-side calls as (ts, key) per collective, in time order."""
    kernels: list[tuple[tuple, float, float]] = []
    calls: dict[str, list[tuple[float, tuple]]] = collections.defaultdict(list)
    for ev in events:
        if not isinstance(ev, dict):
            continue
        name, args = str(ev.get("name", "")), ev.get("args") or {}
        cat = ev.get("cat")
        if cat == "kernel":
            coll = kernel_collective(name)
            if coll is None:
                continue
            if args.get("Collective name"):
                key = _call_from_args(torch_collective(str(args["Collective name"])) or coll, args)
            else:
                key = (coll, None, None, dtype_name(_kernel_dtype(name)), None)
            kernels.append((key, (to_float(ev.get("ts")) or 0.0), (to_float(ev.get("dur")) or 0.0)))
        elif cat == "cpu_op" and name == "record_param_comms" and args.get("Collective name"):
            coll = torch_collective(str(args["Collective name"]))
            if coll:
                calls[coll].append(((to_float(ev.get("ts")) or 0.0), _call_from_args(coll, args)))
        elif cat == "user_annotation" and name.startswith("nccl:") and args.get("Input Dims"):
            coll = torch_collective(name)
            dims = args["Input Dims"][0] if args["Input Dims"] else []
            dtype = (args.get("Input type") or [None])[0]
            width = _width(dtype)
            if coll and isinstance(dims, list) and dims and width and all(isinstance(d, int) for d in dims):
                calls[coll + ":annot"].append(((to_float(ev.get("ts")) or 0.0),
                                               (coll, None, math.prod(dims) * width, dtype_name(dtype), None)))
    ordered = {k: sorted(v, key=lambda x: x[0]) for k, v in calls.items()}
    return sorted(kernels, key=lambda k: k[1]), ordered


def _aggregate(kernels: list, calls: dict[str, list[tuple[float, tuple]]]) -> dict[tuple, tuple]:
    """``{key: (calls, total_us, call_seq)}``: each collective call counted once, with its kernels' time.

    A call shows up several times in a trace: as a ``record_param_comms`` op, as an
    ``nccl:<op>`` annotation, as one or more kernels (a grouped or split collective launches
    several), and PyTorch >= 2.3 copies its metadata onto those kernels. So per collective
    one source counts the calls, the best there is: ``record_param_comms`` ops, else kernels
    carrying metadata, else annotations, else bare kernels. Kernels carrying metadata add
    their time to their own key (and count only where no op of that key was captured);
    other kernels' time is spread over the calls in issue order (with k kernels per call,
    kernels ``i*k..i*k+k-1`` belong to call ``i``). Calls without a kernel keep a null time.
    ``call_seq`` numbers every counted call by the timestamp of the view that counted it.
    """
    groups: dict[tuple, list] = {}
    stamps: list[tuple[float, int, tuple]] = []  # (ts, counting order, key) of every counted call

    def count(key: tuple, ts: float) -> list:
        entry = groups.setdefault(key, [0, None])
        entry[0] += 1
        stamps.append((ts, len(stamps), key))
        return entry

    by_coll: dict[str, list[tuple[tuple, float, float]]] = collections.defaultdict(list)
    for key, ts, dur in kernels:
        by_coll[key[0]].append((key, ts, dur))
    for coll in sorted(set(by_coll) | {c.removesuffix(":annot") for c in calls}):
        ks = by_coll.get(coll, [])
        meta = [(key, ts, dur) for key, ts, dur in ks if key[2] is not None]
        cpu = calls.get(coll) or ([] if meta else calls.get(coll + ":annot")) or []
        for ts, call in cpu:
            count(call, ts)
        if meta:
            counted = {call for _, call in cpu}
            for key, ts, dur in meta:
                entry = groups.setdefault(key, [0, None]) if key in counted else count(key, ts)
                entry[1] = (entry[1] or 0.0) + dur
            continue
        if not cpu:
            cpu = [(ts, key) for key, ts, _ in ks]
            for ts, call in cpu:
                count(call, ts)
        for i, (_, _, dur) in enumerate(ks):
            entry = groups[cpu[min(i * len(cpu) // len(ks), len(cpu) - 1)][1]]
            entry[1] = (entry[1] or 0.0) + dur
    seq: dict[tuple, list[int]] = collections.defaultdict(list)
    for position, (_, _, key) in enumerate(sorted(stamps, key=lambda s: (s[0], s[1]))):
        seq[key].append(position)
    return {k: (v[0], v[1], seq[k]) for k, v in groups.items()}
