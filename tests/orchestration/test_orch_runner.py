"""Campaign runner on the local executor: idempotent submit, resume after SIGKILL, cancel, outcomes."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from orch_support import SMALL_CAMPAIGN, local_inventory_text, starts_and_ends
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import ExecutorError, ManifestError
from ncclbot_sweep.sweep.executors import make_executor
from ncclbot_sweep.sweep.executors.local import session_members
from ncclbot_sweep.sweep.inventory import parse_inventory_text
from ncclbot_sweep.sweep.manifest import JobPhase, Manifest
from ncclbot_sweep.sweep.runner import cancel, prepare, resume, status, submit


def _files(tmp_path: Path, fake_bin: Path, campaign: str = SMALL_CAMPAIGN, concurrent: int = 2) -> tuple[Path, Path]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(local_inventory_text(fake_bin, concurrent=concurrent))
    camp = tmp_path / "campaign.yaml"
    camp.write_text(campaign)
    return camp, inv


def test_submit_twice_runs_nothing_twice(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    first = submit(camp, inv, workdir=work)
    assert first.complete and first.total_steps == 8 and first.jobs == {"finished": 4}
    starts, ends = starts_and_ends(fake_env)
    assert len(starts) == 8 and set(starts.values()) == {1} and set(ends.values()) == {1}
    second = submit(camp, inv, workdir=work)
    assert second.complete
    assert starts_and_ends(fake_env) == (starts, ends)  # nothing ran again
    # The local srun stand-in gave task 0 the whole job size.
    outputs = [p.read_text() for p in work.glob("jobs/*/steps/*/stdout.txt")]
    assert any("# ranks 32 nodes 4 procid 0" in o for o in outputs)
    assert any("# ranks 16 nodes 2 procid 0" in o for o in outputs)


def test_growing_a_campaign_runs_only_new_steps(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, workdir=work)
    starts_before, _ = starts_and_ends(fake_env)
    camp.write_text(SMALL_CAMPAIGN.replace("nodes: [2, 4]", "nodes: [2, 4, 8]"))
    summary = submit(camp, inv, workdir=work)
    starts, _ = starts_and_ends(fake_env)
    assert summary.total_steps == 12 and summary.complete
    assert len(starts) == 12 and all(starts[k] == 1 for k in starts_before)


def test_failed_and_invalid_steps_then_resume_reruns_only_those(tmp_path, fake_bin, fake_env, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    monkeypatch.setenv("NCCLSWEEP_FAKE_FAIL_ALGO", "Tree")
    summary = submit(camp, inv, workdir=work)
    outcomes = {f["label"]: f["outcome"] for f in summary.failed}
    assert outcomes == {"AllReduce 2n Tree/LL": "failed", "AllReduce 4n Tree/LL": "failed"}
    assert summary.steps == {"ok": 6, "failed": 2}
    # A failure does not stop the job: the other step of that job ran.
    monkeypatch.delenv("NCCLSWEEP_FAKE_FAIL_ALGO")
    again = submit(camp, inv, workdir=work)  # submit does not retry
    assert again.steps == {"ok": 6, "failed": 2}
    starts_before, _ = starts_and_ends(fake_env)
    summary = resume(work)
    assert summary.complete, (summary.steps, summary.failed, summary.job_rows)
    starts, ends = starts_and_ends(fake_env)
    rerun = {k for k in starts if starts[k] == 2}
    assert len(rerun) == 2 and all(ends[k] == 1 for k in ends)
    assert all(starts[k] == 1 for k in starts_before if k not in rerun)


def test_exit_0_without_a_result_is_failed_and_resume_runs_it_again(tmp_path, fake_bin, fake_env, monkeypatch):
    """A step whose process exits 0 but prints no result is failed (manifest and dataset agree);
    its exit marker says 0, yet ``resume`` runs it again and nothing else."""
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    monkeypatch.setenv("NCCLSWEEP_FAKE_GARBAGE_ALGO", "Tree")
    summary = submit(camp, inv, workdir=work)
    assert summary.steps == {"ok": 6, "failed": 2}
    assert {f["label"] for f in summary.failed} == {"AllReduce 2n Tree/LL", "AllReduce 4n Tree/LL"}
    assert sorted(m.read_text().strip() for m in work.glob("jobs/*/steps/*/exit")) == ["0"] * 8
    monkeypatch.delenv("NCCLSWEEP_FAKE_GARBAGE_ALGO")
    starts_before, _ = starts_and_ends(fake_env)
    summary = resume(work)
    assert summary.complete, (summary.steps, summary.failed, summary.job_rows)
    starts, _ = starts_and_ends(fake_env)
    rerun = {k for k in starts if starts[k] == 2}
    assert len(rerun) == 2 and all(starts[k] == 1 for k in starts_before if k not in rerun)


def test_invalid_arm_outcome(tmp_path, fake_bin, fake_env, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin)
    monkeypatch.setenv("NCCLSWEEP_FAKE_INVALID_ALGO", "Tree")
    summary = submit(camp, inv, workdir=tmp_path / "work")
    assert {f["outcome"] for f in summary.failed} == {"invalid_arm"}
    assert summary.steps["invalid_arm"] == 2


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    code = "import sys; from ncclbot_sweep.cli import main; sys.exit(main())"
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for_ends(log: Path, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(starts_and_ends(log)[1]) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} steps finished in {timeout} s")


def _finished_steps(work: Path) -> set[str]:
    """Steps whose exit marker says 0: what the campaign counts as finished."""
    return {p.parent.name for p in work.glob("jobs/*/steps/*/exit") if p.read_text().strip() == "0"}


def _runner(work: Path) -> tuple[int, str] | None:
    """(pid, start time) of the local executor's detached runner while it lives, as its record in the folder says."""
    try:
        pid, started = (work / ".executor" / "runner.pid").read_text().split()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    return (int(pid), started) if stat[0] != "Z" and stat[19] == started else None


