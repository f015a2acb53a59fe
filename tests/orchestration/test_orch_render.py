"""Job scripts: the contract of each kind, quoting of every inventory/campaign value, step.json."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from orch_support import FAKE, SMALL_CAMPAIGN, local_inventory_text, starts_and_ends
from ncclbot_sweep import pluginbuild
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import InventoryError, RenderError
from ncclbot_sweep.names import COLLECTIVE_BINARY
from ncclbot_sweep.outcomes import last_error_line
from ncclbot_sweep.paths import StepFiles
from ncclbot_sweep.sweep.campaign import load_campaign, parse_campaign_text, plan_campaign
from ncclbot_sweep.sweep.inventory import load_inventory, parse_inventory_text
from ncclbot_sweep.sweep.render import render_campaign, render_job_script, render_tune_script
from ncclbot_sweep.sweep.runner import submit

EVIL = "x$(touch PWNED)`touch PWNED2`;touch PWNED3;'\"q\" && touch PWNED4 || true"


def test_forced_script_contract():
    plan = plan_campaign(load_campaign("forced-arm-h100"), load_inventory("h100-spectrumx"))
    job = plan.jobs[0]
    text = render_job_script(plan, job, run_root=Path("/shared/c"))
    collectives = "+".join(dict.fromkeys(s.collective for s in job.steps))
    name = f"forced-arm-h100-{collectives}-{job.nodes}n"  # readable; the tag is the comment
    assert text.startswith(f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --comment=ncclbot:")
    assert f"#SBATCH --nodes={job.nodes}\n" in text and "#SBATCH --partition=h100\n" in text
    assert "#SBATCH --exclusive\n" in text
    for step in job.steps:  # each step's own timeout, from its estimate: an LL step's is longer than LL128's
        assert f"exec timeout --kill-after=30 {step.timeout_s} srun --nodes=4 --ntasks=32" in text
    timeouts = {str(s.arm): s.timeout_s for s in job.steps}
    assert timeouts["Ring/LL"] > 3 * timeouts["Ring/LL128"], timeouts
    assert "--mpi=pmix" in text
    step = job.steps[0]
    assert f"export NCCL_ALGO={step.arm.algorithm}\n" in text and f"export NCCL_PROTO={step.arm.protocol}\n" in text
    assert "export NCCL_DEBUG=INFO" in text and "export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING" in text
    assert 'export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"' in text
    assert 'bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank /opt/nccl-tests/build/' in text
    assert '-n 100 -I 1 -c 0 -J "$STEP_DIR/result.json"' in text  # nccl-tests 2.19: per-iteration JSON
    assert 'ncclbot_step_done "$STEP_DIR"' in text and '"$STEP_DIR/exit"' in text
    assert "export NCCL_IB_GID_INDEX=3" in text and "export LD_LIBRARY_PATH=/opt/nccl/lib" in text
    assert "unset NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN" in text


def test_gpu_request_can_be_left_out():
    text = local_inventory_text(Path("/opt/nt")).replace("kind: local\n  max", "kind: local\n  request_gpus: false\n  max")
    plan = plan_campaign(parse_campaign_text(SMALL_CAMPAIGN), parse_inventory_text(text))
    script = render_job_script(plan, plan.jobs[0], run_root=Path("/c"))
    assert "--gpus-per-node" not in script and "#SBATCH --ntasks-per-node=8" in script


def test_old_nccl_tests_use_cycles():
    old = parse_inventory_text(local_inventory_text(Path("/opt/nt")).replace('"2.19.6"', '"2.16.9"'))
    plan = plan_campaign(parse_campaign_text(SMALL_CAMPAIGN), old)
    script = render_job_script(plan, plan.jobs[0], run_root=Path("/c"))
    assert "-n 1 -N 5" in script and "-J" not in script.split("exec timeout")[1]


def test_gb200_segment_container_and_live_plugin_env():
    plan = plan_campaign(load_campaign("forced-arm-h100"), load_inventory("gb200-mnnvl-on"))
    text = render_job_script(plan, plan.jobs[-1], run_root=Path("/c"))
    assert "#SBATCH --segment=16\n" in text and "#SBATCH --nodes=32\n" in text
    assert "--container-image=/shared/images/nccl-tests+ncclbot.sqsh" in text
    assert "export NCCL_MNNVL_ENABLE=1" in text and "export NVIDIA_IMEX_CHANNELS=0" in text
    live = plan_campaign(load_campaign("live-h100"), load_inventory("h100-spectrumx"))
    text = render_job_script(live, live.jobs[0], run_root=Path("/c"))
    assert "export NCCL_TUNER_PLUGIN=/opt/ncclbot/lib/libnccl-ncclbot.so" in text
    assert "/opt/ncclbot/bin/ncclbot-coordinator --listen" in text and "export NCCLBOT_SYNC_TOKEN=" in text
    assert "export NCCLBOT_POLICY=auto" in text
    assert "export NCCLBOT_POLICY=ucb1" in text and 'export NCCLBOT_TRACE_DIR="$STEP_DIR/trace"' in text
    assert text.count("unset NCCL_ALGO NCCL_PROTO NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN") == len(live.jobs[0].steps)


def test_step_json_describes_the_step(tmp_path: Path):
    plan = plan_campaign(load_campaign("live-h100"), load_inventory("h100-spectrumx"))
    render_campaign(plan, tmp_path)
    job = plan.jobs[0]
    metas = [json.loads((tmp_path / "jobs" / job.key / "steps" / s.key / "step.json").read_text()) for s in job.steps]
    stock = next(m for m in metas if m["policy"] == "stock")
    assert stock["plugin"] is False and stock["arm"] is None and "NCCL_TUNER_PLUGIN" not in stock["env"]
    ucb = next(m for m in metas if m["policy"] == "AUTO" and m["variant"] == "sync-4")
    for field in ("campaign", "campaign_key", "job_key", "step_key", "fabric", "kind", "collective", "binary",
                  "nodes", "gpus_per_node", "ranks", "arm", "policy", "sizes", "iterations", "warmup", "env"):
        assert field in ucb
    assert ucb["ranks"] == 64 and ucb["sizes"] == {"min": 512, "max": 16 * 2**30, "factor": 2}
    assert ucb["env"]["NCCLBOT_SYNC_EVERY"] == "4" and ucb["env"]["NCCL_IB_TC"] == "106"
    assert ucb["campaign"] == "live-h100" and ucb["fabric"] == "h100-spectrumx"


def test_rendering_is_idempotent(tmp_path: Path):
    plan = plan_campaign(load_campaign("demo"), load_inventory("h100-spectrumx"))
    first = render_campaign(plan, tmp_path)
    stamps = [p.stat().st_mtime_ns for p in first]
    again = render_campaign(plan, tmp_path)
    assert [p.stat().st_mtime_ns for p in again] == stamps


def _evil_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    weird = tmp_path / "we'ird $(touch PWNED) `x` ;dir\"q"
    bin_dir = weird / "bin"
    bin_dir.mkdir(parents=True)
    for binary in COLLECTIVE_BINARY.values():
        (bin_dir / binary).write_text(FAKE)
        (bin_dir / binary).chmod(0o755)
    extra = (f"description: {json.dumps(EVIL)}\n"
             f"environment:\n  NCCL_EVIL: {json.dumps(EVIL)}\n  NCCL_IB_HCA: {json.dumps('=mlx5_0:1;touch PWNED5')}\n"
             f"nccl: {{version: {json.dumps(EVIL)}, lib_dir: {json.dumps(str(weird / 'lib'))}}}\n"
             f"plugin: {{path: {json.dumps(EVIL)}, version: {json.dumps(EVIL)}}}\n")
    inv_text = local_inventory_text(Path("PLACEHOLDER"), extra=extra)
    inv_text = inv_text.replace('bin_dir: "PLACEHOLDER"', f"bin_dir: {json.dumps(str(bin_dir))}")
    inv_text = inv_text.replace('version: "2.19.6"', 'version: "2.19.6"\n  extra_flags: ["-c", "0; touch PWNED6"]')
    inv = tmp_path / "inv.yaml"
    inv.write_text(inv_text)
    camp = tmp_path / "c.yaml"
    camp.write_text(SMALL_CAMPAIGN.replace("nodes: [2, 4]", "nodes: [2]")
                    + f"env: {{NCCL_CAMPAIGN_EVIL: {json.dumps(EVIL)}}}\n")
    return inv, camp, weird / "campaign\nfolder"


def test_hostile_values_are_never_executed(tmp_path: Path, fake_env: Path):
    """Every inventory and campaign value is shell-quoted: running the scripts executes none of them."""
    inv, camp, workdir = _evil_setup(tmp_path)
    summary = submit(camp, inv, workdir=workdir)
    assert summary.complete, summary
    pwned = [p for p in tmp_path.rglob("PWNED*")]
    assert pwned == [], pwned
    starts, ends = starts_and_ends(fake_env)
    assert len(ends) == summary.total_steps == 4
    job_dir = next((workdir / "jobs").iterdir())
    prov = json.loads((job_dir / "provenance.json").read_text())
    assert prov["environment"]["NCCL_EVIL"] == EVIL  # arrived verbatim
    assert prov["nccl_version"] == EVIL and prov["plugin_version"] == EVIL
    step = next((job_dir / "steps").iterdir())
    stdout = (step / "stdout.txt").read_text()
    assert "-c 0; touch PWNED6" in stdout  # one argument, passed through untouched
    bash_n = subprocess.run(["bash", "-n", str(job_dir / "job.sh")], capture_output=True, text=True)
    assert bash_n.returncode == 0, bash_n.stderr


def test_sbatch_values_with_shell_syntax_are_refused_by_the_inventory(tmp_path: Path):
    # Refused when the inventory is loaded ('inventory check', 'plan'), not first by 'submit'.
    text = local_inventory_text(Path("/opt/nt")).replace("kind: local\n  max", "kind: slurm\n  partition: \"$(touch PWNED)\"\n  max")
    with pytest.raises(InventoryError, match="scheduler.partition: must be a single line without quotes") as info:
        parse_inventory_text(text)
    assert info.value.line == 6


def test_render_refuses_sbatch_values_with_shell_syntax():
    plan = plan_campaign(parse_campaign_text(SMALL_CAMPAIGN), parse_inventory_text(local_inventory_text(Path("/opt/nt"))))
    evil = plan.inventory.model_copy(update={"scheduler": plan.inventory.scheduler.model_copy(
        update={"partition": "$(touch PWNED)"})})  # model_copy skips validation: render's own check remains
    plan = dataclasses.replace(plan, inventory=evil)
    with pytest.raises(RenderError, match="must be a single line without quotes") as info:
        render_job_script(plan, plan.jobs[0], run_root=Path("/c"))
    assert "scheduler.partition" in str(info.value) and info.value.hint == "fix scheduler.partition in the inventory"


def test_cli_render(tmp_path: Path, fake_bin: Path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(local_inventory_text(fake_bin))
    camp = tmp_path / "c.yaml"
    camp.write_text(SMALL_CAMPAIGN)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["render", str(camp), "--inventory", str(inv), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output == f"rendered 4 job scripts (8 steps) into {out}\n"
    assert len(list(out.glob("jobs/*/job.sh"))) == 4 and len(list(out.glob("jobs/*/steps/*/step.json"))) == 8
    result = CliRunner().invoke(main, ["render", str(camp), "--inventory", str(tmp_path / "nope.yaml"), "--out", str(out)])
    assert result.exit_code == 1 and "file not found" in result.output


def _plugin_settings() -> set[str] | None:
    """The NCCLBOT_* settings documented in plugin/README.md's table (None if there is no plugin)."""
    readme = Path(__file__).resolve().parents[2] / "plugin" / "README.md"
    if not readme.exists():
        return None
    return set(re.findall(r"^\| `(NCCLBOT_[A-Z_]+)` \|", readme.read_text(), flags=re.M))


