"""Installs anywhere: the built wheel, installed into a fresh virtual environment, runs a
small simulated campaign, ingest and analysis from outside the source tree.

Slow (a wheel build and a ``pip install`` with dependencies from PyPI or pip's cache):
marked ``slow``; CI runs it with the rest (``make test``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CAMPAIGN = """\
name: wheel-check
kind: forced
collectives: [AllReduce, AllGather]
nodes: [2]
sizes: {min: 1MiB, max: 4MiB, factor: 2}
arms: [Ring/LL, Ring/Simple]
warmup: 0
iterations: 20
timeout_s: 120
packing: {steps_per_job: 4}
"""

READ = """\
import json, sys
from ncclbot_sweep import datasets
runs = datasets.read_table(sys.argv[1], "runs")
it = datasets.read_table(sys.argv[1], "iterations")
print(json.dumps([len(runs), bool(runs["synthetic"].all()), sorted(set(runs["outcome"])), len(it),
                  datasets.__file__]))
"""


def _run(cmd: list[str], cwd: Path, **kw) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)  # pip may download the dependencies; a loaded machine is slow
def test_the_wheel_runs_a_sim_campaign_ingest_and_analysis_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(ROOT)], tmp_path)
    wheel = next(dist.glob("ncclbot_sweep-*.whl"))
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python, cli = env_dir / "bin" / "python", env_dir / "bin" / "ncclbot-sweep"
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], tmp_path)
    work = tmp_path / "work"  # outside the source tree: only the installed wheel is importable
    work.mkdir()
    (work / "campaign.yaml").write_text(CAMPAIGN)
    _run([str(cli), "submit", "campaign.yaml", "-i", "sim-h100", "--workdir", "camp"], work)
    _run([str(cli), "ingest", "camp", "--dataset", "ds", "--strict"], work)
    runs, synthetic, outcomes, rows, where = _read(python, work)
    assert (runs, synthetic, outcomes) == (4, True, ["ok"]) and rows == 4 * 3 * 2 * 20
    assert str(env_dir) in where and str(ROOT) not in where
    audit = _run([str(cli), "analyze", "audit", "--dataset", "ds", "--out", "audit"], work)
    assert "AUTO" in audit and any((work / "audit").glob("*.csv"))
    assert any((work / "ds" / "workload").rglob("_schema.parquet"))  # an empty table keeps its schema file


def _read(python: Path, work: Path) -> list:
    """Runs, whether all are synthetic, their outcomes, iteration rows, and where the package is."""
    return json.loads(_run([str(python), "-c", READ, "ds"], work).splitlines()[-1])
