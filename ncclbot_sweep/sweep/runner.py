"""The campaign runner: the one place that submits, polls, reconciles and updates the manifest.

Executors only start and watch jobs (architecture section 4.5); everything that makes a campaign
survive crashes lives here:

* :func:`prepare` opens the campaign folder for a runner (:mod:`ncclbot_sweep.sweep.campaign_folder`:
  planned, rendered, registered, with the folder's runner lock) and builds its executor;
* :func:`reconcile` asks the executor which of the campaign's jobs it knows (by tag), adopts
  any job submitted just before a crash, polls all open jobs in one call, and classifies
  the steps of finished jobs from their exit markers;
* :func:`submit` runs only jobs never submitted (so submitting twice runs nothing twice);
  :func:`resume` also re-queues jobs with steps that are missing or failed (the job script
  skips steps whose ``exit`` says 0); :func:`status` reconciles a private snapshot of the
  manifest and summarises, writing nothing; :func:`cancel` stops the open jobs.

How a step's exit code, its job's state and its logs make an outcome is decided in
:mod:`ncclbot_sweep.outcomes`, the same rule ingest uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ncclbot_sweep.errors import ExecutorError, Interrupted, OutOfSpaceError, file_system_full, is_out_of_space
from ncclbot_sweep.outcomes import outcome_reason, step_outcome
from ncclbot_sweep.step_output import step_output_usable
from ncclbot_sweep.sweep import campaign_folder
from ncclbot_sweep.sweep.campaign_folder import CampaignFolder
from ncclbot_sweep.sweep.estimate import Measured
from ncclbot_sweep.sweep.executors import (UNKNOWN_POLL_LIMIT, Executor, JobSpec, JobState, JobStatus, StepOutcome,
                                           make_executor)
from ncclbot_sweep.sweep.manifest import JobPhase

__all__ = ["CampaignSummary", "Progress", "cancel", "open_campaign", "prepare", "reconcile", "resume",
           "status", "submit"]

log = logging.getLogger(__name__)

#: Called after every poll with (steps finished, steps total, a short message).
Progress = Callable[[int, int, str], None]


@dataclasses.dataclass
class CampaignSummary:
    """What ``status`` prints: job phases, step outcomes, and whether everything is done."""

    root: Path
    campaign: str
    campaign_key: str
    fabric: str
    jobs: dict[str, int]
    steps: dict[str, int]
    total_steps: int
    failed: list[dict[str, Any]]
    #: One row per job: key, nodes, phase, scheduler state and id, attempts, steps ok of total.
    job_rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def steps_ok(self) -> int:
        return self.steps.get(StepOutcome.OK.value, 0)

    @property
    def open_jobs(self) -> int:
        return self.jobs.get(JobPhase.SUBMITTED.value, 0)

    @property
    def complete(self) -> bool:
        return self.steps_ok == self.total_steps

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["root"] = str(self.root)
        data["complete"] = self.complete
        return data


@dataclasses.dataclass
class _Campaign:
    """An open campaign folder and the executor its jobs run on."""

    folder: CampaignFolder
    executor: Executor

    def close(self) -> None:
        try:
            self.executor.close()
        finally:
            self.folder.close()


# --------------------------------------------------------------------------- opening


def _with_executor(folder: CampaignFolder, executor: Executor | None) -> _Campaign:
    try:
        executor = executor or make_executor(folder.plan.inventory, state_dir=folder.executor_state)
    except BaseException:
        folder.close()
        raise
    return _Campaign(folder=folder, executor=executor)


def prepare(campaign_path: Path | str, inventory_path: Path | str, workdir: Path | str, *,
            enforce_budget: bool = True, executor: Executor | None = None,
            lock_wait_s: float = 0.0, measured: Measured | None = None) -> _Campaign:
    """Open (create or continue) the campaign folder for a runner, and its executor.

    See :func:`ncclbot_sweep.sweep.campaign_folder.create`. Raises CampaignBusyError when another
    runner holds the folder, ManifestError when ``workdir`` holds another campaign.
    """
    folder = campaign_folder.create(campaign_path, inventory_path, workdir, enforce_budget=enforce_budget,
                                    lock_wait_s=lock_wait_s, measured=measured)
    return _with_executor(folder, executor)


def open_campaign(workdir: Path | str, *, executor: Executor | None = None, writable: bool = False) -> _Campaign:
    """Open an existing campaign folder without running it: read-only, or ``writable`` (``cancel``)."""
    return _with_executor(campaign_folder.open_existing(workdir, writable=writable), executor)


# --------------------------------------------------------------------------- reconcile


def _spec(camp: _Campaign, job_key: str) -> JobSpec:
    return camp.folder.job_spec(job_key)


def _classify_steps(camp: _Campaign, job_key: str, job_state: JobState | None) -> None:
    """Record each step's outcome from its folder; ``job_state`` is the job's final state (None: still running)."""
    learners = {s.key for s in camp.folder.plan.steps if s.learns}
    for step in camp.folder.manifest.steps(job_key):
        if step.outcome is StepOutcome.OK and step.exit_code == 0:
            continue  # the job script never re-runs a step whose exit says 0 with a result: it stands
        files = camp.folder.paths.step_files(job_key, step.step_key)
        outcome, code = step_outcome(files, job_state=job_state, output_ok=functools.partial(step_output_usable, files),
                                     learner=step.step_key in learners)
        if outcome is None and step.outcome is not None and job_state is None:
            continue  # a running job re-runs an old failed step: keep the old outcome until it ends
        if outcome is None and step.outcome is StepOutcome.OK:
            continue
        camp.folder.manifest.record_step(step.step_key, outcome, exit_code=code)


def _adopt(camp: _Campaign) -> None:
    """Adopt jobs the executor has under our tags that the manifest does not know of (crash window)."""
    try:
        tagged = camp.executor.find_tagged(camp.folder.plan.campaign_key)
    except ExecutorError as exc:  # retried on the next reconcile, like a failed poll
        log.warning("could not list the campaign's jobs on the scheduler, will retry: %s", exc)
        camp.folder.manifest.note("find_tagged_failed", str(exc))
        return
    for job in camp.folder.manifest.jobs():
        job_id = tagged.get(_spec(camp, job.job_key).tag) if camp.folder.in_plan(job.job_key) else None
        if job_id is None or job_id in job.known_ids:
            continue
        log.warning("adopting job %s (executor id %s) submitted before a crash", job.job_key, job_id)
        camp.folder.manifest.mark_submitted(job.job_key, job_id, adopted=True)


def reconcile(camp: _Campaign, unknown_polls: dict[str, int] | None = None) -> bool:
    """Bring the manifest in line with the executor (one batched poll). Returns True if anything changed."""
    _adopt(camp)
    open_jobs = [j for j in camp.folder.manifest.jobs([JobPhase.SUBMITTED]) if j.executor_job_id]
    if not open_jobs:
        return False
    ids = [j.executor_job_id for j in open_jobs]
    try:
        statuses = camp.executor.poll(ids) if camp.folder.writable else camp.executor.peek(ids)
    except ExecutorError as exc:  # scheduler trouble is logged and retried, never fatal
        log.warning("poll failed, will retry: %s", exc)
        camp.folder.manifest.note("poll_failed", str(exc))
        return False
    changed = False
    unknown_polls = {} if unknown_polls is None else unknown_polls
    for job in open_jobs:
        st = statuses.get(job.executor_job_id, JobStatus(JobState.UNKNOWN))
        if st.state is JobState.UNKNOWN:
            unknown_polls[job.job_key] = unknown_polls.get(job.job_key, 0) + 1
            if unknown_polls[job.job_key] < UNKNOWN_POLL_LIMIT:
                continue
            st = JobStatus(JobState.FAILED, reason="the scheduler lost track of the job")
        unknown_polls.pop(job.job_key, None)
        if st.state.finished:
            changed |= _finish(camp, job.job_key, st)
        else:
            changed |= camp.folder.manifest.update_job(job.job_key, JobPhase.SUBMITTED, scheduler_state=st.state.value,
                                                reason=st.reason or None)
            _classify_steps(camp, job.job_key, None)
    return changed


def _finish(camp: _Campaign, job_key: str, st: JobStatus) -> bool:
    """Fetch an ended job (not for read-only commands: ``collect`` does that) and classify its steps."""
    if camp.folder.writable:
        try:
            camp.executor.fetch(_spec(camp, job_key))
        except ExecutorError as exc:
            log.warning("fetching job %s failed, will retry: %s", job_key, exc)
            camp.folder.manifest.note("fetch_failed", str(exc), job_key=job_key)
            return False
    _classify_steps(camp, job_key, st.state)
    phase = JobPhase.CANCELLED if st.state is JobState.CANCELLED else JobPhase.FINISHED
    return camp.folder.manifest.update_job(job_key, phase, scheduler_state=st.state.value, exit_code=st.exit_code,
                                    reason=st.reason or None)


# --------------------------------------------------------------------------- actions


def _submit_ready(camp: _Campaign, *, retry: bool) -> list[str]:
    """Submit planned jobs (only never-submitted ones unless ``retry``) within the queue limit."""
    limit = camp.folder.plan.inventory.scheduler.max_jobs_in_queue
    open_count = len(camp.folder.manifest.jobs([JobPhase.SUBMITTED]))
    submitted = []
    for job in camp.folder.manifest.jobs([JobPhase.PLANNED]):
        if open_count >= limit:
            break
        if (job.attempts and not retry) or not camp.folder.in_plan(job.job_key):
            continue
        job_id = camp.executor.submit(_spec(camp, job.job_key))
        camp.folder.manifest.mark_submitted(job.job_key, job_id)
        open_count += 1
        submitted.append(job.job_key)
    return submitted


def _requeue_unfinished(camp: _Campaign, already: set[str]) -> int:
    """Put ended jobs with steps missing or failed back to PLANNED, unless this command ran them.

    Called by ``resume`` on every round, so a job that was still running (or looked alive)
    when ``resume`` started and then failed is retried too; a job this command submitted
    itself is not retried again (a deterministic failure must not loop).
    """
    count = 0
    for job in camp.folder.manifest.jobs([JobPhase.FINISHED, JobPhase.CANCELLED]):
        if job.job_key in already or not camp.folder.in_plan(job.job_key):
            continue
        if all(s.outcome is StepOutcome.OK for s in camp.folder.manifest.steps(job.job_key)):
            continue
        camp.folder.manifest.update_job(job.job_key, JobPhase.PLANNED, reason="re-queued by resume")
        count += 1
    return count


def _watch(camp: _Campaign, progress: Progress | None, *, retry: bool, wait: bool) -> None:
    """Submit, poll and reconcile until no job is open and none is left to submit."""
    sched = camp.folder.plan.inventory.scheduler
    interval = sched.poll_interval_s
    unknown: dict[str, int] = {}
    submitted_here: set[str] = set()
    if retry:
        _requeue_unfinished(camp, submitted_here)
    while True:
        submitted_here.update(_submit_ready(camp, retry=retry))
        changed = reconcile(camp, unknown)
        if retry and _requeue_unfinished(camp, submitted_here):
            changed = True
        summary = _summarise(camp)
        if progress:
            done = summary.total_steps - summary.steps.get("pending", 0)
            progress(done, summary.total_steps, _progress_message(summary))
        waiting = [j for j in camp.folder.manifest.jobs([JobPhase.PLANNED]) if retry or not j.attempts]
        if not wait or (summary.open_jobs == 0 and not waiting):
            return
        interval = sched.poll_interval_s if changed else min(interval * 2, sched.poll_interval_max_s)
        time.sleep(interval)


def _progress_message(summary: CampaignSummary) -> str:
    """``12 ok, 1 not ok, 2 jobs open``: what the bar's ``done/total`` count does not say already."""
    parts = [f"{summary.steps_ok} ok"] + ([f"{len(summary.failed)} not ok"] if summary.failed else [])
    return ", ".join(parts) + f", {_jobs(summary.open_jobs)} open"


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _summarise(camp: _Campaign) -> CampaignSummary:
    """Counts of job phases and step outcomes over the current plan, failed steps, one row per job."""
    jobs: dict[str, int] = {}
    steps: dict[str, int] = {}
    failed = []
    ok_per_job: dict[str, int] = {}
    plan_steps = {s.key for s in camp.folder.plan.steps}
    for step in camp.folder.manifest.steps():
        if step.step_key not in plan_steps:
            continue
        key = "pending" if step.outcome is None else step.outcome.value
        steps[key] = steps.get(key, 0) + 1
        ok_per_job[step.job_key] = ok_per_job.get(step.job_key, 0) + (step.outcome is StepOutcome.OK)
        if step.outcome not in (None, StepOutcome.OK):
            files = camp.folder.paths.step_files(step.job_key, step.step_key)
            failed.append({"job_key": step.job_key, "step_key": step.step_key, "label": step.label,
                           "outcome": step.outcome.value, "exit_code": step.exit_code,
                           "last_error": outcome_reason(files, step.outcome)})
    rows = []
    for job in camp.folder.manifest.jobs():
        if not camp.folder.in_plan(job.job_key):
            continue
        jobs[job.phase.value] = jobs.get(job.phase.value, 0) + 1
        rows.append({"job_key": job.job_key, "nodes": job.nodes, "phase": job.phase.value,
                     "scheduler_state": job.scheduler_state, "executor_job_id": job.executor_job_id,
                     "attempts": job.attempts, "steps_ok": ok_per_job.get(job.job_key, 0), "steps": job.n_steps,
                     "reason": job.reason})
    meta = camp.folder.manifest.meta()
    return CampaignSummary(root=camp.folder.root, campaign=meta.get("campaign", ""), campaign_key=camp.folder.plan.campaign_key,
                           fabric=meta.get("fabric", ""), jobs=jobs, steps=steps, total_steps=len(plan_steps),
                           failed=failed, job_rows=rows)