def test_plugin_steps_export_only_settings_the_plugin_knows():
    """The plugin goes inert on an unknown NCCLBOT_* variable: live steps must export none."""
    known = _plugin_settings()
    if not known:
        pytest.skip("plugin/README.md has no settings table")
    live = plan_campaign(load_campaign("live-h100"), load_inventory("h100-spectrumx"))
    text = render_job_script(live, live.jobs[0], run_root=Path("/c"))
    head, *blocks = text.split("# ---- step ")
    plugin_blocks = [b for b in blocks if "export NCCL_PROFILER_PLUGIN=" in b]
    assert len(plugin_blocks) == len(blocks) - 1  # every step but the stock one loads the plugin
    exported = set(re.findall(r"export (NCCLBOT_[A-Z_]+)=", head + "".join(plugin_blocks)))
    assert "NCCLBOT_POLICY" in exported and exported <= known, exported - known


def test_stock_and_overhead_templates():
    inv = parse_inventory_text(local_inventory_text(Path("/opt/nt"), extra="plugin: {path: /opt/p.so, coordinator: /opt/coord}\n"))
    base = SMALL_CAMPAIGN.replace("arms: [Ring/LL, Ring/LL128, Ring/Simple, Tree/LL]\n", "")
    stock = plan_campaign(parse_campaign_text(base.replace("kind: forced", "kind: stock")), inv)
    text = render_job_script(stock, stock.jobs[0], run_root=Path("/c"))
    assert "unset NCCL_ALGO NCCL_PROTO NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN" in text
    assert "export NCCL_ALGO" not in text and "coordinator" not in text
    overhead = plan_campaign(parse_campaign_text(base.replace("kind: forced", "kind: overhead")
                                                 + "policies: [ucb1]\n"), inv)
    text = render_job_script(overhead, overhead.jobs[0], run_root=Path("/c"))
    assert "export NCCL_TUNER_PLUGIN=/opt/p.so" in text and "/opt/coord --listen" in text
    assert 'export NCCLBOT_TRACE_DIR="$STEP_DIR/trace"' in text


