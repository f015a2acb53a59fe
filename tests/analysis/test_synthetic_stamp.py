""""Synthetic" follows what produced the data, never the fabric's name (architecture section 5.3).

A tiny campaign on a copy of the sim-h100 inventory renamed ``h100-lab``, ingested and
reported: its runs are synthetic and every figure is stamped. The same outputs with the
simulator's stamp removed, under a ``sim-*`` name, are not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ncclbot_sweep.analysis.report import ReportOptions, build_report
from ncclbot_sweep.ingest.datasets import read_table
from ncclbot_sweep.ingest.walk import ingest
from ncclbot_sweep.names import SIMULATOR
from ncclbot_sweep.resources import resource_dir
from ncclbot_sweep.sweep.inventory import load_inventory
from ncclbot_sweep.sweep.runner import submit


CAMPAIGN = """\
name: stamp
kind: forced
collectives: [AllReduce]
nodes: [1, 2]
sizes: {list: [1K, 64K, 1M]}
arms: [Ring/LL, Ring/Simple, Tree/LL]
iterations: 12
timeout_s: 120
packing: {steps_per_job: 9}
"""
OPTIONS = ReportOptions(policies=("AUTO", "UCB1"), seeds=2, horizon=12, split="random", n_boot=20, window=(1, 11))


@pytest.fixture(scope="module")
def lab_campaign(tmp_path_factory) -> Path:
    """The campaign folder of the tiny sweep on the renamed simulated inventory."""
    tmp = tmp_path_factory.mktemp("lab")
    spec = yaml.safe_load((resource_dir("inventories") / "sim-h100.yaml").read_text())
    spec["name"] = spec["description"] = "h100-lab"
    inventory = tmp / "h100-lab.yaml"
    inventory.write_text(yaml.safe_dump(spec))
    assert load_inventory(inventory).synthetic  # the simulator's binaries will produce the data
    campaign = tmp / "stamp.yaml"
    campaign.write_text(CAMPAIGN)
    summary = submit(campaign, inventory, workdir=tmp / "campaign", wait=True)
    assert summary.complete and summary.steps == {"ok": 18}, summary
    return tmp / "campaign"


def _report(dataset: Path, out: Path, figures: list) -> str:
    html = build_report(dataset, out, options=OPTIONS).read_text()
    assert len(figures) >= 2 + 2 + 1 + 1  # survival, gate, arm curves per scenario, error map, cost model
    return html


def test_a_renamed_simulated_inventory_is_still_synthetic(lab_campaign, tmp_path, kept_figures):
    meta = json.loads(next(lab_campaign.glob("jobs/*/steps/*/step.json")).read_text())
    assert (meta["fabric"], meta["synthetic"]) == ("h100-lab", True)
    ingest([lab_campaign], tmp_path / "ds")
    runs = read_table(tmp_path / "ds", "runs")
    assert set(runs["fabric"]) == {"h100-lab"} and runs["synthetic"].all() and len(runs) == 18
    html = _report(tmp_path / "ds", tmp_path / "report", kept_figures)
    assert "Synthetic data" in html
    assert all(any("synthetic" in t.get_text() for t in fig.texts) for fig in kept_figures)


def test_unstamped_outputs_under_a_sim_name_are_not_synthetic(lab_campaign, tmp_path, kept_figures):
    real = tmp_path / "campaign"
    for step in lab_campaign.glob("jobs/*/steps/*"):
        copy = real / step.relative_to(lab_campaign)
        copy.mkdir(parents=True)
        for path in step.iterdir():
            if path.is_file():
                (copy / path.name).write_bytes(path.read_bytes())
        meta = json.loads((copy / "step.json").read_text())
        (copy / "step.json").write_text(json.dumps(meta | {"fabric": "sim-h100"}))
        # What real nccl-tests print: the same tables without the simulator's stamp.
        stdout = copy / "stdout.txt"
        stdout.write_text(re.sub(rf" simulator={re.escape(SIMULATOR)}", "", stdout.read_text()))
        result = json.loads((copy / "result.json").read_text())
        result.pop("simulator")
        (copy / "result.json").write_text(json.dumps(result))
    ingest([real], tmp_path / "ds")
    runs = read_table(tmp_path / "ds", "runs")
    assert set(runs["fabric"]) == {"sim-h100"} and not runs["synthetic"].any() and set(runs["outcome"]) == {"ok"}
    html = _report(tmp_path / "ds", tmp_path / "report", kept_figures)
    assert "Synthetic data" not in html
    assert not any("synthetic" in t.get_text() for fig in kept_figures for t in fig.texts)
