"""Executors: where job scripts run (local subprocesses, or Slurm over a shell or SSH)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ncclbot_sweep.executors.base import Executor, JobSpec, JobState, JobStatus, StepOutcome, job_tag

if TYPE_CHECKING:
    from ncclbot_sweep.inventory import Inventory

__all__ = ["Executor", "JobSpec", "JobState", "JobStatus", "StepOutcome", "job_tag", "make_executor"]


def make_executor(inventory: Inventory, *, state_dir: Path) -> Executor:
    """The executor an inventory asks for: ``scheduler.kind`` local or slurm.

    ``state_dir`` is a folder the executor may keep state in (the runner passes one inside
    the campaign folder). The Slurm executor is imported lazily (it pulls in the SSH
    transport); it is built with ``SlurmExecutor.from_inventory(inventory, state_dir=...)``
    when it has that constructor, else ``SlurmExecutor(inventory)``.
    """
    from ncclbot_sweep.errors import ExecutorError

    if inventory.scheduler.kind == "local":
        from ncclbot_sweep.executors.local import LocalExecutor

        return LocalExecutor(state_dir=Path(state_dir), gpus_per_node=inventory.gpus_per_node,
                             max_concurrent=inventory.scheduler.max_concurrent_jobs,
                             rank_processes=inventory.scheduler.local_rank_processes)
    try:
        from ncclbot_sweep.executors.slurm import SlurmExecutor
    except ImportError as exc:
        raise ExecutorError(f"inventory {inventory.name!r} asks for the Slurm executor, which cannot be "
                            f"imported: {exc}", hint="use an inventory with scheduler.kind: local, "
                            "or install the complete ncclbot-sweep") from exc
    factory = getattr(SlurmExecutor, "from_inventory", None)
    if factory is not None:
        return factory(inventory, state_dir=Path(state_dir))
    return SlurmExecutor(inventory)
