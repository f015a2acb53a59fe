"""Step outcomes and the one rule that decides them (architecture section 4).

A leaf module (it imports nothing of the package but :mod:`ncclbot_sweep.paths` and
:mod:`ncclbot_sweep.filekind`): the runner
(``manifest.sqlite``), ingest (the ``runs`` table), the parsers (NCCL's invalid-arm warning)
and the executors (a job script's exit code) all call it, so a step cannot be ``timeout`` in
one place and ``failed`` in another.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from pathlib import Path, PurePath

from ncclbot_sweep.filekind import REGULAR, file_kind
from ncclbot_sweep.paths import StepFiles

__all__ = [
    "AUTO_FALLBACK_RE",
    "INVALID_ARM_GUARD",
    "INVALID_ARM_RE",
    "TIMEOUT_EXIT_CODES",
    "JobState",
    "StepOutcome",
    "classify_step",
    "fallback_line",
    "job_state_for_exit",
    "last_error_line",
    "mentions_invalid_arm",
    "outcome_reason",
    "read_exit_marker",
    "step_mentions_invalid_arm",
    "step_outcome",
]


class JobState(str, enum.Enum):
    """Scheduler-level state of a job (Slurm's names; the local executor uses the same)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNKNOWN = "UNKNOWN"

    @property
    def finished(self) -> bool:
        """True when the job will not change state again."""
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.UNKNOWN)


class StepOutcome(str, enum.Enum):
    """Outcome of one step (one nccl-tests process), as recorded in the manifest and ``runs``."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INVALID_ARM = "invalid_arm"
    NODE_FAIL = "node_fail"
    CANCELLED = "cancelled"
    #: A learning step whose plugin kept NCCL's own choice (a bad setting, a communicator the
    #: coordinator refused): its numbers are AUTO's, not the learner's.
    AUTO_FALLBACK = "auto_fallback"


#: ``timeout`` exits 124 when the limit hits, and 137 (128 + SIGKILL) when the process outlived
#: the ``--kill-after`` grace: both mean the step ran out of time.
TIMEOUT_EXIT_CODES = (124, 137)

#: NCCL's warning when a forced NCCL_ALGO/NCCL_PROTO leaves no valid arm (``src/enqueue.cc``):
#: ``No algorithm/protocol available for function X with datatype Y. NCCL_ALGO was set to Z.``
INVALID_ARM_RE = re.compile(r"no algorithm/protocol available", re.I)
#: A cheap substring test before the regex, for parsers that see millions of lines.
INVALID_ARM_GUARD = "lgorithm/protocol"

#: The plugin's NCCL WARN lines when a communicator keeps NCCL's own choice instead of learning
#: (``plugin/src/learn.c``: "staying AUTO (NCCL's own choice) for communicator ...: why", the
#: coordinator's refusal in it, and "... keeps NCCL's own choice from now" after a failed sync).
AUTO_FALLBACK_RE = re.compile(r"NCCL WARN (.*(?:staying AUTO|keeps NCCL's own choice|refused).*)")

# What a job's final state says of a step the scheduler interrupted.
_INTERRUPTED = {JobState.CANCELLED: StepOutcome.CANCELLED, JobState.NODE_FAIL: StepOutcome.NODE_FAIL,
                JobState.TIMEOUT: StepOutcome.TIMEOUT, JobState.PREEMPTED: StepOutcome.CANCELLED}
_SCAN_LIMIT = 4_000_000  # bytes of each step file searched for the invalid-arm warning


def mentions_invalid_arm(text: str) -> bool:
    """True when ``text`` holds NCCL's invalid-arm warning."""
    return INVALID_ARM_GUARD in text and INVALID_ARM_RE.search(text) is not None


def step_mentions_invalid_arm(files: StepFiles) -> bool:
    """True when a step's stdout, NCCL log or stderr holds NCCL's invalid-arm warning."""
    return any(mentions_invalid_arm(_head(Path(p))) for p in (files.stdout, files.nccl_log, files.stderr))


def fallback_line(files: StepFiles) -> str | None:
    """The plugin's first WARN saying it kept NCCL's own choice (from ``NCCL WARN`` on), or None.

    Rank 0 logs into the step's NCCL log, the other ranks' warnings reach stdout or stderr.
    """
    for path in (files.nccl_log, files.stdout, files.stderr):
        text = _head(Path(path))
        if "NCCL WARN" in text and (found := AUTO_FALLBACK_RE.search(text)):
            return found.group(1).strip()[:300]
    return None


def outcome_reason(files: StepFiles, outcome: StepOutcome | None) -> str | None:
    """The line that says why a step ended as it did: the plugin's fallback, or the last error line."""
    if outcome is StepOutcome.AUTO_FALLBACK:
        return fallback_line(files)
    return last_error_line(files)


