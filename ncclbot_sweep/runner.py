"""The campaign runner: the one place that submits, polls, reconciles and updates the manifest.

Executors only start and watch jobs (STYLE habit 13); everything that makes a campaign
survive crashes lives here:

* :func:`prepare` plans the campaign, creates (or continues) its folder (copies of the
  campaign and inventory YAML, rendered job scripts, ``step.json`` files) and registers
  every job and step in ``manifest.sqlite``;
* :func:`reconcile` asks the executor which of the campaign's jobs it knows (by tag), adopts
  any job submitted just before a crash, polls all open jobs in one call, and classifies
  the steps of finished jobs from their exit markers;
* :func:`submit` runs only jobs never submitted (so submitting twice runs nothing twice);
  :func:`resume` also re-queues jobs with steps that are missing or failed (the job script
  skips steps whose ``exit`` says 0); :func:`status` reconciles and summarises;
  :func:`cancel` stops the open jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ncclbot_sweep.campaign import Plan, load_campaign, plan_campaign, resolve_campaign_path
from ncclbot_sweep.errors import ExecutorError, ManifestError
from ncclbot_sweep.executors import Executor, JobSpec, JobState, JobStatus, StepOutcome, make_executor
from ncclbot_sweep.inventory import load_inventory, resolve_inventory_path
from ncclbot_sweep.manifest import JobPhase, Manifest
from ncclbot_sweep.paths import CampaignPaths, StepFiles
from ncclbot_sweep.render import render_campaign

__all__ = ["CampaignSummary", "Progress", "cancel", "open_campaign", "prepare", "reconcile", "resume",
           "run_root_for", "status", "submit"]

log = logging.getLogger(__name__)

#: Called after every poll with (steps finished, steps total, a short message).
Progress = Callable[[int, int, str], None]

# NCCL's message when a forced NCCL_ALGO/NCCL_PROTO leaves no valid arm (src/enqueue.cc).
_INVALID_ARM_MARKERS = ("No algorithm/protocol available", "NCCL_ALGO was set to")
_UNKNOWN_LIMIT = 20  # polls in a row a job may be unknown to the scheduler before it counts as lost


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
    """An open campaign folder: plan, manifest and executor."""

    root: Path
    plan: Plan
    manifest: Manifest
    executor: Executor
    run_root: PurePosixPath | Path

    @property
    def paths(self) -> CampaignPaths:
        return CampaignPaths.local(self.root)

    def close(self) -> None:
        self.executor.close()
        self.manifest.close()


# --------------------------------------------------------------------------- opening


def run_root_for(plan: Plan, root: Path) -> PurePosixPath | Path:
    """Where the campaign folder lives when its jobs run.

    Over SSH with ``access.remote_workdir`` set: ``<remote_workdir>/<campaign>-<fabric>`` on the
    cluster's shared file system; otherwise the local folder itself.
    """
    access = plan.inventory.access
    if access.kind == "ssh" and access.remote_workdir:
        return PurePosixPath(access.remote_workdir) / f"{plan.campaign.name}-{plan.inventory.name}"
    return root.resolve()


def _copy_source(src: Path, dest: Path, what: str) -> None:
    if dest.exists():
        if Path(src).resolve() == dest.resolve() or dest.read_bytes() == Path(src).read_bytes():
            return
        log.warning("%s differs from the copy in the campaign folder; using %s", what, src)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)


def prepare(campaign_path: Path | str, inventory_path: Path | str, workdir: Path | str, *,
            enforce_budget: bool = True, executor: Executor | None = None) -> _Campaign:
    """Plan, create or continue the campaign folder, render it, register it in the manifest.

    Idempotent: files that did not change are not rewritten and known jobs are not re-added.
    Raises ManifestError when ``workdir`` holds another campaign.
    """
    campaign = load_campaign(campaign_path)
    inventory = load_inventory(inventory_path)
    plan = plan_campaign(campaign, inventory, enforce_budget=enforce_budget)
    root = Path(workdir)
    paths = CampaignPaths.local(root)
    root.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.create(Path(paths.manifest), {"campaign": campaign.name, "campaign_key": plan.campaign_key,
                                                      "fabric": inventory.name, "kind": campaign.kind})
    try:
        _copy_source(Path(_resolved(campaign_path, "campaigns")), Path(paths.campaign_yaml), "campaign.yaml")
        _copy_source(Path(_resolved(inventory_path, "inventories")), Path(paths.inventory_yaml), "inventory.yaml")
        run_root = run_root_for(plan, root)
        render_campaign(plan, root, run_root=run_root)
        added = manifest.register(plan.jobs)
        if added:
            log.info("registered %d new jobs", added)
        executor = executor or make_executor(inventory, state_dir=root / ".executor")
    except BaseException:
        manifest.close()
        raise
    return _Campaign(root=root, plan=plan, manifest=manifest, executor=executor, run_root=run_root)


def _resolved(path: Path | str, kind: str) -> Path:
    return (resolve_campaign_path if kind == "campaigns" else resolve_inventory_path)(Path(path))


def open_campaign(workdir: Path | str, *, executor: Executor | None = None) -> _Campaign:
    """Open an existing campaign folder from its own copies of the campaign and inventory."""
    paths = CampaignPaths.local(Path(workdir))
    if not Path(paths.manifest).exists():
        raise ManifestError("not a campaign folder (no manifest.sqlite)", path=workdir,
                            hint="pass the --workdir given to 'ncclbot-sweep submit'")
    return prepare(paths.campaign_yaml, paths.inventory_yaml, workdir=workdir, enforce_budget=False,
                   executor=executor)


# --------------------------------------------------------------------------- reconcile


def _spec(camp: _Campaign, job_key: str) -> JobSpec:
    job = next(j for j in camp.plan.jobs if j.key == job_key)
    paths = camp.paths
    return JobSpec(campaign_key=camp.plan.campaign_key, job_key=job_key, local_dir=Path(paths.job_dir(job_key)),
                   remote_dir=CampaignPaths(camp.run_root).job_dir(job_key), nodes=job.nodes,
                   time_limit_s=job.time_limit_min * 60)


# What a job's final state says of a step the scheduler interrupted.
_INTERRUPTED = {JobState.CANCELLED: StepOutcome.CANCELLED, JobState.NODE_FAIL: StepOutcome.NODE_FAIL,
                JobState.TIMEOUT: StepOutcome.TIMEOUT, JobState.PREEMPTED: StepOutcome.CANCELLED}


def _step_outcome(camp: _Campaign, job_key: str, step_key: str, job_state: JobState | None) -> tuple[
        StepOutcome | None, int | None]:
    """A step's outcome from its folder; ``job_state`` is the job's final state (None: still running)."""
    files = camp.paths.step_files(job_key, step_key)
    marker = Path(files.exit_marker)
    if marker.exists():
        text = marker.read_text().strip()
        code = int(text) if text.lstrip("-").isdigit() else -1
        if code == 0:
            return StepOutcome.OK, 0
        if code in (124, 137):
            return StepOutcome.TIMEOUT, code
        if code >= 128 and job_state in _INTERRUPTED:
            # Killed by a signal while Slurm ended the job (a node went down, a cancel):
            # the job's state says why, not the step's own failure.
            return _INTERRUPTED[job_state], code
        if _mentions_invalid_arm(files):
            return StepOutcome.INVALID_ARM, code
        return StepOutcome.FAILED, code
    if job_state is None:
        return None, None
    started = Path(files.stdout).exists()
    if not started:
        return None, None  # never ran: stays pending and runs on resume
    return _INTERRUPTED.get(job_state, StepOutcome.FAILED), None


def _mentions_invalid_arm(files: StepFiles) -> bool:
    """True when NCCL refused the forced arm (its WARN in the step's log, stdout or stderr)."""
    for path in (files.stdout, files.nccl_log, files.stderr):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(4_000_000)
        except OSError:
            continue
        if any(m in text for m in _INVALID_ARM_MARKERS):
            return True
    return False


def _classify_steps(camp: _Campaign, job_key: str, job_state: JobState | None) -> None:
    for step in camp.manifest.steps(job_key):
        outcome, code = _step_outcome(camp, job_key, step.step_key, job_state)
        if outcome is None and step.outcome is not None and job_state is None:
            continue  # a running job re-runs an old failed step: keep the old outcome until it ends
        if outcome is None and step.outcome is StepOutcome.OK:
            continue
        camp.manifest.record_step(step.step_key, outcome, exit_code=code)


def _adopt(camp: _Campaign) -> None:
    """Adopt jobs the executor has under our tags that the manifest does not know of (crash window)."""
    try:
        tagged = camp.executor.find_tagged(camp.plan.campaign_key)
    except ExecutorError as exc:  # retried on the next reconcile, like a failed poll
        log.warning("could not list the campaign's jobs on the scheduler, will retry: %s", exc)
        camp.manifest.note("find_tagged_failed", str(exc))
        return
    for job in camp.manifest.jobs():
        job_id = tagged.get(_spec(camp, job.job_key).tag) if _in_plan(camp, job.job_key) else None
        if job_id is None or job_id in job.known_ids:
            continue
        log.warning("adopting job %s (executor id %s) submitted before a crash", job.job_key, job_id)
        camp.manifest.mark_submitted(job.job_key, job_id, adopted=True)


def _in_plan(camp: _Campaign, job_key: str) -> bool:
    return any(j.key == job_key for j in camp.plan.jobs)


def reconcile(camp: _Campaign, unknown_polls: dict[str, int] | None = None) -> bool:
    """Bring the manifest in line with the executor (one batched poll). Returns True if anything changed."""
    _adopt(camp)
    open_jobs = [j for j in camp.manifest.jobs([JobPhase.SUBMITTED]) if j.executor_job_id]
    if not open_jobs:
        return False
    try:
        statuses = camp.executor.poll([j.executor_job_id for j in open_jobs])
    except ExecutorError as exc:  # scheduler trouble is logged and retried, never fatal
        log.warning("poll failed, will retry: %s", exc)
        camp.manifest.note("poll_failed", str(exc))
        return False
    changed = False
    unknown_polls = {} if unknown_polls is None else unknown_polls
    for job in open_jobs:
        st = statuses.get(job.executor_job_id, JobStatus(JobState.UNKNOWN))
        if st.state is JobState.UNKNOWN:
            unknown_polls[job.job_key] = unknown_polls.get(job.job_key, 0) + 1
            if unknown_polls[job.job_key] < _UNKNOWN_LIMIT:
                continue
            st = JobStatus(JobState.FAILED, reason="the scheduler lost track of the job")
        unknown_polls.pop(job.job_key, None)
        if st.state.finished:
            changed |= _finish(camp, job.job_key, st)
        else:
            changed |= camp.manifest.update_job(job.job_key, JobPhase.SUBMITTED, scheduler_state=st.state.value,
                                                reason=st.reason or None)
            _classify_steps(camp, job.job_key, None)
    return changed


def _finish(camp: _Campaign, job_key: str, st: JobStatus) -> bool:
    try:
        camp.executor.fetch(_spec(camp, job_key))
    except ExecutorError as exc:
        log.warning("fetching job %s failed, will retry: %s", job_key, exc)
        camp.manifest.note("fetch_failed", str(exc), job_key=job_key)
        return False
    _classify_steps(camp, job_key, st.state)
    phase = JobPhase.CANCELLED if st.state is JobState.CANCELLED else JobPhase.FINISHED
    return camp.manifest.update_job(job_key, phase, scheduler_state=st.state.value, exit_code=st.exit_code,
                                    reason=st.reason or None)


# --------------------------------------------------------------------------- actions


def _submit_ready(camp: _Campaign, *, retry: bool) -> list[str]:
    """Submit planned jobs (only never-submitted ones unless ``retry``) within the queue limit."""
    limit = camp.plan.inventory.scheduler.max_jobs_in_queue
    open_count = len(camp.manifest.jobs([JobPhase.SUBMITTED]))
    submitted = []
    for job in camp.manifest.jobs([JobPhase.PLANNED]):
        if open_count >= limit:
            break
        if (job.attempts and not retry) or not _in_plan(camp, job.job_key):
            continue
        job_id = camp.executor.submit(_spec(camp, job.job_key))
        camp.manifest.mark_submitted(job.job_key, job_id)
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
    for job in camp.manifest.jobs([JobPhase.FINISHED, JobPhase.CANCELLED]):
        if job.job_key in already or not _in_plan(camp, job.job_key):
            continue
        if all(s.outcome is StepOutcome.OK for s in camp.manifest.steps(job.job_key)):
            continue
        camp.manifest.update_job(job.job_key, JobPhase.PLANNED, reason="re-queued by resume")
        count += 1
    return count


def _watch(camp: _Campaign, progress: Progress | None, *, retry: bool, wait: bool) -> None:
    """Submit, poll and reconcile until no job is open and none is left to submit."""
    sched = camp.plan.inventory.scheduler
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
        waiting = [j for j in camp.manifest.jobs([JobPhase.PLANNED]) if retry or not j.attempts]
        if not wait or (summary.open_jobs == 0 and not waiting):
            return
        interval = sched.poll_interval_s if changed else min(interval * 2, sched.poll_interval_max_s)
        time.sleep(interval)


def _progress_message(summary: CampaignSummary) -> str:
    bad = len(summary.failed)
    return (f"{summary.steps_ok}/{summary.total_steps} steps ok, {bad} not ok, "
            f"{summary.open_jobs} jobs open")


def _summarise(camp: _Campaign) -> CampaignSummary:
    """Counts of job phases and step outcomes over the current plan, failed steps, one row per job."""
    jobs: dict[str, int] = {}
    steps: dict[str, int] = {}
    failed = []
    ok_per_job: dict[str, int] = {}
    plan_steps = {s.key for s in camp.plan.steps}
    for step in camp.manifest.steps():
        if step.step_key not in plan_steps:
            continue
        key = "pending" if step.outcome is None else step.outcome.value
        steps[key] = steps.get(key, 0) + 1
        ok_per_job[step.job_key] = ok_per_job.get(step.job_key, 0) + (step.outcome is StepOutcome.OK)
        if step.outcome not in (None, StepOutcome.OK):
            failed.append({"job_key": step.job_key, "step_key": step.step_key, "label": step.label,
                           "outcome": step.outcome.value, "exit_code": step.exit_code})
    rows = []
    for job in camp.manifest.jobs():
        if not _in_plan(camp, job.job_key):
            continue
        jobs[job.phase.value] = jobs.get(job.phase.value, 0) + 1
        rows.append({"job_key": job.job_key, "nodes": job.nodes, "phase": job.phase.value,
                     "scheduler_state": job.scheduler_state, "executor_job_id": job.executor_job_id,
                     "attempts": job.attempts, "steps_ok": ok_per_job.get(job.job_key, 0), "steps": job.n_steps,
                     "reason": job.reason})
    meta = camp.manifest.meta()
    return CampaignSummary(root=camp.root, campaign=meta.get("campaign", ""), campaign_key=camp.plan.campaign_key,
                           fabric=meta.get("fabric", ""), jobs=jobs, steps=steps, total_steps=len(plan_steps),
                           failed=failed, job_rows=rows)


def _run(camp: _Campaign, progress: Progress | None, *, retry: bool, wait: bool) -> CampaignSummary:
    try:
        reconcile(camp)
        _watch(camp, progress, retry=retry, wait=wait)
        return _summarise(camp)
    finally:
        camp.close()


def submit(campaign_path: Path | str, inventory_path: Path | str, workdir: Path | str, *, wait: bool = True,
           progress: Progress | None = None, enforce_budget: bool = True,
           executor: Executor | None = None) -> CampaignSummary:
    """Create or continue the campaign folder and run every job never submitted before.

    Submitting the same campaign twice runs nothing twice: jobs already submitted (running,
    finished or failed) are left alone; use :func:`resume` to re-run missing or failed steps.
    With ``wait`` it returns when no job is open; without, right after submitting.
    """
    camp = prepare(campaign_path, inventory_path, workdir=workdir, enforce_budget=enforce_budget,
                   executor=executor)
    return _run(camp, progress, retry=False, wait=wait)


def resume(workdir: Path | str, *, wait: bool = True, progress: Progress | None = None,
           executor: Executor | None = None) -> CampaignSummary:
    """Finish a campaign: adopt what still runs, re-run only the steps that are missing or failed."""
    camp = open_campaign(workdir, executor=executor)
    return _run(camp, progress, retry=True, wait=wait)


def status(workdir: Path | str, *, executor: Executor | None = None) -> CampaignSummary:
    """Reconcile the manifest with the executor once and summarise the campaign."""
    camp = open_campaign(workdir, executor=executor)
    try:
        reconcile(camp)
        return _summarise(camp)
    finally:
        camp.close()


def cancel(workdir: Path | str, *, executor: Executor | None = None) -> CampaignSummary:
    """Cancel every open job and every job not yet submitted.

    Steps that had started and not finished become ``cancelled``; steps that never started
    stay pending, so ``resume`` runs them.
    """
    camp = open_campaign(workdir, executor=executor)
    try:
        reconcile(camp)
        open_jobs = camp.manifest.jobs([JobPhase.SUBMITTED])
        ids = [j.executor_job_id for j in open_jobs if j.executor_job_id]
        if ids:
            camp.executor.cancel(ids)
        for job in open_jobs:
            _finish(camp, job.job_key, JobStatus(JobState.CANCELLED, reason="cancelled by the user"))
        for job in camp.manifest.jobs([JobPhase.PLANNED]):
            camp.manifest.update_job(job.job_key, JobPhase.CANCELLED, reason="cancelled before submission")
        return _summarise(camp)
    finally:
        camp.close()
