"""The narrow executor interface every backend implements (architecture section 4.5).

An executor knows how to start a rendered job, report the state of many jobs in one call,
cancel jobs, copy a job's folder back, and find jobs by their tag after a crash. Retry,
reconcile and manifest updates live once, above it, in the campaign runner.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence

from ncclbot_sweep.outcomes import JobState, StepOutcome
from ncclbot_sweep.sweep.jobspec import JobSpec, job_tag
from ncclbot_sweep.sweep.mirror import CollectReport

__all__ = ["UNKNOWN_POLL_LIMIT", "Executor", "JobSpec", "JobState", "JobStatus", "StepOutcome", "job_tag"]

#: Polls in a row a job may be unknown to the scheduler before a watcher counts it as lost.
UNKNOWN_POLL_LIMIT = 20


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """What one poll says of a job."""

    state: JobState
    exit_code: int | None = None
    reason: str = ""


class Executor(abc.ABC):
    """Starts and watches jobs. Implementations must be safe to call again after a crash."""

    name: str = "abstract"

    @abc.abstractmethod
    def submit(self, job: JobSpec) -> str:
        """Start ``job`` (its folder already rendered locally); return the scheduler's job id.

        Raises :class:`~ncclbot_sweep.errors.ExecutorError` (or a subclass) naming the job
        and the scheduler's reason when the job is refused.
        """

    @abc.abstractmethod
    def poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Return the status of every id in one scheduler call; unknown ids map to UNKNOWN."""

    def peek(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Like :meth:`poll`, for read-only commands (``status``): changes nothing the campaign sees.

        The default is :meth:`poll`; an executor whose poll also acts (the local executor
        starts pending jobs) overrides it.
        """
        return self.poll(job_ids)

    @abc.abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel these jobs (and only these); cancelling a finished job is not an error."""

    @abc.abstractmethod
    def fetch(self, job: JobSpec, *, ended: bool = True) -> CollectReport:
        """Bring ``job``'s remote folder into ``job.local_dir``; idempotent, resumable.

        While the job may still run (``ended`` False) only its finished steps are copied.
        Raises TransportError when a file cannot be fetched or does not verify.
        """

    @abc.abstractmethod
    def find_tagged(self, campaign_key: str) -> Mapping[str, str]:
        """Return ``{job_tag: job_id}`` for the campaign's jobs the scheduler knows of."""

    def close(self) -> None:
        """Release connections; called once when the campaign command ends."""
