"""Tuning workers as one Slurm job: ``analyze tune -i INVENTORY --nodes N`` (issue 12).

A tuning job runs ``ncclbot-sweep analyze tune`` once per node (``srun``), each task with its
``--workers`` processes, on one tuning folder and one Optuna storage; the per-study locks
share the studies out (``analysis/study/tune.py``). It goes through the campaign pieces that
fit: the inventory (access, scheduler, and ``ncclbot_sweep.command``, the ncclbot-sweep the
nodes run), a job script from ``templates/job-tune.sh.j2`` under the one quoting rule
(:func:`~ncclbot_sweep.sweep.render.render_tune_script`), and the Slurm executor over its transport
(``sbatch`` with a readable name and the tag in ``--comment``, ``squeue``/``sacct`` polls,
``scancel``, the checksum-verified mirror back).

It is not a campaign: a campaign's unit is an nccl-tests step with an exit marker and an
outcome kept in a manifest, while a tuning job has no steps and keeps its state (every trial)
in the Optuna storage, which resumes by itself. So there is no manifest: the job is known by
its tag, and the same command run again adopts a job still queued or running under that tag
instead of submitting a second one.

Where things are:

* local access (ncclbot-sweep on the login node): the job reads the dataset and writes the
  tuning folder where they are, so both must be on the file system the nodes share;
* SSH access: the tuning folder lives in ``<access.remote_workdir>/tune-<folder name>`` (the
  folder's name as it is when it starts with ``tune``; the job has the same name) and
  is mirrored back into the local folder once the job has ended (``--wait``); the dataset is
  uploaded to ``<remote_workdir>/datasets/<name>-<digest>``, named by its content, so an
  unchanged dataset is sent once and two datasets never mix.

The per-study locks (and the default journal storage beside them) live in the tuning folder,
whose file system must honour ``flock`` across nodes (NFSv4, Lustre mounted with ``flock``);
``--storage`` with an RDB URL every node reaches keeps the trials in a database instead.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePath, PurePosixPath

from ncclbot_sweep.atomicfile import write_atomic
from ncclbot_sweep.errors import DatasetError, InventoryError
from ncclbot_sweep.paths import TuneJobFiles
from ncclbot_sweep.sweep.plan import content_key
from ncclbot_sweep.sweep.executors import UNKNOWN_POLL_LIMIT, JobSpec, JobState, JobStatus
from ncclbot_sweep.sweep.executors.slurm import SlurmExecutor
from ncclbot_sweep.sweep.inventory import Inventory
from ncclbot_sweep.sweep.mirror import RemoteFile, listing_digest, local_listing, push_tree
from ncclbot_sweep.sweep.render import render_tune_script

__all__ = ["TuneJob", "cancel_tune_jobs", "plan_tune_job", "submit_tune_job", "tune_executor", "wait_tune_job"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TuneJob:
    """A tuning job ready to submit: its job spec, the command each node runs, the dataset's two places."""

    inventory: Inventory
    spec: JobSpec
    command: tuple[str, ...]
    workers: int
    dataset: Path
    #: Where the job reads the dataset (the local folder itself with local access).
    dataset_run: PurePath
    #: The dataset's files to upload (SSH access only).
    dataset_files: tuple[RemoteFile, ...] = ()

    @property
    def files(self) -> TuneJobFiles:
        """The job's files in the local tuning folder."""
        return TuneJobFiles(self.spec.local_dir)

    @property
    def run_dir(self) -> PurePath:
        """The tuning folder where the job runs."""
        return self.spec.remote_dir


def _check(inventory: Inventory) -> None:
    if inventory.scheduler.kind != "slurm":
        raise InventoryError(f"inventory {inventory.name!r} runs jobs with the local executor, not Slurm",
                             hint="give an inventory with scheduler.kind: slurm, or leave -i out to tune on "
                                  "this machine (--workers N)")
    if inventory.access.kind == "ssh" and not inventory.access.remote_workdir:
        raise InventoryError(f"inventory {inventory.name!r} reaches the cluster over SSH without access.remote_workdir",
                             hint="set access.remote_workdir to a folder on the cluster's shared file system: "
                                  "the tuning folder and the dataset go there")


