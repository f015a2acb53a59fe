"""Bring finished steps back from the cluster into the local campaign folder (``collect DIR``).

The campaign folder is opened read-only (:func:`ncclbot_sweep.sweep.campaign_folder.open_existing`:
nothing is re-planned, rendered or registered) and each submitted job is fetched through
its executor's :meth:`~ncclbot_sweep.sweep.executors.base.Executor.fetch`: finished steps only
while the job may run, its whole folder once it has ended (see :mod:`ncclbot_sweep.sweep.mirror`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ncclbot_sweep.sweep.campaign_folder import open_existing
from ncclbot_sweep.sweep.executors import Executor, make_executor
from ncclbot_sweep.sweep.manifest import JobPhase
from ncclbot_sweep.sweep.mirror import CollectReport

__all__ = ["CollectReport", "collect"]

log = logging.getLogger(__name__)


def collect(workdir: Path | str, *, executor: Executor | None = None,
            progress: Callable[[str, CollectReport], None] | None = None) -> CollectReport:
    """Collect every submitted job of the campaign in ``workdir`` from where it ran.

    ``executor`` overrides the inventory's (tests pass one with other retry settings).
    Idempotent and resumable. Raises ManifestError when ``workdir`` is not a campaign
    folder, TransportError when the cluster cannot be reached or a file does not verify
    (run it again: it resumes).
    """
    folder = open_existing(workdir, writable=False)
    try:
        own = executor or make_executor(folder.plan.inventory, state_dir=folder.executor_state)
        try:
            report = CollectReport()
            for job in folder.manifest.jobs():
                if not job.executor_job_id or not folder.in_plan(job.job_key):
                    continue
                ended = job.phase in (JobPhase.FINISHED, JobPhase.CANCELLED)
                report.add(own.fetch(folder.job_spec(job.job_key), ended=ended))
                if progress:
                    progress(job.job_key, report)
            if not report.jobs:
                log.info("the %s executor writes into the campaign folder: nothing to collect", own.name)
            return report
        finally:
            if executor is None:
                own.close()
    finally:
        folder.close()
