"""The demo: the paper's forced-arm sweep on the simulated H100 fabric, end to end on this machine.

``make demo`` runs ``ncclbot-sweep demo --out DIR``, which calls :func:`run_demo`. Later
stages (ingest, audit, replay, report) extend it from the campaign folder it returns.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ncclbot_sweep.resources import resource_path
from ncclbot_sweep.runner import Progress, submit

__all__ = ["DEMO_CAMPAIGN", "DEMO_INVENTORY", "run_demo"]

log = logging.getLogger(__name__)

DEMO_CAMPAIGN = "demo.yaml"
DEMO_INVENTORY = "sim-h100.yaml"


def run_demo(out: Path | str, *, progress: Progress | None = None) -> Path:
    """Plan and run ``campaigns/demo.yaml`` on ``inventories/sim-h100.yaml`` into ``out/campaign``.

    Idempotent: running it again continues the same campaign folder and re-runs nothing.
    Returns the campaign folder (``ncclbot_sweep.runner.status(folder)`` summarises it).
    """
    root = Path(out) / "campaign"
    summary = submit(resource_path("campaigns", DEMO_CAMPAIGN), resource_path("inventories", DEMO_INVENTORY),
                     workdir=root, wait=True, progress=progress)
    log.info("demo campaign in %s: %d/%d steps ok", root, summary.steps_ok, summary.total_steps)
    return root