def _kill_sessions(work: Path) -> None:
    """SIGKILL the local executor's runner and every process of the campaign's jobs, again until none is left.

    One pass can miss a child forked while /proc is being scanned, which would then live on.
    """
    runner = _runner(work)
    if runner is not None:
        os.kill(runner[0], signal.SIGKILL)
    for _ in range(50):
        members = []
        for pid_file in (work / ".executor" / "jobs").glob("*/pid"):
            sid, started = pid_file.read_text().split()
            members += session_members(int(sid), started)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    raise AssertionError("the jobs' processes would not die")


@pytest.mark.parametrize("jobs_survive", [True, False], ids=["jobs-keep-running", "jobs-killed-too"])
def test_sigkill_then_resume_finishes_each_step_once(tmp_path, fake_bin, fake_env, jobs_survive):
    camp, inv = _files(tmp_path, fake_bin, concurrent=1)
    work = tmp_path / "work"
    env = dict(os.environ, NCCLSWEEP_FAKE_SLEEP="0.3")
    proc = _cli("submit", str(camp), "--inventory", str(inv), "--workdir", str(work), env=env)
    _wait_for_ends(fake_env, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if not jobs_survive:  # the machine lost the jobs as well: kill every process of their sessions
        _kill_sessions(work)
    finished_before = _finished_steps(work)
    ended_before = set(starts_and_ends(fake_env)[1])
    assert 2 <= len(finished_before) < 8
    os.environ["NCCLSWEEP_FAKE_SLEEP"] = "0.3"
    try:
        summary = resume(work)
    finally:
        del os.environ["NCCLSWEEP_FAKE_SLEEP"]
    assert summary.complete and summary.total_steps == 8, summary
    assert len(_finished_steps(work)) == 8
    starts, ends = starts_and_ends(fake_env)
    detail = f"starts {starts} ends {ends} finished before {finished_before} log {fake_env.read_text()}"
    assert all(starts[k] == 1 and ends[k] == 1 for k in finished_before), detail  # finished steps never ran again
    if jobs_survive:
        assert set(starts.values()) == {1} and set(ends.values()) == {1}  # the running job was adopted
    else:
        # Every unfinished step ran to its end once more; only one killed between its last output
        # and its exit marker can show two ends.
        assert all(ends[k] == 1 for k in ends if k not in ended_before - finished_before), detail
    manifest = Manifest.open(work / "manifest.sqlite")
    try:
        assert all(j.phase is JobPhase.FINISHED for j in manifest.jobs())
    finally:
        manifest.close()


def test_ctrl_c_leaves_the_queued_jobs_going_on_as_slurm_does(tmp_path, fake_bin, fake_env):
    """A real SIGINT to a real ``ncclbot-sweep submit``: the jobs still queued start after it exits
    (the local executor's runner, recorded in the campaign folder), ``status`` shows them advance,
    and no ``resume`` runs. The jobs keep the environment they were submitted in."""
    camp, inv = _files(tmp_path, fake_bin, concurrent=1)  # four jobs, one at a time
    work = tmp_path / "work"
    env = dict(os.environ, NCCLSWEEP_FAKE_SLEEP="0.3")
    cli = Path(sys.executable).with_name("ncclbot-sweep")
    proc = subprocess.Popen([str(cli), "submit", str(camp), "-i", str(inv), "-w", str(work)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for_ends(fake_env, 1)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "still queued or running (they go on without this command" in output
    runner = _runner(work)
    assert runner is not None, (work / ".executor").iterdir()
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = CliRunner().invoke(main, ["status", str(work), "--json"])
        assert result.exit_code == 0, result.output
        seen.append(json.loads(result.output)["steps"].get("ok", 0))
        if seen[-1] == 8:
            break
        time.sleep(0.2)
    assert seen[0] < 8 and seen[-1] == 8 and seen == sorted(seen), seen  # advancing, with nobody resuming
    starts, ends = starts_and_ends(fake_env)
    assert len(starts) == 8 and set(starts.values()) == {1} and set(ends.values()) == {1}
    for record in (work / ".executor" / "jobs").glob("*/spec.json"):  # private: the environment may hold secrets
        assert record.stat().st_mode & 0o777 == 0o600
        assert json.loads(record.read_text())["environ"]["NCCLSWEEP_FAKE_SLEEP"] == "0.3"
    for _ in range(100):  # nothing left to start: the runner ends and removes its record
        if _runner(work) is None:
            break
        time.sleep(0.1)
    assert _runner(work) is None and not (work / ".executor" / "runner.pid").exists()


def test_crash_between_submit_and_manifest_is_adopted(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    camp_obj = prepare(camp, inv, workdir=work)
    from ncclbot_sweep.sweep.runner import _spec  # the crash window is internal: submit without recording

    job_key = camp_obj.folder.plan.jobs[0].key
    job_id = camp_obj.executor.submit(_spec(camp_obj, job_key))
    camp_obj.close()
    summary = resume(work)
    assert summary.complete
    starts, _ = starts_and_ends(fake_env)
    assert set(starts.values()) == {1}
    manifest = Manifest.open(work / "manifest.sqlite")
    try:
        kinds = [e["kind"] for e in manifest.events(job_key)]
        assert "adopted" in kinds and manifest.job(job_key).executor_job_id == job_id
        assert manifest.job(job_key).attempts == 1
    finally:
        manifest.close()


def test_cancel_then_resume(tmp_path, fake_bin, fake_env, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin, concurrent=1)
    work = tmp_path / "work"
    monkeypatch.setenv("NCCLSWEEP_FAKE_SLEEP", "0.5")
    summary = submit(camp, inv, workdir=work, wait=False)
    assert summary.jobs.get("submitted") == 4
    _wait_for_ends(fake_env, 1)
    summary = cancel(work)
    assert summary.jobs.get("cancelled") == 4 and not summary.complete
    for pid_file in (work / ".executor" / "jobs").glob("*/pid"):
        sid, started = pid_file.read_text().split()
        assert session_members(int(sid), started) == []  # the script and its running step are gone
    ok_at_cancel = {p.parent.name for p in work.glob("jobs/*/steps/*/exit") if p.read_text().strip() == "0"}
    time.sleep(0.3)
    starts_after_cancel = starts_and_ends(fake_env)[0]
    assert len(starts_after_cancel) < 8  # nothing else started after the cancel
    monkeypatch.setenv("NCCLSWEEP_FAKE_SLEEP", "0")
    summary = resume(work)
    assert summary.complete
    starts, ends = starts_and_ends(fake_env)
    assert len(ends) == 8
    # A step killed by the cancel before its exit marker runs again; finished ones never do.
    assert ok_at_cancel and all(starts[k] == 1 for k in ok_at_cancel)


def test_status_json_and_text(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, workdir=work)
    runner = CliRunner()
    result = runner.invoke(main, ["status", str(work), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["complete"] is True and data["steps"] == {"ok": 8} and data["campaign"] == "small"
    assert len(data["job_rows"]) == 4 and {r["phase"] for r in data["job_rows"]} == {"finished"}
    assert sum(r["steps_ok"] for r in data["job_rows"]) == 8
    assert runner.invoke(main, ["status", "-w", str(work), "--json"]).output == result.output
    result = runner.invoke(main, ["status", str(work)])
    assert "steps: 8/8 ok (8 ok)" in result.output
    result = runner.invoke(main, ["status", str(work), "--jobs"])
    rows = [line for line in result.output.splitlines() if "finished" in line and "COMPLETED" in line]
    assert len(rows) == 4 and all(line.rstrip().endswith("2/2") for line in rows)
    result = runner.invoke(main, ["status", str(tmp_path / "nowhere")])
    assert result.exit_code == 1 and "not a campaign folder (no manifest.sqlite)" in result.output


def test_cli_submit_failed_steps_exit_1(tmp_path, fake_bin, fake_env, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin)
    monkeypatch.setenv("NCCLSWEEP_FAKE_FAIL_ALGO", "Ring")
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(tmp_path / "w")])
    assert result.exit_code == 1
    assert "steps: 2/8 ok (6 failed, 2 ok)" in result.output
    assert "[8/8 steps] 2 ok, 6 not ok, 0 jobs open" in result.output  # plain progress lines off a terminal
    progress = [line for line in result.output.splitlines() if line.startswith("[")]
    assert progress and not [line for line in progress if re.search(r"\] .*\d+/\d+", line)], progress  # one count


def test_other_campaign_in_same_folder_is_refused(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, workdir=work)
    camp.write_text(SMALL_CAMPAIGN.replace("name: small", "name: other"))
    with pytest.raises(ManifestError, match="this folder holds campaign 'small'"):
        submit(camp, inv, workdir=work)


def test_manifest_schema_mismatch_names_both_versions(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, workdir=work)
    conn = sqlite3.connect(work / "manifest.sqlite")
    conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    conn.execute("UPDATE meta SET value = '0.0.1' WHERE key = 'writer_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ManifestError) as info:
        status(work)
    text = str(info.value)
    assert "schema version 0 (written by ncclbot-sweep 0.0.1)" in text and "reads schema version 1" in text
    assert info.value.path == str(work / "manifest.sqlite") and "ncclbot-sweep 0.0.1" in info.value.hint


def test_event_log_is_append_only(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, workdir=work)
    conn = sqlite3.connect(work / "manifest.sqlite")
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] > 8
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET kind = 'x'")
    conn.close()


def test_local_concurrency_limit(tmp_path, fake_bin, fake_env, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin, concurrent=1)
    monkeypatch.setenv("NCCLSWEEP_FAKE_SLEEP", "0.05")
    submit(camp, inv, workdir=tmp_path / "work")
    kinds = [line.split()[0] for line in fake_env.read_text().splitlines()]
    assert kinds == ["start", "end"] * 8  # never two steps (or jobs) at once


def test_make_executor_picks_the_backend(tmp_path):
    local = parse_inventory_text(local_inventory_text(Path("/x")))
    assert make_executor(local, state_dir=tmp_path / "l").name == "local"
    inv = parse_inventory_text(local_inventory_text(Path("/x")).replace("kind: local\n  max", "kind: slurm\n  max"))
    try:
        import ncclbot_sweep.sweep.executors.slurm  # noqa: F401  (only to learn whether it is installed)
    except ImportError:
        with pytest.raises(ExecutorError, match="cannot be imported"):
            make_executor(inv, state_dir=tmp_path)
        return
    executor = make_executor(inv, state_dir=tmp_path / "s")
    try:
        assert executor.name == "slurm"
    finally:
        executor.close()


def test_cli_resume_and_cancel(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    runner = CliRunner()
    result = runner.invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work), "--no-wait"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["resume", str(work), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{"):])["steps"] == {"ok": 8}
    result = runner.invoke(main, ["cancel", str(work)])
    assert result.exit_code == 0 and "jobs:  4 finished" in result.output  # nothing open to cancel
    for command in ("resume", "cancel"):
        result = runner.invoke(main, [command, str(tmp_path / "missing")])
        assert result.exit_code == 1
        assert result.output.startswith(f"Error: {tmp_path / 'missing'}: not a campaign folder (no manifest.sqlite)")


def test_repacking_a_running_campaign_is_refused(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, work)
    camp.write_text(SMALL_CAMPAIGN.replace("steps_per_job: 2", "steps_per_job: 4"))
    with pytest.raises(ManifestError, match="the packing changed") as info:
        submit(camp, inv, work)
    assert "steps_per_job" in info.value.hint
    # A new time limit is not a new job: nothing is refused and nothing runs again.
    inv.write_text(inv.read_text().replace("kind: local\n", "kind: local\n  time_limit_min: 30\n", 1))
    camp.write_text(SMALL_CAMPAIGN)
    starts, _ = starts_and_ends(fake_env)
    assert submit(camp, inv, work).complete
    assert starts_and_ends(fake_env)[0] == starts


class _FlakyScheduler:
    """Wraps an executor; its listing and polling fail the first ``failures`` times (a lost SSH link)."""

    def __init__(self, inner, failures: int) -> None:
        self.inner, self.failures, self.name = inner, failures, "flaky"

    def _maybe_fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ExecutorError("connection reset by peer")

    def find_tagged(self, campaign_key):
        self._maybe_fail()
        return self.inner.find_tagged(campaign_key)

    def poll(self, ids):
        self._maybe_fail()
        return self.inner.poll(ids)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_scheduler_errors_are_retried_not_fatal(tmp_path, fake_bin, fake_env):
    from ncclbot_sweep.sweep.executors.local import LocalExecutor

    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, work, wait=False)
    flaky = _FlakyScheduler(LocalExecutor(state_dir=work / ".executor", gpus_per_node=8), failures=4)
    summary = resume(work, executor=flaky)
    assert summary.complete and flaky.failures == 0
    manifest = Manifest.open(work / "manifest.sqlite")
    try:
        kinds = [e["kind"] for e in manifest.events()]
        assert "find_tagged_failed" in kinds or "poll_failed" in kinds
    finally:
        manifest.close()


def test_relative_workdir_uses_the_srun_stand_in(tmp_path, fake_bin, fake_env, monkeypatch):
    """`make demo` passes a relative folder; jobs run in their own folder, and a real `srun`
    on PATH (here one that always fails) must never be taken for the local stand-in."""
    camp, inv = _files(tmp_path, fake_bin)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "srun").write_text("#!/bin/sh\necho 'srun: fatal: not the stand-in' >&2\nexit 1\n")
    (decoy / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{decoy}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    summary = submit(camp, inv, workdir=Path("work"))
    assert summary.complete and summary.steps == {"ok": 8}, summary.failed
