"""The Slurm executor: ``sbatch``/``squeue``/``sacct``/``scancel`` over a transport.

It implements the four operations of :class:`~ncclbot_sweep.sweep.executors.base.Executor` and
keeps the runner's guarantees on a real scheduler:

* **submit** uploads the rendered inputs (``job.sh``, ``step.json``; over SSH) and runs
  ``sbatch --parsable`` with a readable ``--job-name`` (campaign, collective, nodes), the job
  tag in ``--comment`` and ``--no-requeue`` (Slurm must never re-run a job's steps on its own). A refusal for a QOS or submit limit, or a controller that is
  restarting, is retried with doubling backoff; before each retry the tag is looked up, so
  a job that was queued although ``sbatch`` failed is adopted, never submitted twice.
* **poll** is one ``squeue`` call for all open jobs (reusing the listing ``find_tagged``
  just made in the same cycle), plus one ``sacct`` call for the ids that left the queue
  when accounting is on; when it is off the first ``sacct`` says so and is never asked
  again. Finished states are cached. A controller that does not answer yields UNKNOWN
  (logged), never an exception. Jobs pending on unavailable nodes (``ReqNodeNotAvail``...)
  longer than ``scheduler.cancel_pending_after_s`` are cancelled.
* **cancel** runs ``scancel`` on the given ids only (the campaign's jobs).
* **fetch** mirrors the ended job's folder back, verified by checksum (:mod:`ncclbot_sweep.sweep.collect`).
* **find_tagged** lists the user's jobs (``squeue --me``, and ``sacct`` on the first call
  when accounting is on) and keeps those whose comment carries the campaign's tag (sacct
  knows comments when slurmdbd has ``AccountingStoreFlags=job_comment``; squeue always does,
  and keeps ended jobs for ``MinJobAge``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ncclbot_sweep.errors import SchedulerError, TransportError
from ncclbot_sweep.paths import STEP_META, slurm_output_pattern
from ncclbot_sweep.sweep.executors import slurm_parse as sp
from ncclbot_sweep.sweep.executors.base import Executor, JobSpec, JobState, JobStatus, job_tag
from ncclbot_sweep.sweep.mirror import CollectReport, sync_tree
from ncclbot_sweep.sweep.transport import CommandResult, Transport, make_transport

if TYPE_CHECKING:
    from ncclbot_sweep.sweep.inventory import Inventory

__all__ = ["SlurmExecutor", "SlurmPolicy"]

log = logging.getLogger(__name__)

_ACCOUNTING_OFF = ("accounting storage is disabled", "slurmdbd", "accounting_storage/none")
_CONTROLLER_DOWN = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
                    "Zero Bytes were transmitted", "Communication connection failure")


@dataclasses.dataclass(frozen=True)
class SlurmPolicy:
    """How patient the executor is with Slurm (defaults suit a production cluster)."""

    #: Cancel a job pending on unavailable nodes this long (seconds); None waits forever.
    cancel_pending_after_s: float | None = None
    #: sbatch attempts when Slurm refuses for a limit or is restarting, and the first backoff.
    submit_attempts: int = 5
    submit_backoff_s: float = 2.0
    #: A find_tagged listing this fresh (seconds) answers the poll of the same cycle.
    listing_ttl_s: float = 1.0
    #: How long read-only commands wait for a controller that does not answer.
    controller_wait_s: float = 60.0


class SlurmExecutor(Executor):
    """Runs campaign jobs on Slurm through ``transport``; see the module docstring."""

    name = "slurm"

    def __init__(self, transport: Transport, policy: SlurmPolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.transport = transport
        self.policy = policy or SlurmPolicy()
        self._clock = clock
        self._sleep = sleep
        self._accounting: bool | None = None  # None: not known yet
        self._final: dict[str, JobStatus] = {}  # finished states never change: cached
        self._listing: tuple[float, dict[str, sp.QueueRow]] | None = None
        self._pending_since: dict[str, float] = {}
        self._searched_history = False
        #: Scheduler commands run, in order (``squeue``, ``sacct``...): tests count them.
        self.calls: list[str] = []

    @classmethod
    def from_inventory(cls, inventory: Inventory, *, state_dir: Path | None = None) -> SlurmExecutor:
        """The executor for an inventory with ``scheduler.kind: slurm`` (called by make_executor).

        ``state_dir`` is accepted for the factory's sake; Slurm itself holds the state.
        """
        policy = SlurmPolicy(cancel_pending_after_s=inventory.scheduler.cancel_pending_after_s)
        return cls(make_transport(inventory.access), policy)

    # ------------------------------------------------------------------ commands

    def _run(self, argv: list[str], *, idempotent: bool = True, timeout: float = 120.0) -> CommandResult:
        self.calls.append(argv[0])
        log.debug("running %s on %s", " ".join(argv[:3]), self.transport.where)
        return self.transport.run(argv, idempotent=idempotent, timeout=timeout)

    def _run_waiting(self, argv: list[str], what: str) -> CommandResult:
        """Run a read-only command, waiting (bounded, with backoff) while the controller is down."""
        deadline = self._clock() + self.policy.controller_wait_s
        delay = 0.5
        while True:
            result = self._run(argv)
            if result.ok or not _controller_down(result.stderr) or self._clock() >= deadline:
                return result
            log.warning("%s: Slurm controller not reachable (%s); retrying in %.1f s",
                        what, result.stderr.strip().splitlines()[-1], delay)
            self._sleep(delay)
            delay = min(delay * 2, 10.0)

    # ------------------------------------------------------------------ submit

    def _sbatch_argv(self, job: JobSpec) -> list[str]:
        remote = PurePosixPath(job.remote_dir)
        export = ",".join(f"{k}={v}" for k, v in job.rerun_env.items())
        return ["sbatch", "--parsable", f"--job-name={job.name or job.tag}", f"--comment={job.tag}",
                "--no-requeue", f"--export=ALL,{export}", f"--chdir={remote}", f"--output={slurm_output_pattern(remote)}",
                str(remote / job.script_name)]

    def submit(self, job: JobSpec) -> str:
        """Upload and ``sbatch`` the job; retry limits with backoff; adopt rather than duplicate.

        Raises SchedulerError naming the job and Slurm's reason when it is refused.
        """
        script = Path(job.local_dir) / job.script_name
        if not script.is_file():
            raise SchedulerError(f"job {job.job_key}: no job script at {script}", path=script,
                                 hint="render the campaign first ('ncclbot-sweep submit' does)")
        self._upload_inputs(job)
        delay = self.policy.submit_backoff_s
        for attempt in range(1, self.policy.submit_attempts + 1):
            try:
                result = self._run(self._sbatch_argv(job), idempotent=False)
            except TransportError as exc:
                failure = sp.SubmitFailure(reason=exc.reason, retryable=True, ambiguous=True)
            else:
                if result.ok:
                    job_id = sp.parse_sbatch(result.stdout)
                    log.info("job %s submitted as Slurm job %s", job.job_key, job_id)
                    return job_id
                failure = sp.classify_submit_error(result.stderr)
            if failure.ambiguous:
                existing = self._lookup_tag(job, failure)
                if existing:
                    log.warning("job %s: sbatch failed (%s) but Slurm has it as %s; adopting it",
                                job.job_key, failure.reason, existing)
                    return existing
            if not failure.retryable or attempt == self.policy.submit_attempts:
                raise SchedulerError(
                    f"job {job.job_key}: Slurm refused it: {failure.reason}", path=script,
                    hint=_submit_hint(failure, attempt))
            log.warning("job %s: sbatch refused (%s); resubmitting in %.1f s (attempt %d of %d)",
                        job.job_key, failure.reason, delay, attempt + 1, self.policy.submit_attempts)
            self._sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _upload_inputs(self, job: JobSpec) -> None:
        """Copy the rendered inputs (job script, step.json files) to the run folder.

        Outputs already fetched are never sent back: on the cluster they may be newer.
        """
        local, remote = Path(job.local_dir), PurePosixPath(job.remote_dir)
        if self.transport.same_path(local, remote):
            return
        inputs = [local / job.script_name, *sorted(local.glob(f"steps/*/{STEP_META}"))]
        for path in inputs:
            target = remote / path.relative_to(local).as_posix()
            self.transport.makedirs(target.parent)
            self.transport.put_file(path, target)
        log.info("job %s: uploaded %d input files to %s", job.job_key, len(inputs), remote)

    def _lookup_tag(self, job: JobSpec, failure: sp.SubmitFailure) -> str | None:
        """The id Slurm has under ``job``'s tag, after an sbatch that may have queued it.

        When Slurm cannot be asked, submitting again might duplicate the job: raise instead,
        and let the next ``status``/``resume`` adopt it by its tag.
        """
        try:
            return self.find_tagged(job.campaign_key).get(job.tag)
        except SchedulerError as exc:
            raise SchedulerError(
                f"job {job.job_key}: sbatch failed ({failure.reason}) and Slurm cannot be asked whether "
                f"it queued the job anyway ({exc.reason})", path=Path(job.local_dir) / job.script_name,
                hint="run 'ncclbot-sweep status DIR' once Slurm answers: it adopts the job if it exists, "
                     "and 'resume' submits it otherwise") from exc

    # ------------------------------------------------------------------ poll

    def poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """One squeue call (or the listing of this cycle) for all ids; sacct for those gone."""
        ids = [str(i) for i in job_ids]
        result = {i: self._final[i] for i in ids if i in self._final}
        open_ids = [i for i in ids if i not in result]
        if not open_ids:
            return result
        rows = self._fresh_listing(open_ids)
        if rows is None:
            return {**result, **{i: JobStatus(JobState.UNKNOWN, reason="Slurm controller not reachable")
                                 for i in open_ids}}
        missing = [i for i in open_ids if i not in rows]
        if missing and self._accounting is not False:
            rows.update(self._sacct(missing))
        stuck = []
        for job_id in open_ids:
            row = rows.get(job_id)
            if row is None:
                result[job_id] = JobStatus(JobState.UNKNOWN, reason="not in squeue and no accounting record")
                continue
            status = row.status
            if self._stuck(row):
                stuck.append(job_id)
                status = JobStatus(JobState.CANCELLED, reason=f"cancelled after pending more than "
                                   f"{self.policy.cancel_pending_after_s:.0f} s on unavailable nodes ({row.reason})")
            if status.state.finished:
                self._final[job_id] = status
                self._pending_since.pop(job_id, None)
            result[job_id] = status
        if stuck:
            self.cancel(stuck)
        return result

    def _fresh_listing(self, ids: list[str]) -> dict[str, sp.QueueRow] | None:
        if self._listing is not None:
            taken, rows = self._listing
            if self._clock() - taken <= self.policy.listing_ttl_s and all(i in rows for i in ids):
                return dict(rows)
        out = self._run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", sp.SQUEUE_FORMAT])
        if not out.ok:
            if "Invalid job id" in out.stderr:
                return {}
            log.warning("squeue failed, status may be stale (will retry): %s", out.stderr.strip())
            return None
        return sp.parse_squeue(out.stdout)

    def _sacct(self, ids: list[str]) -> dict[str, sp.QueueRow]:
        out = self._run(["sacct", "-X", "-n", "-P", "-j", ",".join(ids), f"--format={sp.SACCT_FIELDS}"])
        if not out.ok:
            if any(text in out.stderr for text in _ACCOUNTING_OFF):
                log.info("Slurm accounting is off; polling with squeue only")
                self._accounting = False
            else:
                log.warning("sacct failed (will retry): %s", out.stderr.strip())
            return {}
        self._accounting = True
        return sp.parse_sacct(out.stdout)

    def _stuck(self, row: sp.QueueRow) -> bool:
        if self.policy.cancel_pending_after_s is None or sp.unavailable_reason(row) is None:
            self._pending_since.pop(row.job_id, None)
            return False
        since = self._pending_since.setdefault(row.job_id, self._clock())
        return self._clock() - since >= self.policy.cancel_pending_after_s

    # ------------------------------------------------------------------ cancel, fetch, find

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``scancel`` these ids and no others; ids that already ended are fine."""
        ids = [str(i) for i in job_ids if str(i).strip()]
        if not ids:
            return
        out = self._run_waiting(["scancel", *ids], "scancel")
        if not out.ok and "already completing or completed" not in out.stderr \
                and "Invalid job id" not in out.stderr:
            raise SchedulerError(f"scancel {' '.join(ids)} failed: {out.stderr.strip()}",
                                 hint="run 'ncclbot-sweep cancel' again, or scancel the ids by hand")
        log.info("cancelled Slurm jobs %s", ", ".join(ids))

    def fetch(self, job: JobSpec, *, ended: bool = True) -> CollectReport:
        """Mirror the job's folder back (only finished steps while it runs), verified by checksum."""
        report = sync_tree(self.transport, PurePosixPath(job.remote_dir), Path(job.local_dir), job_ended=ended)
        log.info("job %s: fetched %d files (%d bytes), %d unchanged", job.job_key, report.files_fetched,
                 report.bytes_fetched, report.files_unchanged)
        return report

    def find_tagged(self, campaign_key: str) -> Mapping[str, str]:
        """``{tag: job id}`` of the campaign's jobs Slurm knows; the newest id wins per tag.

        Raises SchedulerError when Slurm cannot be asked (the caller must not submit then,
        or it might duplicate a job).
        """
        prefix = job_tag(campaign_key, "")
        out = self._run_waiting(["squeue", "--me", "-h", "-t", "all", "-o", sp.SQUEUE_FORMAT], "squeue")
        if not out.ok:
            raise SchedulerError(f"cannot list Slurm jobs to reconcile the campaign: {out.stderr.strip()}",
                                 hint="check that Slurm answers (squeue) and run the command again")
        rows = sp.parse_squeue(out.stdout)
        self._listing = (self._clock(), rows)
        found: dict[str, str] = {}
        if not self._searched_history and self._accounting is not False:
            found.update(self._history(prefix))
        self._searched_history = True
        for row in rows.values():
            tag = _tag_of(row, prefix)
            if tag and _newer(row.job_id, found.get(tag)):
                found[tag] = row.job_id
        return found

    def _history(self, prefix: str) -> dict[str, str]:
        """Tagged jobs that already left the queue, from accounting (first call only)."""
        out = self._run(["sacct", "-X", "-n", "-P", "--starttime=now-30days", f"--format={sp.SACCT_FIELDS}"])
        if not out.ok:
            if any(text in out.stderr for text in _ACCOUNTING_OFF):
                self._accounting = False
            return {}
        self._accounting = True
        found: dict[str, str] = {}
        for row in sp.parse_sacct(out.stdout).values():
            tag = _tag_of(row, prefix)
            if tag and _newer(row.job_id, found.get(tag)):
                found[tag] = row.job_id
        return found

    def close(self) -> None:
        self.transport.close()


def _tag_of(row: sp.QueueRow, prefix: str) -> str | None:
    """The campaign tag a job carries: in its comment, or (jobs of older versions) its name."""
    for text in (row.comment, row.name):
        if text.startswith(prefix):
            return text
    return None


def _newer(job_id: str, than: str | None) -> bool:
    if than is None:
        return True
    try:
        return int(job_id.split("_")[0]) > int(than.split("_")[0])
    except ValueError:
        return job_id > than


def _controller_down(stderr: str) -> bool:
    return any(text in stderr for text in _CONTROLLER_DOWN)


def _submit_hint(failure: sp.SubmitFailure, attempts: int) -> str:
    if failure.retryable:
        return (f"gave up after {attempts} attempts; the campaign is unchanged, run "
                "'ncclbot-sweep resume DIR' later")
    return ("fix the scheduler section of the inventory (partition, account, qos, limits) and run "
            "'ncclbot-sweep resume DIR'; nothing was submitted for this job")
