"""Executors: where job scripts run (local subprocesses, or Slurm over a shell or SSH)."""

from ncclbot_sweep.executors.base import Executor, JobSpec, JobState, JobStatus, StepOutcome, job_tag

__all__ = ["Executor", "JobSpec", "JobState", "JobStatus", "StepOutcome", "job_tag"]