def _run(camp: _Campaign, progress: Progress | None, *, retry: bool, wait: bool) -> CampaignSummary:
    """Reconcile, then submit and watch; a Ctrl-C says what is left and how to finish it."""
    try:
        reconcile(camp)
        _watch(camp, progress, retry=retry, wait=wait)
        summary = _summarise(camp)
        if summary.failed and file_system_full(camp.folder.root):
            raise OutOfSpaceError(f"{len(summary.failed)} steps failed while the file system holding the campaign "
                                  "folder is full", path=camp.folder.root)
        return summary
    except KeyboardInterrupt as exc:
        raise Interrupted(_left_behind(_summarise(camp))) from exc
    finally:
        camp.close()


def _left_behind(summary: CampaignSummary) -> str:
    """What an interrupted ``submit``/``resume`` leaves: jobs still queued or running, jobs not
    submitted, and the command that finishes the campaign."""
    planned = summary.jobs.get(JobPhase.PLANNED.value, 0)
    done = summary.total_steps - summary.steps.get("pending", 0)
    queued = (f"{_jobs(summary.open_jobs)} still queued or running (they go on without this command; "
              f"'ncclbot-sweep cancel {summary.root}' stops them)" if summary.open_jobs else "no job queued or running")
    return (f"{done}/{summary.total_steps} steps done; {queued}; {_jobs(planned)} not submitted yet. "
            f"'ncclbot-sweep resume {summary.root}' finishes the campaign.")


