"""Pure parsers for what ``sbatch``, ``squeue`` and ``sacct`` print.

No I/O here: the Slurm executor runs the commands and hands their text to these
functions; the tests feed them literal Slurm 22.05 output. Each parser tolerates lines it
does not understand (logged, skipped) rather than failing a whole poll.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from ncclbot_sweep.sweep.executors.base import JobState, JobStatus

__all__ = [
    "SEP",
    "SQUEUE_FORMAT",
    "SACCT_FIELDS",
    "QueueRow",
    "SubmitFailure",
    "classify_submit_error",
    "map_state",
    "parse_exit_code",
    "parse_sacct",
    "parse_sbatch",
    "parse_squeue",
    "unavailable_reason",
]

log = logging.getLogger(__name__)

#: Field separator for squeue output (our tags never contain it; Slurm names rarely do).
SEP = "|"
#: squeue -o: job id, state (long), reason, job name, comment (last, may hold anything).
SQUEUE_FORMAT = SEP.join(["%i", "%T", "%r", "%j", "%k"])
#: sacct --format (with -P, fields are separated by '|'); the comment last, as in squeue.
SACCT_FIELDS = "JobIDRaw,State,ExitCode,Reason,JobName,Comment"

_STATE_MAP = {
    "PENDING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "CONFIGURING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,  # not final until every process is gone
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "REVOKED": JobState.FAILED,
    "TIMEOUT": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "CANCELLED": JobState.CANCELLED,
    "PREEMPTED": JobState.PREEMPTED,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
}

# Pending reasons that will not clear by waiting (nodes down, drained or not in the partition).
_UNAVAILABLE = ("ReqNodeNotAvail", "NodeDown", "PartitionDown", "PartitionInactive", "BadConstraints",
                "PartitionNodeLimit", "PartitionConfig", "InvalidQOS", "InvalidAccount")

# sbatch stderr fragments that mean "try again later" (limits, a busy or restarting controller).
_RETRYABLE = (
    "QOSMaxSubmitJobPerUserLimit", "QOSMaxSubmitJobPerAccount", "QOSMaxJobsPerUserLimit",
    "AssocMaxSubmitJobLimit", "MaxSubmitJobLimit", "MaxSubmitJobsPerUser", "Job violates accounting/QOS policy",
    "Resource temporarily unavailable", "Slurm temporarily unable to accept job",
    "Unable to contact slurm controller", "Socket timed out", "Connection refused",
    "Zero Bytes were transmitted or received", "Communication connection failure",
    "Required partition not available",  # drained for maintenance: it comes back
)
# Of those, the ones where the job might have been queued although sbatch failed.
_AMBIGUOUS = ("Socket timed out", "Zero Bytes were transmitted or received")


@dataclasses.dataclass(frozen=True)
class QueueRow:
    """One job as squeue or sacct lists it."""

    job_id: str
    raw_state: str
    reason: str
    name: str
    comment: str = ""
    exit_code: int | None = None

    @property
    def status(self) -> JobStatus:
        return JobStatus(map_state(self.raw_state), self.exit_code, self.reason if self.reason != "None" else "")


@dataclasses.dataclass(frozen=True)
class SubmitFailure:
    """Why sbatch refused a job: the scheduler's words, and whether waiting may help."""

    reason: str
    retryable: bool
    ambiguous: bool  # the job may exist anyway: look for its tag before submitting again


def map_state(raw: str) -> JobState:
    """Slurm's state word (``CANCELLED by 0``, ``RUNNING``, ``NODE_FAIL``...) as a JobState."""
    word = raw.strip().split(" ", 1)[0].rstrip("+").upper()
    return _STATE_MAP.get(word, JobState.UNKNOWN)


def parse_exit_code(text: str) -> int | None:
    """sacct's ``ExitCode`` (``code:signal``): the code, or 128+signal when killed by a signal."""
    match = re.fullmatch(r"\s*(\d+):(\d+)\s*", text)
    if not match:
        return None
    code, sig = int(match.group(1)), int(match.group(2))
    return 128 + sig if code == 0 and sig else code


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``123`` or ``123;cluster``); raises ValueError."""
    for line in stdout.splitlines():
        head = line.strip().split(";", 1)[0]
        if head.isdigit():
            return head
    raise ValueError(f"no job id in sbatch output {stdout!r}")


def classify_submit_error(stderr: str) -> SubmitFailure:
    """Read sbatch's stderr: the reason in one line, and whether a resubmission may succeed."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    reason = "; ".join(ln.removeprefix("sbatch: error: ") for ln in lines) or "sbatch failed without a message"
    retryable = any(fragment.lower() in stderr.lower() for fragment in _RETRYABLE)
    ambiguous = any(fragment.lower() in stderr.lower() for fragment in _AMBIGUOUS)
    return SubmitFailure(reason=reason, retryable=retryable, ambiguous=ambiguous)


def _split(line: str, fields: int) -> list[str] | None:
    parts = line.split(SEP, fields - 1)
    return parts if len(parts) == fields else None


def parse_squeue(text: str) -> dict[str, QueueRow]:
    """Rows of ``squeue -h -o SQUEUE_FORMAT`` by job id. Array/het suffixes are kept as printed."""
    rows: dict[str, QueueRow] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = _split(line, 5)
        if parts is None or not parts[0].strip():
            log.warning("ignoring unexpected squeue line %r", line)
            continue
        job_id, state, reason, name, comment = (p.strip() for p in parts)
        comment = "" if comment == "(null)" else comment
        rows[job_id] = QueueRow(job_id, state, reason, name, comment)
    return rows


def parse_sacct(text: str) -> dict[str, QueueRow]:
    """Rows of ``sacct -X -n -P --format SACCT_FIELDS`` by job id; the last row of an id wins."""
    rows: dict[str, QueueRow] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SEP, 5)
        if len(parts) not in (5, 6) or not parts[0].strip():
            log.warning("ignoring unexpected sacct line %r", line)
            continue
        job_id, state, exit_code, reason, name = (p.strip() for p in parts[:5])
        comment = parts[5].strip() if len(parts) == 6 else ""  # empty unless slurmdbd stores comments
        rows[job_id] = QueueRow(job_id, state, reason, name, "" if comment == "(null)" else comment,
                                exit_code=parse_exit_code(exit_code))
    return rows


def unavailable_reason(row: QueueRow) -> str | None:
    """The pending reason when it names unavailable nodes or partitions (waiting will not help)."""
    if map_state(row.raw_state) is not JobState.PENDING:
        return None
    return row.reason if row.reason.startswith(_UNAVAILABLE) else None