def test_baseline_step_unsets_forcing():
    inv = parse_inventory_text(local_inventory_text(Path("/opt/nt")))
    plan = plan_campaign(parse_campaign_text(SMALL_CAMPAIGN + "baseline: true\n"), inv)
    text = render_job_script(plan, plan.jobs[0], run_root=Path("/c"))
    first = text.split("# ---- step ")[1]
    assert "unset NCCL_ALGO NCCL_PROTO" in first and "export NCCL_ALGO" not in first
    assert "export NCCL_ALGO=" in text.split("# ---- step ")[2]


def test_only_rank_zero_writes_the_nccl_log(tmp_path: Path):
    """The rank wrapper of the job script: rank 0 keeps INFO and the file, the others WARN only."""
    plan = plan_campaign(load_campaign("forced-arm-h100"), load_inventory("h100-spectrumx"))
    text = render_job_script(plan, plan.jobs[0], run_root=Path("/c"))
    wrapper = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("NCCLSWEEP_RANK_WRAPPER="))
    probe = 'echo "$NCCL_DEBUG ${NCCL_DEBUG_FILE:-none}"'
    for rank, expected in (("0", "INFO /s/nccl.log"), ("5", "WARN none")):
        out = subprocess.run(["bash", "-c", f"W={wrapper}; bash -c \"$W\" r bash -c '{probe}'"],
                             env={"PATH": "/usr/bin:/bin", "SLURM_PROCID": rank, "NCCL_DEBUG": "INFO",
                                  "NCCL_DEBUG_FILE": "/s/nccl.log"}, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected


FAKE_SRUN = """#!/bin/bash
# Stands in for srun: records its arguments, one per NUL-terminated field.
printf '%s\\0' "$@" >"$NCCLSWEEP_FAKE_SRUN"
"""


def test_tuning_job_passes_every_word_through_untouched(tmp_path: Path):
    """The tuning job's command words and folders are shell-quoted: srun gets them verbatim, nothing runs."""
    weird = tmp_path / "we'ird $(touch PWNED) `x` ;dir\"q"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    inventory = load_inventory("h100-spectrumx")
    inventory = inventory.model_copy(update={"ncclbot_sweep": inventory.ncclbot_sweep.model_copy(
        update={"command": [str(weird / "bin" / "ncclbot-sweep"), EVIL]})})
    command = [*inventory.ncclbot_sweep.command, "analyze", "tune", "-d", str(weird / "ds"), "--storage", EVIL]
    script = tmp_path / "job.sh"
    script.write_text(render_tune_script(inventory, name="tune-x", campaign_key="tune-k", job_key="j",
                                         run_dir=weird / "tune", nodes=3, workers=2, command=command))
    record = tmp_path / "srun.args"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NCCLSWEEP_FAKE_SRUN": str(record)}
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, (run.stderr, (weird / "tune" / "job.log").read_text())
    args = record.read_text().split("\0")[:-1]
    assert args == ["--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--cpus-per-task=2",
                    f"--output={weird / 'tune' / 'workers'}/%j-%t-%N.log", *command]
    assert [p for p in tmp_path.rglob("PWNED*")] == []
    prov = json.loads((weird / "tune" / "provenance.json").read_text())
    assert prov["fabric"] == "h100-spectrumx" and prov["campaign"] == "tune-x" and prov["job_key"] == "j"
    text = script.read_text()
    assert "#SBATCH --nodes=3\n#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2\n" in text
    assert "--gpus-per-node" not in text and "#SBATCH --partition=h100\n" in text


_SRUN_STAND_IN = """#!/bin/bash
# srun for a job script run by hand: drops srun's --flag=value words, runs the command once.
while [ $# -gt 0 ]; do case "$1" in --*=*) shift ;; *) break ;; esac; done
exec "$@"
"""
# The step's binary: records whether the job's coordinator said it listens when the step started,
# then behaves as the fake nccl-tests.
_SEES_COORDINATOR = """#!/bin/bash
job_dir="$(dirname "$(dirname "$(dirname "$NCCL_DEBUG_FILE")")")"
if grep -q '^listening on ' "$job_dir/coordinator.log" 2>/dev/null; then seen=listening; else seen=silent; fi
echo "$NCCLSWEEP_STEP_KEY $seen" >>"$NCCLSWEEP_COORDINATOR_SEEN"
exec "$(dirname "$0")/fake" "$@"
"""


def _free_coordinator_port() -> int:
    """A free port the Slurm branch of the live script computes for some job id (20000 + id % 20000)."""
    import socket

    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", 0))
            port = sock.getsockname()[1]
        if 20000 <= port < 40000:
            return port
    pytest.skip("no free port in 20000-39999")


def _run_live_job_by_hand(tmp_path: Path, coordinator: str) -> tuple[Path, dict[str, str], subprocess.CompletedProcess]:
    """Render a two-step live job (stock, ucb1) for a Slurm inventory and run its script with bash, as
    sbatch would on the batch host: Slurm's branch of the coordinator, the real template."""
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "fake").write_text(FAKE)
    (bins / "all_reduce_perf").write_text(_SEES_COORDINATOR)
    (bins / "srun").write_text(_SRUN_STAND_IN)
    (bins / "coordinator").write_text(coordinator)
    for path in bins.iterdir():
        path.chmod(0o755)
    inv = parse_inventory_text(local_inventory_text(bins).replace("kind: local\n  max", "kind: slurm\n  max")
                               + f"plugin: {{path: /nowhere/libnccl-ncclbot.so, coordinator: {bins / 'coordinator'}}}\n")
    plan = plan_campaign(parse_campaign_text(
        "name: by-hand\nkind: live\ncollectives: [AllReduce]\nnodes: [1]\nsizes: {min: 1K, max: 1K}\n"
        "policies: [stock, ucb1]\niterations: 2\n"), inv)
    (job,) = plan.jobs
    root = tmp_path / "campaign"
    render_campaign(plan, root)
    seen = tmp_path / "seen.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NCCLSWEEP_", "NCCLBOT_"))}
    env.update(PATH=f"{bins}:{env['PATH']}", SLURM_JOB_ID=str(_free_coordinator_port() - 20000),
               NCCLSWEEP_COORDINATOR_SEEN=str(seen), NCCLSWEEP_FAKE_LOG=str(tmp_path / "fake.log"))
    run = subprocess.run(["bash", str(root / "jobs" / job.key / "job.sh")], env=env, capture_output=True, text=True,
                         timeout=120)
    steps = {s.policy: root / "jobs" / job.key / "steps" / s.key for s in job.steps}
    return seen, {policy: str(folder) for policy, folder in steps.items()}, run


