"""PyTorch/Kineto traces -> ``workload`` rows (what collectives a training job issues).

One row per (collective, group size, message size, dtype, process group) with the number of
calls, their total GPU time and ``call_seq``, the positions of those calls in the trace's
issue order (0-based over every collective call the trace counts), so the job's sequence of
collectives can be rebuilt (``analyze workload``). Message sizes follow section 3: the full
buffer for AllGather/ReduceScatter (``max(in, out) nelems x dtype size``).

Each call is counted once however many views of it the trace holds (the op, its annotation,
its kernels: :mod:`~ncclbot_sweep.parsers.kineto_calls` joins them), and only NCCL's: calls
whose kernels are other libraries' are left out. Where the facts come from, best first:
``record_param_comms`` metadata (PyTorch >= 1.13; copied onto the kernels since 2.3), then
an ``nccl:<op>`` annotation's ``Input Dims`` (its ``size_bytes`` is the input's: one rank's
shard for AllGather, and ``group_size`` unknown), then the kernel's name (collective and
dtype, size unknown). dtypes use the nccl-tests spelling (``float``, ``bfloat16``, ...).
"""

from __future__ import annotations

import collections

from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo
from ncclbot_sweep.parsers.jsonfix import load_document
from ncclbot_sweep.parsers.kineto_calls import Call, collect, dtype_name, kernel_collective, link

__all__ = ["parse_kineto", "kernel_collective", "dtype_name"]


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
    calls, unnamed = link(*collect(events))
    groups = _aggregate(calls)
    if unnamed:
        result.issues.append(Issue(None, f"{unnamed} NCCL kernel(s) that name no collective (ncclDevKernel_Generic) "
                                         "were launched by no call in the trace (before it began?): not counted"))
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


def _aggregate(calls: list[Call]) -> dict[tuple, tuple[int, float | None, list[int]]]:
    """``{key: (calls, total_us, call_seq)}``; calls without a kernel keep a null time, and
    ``call_seq`` numbers every call by its start (a CPU view's, else its kernel's)."""
    groups: dict[tuple, list] = {}
    seq: dict[tuple, list[int]] = collections.defaultdict(list)
    for position, call in enumerate(sorted(calls, key=lambda c: c.ts)):
        entry = groups.setdefault(call.key, [0, None])
        entry[0] += 1
        if call.total_us is not None:
            entry[1] = (entry[1] or 0.0) + call.total_us
        seq[call.key].append(position)
    return {k: (v[0], v[1], seq[k]) for k, v in groups.items()}
