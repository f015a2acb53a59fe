"""The executor contract (executors/base.py), checked on the local executor.

Written against the interface only, so another backend can run the same checks by adding
a factory to ``FACTORIES``: submit returns an id; one poll answers many ids (unknown ones
UNKNOWN); states end in COMPLETED, FAILED (with the exit code) or TIMEOUT; cancel stops
only the given jobs and is no error on a finished one; find_tagged maps tags to ids.
"""

from __future__ import annotations

import time
from pathlib import Path, PurePosixPath

import pytest

from ncclbot_sweep.errors import ExecutorError
from ncclbot_sweep.sweep.executors import JobSpec, JobState
from ncclbot_sweep.sweep.executors.local import LocalExecutor


def _local(tmp_path: Path, concurrent: int = 4) -> LocalExecutor:
    return LocalExecutor(state_dir=tmp_path / "state", gpus_per_node=4, max_concurrent=concurrent)


FACTORIES = {"local": _local}


def _job(tmp_path: Path, key: str, body: str, *, nodes: int = 2, limit_s: int = 60) -> JobSpec:
    folder = tmp_path / "jobs" / key
    folder.mkdir(parents=True)
    (folder / "job.sh").write_text("#!/bin/bash\n" + body + "\n")
    return JobSpec(campaign_key="camp0001", job_key=key, local_dir=folder, remote_dir=PurePosixPath(str(folder)),
                   nodes=nodes, time_limit_s=limit_s)


def _wait(executor, ids, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = executor.poll(ids)
        if all(s.state.finished or s.state is JobState.UNKNOWN for s in states.values()):
            return states
        time.sleep(0.05)
    raise AssertionError(f"jobs did not finish: {executor.poll(ids)}")


@pytest.fixture(params=sorted(FACTORIES))
def executor(request, tmp_path):
    ex = FACTORIES[request.param](tmp_path)
    yield ex
    ex.close()


def test_outcomes_and_one_poll_for_many(executor, tmp_path):
    ok = _job(tmp_path, "ok", 'echo "$SLURM_NNODES $SLURM_NTASKS $SLURM_JOB_NAME" > out.txt; srun --nodes=2 true')
    bad = _job(tmp_path, "bad", "exit 7")
    # The time limit ends the whole job, also a step that runs in a process group of its own.
    slow = _job(tmp_path, "slow", "timeout 60 sleep 30 & echo $! > step.pid; wait", limit_s=1)
    ids = {job.job_key: executor.submit(job) for job in (ok, bad, slow)}
    assert len(set(ids.values())) == 3
    states = _wait(executor, [*ids.values(), "999999"])
    assert states["999999"].state is JobState.UNKNOWN
    assert states[ids["ok"]].state is JobState.COMPLETED
    assert states[ids["bad"]].state is JobState.FAILED and states[ids["bad"]].exit_code == 7
    assert states[ids["slow"]].state is JobState.TIMEOUT
    assert (ok.local_dir / "out.txt").read_text().split() == ["2", "8", ok.tag]
    step_pid = int((slow.local_dir / "step.pid").read_text())
    assert not Path(f"/proc/{step_pid}").exists() or "Z" in Path(f"/proc/{step_pid}/stat").read_text().split()[2]
    assert executor.find_tagged("camp0001") == {job.tag: ids[job.job_key] for job in (ok, bad, slow)}
    assert executor.find_tagged("other") == {}


def test_cancel_only_the_given_jobs(executor, tmp_path):
    a = _job(tmp_path, "a", "sleep 30")
    b = _job(tmp_path, "b", "sleep 1")
    ida, idb = executor.submit(a), executor.submit(b)
    executor.cancel([ida])
    states = _wait(executor, [ida, idb])
    assert states[ida].state is JobState.CANCELLED and states[idb].state is JobState.COMPLETED
    executor.cancel([ida, idb])  # finished jobs: not an error
    assert executor.poll([idb])[idb].state is JobState.COMPLETED


def test_missing_script_is_refused(executor, tmp_path):
    spec = JobSpec(campaign_key="c", job_key="nope", local_dir=tmp_path / "nowhere",
                   remote_dir=PurePosixPath("/nowhere"), nodes=1, time_limit_s=10)
    with pytest.raises(ExecutorError, match="no job script"):
        executor.submit(spec)


def test_local_queue_holds_jobs_beyond_the_limit(tmp_path):
    executor = _local(tmp_path, concurrent=1)
    first = executor.submit(_job(tmp_path, "first", "sleep 0.5"))
    second = executor.submit(_job(tmp_path, "second", "true"))
    assert executor.poll([second])[second].state is JobState.PENDING
    states = _wait(executor, [first, second])
    assert {s.state for s in states.values()} == {JobState.COMPLETED}


def test_a_new_executor_adopts_the_state_of_an_old_one(tmp_path):
    """What the runner relies on after a crash: the state lives in files, not in the object."""
    old = _local(tmp_path)
    job_id = old.submit(_job(tmp_path, "j", "sleep 1"))
    new = _local(tmp_path)
    deadline = time.monotonic() + 5
    while new.poll([job_id])[job_id].state is JobState.PENDING and time.monotonic() < deadline:
        time.sleep(0.02)  # the job records its own pid as it starts
    assert new.poll([job_id])[job_id].state is JobState.RUNNING
    assert _wait(new, [job_id])[job_id].state is JobState.COMPLETED
    assert new.find_tagged("camp0001") == {"ncclbot:camp0001:j": job_id}


def test_a_job_claimed_but_never_started_fails_after_the_grace(tmp_path, monkeypatch):
    """A crash between claiming a job and starting it must not leave it pending forever."""
    import ncclbot_sweep.sweep.executors.local as local

    executor = _local(tmp_path, concurrent=0)  # nothing starts: the job stays unclaimed
    job_id = executor.submit(_job(tmp_path, "j", "true"))
    assert executor.poll([job_id])[job_id].state is JobState.PENDING
    claim = tmp_path / "state" / "jobs" / job_id / "claim"
    claim.write_text("12345")  # what a caller that died while starting leaves behind
    assert executor.poll([job_id])[job_id].reason == "starting"
    monkeypatch.setattr(local, "_START_GRACE_S", 0.0)  # the grace is a module constant
    status = executor.poll([job_id])[job_id]
    assert status.state is JobState.FAILED and "never started" in status.reason
