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
from ncclbot_sweep.outcomes import StepOutcome
from ncclbot_sweep.parsers import parse_source
from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo
from ncclbot_sweep.paths import StepFiles

__all__ = ["StepOutput", "read_step_output", "step_output_usable"]


@dataclasses.dataclass
class StepOutput:
    """A step's parsed stdout (nccl-tests text) and ``result.json``; None where the file is absent."""

    text: ParseResult | None
    json: ParseResult | None
    #: Why a file of the step was not read (too big to parse whole), one reason per file.
    refused: list[str] = dataclasses.field(default_factory=list)

    @property
    def usable(self) -> bool:
        """True when the text or the JSON holds result rows and reports no failure.

        Not usable: no output at all, output that is not nccl-tests' (garbage), a run that
        stopped before its table, a truncated JSON, error lines or out-of-bounds values.
        """
        runs = [run for part in (self.text, self.json) if part is not None for run in part.rows("runs")]
        return any(run.get("outcome") != StepOutcome.FAILED.value and (run.get("cycles") or 0) > 0 for run in runs)


def read_step_output(files: StepFiles, source: SourceInfo) -> StepOutput:
    """Parse a step's stdout and ``result.json``, each read whole (nccl-tests output is small);
    one over :data:`~ncclbot_sweep.filekind.WHOLE_READ_LIMIT` is not read: its result is an
    issue saying so (and the output is not usable), so neither the runner nor ingest holds it."""
    output = StepOutput(text=None, json=None)
    for name, fmt, path in (("text", "nccl-tests-text", Path(files.stdout)),
                            ("json", "nccl-tests-json", Path(files.result_json))):
        if not path.is_file():
            continue
        try:
            parsed = parse_source(fmt, read_whole(path), source)
        except ParseError as exc:
            output.refused.append(f"{path.name}: {exc.reason}")
            parsed = ParseResult(unusable=True, issues=[Issue(None, output.refused[-1])])
        setattr(output, name, parsed)
    return output


def step_output_usable(files: StepFiles) -> bool:
    """:attr:`StepOutput.usable` for a step folder (the runner's question; ingest parses once and asks the same)."""
    root = str(files.root)
    return read_step_output(files, SourceInfo(path=root, sha256="", run_id=Path(root).name)).usable
