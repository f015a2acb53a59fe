"""One collective call of a Kineto trace, however many times the trace shows it.

PyTorch (2.x) shows one NCCL collective up to five times: the dispatcher op
(``c10d::allreduce_``), a ``record_param_comms`` op holding its metadata (collective, element
counts, dtype, group size, process group, ``Seq`` in newer builds), an ``nccl:all_reduce``
annotation inside it (with ``Input Dims`` when shapes are recorded), the NCCL kernel (which
since 2.3 carries a copy of the metadata) and a ``gpu_user_annotation`` mirroring the kernel.
In HTA's PyTorch 2.3 test trace they nest as ``c10d::allreduce_`` > ``record_param_comms`` >
``nccl:all_reduce`` > ``cudaLaunchKernelExC`` on one thread, and the kernel's ``External id``
is the ``record_param_comms``' and its ``correlation`` the launch's.

Here the CPU views become one call each (a ``record_param_comms`` op and the ``nccl:``
annotation that follows it on its thread), and each kernel joins the call that launched it:
by ``External id``, else by the launch (``correlation``) inside the call's time window on its
thread, else by process group and ``Seq``, else, when the trace keeps no link (old or sampled
traces), in issue order among the calls of its collective. The call's collective wins over
the kernel's name: old NCCL builds launch ``ncclKernel_SendRecv_...`` for every collective,
and RCCL launches ``ncclDevKernel_Generic`` for all of them (an NCCL kernel that names no
collective: it counts through the call that launched it, and one no call launched is
reported, not counted). Point-to-point operations PyTorch batches (``batch_isend_irecv``: an
``nccl:send``/``nccl:recv`` per operation, then ``nccl:coalesced`` where the group ends and
its one kernel is launched) are one call. A call whose only kernels are not NCCL's (PyTorch's
symmetric-memory ``two_shot_all_reduce_kernel``, vLLM's custom all-reduce) is not an NCCL
collective.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
import re
from typing import Any

from ncclbot_sweep.names import canonical_dtype, dtype_bytes, torch_collective
from ncclbot_sweep.parsers.common import to_float, to_int

__all__ = ["Call", "Kernel", "collect", "link", "kernel_collective", "dtype_name"]

_KERNEL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def kernel_collective(name: str) -> str | None:
    """Collective of an NCCL kernel name, old or new form; None if not an NCCL kernel, or an
    NCCL kernel that names none (RCCL's ``ncclDevKernel_Generic``)."""
    m = _KERNEL_RE.match(name)
    return torch_collective(m.group(1)) if m else None


def dtype_name(dtype: Any) -> str | None:
    """The nccl-tests spelling of a dtype (``c10::BFloat16``, ``bf16`` -> ``bfloat16``)."""
    if dtype is None:
        return None
    key = str(dtype).strip().lower()
    return canonical_dtype(key) or key or None


@dataclasses.dataclass
class Call:
    """One collective call: its key ``(collective, group size, bytes, dtype, process group)``."""

    key: tuple
    ts: float
    end: float
    thread: tuple | None
    ext: set = dataclasses.field(default_factory=set)
    seq: tuple | None = None
    from_op: bool = False
    annotated: bool = False
    total_us: float | None = None
    nccl_kernels: int = 0
    foreign_kernels: int = 0

    def add_kernel(self, kernel: Kernel) -> None:
        if not kernel.nccl:
            self.foreign_kernels += 1
            return
        self.nccl_kernels += 1
        self.total_us = (self.total_us or 0.0) + kernel.dur
        if kernel.meta and not self.from_op:
            self.key = _fill(kernel.key, self.key)


@dataclasses.dataclass
class Kernel:
    """A GPU kernel: NCCL's (``nccl``; ``collective`` None when its name says none) or another one."""

    nccl: bool
    collective: str | None
    key: tuple
    meta: bool
    ts: float
    dur: float
    ext: Any
    corr: Any
    seq: tuple | None
    call: Call | None = None


def _fill(first: tuple, second: tuple) -> tuple:
    """``first`` with its unknown fields taken from ``second`` (the collective stays first's)."""
    return (first[0],) + tuple(a if a is not None else b for a, b in zip(first[1:], second[1:]))


def _width(dtype: Any) -> int | None:
    return dtype_bytes(str(dtype)) if dtype is not None else None


def _kernel_dtype(name: str) -> str | None:
    for tok in reversed(name.split("(", 1)[0].split("_")):
        if dtype_bytes(tok) is not None:
            return tok
    return None


def _id(value: Any) -> int | str | None:
    """An id a trace gives (``External id``, ``correlation``, pid, tid) when it is one: a
    number or a name; anything else (a list, an object) is no id."""
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _key_from_args(coll: str, args: dict) -> tuple:
    width = _width(args.get("dtype"))
    nelems = max(to_int(args.get("In msg nelems")) or 0, to_int(args.get("Out msg nelems")) or 0)
    pg = args.get("Process Group Name")
    return (coll, to_int(args.get("Group size")), nelems * width if width else None, dtype_name(args.get("dtype")),
            str(pg) if pg is not None else None)


def _seq(args: dict) -> tuple | None:
    seq = to_int(args.get("Seq"))
    return (str(args.get("Process Group Name")), seq) if seq is not None else None


def _annotation_key(coll: str, args: dict) -> tuple:
    dims = args.get("Input Dims")
    dims = dims[0] if isinstance(dims, list) and dims else None
    types = args.get("Input type")
    dtype = types[0] if isinstance(types, list) and types else None
    width = _width(dtype)
    size = None
    if isinstance(dims, list) and dims and width and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        size = math.prod(dims) * width
    return (coll, None, size, dtype_name(dtype) if size is not None else None, None)


def collect(events: list) -> tuple[list[Call], list[Kernel], dict[Any, tuple]]:
    """The CPU views of collective calls (merged), the kernels, and each launch's
    ``correlation -> (thread, ts)``."""
    ops: dict[tuple, list[tuple[float, int, Call]]] = collections.defaultdict(list)
    kernels: list[Kernel] = []
    launches: dict[Any, tuple] = {}
    #: Per thread, the windows of ``nccl:coalesced`` annotations (the end of a batched group).
    groups: dict[Any, list[tuple[float, float]]] = collections.defaultdict(list)
    for ev in events:
        if not isinstance(ev, dict):
            continue
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        cat, name = str(ev.get("cat", "")).lower(), str(ev.get("name", ""))
        ts, dur = to_float(ev.get("ts")) or 0.0, to_float(ev.get("dur")) or 0.0
        thread = (_id(ev.get("pid")), _id(ev.get("tid"))) if _id(ev.get("tid")) is not None else None
        if cat == "kernel":
            kernels.append(_kernel(name, args, ts, dur))
        elif cat in ("cuda_runtime", "cuda_driver") and _id(args.get("correlation")) is not None:
            launches[_id(args.get("correlation"))] = (thread, ts)
        elif cat == "cpu_op" and name == "record_param_comms" and args.get("Collective name"):
            if coll := torch_collective(str(args["Collective name"])):
                call = Call(_key_from_args(coll, args), ts, ts + dur, thread, {_id(args.get("External id"))},
                            _seq(args), from_op=True)
                ops[(thread, coll)].append((ts, 0, call))
        elif cat in ("user_annotation", "cpu_op") and name.startswith("nccl:"):
            if coll := torch_collective(name):
                call = Call(_annotation_key(coll, args), ts, ts + dur, thread, {_id(args.get("External id"))},
                            annotated=True)
                ops[(thread, coll)].append((ts, 1, call))
            elif name == "nccl:coalesced":
                groups[thread].append((ts, ts + dur))
    nccl_launches = collections.defaultdict(list)
    for kernel in kernels:
        if kernel.nccl and (launch := launches.get(kernel.corr)) is not None:
            nccl_launches[launch[0]].append(launch[1])
    calls = []
    for (thread, coll), views in ops.items():
        merged = _merge_views(sorted(views, key=lambda v: (v[0], v[1])))
        if coll == "SendRecv" and groups.get(thread):
            merged = _batched(merged, sorted(groups[thread]), sorted(nccl_launches[thread]))
        calls += merged
    return calls, kernels, launches


def _kernel(name: str, args: dict, ts: float, dur: float) -> Kernel:
    nccl = _KERNEL_RE.match(name) is not None
    coll = kernel_collective(name)
    named = torch_collective(str(args["Collective name"])) if nccl and args.get("Collective name") else None
    coll = coll or named
    meta = named is not None
    if meta:
        key = _key_from_args(named, args)
    else:
        key = (coll, None, None, dtype_name(_kernel_dtype(name)) if coll else None, None)
    return Kernel(nccl, coll, key, meta, ts, dur, _id(args.get("External id")), _id(args.get("correlation")),
                  _seq(args))


def _merge_views(views: list[tuple[float, int, Call]]) -> list[Call]:
    """One thread's views of one collective, in time order, as calls: an annotation joins the
    op before it that has none yet (it is printed inside it), or stands alone."""
    calls: list[Call] = []
    open_op: Call | None = None
    for _, is_annotation, view in views:
        if not is_annotation:
            calls.append(view)
            open_op = view
        elif open_op is not None:
            open_op.key = _fill(open_op.key, view.key)
            open_op.ext |= view.ext
            open_op.end = max(open_op.end, view.end)
            open_op.annotated = True
            open_op = None
        else:
            calls.append(view)
    return calls


def _batched(views: list[Call], groups: list[tuple[float, float]], launched: list[float]) -> list[Call]:
    """One thread's SendRecv calls with each batch (the views before an ``nccl:coalesced``
    group end, up to the group before it) joined into one call that spans the group's end,
    where its kernel is launched. A view that launched an NCCL kernel itself is a call of its own."""
    out: list[Call] = []
    batch: list[Call] = []
    ends = iter(groups)
    end = next(ends, None)
    for view in sorted(views, key=lambda c: c.ts):
        while end is not None and end[0] < view.ts:
            out += [_joined(batch, end)] if batch else []
            batch = []
            end = next(ends, None)
        own = bisect.bisect_left(launched, view.ts) < bisect.bisect_right(launched, view.end)
        if own or end is None:
            out.append(view)
        else:
            batch.append(view)
    if batch:
        out.append(_joined(batch, end))
    return out


def _joined(batch: list[Call], end: tuple[float, float]) -> Call:
    call = batch[0]
    for view in batch[1:]:
        call.key = _fill(call.key, view.key)
        call.ext |= view.ext
    call.end = max(end[1], call.end)
    return call


def link(calls: list[Call], kernels: list[Kernel], launches: dict[Any, tuple]) -> tuple[list[Call], int]:
    """Join each kernel to the call that launched it; return the calls that are NCCL
    collectives, plus one call per NCCL kernel no call launched, and how many NCCL kernels
    that name no collective no call launched (they are not counted)."""
    by_ext = {ext: call for call in calls for ext in call.ext if ext is not None}
    by_seq = {(call.key[0],) + call.seq: call for call in calls if call.seq is not None}
    by_thread: dict[Any, list[Call]] = collections.defaultdict(list)
    for call in calls:
        by_thread[call.thread].append(call)
    unlinked: dict[str, list[Kernel]] = collections.defaultdict(list)
    unnamed = 0
    for kernel in sorted(kernels, key=lambda k: k.ts):
        kernel.call = (by_ext.get(kernel.ext) if kernel.ext is not None else None) \
            or _launched_in(launches.get(kernel.corr), by_thread) \
            or (by_seq.get((kernel.key[0],) + kernel.seq) if kernel.seq is not None and kernel.collective else None)
        if kernel.call is not None:
            kernel.call.add_kernel(kernel)
        elif kernel.collective is not None:
            unlinked[kernel.collective].append(kernel)
        elif kernel.nccl:
            unnamed += 1
    out = [call for call in calls if call.nccl_kernels or not call.foreign_kernels]
    for coll, ks in unlinked.items():
        out += _by_order(coll, ks, [c for c in out if c.key[0] == coll and not c.nccl_kernels])
    return out, unnamed


def _launched_in(launch: tuple | None, by_thread: dict[Any, list[Call]]) -> Call | None:
    """The call on the launching thread whose time window holds the launch."""
    if launch is None or launch[0] is None:
        return None
    thread, ts = launch
    return next((c for c in by_thread.get(thread, ()) if c.ts <= ts <= c.end), None)


def _by_order(coll: str, kernels: list[Kernel], calls: list[Call]) -> list[Call]:
    """Kernels no link ties to a call, given the calls of their collective that have none yet
    (issue order); returns the calls of kernels that belong to none of those.

    A kernel carrying metadata joins the first such call whose key agrees with it, or is a
    call of its own. The bare ones are spread over the calls still without a kernel: with k
    kernels per call (a grouped or split collective launches several), kernels
    ``i*k..i*k+k-1`` belong to the i-th call; without calls each kernel is a call of its own.
    """
    calls = sorted(calls, key=lambda c: c.ts)
    own: list[Call] = []
    bare = []
    for kernel in kernels:
        if not kernel.meta:
            bare.append(kernel)
        elif (call := next((c for c in calls if not c.nccl_kernels and _agrees(c.key, kernel.key)), None)) is not None:
            call.add_kernel(kernel)
        else:
            own.append(_kernel_call(kernel))
    free = [c for c in calls if not c.nccl_kernels]
    for i, kernel in enumerate(bare):
        if free:
            free[min(i * len(free) // len(bare), len(free) - 1)].add_kernel(kernel)
        else:
            own.append(_kernel_call(kernel))
    return own


def _agrees(first: tuple, second: tuple) -> bool:
    """Two keys that may describe one call: no field known in both differs."""
    return all(a is None or b is None or a == b for a, b in zip(first, second))


def _kernel_call(kernel: Kernel) -> Call:
    call = Call(kernel.key, kernel.ts, kernel.ts + kernel.dur, None)
    call.add_kernel(kernel)
    return call