def plan_tune_job(inventory: Inventory, out: Path, dataset: Path, tune_args: Sequence[str], *, nodes: int,
                  workers: int) -> TuneJob:
    """Say where a tuning job runs and what each node runs: ``analyze tune -d DS -o OUT`` + ``tune_args``.

    ``tune_args`` are the options of the tuning itself (families, trials, seed, storage,
    ``--workers``...), passed on unchanged. The job's tag names the tuning folder (which
    jobs belong to it) and the command (which job this is).
    """
    _check(inventory)
    out = Path(os.path.abspath(out))
    dataset = Path(os.path.abspath(dataset))
    label = out.name if out.name.startswith("tune") else f"tune-{out.name}"
    files: tuple[RemoteFile, ...] = ()
    if inventory.access.kind == "ssh":
        base = PurePosixPath(inventory.access.remote_workdir or "")
        run_dir: PurePath = base / label
        files = tuple(local_listing(dataset))
        if not files:
            raise DatasetError("the dataset has no files to upload", path=dataset,
                               hint="give -d the dataset root written by 'ncclbot-sweep ingest'")
        dataset_run: PurePath = base / "datasets" / f"{dataset.name}-{listing_digest(list(files))}"
    else:
        run_dir, dataset_run = out, dataset
    command = (*inventory.ncclbot_sweep.command, "analyze", "tune", "-d", str(dataset_run), "-o", str(run_dir),
               *tune_args)
    folder_key = "tune-" + content_key({"folder": str(run_dir), "fabric": inventory.name})
    job_key = content_key({"command": command, "nodes": nodes, "workers": workers})
    spec = JobSpec(campaign_key=folder_key, job_key=job_key, local_dir=out, remote_dir=run_dir, nodes=nodes,
                   time_limit_s=60 * inventory.scheduler.time_limit_min, name=label)
    return TuneJob(inventory=inventory, spec=spec, command=command, workers=workers, dataset=dataset,
                   dataset_run=dataset_run, dataset_files=files)


def tune_executor(job: TuneJob) -> SlurmExecutor:
    """The Slurm executor of the job's inventory (its transport: the local shell or SSH)."""
    return SlurmExecutor.from_inventory(job.inventory)


def _render(job: TuneJob) -> Path:
    """Write ``job.sh`` into the local tuning folder (the executor uploads it)."""
    text = render_tune_script(job.inventory, name=job.spec.name, campaign_key=job.spec.campaign_key,
                              job_key=job.spec.job_key, run_dir=job.run_dir, nodes=job.spec.nodes,
                              workers=job.workers, command=list(job.command))
    path = Path(job.files.job_script)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=0o755)
    return path


def _open_jobs(job: TuneJob, executor: SlurmExecutor) -> dict[str, str]:
    """``{tag: job id}`` of the tuning folder's jobs still queued or running (any command)."""
    tagged = executor.find_tagged(job.spec.campaign_key)
    if not tagged:
        return {}
    statuses = executor.poll(list(tagged.values()))
    return {tag: job_id for tag, job_id in tagged.items()
            if not statuses.get(job_id, JobStatus(JobState.UNKNOWN)).state.finished}


def submit_tune_job(job: TuneJob, executor: SlurmExecutor) -> tuple[str, bool]:
    """Submit the job, or adopt the one still queued or running under its tag; returns (Slurm id, adopted).

    Over SSH the dataset is uploaded first (only the files the cluster lacks).
    """
    running = _open_jobs(job, executor)
    if job.spec.tag in running:
        log.info("tuning job %s is already queued or running as Slurm job %s", job.spec.job_key, running[job.spec.tag])
        return running[job.spec.tag], True
    if job.dataset_files:
        sent = push_tree(executor.transport, job.dataset, PurePosixPath(job.dataset_run), list(job.dataset_files))
        log.info("dataset %s: %d of %d files uploaded to %s", job.dataset, sent, len(job.dataset_files),
                 job.dataset_run)
    _render(job)
    return executor.submit(job.spec), False


def wait_tune_job(job: TuneJob, executor: SlurmExecutor, job_id: str, *,
                  on_state: Callable[[JobStatus], None] | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> JobStatus:
    """Poll until the job has ended (the inventory's poll intervals), then mirror the tuning folder back.

    ``on_state`` is called whenever the job's state changes. A job the scheduler does not know
    for :data:`~ncclbot_sweep.sweep.executors.UNKNOWN_POLL_LIMIT` polls in a row counts as failed.
    """
    sched = job.inventory.scheduler
    interval, unknown, seen = sched.poll_interval_s, 0, None
    while True:
        status = executor.poll([job_id]).get(job_id, JobStatus(JobState.UNKNOWN))
        unknown = unknown + 1 if status.state is JobState.UNKNOWN else 0
        if unknown >= UNKNOWN_POLL_LIMIT:
            status = JobStatus(JobState.FAILED, reason="the scheduler lost track of the job")
        if on_state is not None and status.state is not seen:
            on_state(status)
            seen = status.state
        if status.state.finished:
            break
        sleep(interval)
        interval = min(interval * 2, sched.poll_interval_max_s)
    report = executor.fetch(job.spec, ended=True)
    log.info("tuning folder %s: %d files fetched, %d unchanged", job.run_dir, report.files_fetched,
             report.files_unchanged)
    return status


def cancel_tune_jobs(job: TuneJob, executor: SlurmExecutor) -> list[str]:
    """Cancel every job of the tuning folder still queued or running; returns their Slurm ids.

    The studies keep every complete trial: the same command resumes them.
    """
    ids = sorted(_open_jobs(job, executor).values())
    executor.cancel(ids)
    return ids

