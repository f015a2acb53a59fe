"""Workload campaigns: the spec, the plan, the job script, and real runs on the local executor.

The runs are real processes: shell commands that print step lines, crash, hang or print
nothing; the simulator's workload player (``ncclbot-sweep sim workload``) with its Kineto-style
trace; and, with the real plugin, coordinator and two rank processes, a DDP step where NCCL's
cost model is wrong, ingested and analysed (``analyze workload-ab``).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import CampaignError, PlanError
from ncclbot_sweep.ingest.datasets import read_table
from ncclbot_sweep.resources import resource_path
from ncclbot_sweep.sweep.campaign import load_campaign, parse_campaign_text, plan_campaign
from ncclbot_sweep.sweep.estimate import Measured
from ncclbot_sweep.sweep.inventory import load_inventory, parse_inventory_text
from ncclbot_sweep.sweep.plan import describe_plan
from ncclbot_sweep.sweep.render import step_metadata
from ncclbot_sweep.sweep.workload import DEFAULT_RUN_TIMEOUT_S

HEAD = """\
name: wl
kind: workload
nodes: [1]
policies: [stock, AUTO]
"""
# Megatron's step line; the environment decides how the run ends (crash, hang, no step line, ok).
MIXED = r"""case "${NCCLBOT_POLICY:-stock}" in
  ucb1) echo "loading the model"; echo "RuntimeError: CUDA error: an illegal memory access" >&2; exit 3 ;;
  greedy) echo "iteration 1/3 | elapsed time per iteration (ms): 10.0 |"; sleep 600 ;;
  auto) echo "loading the model"; echo "training started" ;;
  *) for i in 1 2 3; do echo " iteration $i/3 | elapsed time per iteration (ms): 1$i.5 | lr 1e-4"; done ;;
esac"""


def _inventory(tmp: Path, *, ranks: int = 2) -> Path:
    """sim-h100 with ``ranks`` rank processes per plugin step (the default is one per node, at most 8)."""
    text = resource_path("inventories", "sim-h100.yaml").read_text()
    text = text.replace("  max_concurrent_jobs: 2\n", f"  max_concurrent_jobs: 2\n  local_rank_processes: {ranks}\n")
    path = tmp / "sim-h100.yaml"
    path.write_text(text)
    return path


def _submit(tmp: Path, campaign: str, name: str = "c", *, ranks: int = 2) -> tuple[Path, str]:
    path = tmp / f"{name}.yaml"
    path.write_text(campaign)
    inventory = _inventory(tmp, ranks=ranks)
    result = CliRunner().invoke(main, ["submit", str(path), "-i", str(inventory), "-w", str(tmp / name)])
    return tmp / name, result.output


def _steps(run: Path) -> dict[str, Path]:
    """Step folder per environment (the step's policy)."""
    return {json.loads(p.read_text())["policy"]: p.parent for p in run.glob("jobs/*/steps/*/step.json")}


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", str(pluginbuild.build_dir().parent)], check=True)


# --------------------------------------------------------------------------- spec and plan


@pytest.mark.parametrize(("extra", "line", "words"), [
    ("workload:\n  command: [train]\n  step_time: {pattern: megatron, wall: true}\n", 7,
     "exactly one step-time source"),
    ("workload:\n  command: [train]\n  step_time: {regex: 'step (\\d+) took ([0-9.]+)'}\n", 7,
     "named group, one of us, ms, s, per_s"),
    ("workload:\n  command: [train]\n  step_time: {wall: true}\n", 5, "set warmup_steps: 0"),
    ("sizes: {min: 1K, max: 1M}\nworkload:\n  command: [train]\n  step_time: {pattern: hf}\n", None,
     "remove sizes"),
])
def test_a_bad_workload_campaign_names_file_line_and_fix(tmp_path, extra, line, words):
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + extra)
    with pytest.raises(CampaignError) as caught:
        load_campaign(path)
    assert caught.value.path == str(path) and words in str(caught.value)
    if line is not None:
        assert caught.value.line == line


def test_static_needs_its_table_and_other_kinds_take_no_workload():
    with pytest.raises(CampaignError, match="'static' needs workload.static_table"):
        parse_campaign_text(HEAD.replace("[stock, AUTO]", "[stock, static]")
                            + "workload: {command: [t], step_time: {pattern: megatron}}\n")
    with pytest.raises(CampaignError, match="'workload' applies to campaigns of kind workload"):
        parse_campaign_text("name: f\nkind: forced\ncollectives: [AllReduce]\nnodes: [1]\nsizes: {list: [1K]}\n"
                            "workload: {command: [t], step_time: {pattern: megatron}}\n")
    with pytest.raises(CampaignError, match="needs 'collectives' and 'sizes'"):
        parse_campaign_text("name: f\nkind: live\nnodes: [1]\npolicies: [stock]\n")


