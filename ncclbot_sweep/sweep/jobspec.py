"""A rendered job ready to submit: what the campaign folder hands an executor.

A leaf (it imports only :mod:`ncclbot_sweep.paths`), so :mod:`ncclbot_sweep.sweep.campaign_folder`
can build job specs without importing the executors that run them (architecture section 2.2).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePath

from ncclbot_sweep.paths import JOB_SCRIPT

__all__ = ["JobSpec", "job_tag"]


def job_tag(campaign_key: str, job_key: str) -> str:
    """The tag a job carries on the scheduler (its comment) so a crash can be reconciled."""
    return f"ncclbot:{campaign_key}:{job_key}"


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A rendered job ready to submit: its keys, its local folder and what it asks for."""

    campaign_key: str
    job_key: str
    local_dir: Path
    remote_dir: PurePath
    nodes: int
    time_limit_s: int
    #: A readable name for the scheduler's listings (campaign, collective, nodes); the tag
    #: identifies the job, the name is for people.
    name: str = ""
    #: Steps to run again although their exit marker says 0 (their output was not a usable
    #: result); the job script reads them from ``$NCCLSWEEP_RERUN`` (:attr:`rerun_env`).
    rerun: tuple[str, ...] = ()

    @property
    def rerun_env(self) -> dict[str, str]:
        """The job's environment for :attr:`rerun`: step keys joined by ``:`` (none: empty)."""
        return {"NCCLSWEEP_RERUN": ":".join(self.rerun)}

    @property
    def tag(self) -> str:
        return job_tag(self.campaign_key, self.job_key)

    @property
    def script_name(self) -> str:
        return JOB_SCRIPT
