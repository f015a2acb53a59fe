"""What a step is (``step.json``): the one model that rendering writes and ingest reads.

``render`` builds every ``step.json`` through :class:`StepMeta`, so what it writes is what
ingest accepts; ingest reads a step folder's ``step.json`` with :func:`read_step_meta`, so a
file edited by hand, cut short or written by something else is checked field by field
before any parser sees it: a name must be text (not a list), a count an integer in range
(``ranks: -1``, ``nodes: 1e30`` and ``nodes: "many"`` are refused), a timeout at most
:data:`MAX_TIMEOUT_S`. A refusal names the field and the line of ``step.json`` it is on, and
ingest quarantines the step with it.

Every field is optional (a step folder written by an older ncclbot-sweep, or by hand for a
test, may say less); keys this version does not know are ignored, so a newer writer's
``step.json`` still reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ncclbot_sweep.errors import ParseError
from ncclbot_sweep.filekind import REGULAR, file_kind
from ncclbot_sweep.specfile import Bool, Bytes, Int, error_message

__all__ = ["MAX_BYTES", "MAX_TIMEOUT_S", "StepMeta", "read_step_meta"]

#: The longest a step may run (seconds): a week is past any scheduler's limit for one
#: nccl-tests process, so anything longer is a typo (``timeout_s: 1.0e+20``).
MAX_TIMEOUT_S = 7 * 24 * 3600
#: The largest ``step.json`` read (one is about 1 KiB).
MAX_BYTES = 1 << 20

_Count = Annotated[Int, Field(ge=1)]
_Index = Annotated[Int, Field(ge=0)]


class SizeRange(BaseModel):
    """nccl-tests' ``-b``/``-e``/``-f``: the sizes of one step, in bytes."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    min: Bytes
    max: Bytes
    factor: _Count = 2


class StepMeta(BaseModel):
    """The fields of ``step.json`` (see :mod:`ncclbot_sweep.paths`), typed strictly."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    schema_: _Index | None = Field(None, alias="schema")
    writer: str | None = None
    campaign: str | None = None
    campaign_key: str | None = None
    job_key: str | None = None
    step_key: str | None = None
    fabric: str | None = None
    synthetic: Bool | None = None
    kind: str | None = None
    collective: str | None = None
    binary: str | None = None
    nodes: _Count | None = None
    gpus_per_node: _Count | None = None
    ranks: _Count | None = None
    node_set: str | None = None
    arm: str | None = None
    policy: str | None = None
    plugin: Bool | None = None
    variant: str | None = None
    repeat: _Index | None = None
    sizes: SizeRange | None = None
    iterations: _Count | None = None
    warmup: _Index | None = None
    dtype: str | None = None
    op: str | None = None
    timeout_s: Annotated[Int, Field(ge=1, le=MAX_TIMEOUT_S)] | None = None
    env: dict[str, str] | None = None
    per_iteration: Literal["json", "cycles"] | None = None
    nccl_log_rank: _Index | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    plugin_path: str | None = None
    plugin_version: str | None = None
    #: A workload run's command, as the job ran it (``sweep/workload.py``).
    command: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as ``step.json`` spells them (``schema``, not ``schema_``), nulls included."""
        return self.model_dump(mode="json", by_alias=True)


def read_step_meta(path: str | Path) -> StepMeta:
    """The ``step.json`` at ``path``, checked; raises :class:`ParseError` with the field and line.

    Only a regular file of at most :data:`MAX_BYTES` is read (a FIFO or a device named
    ``step.json`` is refused unread).
    """
    path = Path(path)
    kind = file_kind(path)
    if kind != REGULAR:
        raise ParseError(f"step.json is a {kind or 'missing file'}, not a regular file: not read", path=path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ParseError(f"step.json cannot be read: {exc.strerror or exc}", path=path) from exc
    if len(data) > MAX_BYTES:
        raise ParseError(f"step.json is larger than {MAX_BYTES >> 10} KiB (one is about 1 KiB): not read", path=path)
    text = data.decode("utf-8", "replace")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        line = getattr(exc, "lineno", None)
        raise ParseError(f"step.json is not JSON: {getattr(exc, 'msg', exc)}", path=path, line=line) from exc
    if not isinstance(raw, dict):
        raise ParseError(f"step.json holds a {type(raw).__name__}, not an object of fields", path=path, line=1)
    try:
        return StepMeta.model_validate(raw)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        loc = [str(p) for p in errors[0]["loc"]]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ParseError(f"step.json: {'.'.join(loc)}: {error_message(errors[0])}{more}",
                         path=path, line=_line_of(text, loc)) from exc


def _line_of(text: str, loc: list[str]) -> int | None:
    """The line of the (nested) key ``loc`` in the JSON text: each key is searched after the one before."""
    pos = 0
    for key in loc:
        if key.isdigit():
            continue
        found = text.find(json.dumps(key), pos)
        if found < 0:
            break
        pos = found
    return text.count("\n", 0, pos) + 1 if loc else None
