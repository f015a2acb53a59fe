"""SlurmExecutor against the real loopback cluster, over the local shell and over SSH."""

from __future__ import annotations

import threading
import time
from pathlib import Path, PurePosixPath

import pytest

from ncclbot_sweep.errors import SchedulerError
from ncclbot_sweep.sweep.executors.base import JobSpec, JobState
from ncclbot_sweep.sweep.executors.slurm import SlurmExecutor, SlurmPolicy
from ncclbot_sweep.sweep.transport import LocalTransport, SshTransport

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]

_counter = iter(range(10_000))


def make_job(tmp_path: Path, body: str, *, nodes: int = 4, sbatch: tuple[str, ...] = (),
             campaign: str = "camp", remote: bool = True) -> JobSpec:
    """A hand-written job folder; ``remote`` puts the run folder elsewhere (copied over SFTP)."""
    key = f"job{next(_counter)}"
    local = tmp_path / "local" / "jobs" / key
    run = (tmp_path / "remote" / "jobs" / key) if remote else local
    (local / "steps" / "s1").mkdir(parents=True)
    lines = ["#!/bin/bash", f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1", "#SBATCH --time=5",
             *(f"#SBATCH {s}" for s in sbatch), f"JOB_DIR={run}", "STEP=$JOB_DIR/steps/s1", body]
    (local / "job.sh").write_text("\n".join(lines) + "\n")
    (local / "steps" / "s1" / "step.json").write_text("{}\n")
    return JobSpec(campaign_key=campaign, job_key=key, local_dir=local, remote_dir=PurePosixPath(run),
                   nodes=nodes, time_limit_s=300, name=f"{campaign}-AllReduce-{nodes}n")


HOSTS_STEP = ('srun --nodes=4 --ntasks=4 bash -c \'echo "$SLURMD_NODENAME"\' >"$STEP/stdout.txt"; '
              'echo $? >"$STEP/exit"')