@contextlib.contextmanager
def _finishable(workdir: Path | str) -> Iterator[None]:
    """``submit``/``resume`` stopped by a full disk or Ctrl-C at any moment: one error that names
    the path and the command that continues. That is ``resume`` once the folder has its YAML
    copies (it always can then, see :func:`ncclbot_sweep.sweep.campaign_folder.create`), the same
    ``submit`` before (nothing was kept)."""
    def way_on(what: str) -> str:
        if campaign_folder.resumable(workdir):
            return f"{what}'ncclbot-sweep resume {workdir}' finishes the campaign"
        return f"{what}run the same 'ncclbot-sweep submit' again (nothing of the campaign was kept)"

    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt as exc:  # while the folder was being created: nothing submitted yet
        raise Interrupted(way_on("the campaign folder was being created; ") + ".") from exc
    except (OSError, OutOfSpaceError) as exc:
        if not is_out_of_space(exc):
            raise
        hint = way_on("free space on that file system, then ")
        if isinstance(exc, OutOfSpaceError):
            raise OutOfSpaceError(exc.reason, path=exc.path, line=exc.line, hint=hint) from exc
        raise OutOfSpaceError(f"the file system is full ({exc.strerror or exc})", path=exc.filename or workdir,
                              hint=hint) from exc


