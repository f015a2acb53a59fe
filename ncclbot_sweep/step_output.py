"""What a step's nccl-tests process printed, and whether it is a usable result.

A step that exits 0 is ``ok`` only when its output holds a result: the runner
(``manifest.sqlite``) and ingest (the ``runs`` table) both read a step's stdout and ``-J``
JSON here and ask :attr:`StepOutput.usable`, so the two cannot disagree on an empty,
truncated or garbled stdout. The outcome rule itself is :func:`ncclbot_sweep.outcomes.step_outcome`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ncclbot_sweep.errors import ParseError
from ncclbot_sweep.filekind import read_whole
from ncclbot_sweep.names import SIMULATOR
from ncclbot_sweep.outcomes import StepOutcome
from ncclbot_sweep.parsers import parse_source
from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo
from ncclbot_sweep.paths import StepFiles
from ncclbot_sweep.stepmeta import read_step_meta

__all__ = ["StepOutput", "read_step_output", "step_output_usable"]


@dataclasses.dataclass
class StepOutput:
    """A step's parsed stdout (nccl-tests text) and ``result.json``, or a workload run's step times
    (``workload_steps.csv``; its stdout is the user's program's, not parsed); None where absent."""

    text: ParseResult | None
    json: ParseResult | None
    #: Why a file of the step was not read (too big to parse whole), one reason per file.
    refused: list[str] = dataclasses.field(default_factory=list)
    workload: ParseResult | None = None
    is_workload: bool = False
    #: A workload run whose stdout carries the simulator's stamp (``simulator=``, the workload player's).
    synthetic: bool = False

    @property
    def usable(self) -> bool:
        """True when the text or the JSON holds result rows and reports no failure; for a
        workload run, when it has step times.

        Not usable: no output at all, output that is not nccl-tests' (garbage), a run that
        stopped before its table, a truncated JSON, error lines or out-of-bounds values.
        """
        if self.is_workload:
            return self.workload is not None and self.workload.count("workload_steps") > 0
        runs = [run for part in (self.text, self.json) if part is not None for run in part.rows("runs")]
        return any(run.get("outcome") != StepOutcome.FAILED.value and (run.get("cycles") or 0) > 0 for run in runs)


def read_step_output(files: StepFiles, source: SourceInfo) -> StepOutput:
    """Parse a step's stdout and ``result.json``, or a workload run's ``workload_steps.csv``
    (``source.meta`` says the kind), each read whole (they are small); one over
    :data:`~ncclbot_sweep.filekind.WHOLE_READ_LIMIT` is not read: its result is an issue saying
    so (and the output is not usable), so neither the runner nor ingest holds it."""
    if source.meta.get("kind") == "workload":
        stdout = Path(files.stdout)
        output = StepOutput(text=None, json=None, is_workload=True,
                            synthetic=stdout.is_file() and f" simulator={SIMULATOR}".encode() in _head(stdout))
        output.workload = _parse_whole(output, "workload-steps", Path(files.workload_steps), source)
        return output
    output = StepOutput(text=None, json=None)
    output.text = _parse_whole(output, "nccl-tests-text", Path(files.stdout), source)
    output.json = _parse_whole(output, "nccl-tests-json", Path(files.result_json), source)
    return output


def _parse_whole(output: StepOutput, fmt: str, path: Path, source: SourceInfo) -> ParseResult | None:
    """``path`` parsed as ``fmt``; None when absent; an unusable result naming the limit (and the
    reason added to ``output.refused``) when it is too big to read whole."""
    if not path.is_file():
        return None
    try:
        return parse_source(fmt, read_whole(path), source)
    except ParseError as exc:
        output.refused.append(f"{path.name}: {exc.reason}")
        return ParseResult(unusable=True, issues=[Issue(None, output.refused[-1])])


def _head(path: Path, size: int = 65536) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(size)


def step_output_usable(files: StepFiles) -> bool:
    """:attr:`StepOutput.usable` for a step folder (the runner's question; ingest parses once and asks the same)."""
    root = str(files.root)
    try:
        meta = read_step_meta(files.meta).as_dict()
    except ParseError:
        meta = {}  # ingest quarantines such a step; here it is read as nccl-tests output
    return read_step_output(files, SourceInfo(path=root, sha256="", run_id=Path(root).name, meta=meta)).usable
