"""End to end on the simulated fabric: the demo (the paper's sweep) and a small GB200 campaign."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.ingest.datasets import read_table

sim = pytest.importorskip("ncclbot_sweep.sim")
if not hasattr(sim, "bin_dir"):
    pytest.skip("the simulated fabric has no binaries yet", allow_module_level=True)


def test_demo_runs_the_paper_sweep_on_sim_h100(tmp_path: Path):
    """52 steps (3 collectives x 4 node counts x every valid arm, 26 sizes, 100 iterations), ingest and
    report; then the small live campaign (3 steps, the real plugin, 4 rank processes), ingested."""
    started = time.monotonic()
    result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path)])
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.output + _failed_steps(tmp_path / "campaign") + \
        _failed_steps(tmp_path / "live-campaign")
    assert "steps: 52/52 ok (52 ok)" in result.output and "steps: 3/3 ok (3 ok)" in result.output
    assert "steps: 15/15 ok (15 ok)" in result.output, "the workload A/B: 3 environments x 5 repetitions"
    # It ends with the report's headline in words (what was measured, AUTO's loss, what to set and
    # the files it wrote, whether to learn live), then where the outputs are.
    lines = result.output.splitlines()
    summary = lines[lines.index("demo: result on sim-h100 (synthetic: the simulated fabric)"):]
    assert re.fullmatch(r"demo:   AUTO picks a wrong arm in \d+ of \d+ contexts .*; \d+ contexts lose more than 10%\.",
                        summary[1]), summary
    assert summary[2].startswith("demo:   Set the measured-best arm where it beats NCCL's choice"), summary
    assert any(line.startswith("demo:   sim-h100: ") and "nccl_tuner.conf" in line for line in summary), summary
    assert summary[-3].startswith(f"demo:   report {tmp_path / 'report' / 'index.html'} (data {tmp_path / 'dataset'}")
    assert summary[-2].startswith(f"demo:   live campaign analysis {tmp_path / 'live'}")
    assert summary[-1].startswith(f"demo:   workload comparison {tmp_path / 'report' / 'workload'}")
    # the workload A/B: the DDP step, whose 25 MiB buckets AUTO gets wrong, is faster with UCB1
    assert re.fullmatch(r"demo:   On demo-workload \(sim-h100, 4 nodes\) the plugin paid: UCB1 cut the median step "
                        r"time by \d\.\d% against stock .*", summary[-4]), summary
    # Every path it prints exists, the first line's included (shipped names, not repository paths).
    assert result.output.startswith(f"demo: the shipped campaigns demo, demo-live, demo-workload on inventory sim-h100 "
                                    f"('ncclbot-sweep campaign list'), into {tmp_path.resolve()}\n")
    printed = re.findall(r"(/[^\s,()']+)", "\n".join(line for line in result.output.splitlines()
                                                    if line.startswith(("demo", "campaign "))))
    assert len(printed) >= 8 and all(Path(p).exists() for p in printed), printed
    assert elapsed < 180, f"the demo took {elapsed:.0f} s"
    live = read_table(tmp_path / "live-dataset", "live_events")
    assert "ucb1" in set(live["policy"]) and sorted(live["rank"].unique()) == [0, 1, 2, 3]
    per_size = pd.read_csv(tmp_path / "live" / "selection_per_size.csv")
    at16 = per_size[per_size["size_bytes"] == 16 << 20].set_index("policy")
    # 16 MiB at 4 nodes: AUTO's NVLSTree/Simple is the simulator's wrong pick (about 30% slow); UCB1
    # leaves it. (At 4-8 MiB, where AUTO is right, UCB1 pays a little for its probes.)
    assert at16.loc["AUTO", "selection_trlt_pct"] > 10 and at16.loc["AUTO", "auto_errs"]
    assert at16.loc["UCB1", "selection_trlt_pct"] < at16.loc["AUTO", "selection_trlt_pct"]
    root = tmp_path / "campaign"
    results = sorted(root.glob("jobs/*/steps/*/result.json"))
    assert len(results) == 52
    data = json.loads(results[0].read_text())
    assert len(data["results"]) == 26  # 512 B .. 16 GiB
    meta = json.loads((results[0].parent / "step.json").read_text())
    assert meta["fabric"] == "sim-h100" and meta["synthetic"] is True and meta["iterations"] == 100
    assert "NCCL INFO" in (results[0].parent / "nccl.log").read_text()
    _check_report(tmp_path)
    page = (tmp_path / "report" / "index.html").read_text()
    assert 'id="workload"' in page and "the plugin paid: UCB1 cut the median step time" in page
    assert (tmp_path / "report" / "tables" / "workload_comparisons.csv").is_file()
    # Running the demo again continues the same folder and runs nothing.
    before = {p: p.stat().st_mtime_ns for p in results}
    again = CliRunner().invoke(main, ["demo", "--out", str(tmp_path)])
    assert again.exit_code == 0
    assert {p: p.stat().st_mtime_ns for p in results} == before


def _check_report(out: Path) -> None:
    """The demo ends in the report, and on sim-h100 warm UCB1 beats AUTO (issue 5's acceptance)."""
    assert (out / "dataset" / "iterations").is_dir()
    assert (out / "report" / "index.html").is_file() and (out / "report" / "survival.png").is_file()
    rows = {r["policy"]: r for r in csv.DictReader((out / "report" / "tables" / "summary.csv").open())}
    assert set(rows) == {"AUTO", "Random", "UCB1", "Softmax", "KL-UCB", "ETC"}
    auto, ucb = rows["AUTO"], rows["UCB1"]
    assert float(ucb["realized_mean_pct"]) < float(auto["realized_mean_pct"])
    assert float(ucb["realized_p99_pct"]) < float(auto["realized_p99_pct"])
    assert int(ucb["realized_above"]) < int(auto["realized_above"])
    # The live campaign is in the report, compared with the sweep (its own dataset, read beside it).
    html = (out / "report" / "index.html").read_text()
    assert 0 <= html.find('id="headline"') < html.find("<table")
    assert "UCB1 (the best learner): selection loss" in html and "Speed against stock" in html
    for name in ("forced_vs_stock", "auto_vs_audit"):
        assert len(pd.read_csv(out / "report" / "tables" / f"live_{name}.csv")) == 5, name


def _failed_steps(root: Path) -> str:
    """The stderr and exit code of every failed step, for the assertion message."""
    out = []
    for marker in root.glob("jobs/*/steps/*/exit"):
        if marker.read_text().strip() != "0":
            stderr = (marker.parent / "stderr.txt").read_text()[-2000:]
            out.append(f"\n{marker.parent}: exit {marker.read_text().strip()}\n{stderr}")
    return "".join(out)


CAMPAIGN = """\
name: gb-small
kind: forced
collectives: [AllGather]
nodes: [4]
sizes: {min: 1K, max: 64K}
iterations: 10
warmup: 1
timeout_s: 120
packing: {steps_per_job: 20}
"""


def test_forced_arms_on_sim_gb200_mnnvl_off(tmp_path: Path):
    camp = tmp_path / "c.yaml"
    camp.write_text(CAMPAIGN)
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", "sim-gb200-mnnvl-off", "-w", str(tmp_path / "w"),
                                       "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["complete"] and data["fabric"] == "sim-gb200-mnnvl-off"
    logs = [p.read_text() for p in (tmp_path / "w").glob("jobs/*/steps/*/nccl.log")]
    assert any("NCCL_ALGO set by environment to PAT" in text for text in logs)


_SIX_JOBS = """\
name: interrupted
kind: forced
collectives: [AllReduce, AllGather]
nodes: [4]
sizes: {min: 512B, max: 64MiB, factor: 2}
arms: [Ring/LL, Ring/LL128, Ring/Simple]
iterations: 50
timeout_s: 600
packing: {steps_per_job: 1}
"""


def test_ctrl_c_during_submit_says_what_is_still_queued_and_resume_finishes_it(tmp_path: Path):
    """A real SIGINT to a real ``submit`` on the local executor: the jobs go on, the message says
    so and names the command that finishes the campaign, and that command does."""
    import signal
    import subprocess
    import sys

    campaign, work = tmp_path / "campaign.yaml", tmp_path / "work"
    campaign.write_text(_SIX_JOBS)
    cli = "from ncclbot_sweep.cli import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", cli, "submit", str(campaign), "-i", "sim-h100", "-w", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()  # the first progress line: every job has been handed to the executor
        assert first.startswith("[0/6 steps]"), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    message = [line for line in err.splitlines() if line.startswith("Interrupted: ")]
    assert len(message) == 1 and "Traceback" not in err, err
    assert re.fullmatch(
        rf"Interrupted: \d/6 steps done; [1-6] jobs? still queued or running \(they go on without this command; "
        rf"'ncclbot-sweep cancel {re.escape(str(work))}' stops them\); 0 jobs not submitted yet\. "
        rf"'ncclbot-sweep resume {re.escape(str(work))}' finishes the campaign\.", message[0]), message[0]
    done = CliRunner().invoke(main, ["resume", str(work)])
    assert done.exit_code == 0 and "steps: 6/6 ok (6 ok)" in done.output, done.output
