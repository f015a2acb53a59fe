"""A workload campaign on the loopback Slurm cluster: rendered, submitted with sbatch, ingested, analysed.

The command is the simulator's workload player (``ncclbot-sweep sim workload``), launched by
``srun`` on two nodes as any step: once with stock NCCL, once through the real plugin (UCB1,
its coordinator on loopback, one rank process per task).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e_files import inventory
from ncclbot_sweep.cli import main
from ncclbot_sweep.ingest.datasets import read_table

pytestmark = [pytest.mark.slurm]

CAMPAIGN = """\
name: wl-slurm
kind: workload
nodes: [2]
policies: [stock, ucb1]
workload:
  command: [ncclbot-sweep, sim, workload, ddp-buckets, --steps, "8"]
  step_time: {pattern: megatron}
  warmup_steps: 2
timeout_s: 240
packing: {steps_per_job: 4}
"""


def test_a_workload_campaign_runs_through_sbatch_and_srun(tmp_path, slurm_cluster):
    tool = Path(sys.executable).parent / "ncclbot-sweep"
    inv = inventory(tmp_path / "inventory.yaml", bin_dir="sim", access="{kind: local}",
                    environment={"NCCLBOT_SIM_FABRIC": "sim-h100", "NCCLSWEEP_COORDINATOR_LISTEN": "127.0.0.1:0"},
                    extra=f"ncclbot_sweep: {{command: ['{tool}']}}\nplugin: {{path: bundled, coordinator: bundled}}\n")
    camp = tmp_path / "wl.yaml"
    camp.write_text(CAMPAIGN)
    work = tmp_path / "work"
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"] == {"ok": 2}
    (script,) = work.glob("jobs/*/job.sh")
    text = script.read_text()
    assert "#SBATCH --nodes=2" in text and f"srun --nodes=2 --ntasks=2 --ntasks-per-node=1 bash -c" in text
    assert f"ncclbot-rank {tool} sim workload ddp-buckets --steps 8 >" in text
    provenance = json.loads(next(work.glob("jobs/*/provenance.json")).read_text())
    assert provenance["hosts"] == ["n1", "n2"]
    ingested = CliRunner().invoke(main, ["ingest", *map(str, work.glob("jobs/*/steps/*")), "-d", str(tmp_path / "ds")])
    assert ingested.exit_code == 0 and "ingested: 2 (partly: 0)" in ingested.output, ingested.output
    runs = read_table(tmp_path / "ds", "runs").set_index("policy")
    assert set(runs["outcome"]) == {"ok"} and runs["synthetic"].all() and set(runs["nodes"]) == {2}
    steps = read_table(tmp_path / "ds", "workload_steps")
    assert steps.groupby("environment").size().to_dict() == {"stock": 8, "ucb1": 8}
    assert steps["warmup"].sum() == 4
    events = read_table(tmp_path / "ds", "live_events")
    assert set(events["rank"]) == {0, 1}, "both tasks of the plugin step traced their collectives"
    analysed = CliRunner().invoke(main, ["analyze", "workload-ab", "-d", str(tmp_path / "ds"), "-o",
                                         str(tmp_path / "ab")])
    assert analysed.exit_code == 0, analysed.output
    assert "On wl-slurm (loopback, 2 nodes) UCB1, the best learner, ran beside stock in one repetition only" \
        in analysed.output
