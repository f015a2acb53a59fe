"""End-to-end campaigns on the loopback Slurm cluster through the runner and the CLI.

Each test runs the real commands (``submit``, ``status``, ``resume``, ``cancel``,
``collect``) against real daemons, then checks the manifest, the files and Slurm itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e_files import campaign, fake_bin, inventory, ssh_access
from ncclbot_sweep.cli import main
from ncclbot_sweep.sweep import runner
from ncclbot_sweep.sweep.collect import collect
from ncclbot_sweep.sweep.executors.slurm import SlurmExecutor
from ncclbot_sweep.sweep.inventory import load_inventory
from ncclbot_sweep.sweep.transport import SshTransport, sha256_file

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]


@dataclasses.dataclass
class Setup:
    root: Path
    workdir: Path
    remote: Path
    log: Path
    campaign: Path
    inventory: Path

    def starts(self) -> Counter:
        lines = self.log.read_text().split() if self.log.exists() else []
        return Counter(lines[1::2])

    def cli(self, *args: str) -> tuple[int, str]:
        """Run a command; returns (exit code, stdout), or (exit code, all output) when it failed."""
        result = CliRunner().invoke(main, list(args))
        return result.exit_code, (result.stdout if result.exit_code == 0 else result.output)


def make_setup(tmp_path: Path, sshd, *, name: str, arms: list[str], nodes: list[int] = [4],
               steps_per_job: int = 2, env: dict[str, str] | None = None, access: str | None = None,
               partition: str = "debug", timeout_s: int = 60, scheduler_extra: str = "",
               bin_dir: str | None = None) -> Setup:
    log = tmp_path / "starts.log"
    remote = tmp_path / "remote"
    environment = {"NCCLBOT_E2E_LOG": str(log), **(env or {})}
    inv = inventory(tmp_path / "inventory.yaml", bin_dir=bin_dir or fake_bin(tmp_path / "bin"),
                    access=access or ssh_access(sshd, remote), environment=environment, partition=partition,
                    scheduler_extra=scheduler_extra)
    camp = campaign(tmp_path / "campaign.yaml", name=name, arms=arms, nodes=nodes,
                    steps_per_job=steps_per_job, timeout_s=timeout_s)
    return Setup(tmp_path, tmp_path / "work", remote, log, camp, inv)


def submit_in_background(setup: Setup) -> tuple[threading.Thread, dict]:
    """``runner.submit`` on a thread, returned once the campaign's first step has started."""
    done: dict = {}
    worker = threading.Thread(target=lambda: done.setdefault("summary", runner.submit(
        setup.campaign, setup.inventory, setup.workdir)))
    worker.start()
    deadline = time.monotonic() + 30
    while not setup.starts() and time.monotonic() < deadline:
        time.sleep(0.2)
    return worker, done


def summary(setup: Setup) -> dict:
    code, out = setup.cli("status", str(setup.workdir), "--json")
    assert code == 0, out
    return json.loads(out)


def manifest_jobs(setup: Setup) -> list:
    camp = runner.open_campaign(setup.workdir)  # a read-only snapshot of the manifest
    try:
        return camp.folder.manifest.jobs()
    finally:
        camp.close()


def squeue_tags(cluster, prefix: str) -> list[str]:
    """The campaign tags Slurm holds: in each job's comment (the job name is the readable one)."""
    out = cluster.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    return [n for n in out if n.startswith(prefix)]