def submit(campaign_path: Path | str, inventory_path: Path | str, workdir: Path | str, *, wait: bool = True,
           progress: Progress | None = None, enforce_budget: bool = True,
           executor: Executor | None = None, lock_wait_s: float = 0.0,
           measured: Measured | None = None) -> CampaignSummary:
    """Create or continue the campaign folder and run every job never submitted before.

    Submitting the same campaign twice runs nothing twice: jobs already submitted (running,
    finished or failed) are left alone; use :func:`resume` to re-run missing or failed steps.
    With ``wait`` it returns when no job is open; without, right after submitting. A second
    ``submit``/``resume`` on the same folder waits ``lock_wait_s`` for this one, then raises
    CampaignBusyError. A full disk at any moment raises OutOfSpaceError naming the path, with
    the command that continues (:func:`resume`); Ctrl-C raises :class:`Interrupted` saying what
    is still queued and that :func:`resume` finishes it. ``measured`` prices the plan with an
    earlier campaign's times (the folder keeps them for later commands).
    """
    with _finishable(workdir):
        camp = prepare(campaign_path, inventory_path, workdir=workdir, enforce_budget=enforce_budget,
                       executor=executor, lock_wait_s=lock_wait_s, measured=measured)
        return _run(camp, progress, retry=False, wait=wait)