def test_plan_interleaves_the_environments_and_states_the_time_budget(tmp_path):
    plan = plan_campaign(load_campaign("workload-sim-h100"), load_inventory("sim-h100"))
    assert [(s.repeat, s.policy) for s in plan.steps[:5]] == [(0, "stock"), (0, "AUTO"), (0, "ucb1"), (0, "greedy"),
                                                              (1, "stock")]
    static = HEAD.replace("[stock, AUTO]", "[stock, static]") + (
        "workload: {command: [ncclbot-sweep, sim, workload, ddp-buckets], step_time: {pattern: megatron}, "
        "static_table: /shared/static.csv}\nrepeats: 2\ntimeout_s: 100\n")
    path = tmp_path / "s.yaml"
    path.write_text(static)
    result = CliRunner().invoke(main, ["plan", str(path), "-i", "sim-h100"])
    assert result.exit_code == 0, result.output
    assert "runs: 4 (2 environments x 2 repetitions, interleaved):" in result.output
    assert "repetition 1: stock, static" in result.output
    assert "each run up to 100 s (expected 100 s): ~0.11 node-hours expected, at most 0.11 node-hours" in result.output
    step = next(s for s in plan_campaign(load_campaign(path), load_inventory("sim-h100")).steps if s.policy == "static")
    assert step.env["NCCLBOT_POLICY"] == "static" and step.env["NCCLBOT_STATIC_TABLE"] == "/shared/static.csv"
    assert step.command[1:4] == ("-m", "ncclbot_sweep", "sim"), "the local executor runs this interpreter's package"


def test_a_run_is_estimated_from_its_spec_and_packed_within_the_partition():
    """A workload has no calls to price: a run's estimate is workload.run_estimate_s, its timeout the
    campaign's timeout_s, else the margin times the estimate plus set-up, else the default; jobs
    hold as many runs as sim-h100's 60 min limit allows (their --time counts each run's allowance)."""
    inventory = load_inventory("sim-h100")
    plan = plan_campaign(load_campaign("workload-sim-h100"), inventory)
    assert {(s.estimate_s, s.setup_s, s.timeout_s) for s in plan.steps} == {(30.0, 0.0, 600)}
    assert [len(j.steps) for j in plan.jobs] == [8, 8, 8] and all(j.time_limit_min <= 60 for j in plan.jobs)
    job = plan.jobs[0]
    meta = step_metadata(plan, job, step=job.steps[0])
    assert (meta["timeout_s"], meta["kind"], meta["collective"], meta["sizes"]) == (600, "workload", None, None)
    assert plan.priced_by == "workload.run_estimate_s (30 s a run)" and not plan.warnings
    assert plan.summary()["jobs"][0]["steps"][0]["estimate_s"] == 30.0
    assert plan.job_name(job.key) == "workload-sim-h100-workload-8n"
    text = describe_plan(plan)
    assert "limits allow 1.5x the estimate plus set-up, at most each run's timeout" in text and "scenarios:" not in text

    estimated = parse_campaign_text(HEAD + "workload: {command: [t], step_time: {pattern: megatron}, "
                                           "run_estimate_s: 100}\n")
    (run, _) = plan_campaign(estimated, inventory).steps
    assert run.timeout_s == inventory.estimate.step_timeout_s(100, 1) == 300  # sim-h100's shortest step timeout
    bare = plan_campaign(parse_campaign_text(HEAD + "workload: {command: [t], step_time: {pattern: megatron}}\n"),
                         inventory)
    assert {(s.estimate_s, s.timeout_s) for s in bare.steps} == {(DEFAULT_RUN_TIMEOUT_S, DEFAULT_RUN_TIMEOUT_S)}
    assert [len(j.steps) for j in bare.jobs] == [1, 1], "two 30-min runs and the set-up exceed 60 min"
    assert bare.priced_by == "the runs' timeouts (no workload.run_estimate_s)"

    short = plan_campaign(parse_campaign_text(HEAD + "workload: {command: [t], step_time: {pattern: megatron}, "
                                                     "run_estimate_s: 700}\ntimeout_s: 600\n"), inventory)
    assert short.warnings == ["2 step(s) may need more than the campaign's timeout_s (600 s): workload 1n policy "
                              "stock is estimated at 700 s a run (workload.run_estimate_s); leave timeout_s out to "
                              "size each step's timeout from its estimate"]
    with pytest.raises(PlanError) as info:
        plan_campaign(parse_campaign_text(HEAD + "workload: {command: [t], step_time: {pattern: megatron}, "
                                                 "run_estimate_s: 4000}\n"), inventory)
    assert "2 step(s) need more than the 60 min" in str(info.value)
    assert "workload 1n policy stock: 66.7 min a run x margin 1.5 + 30 s set-up + 30 s job set-up = 101 min" \
        in str(info.value) and "shorten the runs" in info.value.hint
    with pytest.raises(PlanError, match="runs a workload: its runs make no nccl-tests calls to price"):
        plan_campaign(estimated, inventory, measured=Measured(times={}, source="ds"))
    unmodelled = parse_inventory_text(re.sub(r"\n  (model|NCCLBOT_SIM_FABRIC): sim-h100[^\n]*", "",
                                             resource_path("inventories", "sim-h100.yaml").read_text()))
    assert unmodelled.estimate.fabric_model(unmodelled.environment) == ("sim-h100", False)
    assert not plan_campaign(estimated, unmodelled).warnings, "no call is priced by a model it would warn of"


