"""A training step as the simulator's workload player replays it: collectives and the work between them.

A step is a flat sequence of operations, in launch order (:data:`Op`):

* :class:`Compute`: the application's own work: ``host_us`` of CPU time (Python, the framework,
  its kernel launches), then ``gpu_us`` of GPU kernels on the stream;
* :class:`Call`: one NCCL collective of ``size_bytes`` (nccl-tests' size: the full buffer for
  AllGather and ReduceScatter, as the tuner's ``nBytes``) on the job's communicator (every rank).

It comes from a small spec file (YAML or JSON; shipped ones in ``workloads/``, named without
their ``.yaml``) or from a PyTorch/Kineto trace, whose collective calls
(:mod:`ncclbot_sweep.parsers.kineto_calls`) and non-NCCL kernels between them become the step.
A spec file::

    name: ddp-buckets
    dtype: float                  # the collectives' default datatype (nccl-tests spelling)
    step:
      - {gpu_us: 30000, host_us: 300}            # forward
      - repeat: 52                               # backward, bucket by bucket
        items:
          - {gpu_us: 1150}
          - {collective: AllReduce, size: 25MiB}
      - {gpu_us: 5000}                           # optimizer

Every collective runs on the job's world communicator: one communicator, one stream, the
collectives and the compute kernels in launch order (no overlap of communication with
compute, as a training loop with blocking collectives runs; what overlap would hide is out
of this model). A trace's calls on a smaller process group are left out, each kind named.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Discriminator, Field, Tag, field_validator

from ncclbot_sweep.errors import ParseError, WorkloadError
from ncclbot_sweep.filekind import read_whole
from ncclbot_sweep.names import COLLECTIVES, canonical_collective, canonical_dtype, dtype_bytes, parse_size
from ncclbot_sweep.parsers.common import to_float
from ncclbot_sweep.parsers.kineto_calls import collect, link
from ncclbot_sweep.specfile import Float, Int, SpecModel, parse_spec

__all__ = ["MAX_OPS", "Call", "Compute", "Op", "WorkloadStep", "load_step"]

#: The most operations one step may expand into (a ``repeat`` of a ``repeat``...).
MAX_OPS = 200_000
_HINT = "fix the field named above; 'ncclbot-sweep sim workload --help' shows the spec format"


@dataclasses.dataclass(frozen=True)
class Compute:
    """The application's work between collectives: CPU time, then GPU time on the stream (us)."""

    host_us: float
    gpu_us: float


@dataclasses.dataclass(frozen=True)
class Call:
    """One collective: NCCL's function name, its size (nccl-tests' ``size``) and datatype."""

    collective: str
    size_bytes: int
    dtype: str


Op = Union[Compute, Call]


@dataclasses.dataclass(frozen=True)
class WorkloadStep:
    """One training step: its operations in launch order, and what it was read from."""

    name: str
    ops: tuple[Op, ...]
    notes: tuple[str, ...] = ()

    @property
    def calls(self) -> int:
        return sum(isinstance(op, Call) for op in self.ops)


# --------------------------------------------------------------------------- the spec file


class _ComputeItem(SpecModel):
    gpu_us: Float = Field(0.0, ge=0)
    host_us: Float = Field(0.0, ge=0)


class _CallItem(SpecModel):
    collective: str
    size: int
    dtype: str | None = None

    @field_validator("collective")
    @classmethod
    def _collective(cls, value: str) -> str:
        name = canonical_collective(value)
        if name not in COLLECTIVES:
            raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, but got {value!r}")
        return name

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: object) -> int:
        size = parse_size(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else 0
        if size <= 0:
            raise ValueError(f"size must be a size above 0 bytes such as 25MiB or 26214400, but got {value!r}")
        return size

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str | None) -> str | None:
        return None if value is None else _dtype_name(value)


class _RepeatItem(SpecModel):
    repeat: Int = Field(ge=1)
    items: list[_Item] = Field(min_length=1)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "repeat block" if "repeat" in value or "items" in value else \
            "collective call" if "collective" in value else "compute gap"
    return "repeat block" if isinstance(value, _RepeatItem) else \
        "collective call" if isinstance(value, _CallItem) else "compute gap"


# The tags name each item's kind in an error's location (never a key of the item, so the error's line is its own).
_Item = Annotated[Union[Annotated[_ComputeItem, Tag("compute gap")], Annotated[_CallItem, Tag("collective call")],
                        Annotated[_RepeatItem, Tag("repeat block")]], Discriminator(_kind)]
_RepeatItem.model_rebuild()


