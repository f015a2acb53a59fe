"""Golden job scripts: a rendered job.sh is diffed against a recorded copy.

When a change to the templates or the shipped inventories is intended, accept it with

    NCCLSWEEP_ACCEPT_GOLDEN=1 .venv/bin/python -m pytest tests/orchestration/test_orch_golden.py

and review the diff of ``tests/orchestration/golden/`` before committing.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from ncclbot_sweep.sweep.campaign import parse_campaign_text, plan_campaign
from ncclbot_sweep.sweep.inventory import load_inventory
from ncclbot_sweep.sweep.render import render_job_script, render_tune_script
from ncclbot_sweep.sweep.tunejob import plan_tune_job

GOLDEN = Path(__file__).parent / "golden"

CASES = {
    "forced-h100-spectrumx.job.sh": ("h100-spectrumx", """\
name: golden-forced
kind: forced
collectives: [AllReduce]
nodes: [8]
sizes: {min: 512B, max: 16GiB}
arms: [Ring/LL128, NVLSTree/Simple]
iterations: 100
"""),
    "live-gb200-mnnvl-on.job.sh": ("gb200-mnnvl-on", """\
name: golden-live
kind: live
collectives: [AllReduce]
nodes: [16]
sizes: {min: 1M, max: 1G}
policies: [stock, ucb1]
iterations: 100
warmup: 100
"""),
    "workload-h100-spectrumx.job.sh": ("h100-spectrumx", """\
name: golden-workload
kind: workload
nodes: [4]
policies: [stock, ucb1]
workload:
  command: [torchrun, --nproc-per-node=8, train.py, --log-interval, "1"]
  step_time: {pattern: megatron}
  warmup_steps: 10
  tasks_per_node: 1
timeout_s: 3600
"""),
}


def _compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("NCCLSWEEP_ACCEPT_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
    recorded = path.read_text()
    if text != recorded:
        diff = "".join(difflib.unified_diff(recorded.splitlines(True), text.splitlines(True),
                                            f"recorded/{name}", f"rendered/{name}"))
        pytest.fail(f"job.sh differs from {path}:\n{diff}\nIf intended: NCCLSWEEP_ACCEPT_GOLDEN=1 .venv/bin/python "
                    "-m pytest tests/orchestration/test_orch_golden.py, then review and commit the new copy.")


@pytest.mark.parametrize("name", sorted(CASES))
def test_job_script_matches_recorded_copy(name):
    inventory, campaign = CASES[name]
    plan = plan_campaign(parse_campaign_text(campaign), load_inventory(inventory))
    assert len(plan.jobs) == 1
    _compare(name, render_job_script(plan, plan.jobs[0], run_root=Path("/shared/campaigns/golden")))


def test_tuning_job_script_matches_recorded_copy(tmp_path):
    # Over SSH (the shipped inventory): the folder and the content-named dataset under remote_workdir.
    dataset = tmp_path / "ds"
    (dataset / "runs").mkdir(parents=True)
    (dataset / "runs" / "_schema.parquet").write_bytes(b"golden")
    job = plan_tune_job(load_inventory("h100-spectrumx"), tmp_path / "tune-h100", dataset,
                        ["--families", "UCB1,GBM+cost", "--trials", "151", "--workers", "8"], nodes=4, workers=8)
    _compare("tune-h100-spectrumx.job.sh", render_tune_script(
        job.inventory, name=job.spec.name, campaign_key=job.spec.campaign_key, job_key=job.spec.job_key,
        run_dir=job.run_dir, nodes=4, workers=8, command=list(job.command)))