def resume(workdir: Path | str, *, wait: bool = True, progress: Progress | None = None,
           executor: Executor | None = None, lock_wait_s: float = 0.0) -> CampaignSummary:
    """Finish a campaign: adopt what still runs, re-run only the steps that are missing or failed.

    Also finishes a folder whose creation was cut short (a full disk, a kill) once it has its
    YAML copies. Raises OutOfSpaceError, saying to resume again, when the disk is full.
    """
    with _finishable(workdir):
        folder = campaign_folder.open_runner(workdir, lock_wait_s=lock_wait_s)
        return _run(_with_executor(folder, executor), progress, retry=True, wait=wait)


def status(workdir: Path | str, *, executor: Executor | None = None) -> CampaignSummary:
    """Summarise the campaign as the scheduler sees it now, writing nothing.

    The manifest is reconciled in a private in-memory snapshot (jobs adopted, polled, steps
    classified from their folders); the file itself, the job folders and the scheduler's
    queue stay as they are. ``resume`` records what this shows.
    """
    camp = open_campaign(workdir, executor=executor)
    try:
        reconcile(camp)
        return _summarise(camp)
    finally:
        camp.close()


def cancel(workdir: Path | str, *, executor: Executor | None = None) -> CampaignSummary:
    """Cancel every open job and every job not yet submitted.

    Steps that had started and not finished become ``cancelled``; steps that never started
    stay pending, so ``resume`` runs them. Does not wait for a running ``submit``: it stops it.
    """
    camp = open_campaign(workdir, executor=executor, writable=True)
    try:
        reconcile(camp)
        open_jobs = camp.folder.manifest.jobs([JobPhase.SUBMITTED])
        ids = [j.executor_job_id for j in open_jobs if j.executor_job_id]
        if ids:
            camp.executor.cancel(ids)
        for job in open_jobs:
            _finish(camp, job.job_key, JobStatus(JobState.CANCELLED, reason="cancelled by the user"))
        for job in camp.folder.manifest.jobs([JobPhase.PLANNED]):
            camp.folder.manifest.update_job(job.job_key, JobPhase.CANCELLED, reason="cancelled before submission")
        return _summarise(camp)
    finally:
        camp.close()