def ids_tagged(cluster, tag: str) -> list[str]:
    """Every job id Slurm has under this tag, kept in the comment (to prove nothing was submitted twice)."""
    rows = (line.split("|", 1) for line in cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%k").stdout.splitlines())
    return [job_id for job_id, comment in rows if comment.strip() == tag]


def wait_final(executor: SlurmExecutor, ids: list[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = executor.poll(ids)
        if all(s.state.finished for s in statuses.values()):
            return statuses
        time.sleep(0.3)
    raise AssertionError(f"jobs {ids} did not finish: {statuses}")


def wait_state(executor: SlurmExecutor, job_id: str, state: JobState, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if executor.poll([job_id])[job_id].state is state:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never reached {state}")


@pytest.fixture(params=["local", "ssh"])
def executor(request, slurm_cluster, tmp_path):
    if request.param == "local":
        transport = LocalTransport()
    else:
        transport = SshTransport(request.getfixturevalue("ssh_settings"))
    ex = SlurmExecutor(transport, SlurmPolicy(submit_backoff_s=0.3, controller_wait_s=30))
    ex.kind = request.param
    yield ex
    ex.close()


def test_four_node_job_runs_tagged_and_comes_back(executor, slurm_cluster, tmp_path):
    job = make_job(tmp_path, HOSTS_STEP, remote=executor.kind == "ssh")
    job_id = executor.submit(job)
    named = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%j %k").stdout.split()
    assert named == [job.name, job.tag]  # a readable name; the tag in the comment finds it again
    assert executor.find_tagged("camp")[job.tag] == job_id
    assert executor.find_tagged("other") == {}
    status = wait_final(executor, [job_id])[job_id]
    assert status.state is JobState.COMPLETED
    executor.fetch(job)
    step = job.local_dir / "steps" / "s1"
    assert sorted(step.joinpath("stdout.txt").read_text().split()) == ["n1", "n2", "n3", "n4"]
    assert step.joinpath("exit").read_text().strip() == "0"
    # a second fetch changes nothing
    before = {p: p.stat().st_mtime_ns for p in job.local_dir.rglob("*") if p.is_file()}
    executor.fetch(job)
    assert before == {p: p.stat().st_mtime_ns for p in job.local_dir.rglob("*") if p.is_file()}


def test_poll_is_one_scheduler_call_for_many_jobs(executor, tmp_path):
    jobs = [make_job(tmp_path, 'sleep 1; echo 0 >"$STEP/exit"', nodes=1, remote=executor.kind == "ssh")
            for _ in range(3)]
    ids = [executor.submit(j) for j in jobs]
    executor.calls.clear()
    statuses = executor.poll(ids)
    assert set(statuses) == set(ids)
    assert executor.calls == ["squeue"]
    final = wait_final(executor, ids)
    assert {s.state for s in final.values()} == {JobState.COMPLETED}
    executor.calls.clear()
    executor.poll(ids)  # finished states are cached
    assert executor.calls == []


def test_cancel_touches_only_the_given_jobs(executor, tmp_path):
    spin = 'sleep 60; echo 0 >"$STEP/exit"'
    a = executor.submit(make_job(tmp_path, spin, nodes=1, remote=executor.kind == "ssh"))
    b = executor.submit(make_job(tmp_path, spin, nodes=1, remote=executor.kind == "ssh"))
    wait_state(executor, b, JobState.RUNNING)
    executor.cancel([a])
    assert wait_final(executor, [a])[a].state is JobState.CANCELLED
    assert executor.poll([b])[b].state is JobState.RUNNING
    executor.cancel([b])
    executor.cancel([b])  # cancelling a finished job again is fine
    assert wait_final(executor, [b])[b].state is JobState.CANCELLED


def test_rejected_job_names_the_job_and_the_reason(executor, tmp_path):
    job = make_job(tmp_path, "true", nodes=1, sbatch=("--partition=nosuch",), remote=executor.kind == "ssh")
    with pytest.raises(SchedulerError) as info:
        executor.submit(job)
    assert job.job_key in str(info.value) and "invalid partition specified: nosuch" in str(info.value)
    assert executor.calls.count("sbatch") == 1  # not retried: waiting would not help
    assert executor.find_tagged("camp").get(job.tag) is None


def test_node_down_mid_job_is_node_fail(executor, slurm_cluster, tmp_path):
    job = make_job(tmp_path, 'srun --nodes=4 --ntasks=4 sleep 30; echo $? >"$STEP/exit"',
                   remote=executor.kind == "ssh")
    job_id = executor.submit(job)
    wait_state(executor, job_id, JobState.RUNNING)
    slurm_cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=test")
    status = wait_final(executor, [job_id])[job_id]
    assert status.state is JobState.NODE_FAIL


def test_pending_on_unavailable_nodes_is_cancelled_after_the_limit(slurm_cluster, tmp_path):
    ex = SlurmExecutor(LocalTransport(), SlurmPolicy(cancel_pending_after_s=1.0))
    slurm_cluster.run("scontrol", "update", "nodename=n3", "state=drain", "reason=test")
    job = make_job(tmp_path, "true", nodes=1, sbatch=("--nodelist=n3",), remote=False)
    job_id = ex.submit(job)
    first = ex.poll([job_id])[job_id]
    deadline = time.monotonic() + 20
    while first.state is JobState.PENDING and "ReqNodeNotAvail" not in first.reason and time.monotonic() < deadline:
        time.sleep(0.3)
        first = ex.poll([job_id])[job_id]
    assert first.state is JobState.PENDING and "ReqNodeNotAvail" in first.reason
    time.sleep(1.2)
    status = ex.poll([job_id])[job_id]
    assert status.state is JobState.CANCELLED and "unavailable nodes" in status.reason
    assert "CANCELLED" in slurm_cluster.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T").stdout


def test_submit_waits_for_a_restarting_controller(ssh_settings, slurm_cluster, tmp_path):
    ex = SlurmExecutor(SshTransport(ssh_settings), SlurmPolicy(submit_backoff_s=0.5, submit_attempts=6))
    job = make_job(tmp_path, HOSTS_STEP)
    slurm_cluster.stop_ctld()
    restart = threading.Timer(2.0, slurm_cluster.start_ctld)
    restart.start()
    try:
        job_id = ex.submit(job)
    finally:
        restart.join()
    assert ids_tagged(slurm_cluster, job.tag) == [job_id]  # one job, not two
    assert wait_final(ex, [job_id])[job_id].state is JobState.COMPLETED
    ex.close()


def test_refused_while_the_partition_drains_then_resubmitted(slurm_cluster, tmp_path, caplog):
    ex = SlurmExecutor(LocalTransport(), SlurmPolicy(submit_backoff_s=0.5, submit_attempts=6))
    job = make_job(tmp_path, HOSTS_STEP, remote=False)
    slurm_cluster.run("scontrol", "update", "partitionname=debug", "state=drain")
    reopen = threading.Timer(1.5, slurm_cluster.run, ("scontrol", "update", "partitionname=debug", "state=up"))
    reopen.start()
    try:
        with caplog.at_level("WARNING", logger="ncclbot_sweep.sweep.executors.slurm"):
            job_id = ex.submit(job)
    finally:
        reopen.join()
        slurm_cluster.run("scontrol", "update", "partitionname=debug", "state=up")
    assert ex.calls.count("sbatch") >= 2
    assert any("resubmitting in" in r.getMessage() for r in caplog.records)
    assert ids_tagged(slurm_cluster, job.tag) == [job_id]
    assert wait_final(ex, [job_id])[job_id].state is JobState.COMPLETED


def test_accounting_off_is_detected_once(slurm_cluster):
    ex = SlurmExecutor(LocalTransport())
    assert ex.poll(["999999"])["999999"].state is JobState.UNKNOWN
    assert ex.calls == ["squeue", "sacct"]
    ex.calls.clear()
    assert ex.poll(["999999"])["999999"].state is JobState.UNKNOWN
    assert ex.calls == ["squeue"]  # squeue only from now on


def test_find_tagged_refuses_to_guess_when_the_controller_stays_down(slurm_cluster):
    ex = SlurmExecutor(LocalTransport(), SlurmPolicy(controller_wait_s=1.0))
    slurm_cluster.stop_ctld()
    try:
        with pytest.raises(SchedulerError, match="cannot list Slurm jobs"):
            ex.find_tagged("camp")  # an empty answer could make the runner submit a duplicate
        status = ex.poll(["1"])["1"]
        assert status.state is JobState.UNKNOWN and "not reachable" in status.reason  # poll never raises
    finally:
        slurm_cluster.start_ctld()
