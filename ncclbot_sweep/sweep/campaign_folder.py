"""Opening a campaign folder: the one place that does it (architecture sections 2 and 4).

Three ways in, one per kind of command:

* :func:`create` (``submit``) plans the campaign from its YAML files, takes the folder's
  runner lock, and creates or continues the folder: copies of both YAML files, rendered job
  scripts and ``step.json`` files, every job and step registered in ``manifest.sqlite``;
* :func:`open_runner` (``resume``) does the same from the folder's own copies;
* :func:`open_existing` (``status``, ``cancel``, ``collect``) plans from the copies and opens
  the manifest without rendering or copying anything: read-only (an in-memory snapshot of
  the manifest, for ``status``) or writable (``cancel``).

The runner lock is an ``flock`` on :attr:`CampaignPaths.runner_lock`: one ``submit``/``resume``
at a time runs a campaign, a second one waits up to ``lock_wait_s`` and then refuses with
:class:`~ncclbot_sweep.errors.CampaignBusyError` naming the holder. The kernel drops the lock
when its holder dies, so a killed runner never leaves the folder locked.

Below the runner, ``collect`` and the executors: this module imports none of them (the
:class:`~ncclbot_sweep.sweep.jobspec.JobSpec` it hands the executors lives in a leaf module).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path, PurePosixPath
from typing import IO

from ncclbot_sweep.atomicfile import write_atomic
from ncclbot_sweep.errors import CampaignBusyError, ManifestError
from ncclbot_sweep.outcomes import StepOutcome
from ncclbot_sweep.paths import CampaignPaths
from ncclbot_sweep.sweep.campaign import Plan, load_campaign, plan_campaign, resolve_campaign_path
from ncclbot_sweep.sweep.estimate import Measured
from ncclbot_sweep.sweep.inventory import load_inventory, resolve_inventory_path
from ncclbot_sweep.sweep.jobspec import JobSpec
from ncclbot_sweep.sweep.manifest import Manifest
from ncclbot_sweep.sweep.render import render_campaign

__all__ = ["CampaignFolder", "create", "open_existing", "open_runner", "resumable", "run_root_for"]

log = logging.getLogger(__name__)

_LOCK_POLL_S = 0.1


@dataclasses.dataclass
class CampaignFolder:
    """An open campaign folder: its plan (from its YAML copies) and its manifest.

    ``writable`` is False for a read-only opening, whose manifest is a private in-memory copy.
    """

    root: Path
    plan: Plan
    manifest: Manifest
    run_root: PurePosixPath | Path
    writable: bool
    _lock: IO[str] | None = None

    @property
    def paths(self) -> CampaignPaths:
        return CampaignPaths.local(self.root)

    @property
    def executor_state(self) -> Path:
        return Path(self.paths.executor_state)

    def in_plan(self, job_key: str) -> bool:
        """True when the current plan has this job (the manifest may know jobs of older plans)."""
        return any(j.key == job_key for j in self.plan.jobs)

    def job_spec(self, job_key: str) -> JobSpec:
        """What an executor needs to submit, poll or fetch this job."""
        job = next(j for j in self.plan.jobs if j.key == job_key)
        rerun = tuple(s.step_key for s in self.manifest.steps(job_key)
                      if s.outcome is not None and s.outcome is not StepOutcome.OK and s.exit_code == 0)
        return JobSpec(campaign_key=self.plan.campaign_key, job_key=job_key,
                       local_dir=Path(self.paths.job_dir(job_key)),
                       remote_dir=CampaignPaths(self.run_root).job_dir(job_key), nodes=job.nodes,
                       time_limit_s=job.time_limit_min * 60, name=self.plan.job_name(job_key), rerun=rerun)

    def close(self) -> None:
        """Close the manifest and release the runner lock (if this opening holds it)."""
        self.manifest.close()
        if self._lock is not None:
            self._lock.close()  # closing the file drops the flock
            self._lock = None


def run_root_for(plan: Plan, root: Path) -> PurePosixPath | Path:
    """Where the campaign folder lives when its jobs run.

    Over SSH with ``access.remote_workdir`` set: ``<remote_workdir>/<campaign>-<fabric>`` on the
    cluster's shared file system; otherwise the local folder itself.
    """
    access = plan.inventory.access
    if access.kind == "ssh" and access.remote_workdir:
        return PurePosixPath(access.remote_workdir) / f"{plan.campaign.name}-{plan.inventory.name}"
    return root.resolve()


# --------------------------------------------------------------------------- the runner lock


def _take_lock(root: Path, command: str, wait_s: float) -> IO[str]:
    """Hold the folder's runner lock (waiting up to ``wait_s``) and write who holds it."""
    path = Path(CampaignPaths.local(root).runner_lock)
    fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - kept open while the lock is held
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError as exc:
            if time.monotonic() >= deadline:
                holder = _holder(path)
                fh.close()
                raise CampaignBusyError(
                    f"another ncclbot-sweep {holder} is running this campaign", path=root,
                    hint="wait for it to end, follow it with 'ncclbot-sweep status DIR', or stop it "
                         "(Ctrl-C, or 'ncclbot-sweep cancel DIR'); only one submit or resume runs a "
                         "campaign at a time") from exc
            time.sleep(_LOCK_POLL_S)
    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps({"command": command, "pid": os.getpid(), "host": socket.gethostname(),
                         "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
    fh.flush()
    return fh


def _holder(path: Path, *, tries: int = 10) -> str:
    """``submit (pid 123 on host, since ...)`` from the lock file, or ``command`` when unreadable.

    The holder writes its details just after taking the lock, so a reader that comes in
    between finds the file empty or half written: it reads again for up to a second.
    """
    for attempt in range(tries):
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            return f"{info['command']} (pid {info['pid']} on {info['host']}, since {info['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            if attempt + 1 < tries:
                time.sleep(_LOCK_POLL_S)
    return "command"


# --------------------------------------------------------------------------- opening


def create(campaign_path: Path | str, inventory_path: Path | str, workdir: Path | str, *,
           enforce_budget: bool = True, command: str = "submit", lock_wait_s: float = 0.0,
           measured: Measured | None = None) -> CampaignFolder:
    """Plan, lock, and create or continue the campaign folder; render it and register it.

    ``measured`` prices the plan with an earlier campaign's times; the folder keeps a copy, which
    later openings (and a ``submit`` without it) plan with.

    Validation (both YAML files, the plan, the budget) runs before anything is written, so
    a command that fails it leaves no folder behind. Idempotent: files that did not change
    are not rewritten and known jobs are not re-added. Recoverable at every moment: the YAML
    copies come first, then the job scripts and ``step.json`` files, the manifest last, each
    written whole (:mod:`ncclbot_sweep.atomicfile`, :meth:`Manifest.create`); so a folder
    that has its YAML copies can always be finished by ``resume``, whatever stopped this one
    (a full disk, a kill), and a new folder that did not get that far is removed again.
    Raises CampaignBusyError when another runner holds the folder, ManifestError when
    ``workdir`` holds another campaign, OutOfSpaceError (or OSError) when the disk is full.
    """
    campaign_file = resolve_campaign_path(Path(campaign_path))
    inventory_file = resolve_inventory_path(Path(inventory_path))
    root = Path(workdir)
    paths = CampaignPaths.local(root)
    plan = plan_campaign(load_campaign(campaign_file), load_inventory(inventory_file),
                         enforce_budget=enforce_budget, measured=measured or _measured_copy(paths))
    try:  # whoever makes the folder knows it is new (two submits may race for it)
        root.mkdir(parents=True)
        new = True
    except FileExistsError:
        new = False
    try:
        lock = _take_lock(root, command, lock_wait_s)
    except CampaignBusyError:
        raise  # the folder is the holder's, new or not: never removed from under it
    except BaseException:
        _remove_if_new(root, new)
        raise
    try:
        meta = {"campaign": plan.campaign.name, "campaign_key": plan.campaign_key, "fabric": plan.inventory.name,
                "kind": plan.campaign.kind}
        # A folder that has a manifest must be this campaign's before its copies are replaced.
        manifest = Manifest.create(Path(paths.manifest), meta) if Path(paths.manifest).exists() else None
        try:
            _copy_source(campaign_file, Path(paths.campaign_yaml), "campaign.yaml")
            _copy_source(inventory_file, Path(paths.inventory_yaml), "inventory.yaml")
            if measured is not None:
                write_atomic(Path(paths.measured_times), measured.to_json())
            run_root = run_root_for(plan, root)
            render_campaign(plan, root, run_root=run_root)
            manifest = manifest or Manifest.create(Path(paths.manifest), meta)
            added = manifest.register(plan.jobs)
            if added:
                log.info("registered %d new jobs", added)
        except BaseException:
            if manifest is not None:
                manifest.close()
            raise
    except BaseException:
        lock.close()
        _remove_if_new(root, new and not resumable(root))
        raise
    return CampaignFolder(root=root, plan=plan, manifest=manifest, run_root=run_root, writable=True, _lock=lock)


def resumable(workdir: Path | str) -> bool:
    """True when the folder holds both YAML copies: ``resume`` can finish it from them."""
    paths = CampaignPaths.local(Path(workdir))
    return Path(paths.campaign_yaml).is_file() and Path(paths.inventory_yaml).is_file()


def _remove_if_new(root: Path, new: bool) -> None:
    """Remove a folder this command created and could not make a campaign folder of (nothing to resume)."""
    if new:
        shutil.rmtree(root, ignore_errors=True)


def open_runner(workdir: Path | str, *, command: str = "resume", lock_wait_s: float = 0.0) -> CampaignFolder:
    """Open an existing campaign folder to run it (``resume``): :func:`create` from its own copies.

    A folder whose creation stopped before its manifest was written (a full disk, a kill) is
    finished here: its YAML copies are all :func:`create` needs.
    """
    paths = CampaignPaths.local(Path(workdir))
    if not resumable(workdir):
        _existing(workdir)  # not a campaign folder at all: says so
        missing = paths.campaign_yaml if not Path(paths.campaign_yaml).is_file() else paths.inventory_yaml
        raise ManifestError(f"the campaign folder has no {missing.name}: its creation was interrupted before the "
                            "copy was written", path=workdir,
                            hint=f"run the same 'ncclbot-sweep submit CAMPAIGN -i INVENTORY -w {workdir}' again: "
                                 "it finishes the folder and runs nothing twice")
    return create(paths.campaign_yaml, paths.inventory_yaml, workdir, enforce_budget=False, command=command,
                  lock_wait_s=lock_wait_s)


def open_existing(workdir: Path | str, *, writable: bool) -> CampaignFolder:
    """Open an existing campaign folder without rendering, copying or registering anything.

    Read-only (``writable=False``) takes a private snapshot of the manifest, so nothing in
    the folder changes; writable opens the manifest itself. Neither takes the runner lock:
    ``status`` follows a running campaign and ``cancel`` stops one.
    """
    paths = _existing(workdir)
    plan = plan_campaign(load_campaign(paths.campaign_yaml), load_inventory(paths.inventory_yaml),
                         enforce_budget=False, measured=_measured_copy(paths))
    manifest_path = Path(paths.manifest)
    manifest = Manifest.open(manifest_path) if writable else Manifest.snapshot(manifest_path)
    root = Path(workdir)
    return CampaignFolder(root=root, plan=plan, manifest=manifest, run_root=run_root_for(plan, root),
                          writable=writable)


def _measured_copy(paths: CampaignPaths) -> Measured | None:
    """The measured times the folder's plan was priced with, or None; ManifestError when the copy is unreadable."""
    path = Path(paths.measured_times)
    if not path.is_file():
        return None
    try:
        return Measured.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManifestError(f"the copy of the measured times the campaign was planned with cannot be read: {exc}",
                            path=path, hint="restore it, or submit again with the same --from-dataset") from exc


def _existing(workdir: Path | str) -> CampaignPaths:
    paths = CampaignPaths.local(Path(workdir))
    if not Path(paths.manifest).exists():
        if resumable(workdir):
            raise ManifestError(f"the campaign folder has no {paths.manifest.name} yet: its creation was "
                                "interrupted", path=workdir, hint=f"run 'ncclbot-sweep resume {workdir}' to finish it")
        raise ManifestError(f"not a campaign folder (no {paths.manifest.name})", path=workdir,
                            hint="pass the --workdir given to 'ncclbot-sweep submit'")
    return paths


def _copy_source(src: Path, dest: Path, what: str) -> None:
    """Keep a copy of a YAML file in the folder (atomically); an unchanged copy is left alone."""
    if dest.exists():
        if src.resolve() == dest.resolve() or dest.read_bytes() == src.read_bytes():
            return
        log.warning("%s differs from the copy in the campaign folder; using %s", what, src)
    write_atomic(dest, src.read_bytes())