def _head(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(_SCAN_LIMIT)
    except OSError:
        return ""


_EXIT_BYTES = 64  # an exit marker holds one number and a newline
_ERROR_WORDS = ("fatal", "error", "failure", "failed", "killed", "abort", "denied", "cannot", "not found")
_TAIL = 65536  # bytes read from the end of a step's stderr or stdout


def last_error_line(files: StepFiles) -> str | None:
    """The line that most likely says why a step failed (for ``status`` and the ``runs`` table).

    The last line of stderr, then of stdout, that names an error; else stderr's last line.
    """
    tails = {name: _tail(Path(path)) for name, path in (("stderr", files.stderr), ("stdout", files.stdout))}
    for lines in tails.values():
        for line in reversed(lines):
            if any(word in line.lower() for word in _ERROR_WORDS):
                return line.strip()[:300]
    return tails["stderr"][-1].strip()[:300] if tails["stderr"] else None


def _tail(path: Path) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - _TAIL))
            return [line for line in fh.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return []


def read_exit_marker(path: str | PurePath) -> int | None:
    """The exit code a step's ``exit`` marker holds; None when there is no marker.

    A marker that does not hold a number (a truncated write), or that is not a regular file
    (a directory, a FIFO, ``/dev/zero``: never read), reads as -1: the step ended, and not well.
    """
    kind = file_kind(path)
    if kind is None:
        return None
    if kind != REGULAR:
        return -1
    try:
        with open(path, "rb") as fh:
            text = fh.read(_EXIT_BYTES).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError:
        return -1
    head = text.split()[0] if text else ""
    code = int(head) if head.lstrip("-").isdigit() else -1
    return code if -(2**31) <= code < 2**31 else -1  # a process exit code, whatever else is written there


def job_state_for_exit(code: int) -> JobState:
    """A job's state from its batch script's exit code (the local executor's scheduler)."""
    if code == 0:
        return JobState.COMPLETED
    if code in TIMEOUT_EXIT_CODES:
        return JobState.TIMEOUT
    return JobState.FAILED


def classify_step(exit_code: int | None, *, job_state: JobState | None, started: bool,
                  invalid_arm: bool, output_ok: bool = True, fell_back: bool = False) -> StepOutcome | None:
    """The outcome of one step; None while it has not finished (it runs again on ``resume``).

    ``exit_code`` is what the step's ``exit`` marker holds (None: no marker); ``job_state`` the
    job's final state (None: still running, or not known); ``started`` whether the step wrote
    its stdout; ``invalid_arm`` whether its output carries NCCL's invalid-arm warning;
    ``output_ok`` whether a step that exited 0 printed a usable result; ``fell_back`` whether
    a learning step's plugin kept NCCL's own choice.

    The order is the rule: exit 0 is ``ok``, or ``auto_fallback`` for a learner that fell back;
    a timeout code is ``timeout``; a signal while the scheduler ended the job takes the job's
    reason (node failure, cancel); NCCL's refusal of the forced arm is ``invalid_arm``;
    anything else is ``failed``.
    """
    if exit_code is None:
        if job_state is None or not job_state.finished or not started:
            return None  # still running, or never ran: stays pending
        return _INTERRUPTED.get(job_state, StepOutcome.FAILED)
    if exit_code == 0:
        if output_ok:
            return StepOutcome.AUTO_FALLBACK if fell_back else StepOutcome.OK
        return StepOutcome.INVALID_ARM if invalid_arm else StepOutcome.FAILED
    if exit_code in TIMEOUT_EXIT_CODES:
        return StepOutcome.TIMEOUT
    if exit_code >= 128 and job_state in _INTERRUPTED:
        return _INTERRUPTED[job_state]
    if invalid_arm:
        return StepOutcome.INVALID_ARM
    return StepOutcome.FAILED



def step_outcome(files: StepFiles, *, job_state: JobState | None, output_ok: Callable[[], bool],
                 learner: bool = False) -> tuple[StepOutcome | None, int | None]:
    """A step's outcome from its folder, and the exit code its marker holds.

    The runner and ingest both call this. ``output_ok`` says whether the step's output is a
    usable result (:mod:`ncclbot_sweep.step_output`); it is asked only of a step that exited 0.
    ``learner`` says the step's plugin was to learn (:func:`ncclbot_sweep.names.learning_policy`).
    NCCL's invalid-arm warning and the plugin's fallback are looked for only where they can
    change the outcome.
    """
    code = read_exit_marker(files.exit_marker)
    usable = code != 0 or output_ok()
    invalid = code is not None and not (code == 0 and usable) and step_mentions_invalid_arm(files)
    fell_back = learner and code == 0 and usable and fallback_line(files) is not None
    outcome = classify_step(code, job_state=job_state, started=Path(files.stdout).exists(), invalid_arm=invalid,
                            output_ok=usable, fell_back=fell_back)
    return outcome, code