class _Spec(SpecModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    dtype: str = "float"
    step: list[_Item] = Field(min_length=1)

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        return _dtype_name(value)


def _dtype_name(value: str) -> str:
    name = canonical_dtype(value)
    if name is None or dtype_bytes(name) is None:
        raise ValueError(f"dtype must be an nccl-tests datatype such as float, half or bfloat16, but got {value!r}")
    return name


def _expand(items: list[Any], dtype: str, budget: list[int]) -> Iterator[Op]:
    for item in items:
        if isinstance(item, _RepeatItem):
            for _ in range(item.repeat):
                yield from _expand(item.items, dtype, budget)
            continue
        budget[0] -= 1
        if budget[0] < 0:
            raise WorkloadError(f"the step expands into more than {MAX_OPS:,} operations",
                                hint="lower a 'repeat' count")
        if isinstance(item, _CallItem):
            yield Call(item.collective, int(item.size), item.dtype or dtype)
        elif item.gpu_us > 0 or item.host_us > 0:
            yield Compute(item.host_us, item.gpu_us)


def _from_spec(text: str, path: Path) -> WorkloadStep:
    spec = parse_spec(text, path, _Spec, WorkloadError, what="workload spec", hint=_HINT)
    ops = tuple(_expand(spec.step, spec.dtype, [MAX_OPS]))
    if not any(isinstance(op, Call) for op in ops):
        raise WorkloadError("the step holds no collective", path=path, hint="add an item such as "
                            "{collective: AllReduce, size: 25MiB}")
    return WorkloadStep(spec.name, ops)


# --------------------------------------------------------------------------- a Kineto trace


def _from_kineto(doc: Any, path: Path, ranks: int) -> WorkloadStep:
    """The last complete ``ProfilerStep#N`` of a trace (the whole trace without one): its NCCL
    calls in issue order, each preceded by the GPU time of the other kernels since the last one."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise WorkloadError("the trace has no traceEvents list", path=path)
    window = _last_profiler_step(events)
    calls, kernels, launches = collect(events)
    linked, unnamed = link(calls, kernels, launches)
    starts: dict[int, float] = {}  # a call's first NCCL kernel on the GPU, else its CPU start
    for kernel in kernels:
        if kernel.call is not None and kernel.nccl:
            starts[id(kernel.call)] = min(starts.get(id(kernel.call), kernel.ts), kernel.ts)
    inside = (lambda ts: window[0] <= ts <= window[1]) if window else (lambda ts: True)
    compute = sorted((k.ts, k.dur) for k in kernels if not k.nccl and inside(k.ts))
    ops: list[Op] = []
    skipped: dict[str, int] = {}
    if unnamed:  # RCCL's kernels name no collective: one that no call of the trace launched cannot be replayed
        skipped["an NCCL kernel that names no collective (ncclDevKernel_Generic) and no call launched"] = unnamed
    done = 0
    for call in sorted((c for c in linked if inside(c.ts)), key=lambda c: starts.get(id(c), c.ts)):
        collective, group, size, dtype, _pg = call.key
        reason = _unplayable(collective, group, size, ranks)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        start = starts.get(id(call), call.ts)
        before = [dur for ts, dur in compute[done:] if ts < start]
        done += len(before)
        if sum(before) > 0:
            ops.append(Compute(0.0, sum(before)))
        ops.append(Call(collective, size, canonical_dtype(dtype or "") or "float"))
    tail = sum(dur for _ts, dur in compute[done:])
    if tail > 0:
        ops.append(Compute(0.0, tail))
    notes = tuple(f"{n} call(s) left out: {why}" for why, n in sorted(skipped.items()))
    if not any(isinstance(op, Call) for op in ops):
        raise WorkloadError("the trace holds no collective the player can replay"
                            + (f" ({'; '.join(notes)})" if notes else ""), path=path,
                            hint="record the trace with record_shapes=True on a job of as many ranks as this one")
    return WorkloadStep(path.name, tuple(ops), notes)


def _unplayable(collective: str | None, group: int | None, size: int | None, ranks: int) -> str | None:
    if collective not in COLLECTIVES:
        return f"{collective or 'an unknown collective'} has no algorithm choice"
    if size is None or size <= 0:
        return f"{collective} of unknown size (record the trace with record_shapes=True)"
    if group is not None and group != ranks:
        return f"{collective} on a group of {group} ranks, not the job's {ranks}"
    return None


def _last_profiler_step(events: list) -> tuple[float, float] | None:
    """(start, end) us of the last ``ProfilerStep#N`` span, or None when the trace has none."""
    spans = [(to_float(e.get("ts")), to_float(e.get("dur"))) for e in events
             if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")]
    spans = [(ts, ts + dur) for ts, dur in spans if ts is not None and dur]
    return max(spans) if spans else None


# --------------------------------------------------------------------------- entry point


def load_step(source: str, *, ranks: int) -> WorkloadStep:
    """The step to replay from ``source``: a shipped spec's name, a spec file, or a Kineto trace
    (plain or gzipped JSON with ``traceEvents``); ``ranks`` is the job's (a trace's calls on other
    group sizes are left out). Raises :class:`WorkloadError` with the file, line and fix."""
    from ncclbot_sweep.resources import resolve_shipped

    path = resolve_shipped("workloads", Path(source), WorkloadError)
    try:
        data = read_whole(path)
    except ParseError as exc:
        raise WorkloadError(exc.reason, path=path, hint="trace one step: torch.profiler.schedule(active=1)") from exc
    except OSError as exc:
        raise WorkloadError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise WorkloadError(f"not a readable gzip file: {exc}", path=path) from exc
    text = data.decode("utf-8", "replace")
    if '"traceEvents"' in text[:1 << 20]:
        try:
            return _from_kineto(json.loads(text), path, ranks)
        except (ValueError, RecursionError) as exc:
            raise WorkloadError(f"the trace is not valid JSON: {exc}", path=path) from exc
    return _from_spec(text, path)