def test_the_job_script_quotes_the_command_and_the_pattern(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text(HEAD + "workload:\n  command: [bash, -c, \"echo 'it''s'; $(rm -rf /)\"]\n"
                           "  step_time: {regex: 'took (?P<ms>[0-9.]+) ms; $(touch /tmp/x)'}\n")
    result = CliRunner().invoke(main, ["render", str(path), "-i", "sim-h100", "-o", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    scripts = sorted((tmp_path / "r").glob("jobs/*/job.sh"))
    assert len(scripts) == 2, "one run per job: each is budgeted up to its 30 min default timeout"
    for script in scripts:
        text = script.read_text()
        word = "echo 'it''s'; $(rm -rf /)"
        assert f"bash -c {shlex.quote(word)} >" in text
        assert f"--regex {shlex.quote('took (?P<ms>[0-9.]+) ms; $(touch /tmp/x)')} " in text
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


# --------------------------------------------------------------------------- runs


def test_crash_hang_and_no_step_line_fail_with_their_reason_and_the_others_count(tmp_path):
    campaign = HEAD.replace("[stock, AUTO]", "[stock, AUTO, ucb1, greedy]") + (
        f"workload:\n  command: [bash, -c, {json.dumps(MIXED)}]\n  step_time: {{pattern: megatron}}\n"
        "  warmup_steps: 1\ntimeout_s: 10\n")
    run, output = _submit(tmp_path, campaign, ranks=1)  # one rank process prints, as rank 0 of a job would
    assert "steps: 1/4 ok" in output, output
    steps = _steps(run)
    assert (steps["stock"] / "exit").read_text().strip() == "0"
    rows = (steps["stock"] / "workload_steps.csv").read_text().splitlines()
    assert rows[0] == "# ncclbot-workload-steps v1" and len(rows) == 5 and rows[2].startswith("megatron,0,0.0115,1,1,")
    assert (steps["AUTO"] / "exit").read_text().strip() == "4"
    assert "error: no step time: step-time pattern megatron matched no line of stdout.txt (2 non-empty line(s); " \
           "the first: 'loading the model' | 'training started')" in (steps["AUTO"] / "stderr.txt").read_text()
    code = CliRunner().invoke(main, ["ingest", str(run), "-d", str(tmp_path / "ds")])
    assert code.exit_code == 0, code.output
    runs = read_table(tmp_path / "ds", "runs").set_index("policy")
    assert runs.loc["stock", "outcome"] == "ok" and runs.loc["AUTO", "outcome"] == "failed"
    assert runs.loc["AUTO", "failure"].startswith("exit code 4: error: no step time: step-time pattern megatron")
    assert runs.loc["ucb1", "failure"] == "exit code 3: RuntimeError: CUDA error: an illegal memory access"
    assert runs.loc["greedy", "outcome"] == "timeout"
    steps_table = read_table(tmp_path / "ds", "workload_steps")
    assert set(steps_table["environment"]) == {"stock"} and list(steps_table["step_time_s"]) == [0.0115, 0.0125, 0.0135]
    result = CliRunner().invoke(main, ["analyze", "workload-ab", "-d", str(tmp_path / "ds"), "-o", str(tmp_path / "ab")])
    assert result.exit_code == 0, result.output
    assert "Warning: a run failed: timeout: exit code 124 (timeout)" in result.output
    envs = pd.read_csv(tmp_path / "ab" / "tables" / "workload_environments.csv")
    assert envs[["environment", "runs", "steps", "median_ms"]].values.tolist() == [["stock", 1, 2, 13.0]]


def test_kineto_and_wall_time_sources(tmp_path):
    kineto = HEAD.replace("[stock, AUTO]", "[stock]") + (
        "workload:\n  command: [ncclbot-sweep, sim, workload, fsdp-layers, --steps, '4']\n"
        "  step_time: {kineto: true}\n  warmup_steps: 1\n")
    run, output = _submit(tmp_path, kineto.replace("nodes: [1]", "nodes: [2]"), "k")
    assert "steps: 1/1 ok" in output, output
    (step,) = _steps(run).values()
    rows = (step / "workload_steps.csv").read_text().splitlines()[2:]
    printed = [float(line.split("elapsed time per iteration (ms): ")[1].split()[0])
               for line in (step / "stdout.txt").read_text().splitlines() if "iteration (ms)" in line]
    assert [r.split(",")[:2] for r in rows] == [["kineto", str(i)] for i in range(4)]
    assert [round(float(r.split(",")[2]) * 1e3, 1) for r in rows] == pytest.approx(printed, abs=0.06)
    wall = HEAD.replace("[stock, AUTO]", "[stock]") + (
        "workload:\n  command: [sleep, '0.3']\n  step_time: {wall: true}\n  warmup_steps: 0\n")
    run, output = _submit(tmp_path, wall, "w")
    assert "steps: 1/1 ok" in output, output
    (step,) = _steps(run).values()
    (row,) = (step / "workload_steps.csv").read_text().splitlines()[2:]
    assert row.startswith("wall,0,") and 0.3 <= float(row.split(",")[2]) < 5.0


def test_the_plugin_pays_where_auto_errs(tmp_path, built):
    # DDP at 8 nodes on sim-h100: NCCL's model plays NVLSTree/Simple for the 25 MiB buckets, Tree/LL128 is faster.
    table = tmp_path / "static.csv"  # what 'export static' would write from a sweep: Tree/LL128 from 16 MiB
    table.write_text("collective,nodes,ranks,size_bytes,arm\nAllReduce,*,*,16777216,Tree/LL128\n")
    campaign = HEAD.replace("nodes: [1]", "nodes: [8]").replace("[stock, AUTO]", "[stock, AUTO, ucb1, static]") + (
        "workload:\n  command: [ncclbot-sweep, sim, workload, ddp-buckets, --steps, '12']\n"
        f"  step_time: {{pattern: megatron}}\n  warmup_steps: 4\n  static_table: {table}\n"
        "repeats: 2\npacking: {separate_repeats: false}\n")
    run, output = _submit(tmp_path, campaign)
    assert "steps: 8/8 ok" in output, output
    traced = {env: len(list((p / "trace").glob("*.csv"))) for env, p in _steps(run).items()}
    assert traced == {"stock": 0, "AUTO": 2, "ucb1": 2, "static": 0}, "the plugin traces what it times; static times nothing"
    ingested = CliRunner().invoke(main, ["ingest", str(run), "-d", str(tmp_path / "ds")])
    assert ingested.exit_code == 0 and "quarantined: 0" in ingested.output, ingested.output
    again = CliRunner().invoke(main, ["ingest", str(run), "-d", str(tmp_path / "ds")])
    assert "already in dataset: 8" in again.output and len(read_table(tmp_path / "ds", "workload_steps")) == 96
    result = CliRunner().invoke(main, ["analyze", "workload-ab", "-d", str(tmp_path / "ds"), "-o", str(tmp_path / "ab"),
                                       "--json"])
    assert result.exit_code == 0, result.output
    (scenario,) = json.loads(result.output)["scenarios"]
    best = scenario["best_vs_stock"]
    assert scenario["best_learner"] == "UCB1" and best["saving"] > 0.03 and best["saving_ci_low"] > 0
    assert scenario["sentence"].startswith("On wl (sim-h100, 8 nodes) the plugin paid: UCB1 cut the median step time by")
    static = pd.read_csv(tmp_path / "ab" / "tables" / "workload_comparisons.csv").set_index(["environment", "reference"])
    assert static.loc[("static", "stock"), "saving_ci_low"] > 0.03, "the static table plays Tree/LL128 from the start"
    contexts = pd.read_csv(tmp_path / "ab" / "tables" / "workload_contexts.csv")
    top = contexts.iloc[0]
    assert (top["environment"], top["size_bytes"], top["auto_arm"], top["arm"]) == \
        ("UCB1", 25 << 20, "NVLSTree/Simple", "Tree/LL128") and top["saved_ms_per_step"] > 3.0
    figure = tmp_path / "ab" / "figures" / "workload_ab-wl-8n.png"
    assert figure.stat().st_size > 10_000
    assert set(pd.read_csv(figure.with_suffix(".csv"))["environment"]) == {"stock", "AUTO", "UCB1", "static"}
    assert read_table(tmp_path / "ds", "runs")["synthetic"].all(), "the player's stamp marks the runs synthetic"