def test_the_live_job_waits_for_the_coordinator_before_any_step(tmp_path: Path):
    """The real coordinator, slow to start (2 s), on Slurm's branch: no step starts before it listens."""
    coordinator = f"#!/bin/bash\nsleep 2\nexec {pluginbuild.built_file(pluginbuild.COORDINATOR)} \"$@\"\n"
    seen, steps, run = _run_live_job_by_hand(tmp_path, coordinator)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [line.split()[1] for line in seen.read_text().splitlines()] == ["listening", "listening"]
    job_log = (Path(steps["ucb1"]).parents[1] / "job.log").read_text()
    assert "[ncclbot] coordinator listening on 0.0.0.0:" in job_log


def test_a_coordinator_that_cannot_listen_fails_the_plugin_steps_naming_why(tmp_path: Path):
    """The stock step runs; the ucb1 step never starts and fails with the coordinator's own words."""
    coordinator = "#!/bin/bash\necho \"error: cannot listen on $2\" >&2\nexit 1\n"
    seen, steps, run = _run_live_job_by_hand(tmp_path, coordinator)
    assert run.returncode == 1
    assert [line.split()[0] for line in seen.read_text().splitlines()] == [Path(steps["stock"]).name]
    ucb1 = Path(steps["ucb1"])
    assert (ucb1 / "exit").read_text().strip() == "1" and (Path(steps["stock"]) / "exit").read_text().strip() == "0"
    reason = (ucb1 / "stderr.txt").read_text()
    assert reason.startswith("the ncclbot coordinator cannot listen on 0.0.0.0:")
    assert "error: cannot listen on 0.0.0.0:" in reason and "(see coordinator.log)" in reason
    assert last_error_line(StepFiles(ucb1)) == reason.strip()  # what status and the runs table show


def test_slurm_output_and_error_go_to_the_jobs_folder():
    """``sbatch job.sh`` by hand logs into the job's folder too; a '%' of the folder is not a Slurm pattern."""
    plan = plan_campaign(load_campaign("forced-arm-h100"), load_inventory("h100-spectrumx"))
    job = plan.jobs[0]
    text = render_job_script(plan, job, run_root=Path("/shared/runs 50%"))
    target = f'"/shared/runs 50%%/jobs/{job.key}/slurm-%j.out"'
    assert f"#SBATCH --output={target}\n#SBATCH --error={target}\n" in text
    tune = render_tune_script(plan.inventory, name="t", campaign_key="c", job_key="j", run_dir=Path("/shared/tune"),
                              nodes=1, workers=1, command=["ncclbot-sweep"])
    assert "#SBATCH --output=/shared/tune/slurm-%j.out\n#SBATCH --error=/shared/tune/slurm-%j.out\n" in tune