def test_multi_node_campaign_over_ssh_then_collect(tmp_path, sshd, slurm_cluster):
    s = make_setup(tmp_path, sshd, name="e2e-multi", arms=["Ring/Simple", "Tree/Simple", "Ring/LL"],
                   steps_per_job=2, env={"NCCLBOT_E2E_BIG_MB": "1"})
    code, out = s.cli("submit", str(s.campaign), "-i", str(s.inventory), "-w", str(s.workdir), "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["complete"] and result["steps"] == {"ok": 3}
    assert set(s.starts().values()) == {1} and len(s.starts()) == 3
    jobs = manifest_jobs(s)
    assert len(jobs) == 2
    for job in jobs:
        for step_dir in (s.workdir / "jobs" / job.job_key / "steps").iterdir():
            lines = (step_dir / "stdout.txt").read_text().splitlines()
            hosts = sorted(line.split(" on ")[1].split()[0] for line in lines if " on " in line)
            assert hosts == ["n1", "n2", "n3", "n4"]  # the step ran on all four nodes
            assert (step_dir / "exit").read_text().strip() == "0"
    # the runner fetched at the end of each job; collect re-verifies and changes nothing
    code, out = s.cli("collect", str(s.workdir), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["files_fetched"] == 0 and report["files_unchanged"] > 0 and report["steps_collected"] == 3
    for path in s.remote.rglob("*"):
        if path.is_file() and "steps" in path.parts:
            local = s.workdir / path.relative_to(next(s.remote.iterdir()))
            assert sha256_file(local) == sha256_file(path)


def test_simulated_fabric_binaries_on_four_nodes(tmp_path, sshd, slurm_cluster):
    s = make_setup(tmp_path, sshd, name="e2e-sim", arms=["Ring/Simple", "Tree/LL"], steps_per_job=2,
                   bin_dir="sim", env={"NCCLBOT_SIM_FABRIC": "sim-h100"})
    code, out = s.cli("submit", str(s.campaign), "-i", str(s.inventory), "-w", str(s.workdir), "--json")
    assert code == 0, out
    assert json.loads(out)["steps"] == {"ok": 2}
    (job,) = manifest_jobs(s)
    for step_dir in (s.workdir / "jobs" / job.job_key / "steps").iterdir():
        assert "Avg bus bandwidth" in (step_dir / "stdout.txt").read_text()
        result = json.loads((step_dir / "result.json").read_text())
        assert result  # nccl-tests -J output from the simulator, fetched over SFTP
    provenance = json.loads((s.workdir / "jobs" / job.job_key / "provenance.json").read_text())
    assert provenance["hosts"] == ["n1", "n2", "n3", "n4"]


def test_node_down_mid_job_then_resume_finishes(tmp_path, sshd, slurm_cluster):
    s = make_setup(tmp_path, sshd, name="e2e-nodefail", arms=["Ring/Simple", "Tree/Simple"], steps_per_job=2,
                   env={"NCCLBOT_E2E_SLEEP": "4"})
    worker, done = submit_in_background(s)
    assert s.starts(), "the first step never started"
    slurm_cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=e2e-test")
    worker.join(60)
    first = done["summary"]
    # node_fail whether or not the batch script wrote the step's exit marker before Slurm
    # killed it: the job's NODE_FAIL state says why the step died.
    (bad,) = first.failed
    assert bad["outcome"] == "node_fail", bad
    assert not first.complete
    assert first.steps.get("pending", 0) == 1  # the second step never started
    slurm_cluster.resume_node("n2")
    slurm_cluster.wait_nodes_idle(30)
    code, out = s.cli("resume", str(s.workdir), "--json")
    assert code == 0, out
    assert json.loads(out)["steps"] == {"ok": 2}
    starts = s.starts()
    assert sorted(starts.values()) == [1, 2]  # only the node-failed step ran again


def test_step_timeout_loses_nothing_else(tmp_path, sshd, slurm_cluster):
    s = make_setup(tmp_path, sshd, name="e2e-timeout", arms=["Ring/Simple", "Tree/Simple", "Ring/LL"],
                   steps_per_job=3, timeout_s=10,
                   env={"NCCLBOT_E2E_SLOW_ALGO": "Tree", "NCCLBOT_E2E_SLOW_SLEEP": "40"})
    summary_ = runner.submit(s.campaign, s.inventory, s.workdir)
    assert summary_.steps == {"ok": 2, "timeout": 1}
    assert summary_.failed[0]["outcome"] == "timeout" and "Tree" in summary_.failed[0]["label"]


def test_controller_restart_mid_campaign(tmp_path, sshd, slurm_cluster):
    # Two 4-node jobs, so the second waits in the queue while the controller restarts. (An
    # srun caught between asking for its step and getting it hangs until the step timeout
    # in Slurm 22.05, so the restart happens while the first step runs.)
    s = make_setup(tmp_path, sshd, name="e2e-ctld", arms=["Ring/Simple", "Tree/Simple"], steps_per_job=1,
                   nodes=[4], timeout_s=30, env={"NCCLBOT_E2E_SLEEP": "3"})
    worker, done = submit_in_background(s)
    slurm_cluster.restart_ctld()
    worker.join(120)
    assert not worker.is_alive()
    assert done["summary"].complete and done["summary"].steps == {"ok": 2}
    assert set(s.starts().values()) == {1}


def test_rejected_job_names_job_and_reason_manifest_consistent(tmp_path, sshd, slurm_cluster):
    s = make_setup(tmp_path, sshd, name="e2e-reject", arms=["Ring/Simple"], steps_per_job=1, partition="nosuch")
    code, out = s.cli("submit", str(s.campaign), "-i", str(s.inventory), "-w", str(s.workdir))
    assert code == 1
    (job,) = manifest_jobs(s)
    assert f"job {job.job_key}: Slurm refused it: invalid partition specified: nosuch" in out
    assert job.phase.value == "planned" and not job.executor_job_id
    assert summary(s)["jobs"] == {"planned": 1}
    assert not s.starts()


def test_cli_killed_right_after_sbatch_adopts_the_job(tmp_path, sshd, slurm_cluster):
    wrappers = tmp_path / "wrappers"
    wrappers.mkdir()
    (wrappers / "sbatch").write_text(
        "#!/bin/bash\nout=$(/usr/bin/sbatch \"$@\"); rc=$?\necho \"$out\"\n"
        "[ $rc = 0 ] && [ -n \"${NCCLBOT_E2E_KILL_AFTER_SBATCH:-}\" ] && kill -9 $PPID\nexit $rc\n")
    (wrappers / "sbatch").chmod(0o755)
    s = make_setup(tmp_path, sshd, name="e2e-adopt", arms=["Ring/Simple", "Tree/Simple"], steps_per_job=2,
                   access="{kind: local}", env={"NCCLBOT_E2E_SLEEP": "1"})
    env = {**os.environ, "PATH": f"{wrappers}{os.pathsep}{os.environ['PATH']}", "NCCLBOT_E2E_KILL_AFTER_SBATCH": "1"}
    proc = subprocess.run([sys.executable, "-c", "from ncclbot_sweep.cli import main; main()", "submit", str(s.campaign), "-i",
                           str(s.inventory), "-w", str(s.workdir)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr
    (job,) = manifest_jobs(s)
    assert not job.executor_job_id  # the crash window: Slurm has the job, the manifest does not
    tag_prefix = "ncclbot:"
    queued = squeue_tags(slurm_cluster, tag_prefix)
    assert len([n for n in queued if n.endswith(job.job_key)]) == 1
    state = summary(s)  # status adopts it
    assert state["jobs"].get("submitted", 0) + state["jobs"].get("finished", 0) == 1
    code, out = s.cli("resume", str(s.workdir), "--json")
    assert code == 0, out
    assert json.loads(out)["steps"] == {"ok": 2}
    assert len([n for n in squeue_tags(slurm_cluster, tag_prefix) if n.endswith(job.job_key)]) == 1
    assert set(s.starts().values()) == {1}  # no step ran twice


def _size(path: Path) -> int:
    """Size of a file that may be renamed away meanwhile (0 then)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# paramiko's SFTP prefetch thread dies with the cut connection and pytest reports that thread's
# EOFError; the download itself fails cleanly in the main thread, which is what is tested.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_ssh_cut_during_collect_then_collect_again(tmp_path, sshd, slurm_cluster, ssh_settings):
    s = make_setup(tmp_path, sshd, name="e2e-collect", arms=["Ring/Simple", "Tree/Simple"], steps_per_job=1,
                   nodes=[1], env={"NCCLBOT_E2E_BIG_MB": "48"})
    code, out = s.cli("submit", str(s.campaign), "-i", str(s.inventory), "-w", str(s.workdir), "--no-wait")
    assert code == 0, out
    deadline = time.monotonic() + 60
    while len(list(s.remote.rglob("exit"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(list(s.remote.rglob("exit"))) == 2
    stop = threading.Event()

    def cutter() -> None:
        """Cut the connection a few MB into a 48 MB file: a small file (or the big one's last
        bytes) could finish and be renamed before the kill lands, leaving nothing to resume."""
        while not stop.is_set():
            if any(_size(p) >= 4 << 20 for p in s.workdir.rglob("*.ncclbot-part")):
                sshd.kill_sessions()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=cutter)
    thread.start()
    fragile = SshTransport(dataclasses.replace(ssh_settings, attempts=1))
    try:
        with pytest.raises(Exception):
            collect(s.workdir, executor=SlurmExecutor(fragile))
    finally:
        stop.set()
        thread.join()
        fragile.close()
    assert list(s.workdir.rglob("*.ncclbot-part")), "the cut left no partial file to resume"
    code, out = s.cli("collect", str(s.workdir), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["files_resumed"] >= 1 and report["steps_collected"] == 2
    assert not list(s.workdir.rglob("*.ncclbot-part"))
    run_root = next(s.remote.iterdir())
    remote_files = [p for p in run_root.rglob("*") if p.is_file() and "steps" in p.parts]
    assert len(remote_files) >= 6
    for path in remote_files:
        assert sha256_file(s.workdir / path.relative_to(run_root)) == sha256_file(path)
    code, out = s.cli("collect", str(s.workdir), "--json")  # idempotent
    assert json.loads(out)["files_fetched"] == 0


def test_queue_cap_holds_jobs_back(tmp_path, sshd, slurm_cluster):
    s = make_setup(tmp_path, sshd, name="e2e-cap", arms=["Ring/Simple", "Tree/Simple", "Ring/LL"],
                   steps_per_job=1, nodes=[1], env={"NCCLBOT_E2E_SLEEP": "1"},
                   scheduler_extra="  max_jobs_in_queue: 1")
    executor = SlurmExecutor.from_inventory(load_inventory(s.inventory))
    seen, queries = [], []

    def sample(done: int, total: int, message: str) -> None:
        out = slurm_cluster.run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%k").stdout.split()
        seen.append(len([n for n in out if n.startswith("ncclbot:")]))
        queries.append(sum(1 for c in executor.calls if c in ("squeue", "sacct")))

    runner.submit(s.campaign, s.inventory, s.workdir, wait=False)  # queues the first job only
    result = runner.resume(s.workdir, progress=sample, executor=executor)
    assert result.steps == {"ok": 3}
    assert max(seen) == 1 and len(seen) >= 3
    # one scheduler query per poll cycle (the first cycle also asks sacct once: accounting is off)
    per_cycle = [b - a for a, b in zip(queries, queries[1:])]
    assert per_cycle and max(per_cycle) == 1, per_cycle
    assert executor.transport.connects == 1  # one SSH connection for the whole campaign


def test_cancel_stops_the_campaign_jobs_only(tmp_path, sshd, slurm_cluster):
    other = slurm_cluster.run("sbatch", "--parsable", "-N1", "-J", "someone-else", "-o", "/dev/null",
                              "--wrap", "sleep 60").stdout.strip()
    s = make_setup(tmp_path, sshd, name="e2e-cancel", arms=["Ring/Simple", "Tree/Simple"], steps_per_job=2,
                   nodes=[2], env={"NCCLBOT_E2E_SLEEP": "60"})
    try:
        code, out = s.cli("submit", str(s.campaign), "-i", str(s.inventory), "-w", str(s.workdir), "--no-wait")
        assert code == 0, out
        deadline = time.monotonic() + 30
        while not s.starts() and time.monotonic() < deadline:
            time.sleep(0.2)
        code, out = s.cli("cancel", str(s.workdir), "--json")
        assert code == 0, out
        result = json.loads(out)
        assert result["jobs"] == {"cancelled": 1} and result["steps"] == {"cancelled": 1, "pending": 1}
        (job,) = manifest_jobs(s)
        state = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", f"{job.executor_job_id},{other}",
                                  "-o", "%i %T").stdout.split()
        assert dict(zip(state[::2], state[1::2])) == {job.executor_job_id: "CANCELLED", other: "RUNNING"}
    finally:
        slurm_cluster.run("scancel", other, check=False)


def test_a_job_script_submitted_by_hand_logs_into_its_folder(tmp_path, slurm_cluster):
    """``render`` then ``sbatch job.sh`` from another folder: Slurm's output lands in the job's folder
    (``#SBATCH --output/--error``), not where sbatch ran, and the job's step runs."""
    inv = inventory(tmp_path / "inventory.yaml", bin_dir=fake_bin(tmp_path / "bin"), access="{kind: local}",
                    environment={})
    camp = campaign(tmp_path / "campaign.yaml", name="e2e-by-hand", arms=["Ring/Simple"], nodes=[1], steps_per_job=1)
    rendered = CliRunner().invoke(main, ["render", str(camp), "-i", str(inv), "-o", str(tmp_path / "50% run")])
    assert rendered.exit_code == 0, rendered.output
    (script,) = (tmp_path / "50% run").glob("jobs/*/job.sh")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job_id = subprocess.run(["sbatch", "--parsable", str(script)], cwd=elsewhere, capture_output=True, text=True,
                            check=True, timeout=30).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while slurm_cluster.run("squeue", "-h", "-j", job_id, check=False).stdout.strip():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.3)
    assert (script.parent / f"slurm-{job_id}.out").is_file()
    assert not list(elsewhere.iterdir())
    (marker,) = script.parent.glob("steps/*/exit")
    assert marker.read_text().strip() == "0"
