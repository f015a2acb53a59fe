"""Executors: where job scripts run (local subprocesses, or Slurm over a shell or SSH)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ncclbot_sweep.sweep.executors.base import (UNKNOWN_POLL_LIMIT, Executor, JobSpec, JobState, JobStatus, StepOutcome,
                                                job_tag)

if TYPE_CHECKING:
    from ncclbot_sweep.sweep.inventory import Inventory

__all__ = ["UNKNOWN_POLL_LIMIT", "Executor", "JobSpec", "JobState", "JobStatus", "StepOutcome", "job_tag",
           "make_executor"]


def make_executor(inventory: Inventory, *, state_dir: Path) -> Executor:
    """The executor an inventory asks for: ``scheduler.kind`` local or slurm.

    ``state_dir`` is a folder the executor may keep state in (the runner passes one inside
    the campaign folder). The Slurm executor is imported only when asked for (it pulls in
    the SSH transport).
    """
    if inventory.scheduler.kind == "local":
        from ncclbot_sweep.sweep.executors.local import LocalExecutor

        return LocalExecutor(state_dir=Path(state_dir), gpus_per_node=inventory.gpus_per_node,
                             max_concurrent=inventory.scheduler.max_concurrent_jobs,
                             rank_processes=inventory.scheduler.local_rank_processes)
    from ncclbot_sweep.sweep.executors.slurm import SlurmExecutor

    return SlurmExecutor.from_inventory(inventory, state_dir=Path(state_dir))
