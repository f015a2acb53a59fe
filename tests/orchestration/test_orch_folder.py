"""Opening a campaign folder: one runner at a time (the lock), a read-only status, validation
before any write, and OS faults as one ``Error:`` line."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from orch_support import SMALL_CAMPAIGN, local_inventory_text, starts_and_ends
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import CampaignBusyError, from_os_error
from ncclbot_sweep.sweep import campaign_folder
from ncclbot_sweep.sweep.manifest import JobPhase, Manifest
from ncclbot_sweep.sweep.runner import resume, status, submit

TWO_JOBS = """\
name: race
kind: forced
collectives: [AllReduce]
nodes: [2]
sizes: {min: 1K, max: 4K}
arms: [Ring/LL, Ring/Simple]
iterations: 2
timeout_s: 60
packing: {steps_per_job: 1}
"""
_CLI = "from ncclbot_sweep.cli import main; main()"


def _files(tmp_path: Path, fake_bin: Path, campaign: str = SMALL_CAMPAIGN) -> tuple[Path, Path]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(local_inventory_text(fake_bin, concurrent=4))
    camp = tmp_path / "campaign.yaml"
    camp.write_text(campaign)
    return camp, inv


def _tree(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file below ``root`` with its size, mtime and checksum."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns,
                                                hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def test_status_writes_nothing_and_resume_records_what_it_showed(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    submit(camp, inv, workdir=work, wait=False)  # jobs end while no runner watches them
    deadline = time.monotonic() + 120
    while len(list(work.glob(".executor/jobs/*/rc"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list(work.glob(".executor/jobs/*/rc"))) == 4
    before = _tree(work)
    shown = status(work)
    assert shown.complete and shown.steps == {"ok": 8}  # reconciled in memory
    result = CliRunner().invoke(main, ["status", str(work), "--jobs", "--check"])
    assert result.exit_code == 0, result.output
    assert _tree(work) == before  # not a byte changed, not a file added
    manifest = Manifest.open(work / "manifest.sqlite")
    try:
        assert {j.phase for j in manifest.jobs()} == {JobPhase.SUBMITTED}  # status recorded nothing
    finally:
        manifest.close()
    recorded = resume(work)
    assert recorded.complete and recorded.jobs == {"finished": 4}
    assert set(starts_and_ends(fake_env)[0].values()) == {1}


def test_two_concurrent_submits_never_run_a_job_twice(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS)
    refusals = 0
    for trial in range(10):
        work, log = tmp_path / f"work{trial}", tmp_path / f"starts{trial}.log"
        env = {**os.environ, "NCCLSWEEP_FAKE_LOG": str(log), "NCCLSWEEP_FAKE_SLEEP": "0.3"}
        argv = [sys.executable, "-c", _CLI, "submit", str(camp), "-i", str(inv), "-w", str(work)]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
        results = [(p.wait(timeout=180), *p.communicate()) for p in procs]
        for code, _, err in results:
            if code != 0:
                assert code == 1, err
                assert err.startswith(f"Error: {work}: another ncclbot-sweep submit (pid "), err
                assert "only one submit or resume runs a campaign at a time" in err
                refusals += 1
        assert any(code == 0 for code, _, _ in results)
        tags = [json.loads(p.read_text())["tag"] for p in work.glob(".executor/jobs/*/spec.json")]
        assert len(tags) == 2 and len(set(tags)) == 2, tags  # each job submitted once
        starts, ends = starts_and_ends(log)
        assert len(starts) == 2 and set(starts.values()) == {1} and set(ends.values()) == {1}
    assert refusals >= 1  # the two really overlapped at least once


def test_a_second_runner_waits_for_the_lock_when_asked(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS)
    work = tmp_path / "work"
    holder = campaign_folder.create(camp, inv, work)  # a runner holding the folder
    try:
        with pytest.raises(CampaignBusyError) as info:
            submit(camp, inv, workdir=work)
        assert "another ncclbot-sweep submit (pid " in str(info.value) and info.value.path == str(work)
        started = time.monotonic()
        with pytest.raises(CampaignBusyError):
            resume(work, lock_wait_s=0.5)
        assert time.monotonic() - started >= 0.5
    finally:
        holder.close()
    assert submit(camp, inv, workdir=work, lock_wait_s=5).complete  # the lock is free again


def test_a_command_that_fails_validation_writes_nothing(tmp_path, fake_bin, fake_env):
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS.replace("iterations: 2", "iterations: 2\niterations: 3"))
    work = tmp_path / "new"
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work)])
    assert result.exit_code == 1 and "key 'iterations' is given twice: on line 7 and on line 8" in result.output
    assert not work.exists()
    camp.write_text(TWO_JOBS)
    submit(camp, inv, workdir=work)
    before = _tree(work)
    camp.write_text(TWO_JOBS.replace("nodes: [2]", "nodes: [2]\nbudget_node_hours: .inf"))
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work)])
    assert result.exit_code == 1 and "budget_node_hours: must be a finite number" in result.output
    assert _tree(work) == before


def test_status_check_lists_failed_steps_with_exit_code_and_last_error(tmp_path, fake_bin, fake_env, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin)
    work = tmp_path / "work"
    monkeypatch.setenv("NCCLSWEEP_FAKE_FAIL_ALGO", "Tree")
    submit(camp, inv, workdir=work)
    result = CliRunner().invoke(main, ["status", str(work)])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    failed = [i for i, line in enumerate(lines) if line.strip().startswith("failed")]
    assert len(failed) == 2 and all("Tree/LL exit 7  (jobs/" in lines[i] for i in failed)
    assert all(lines[i + 1].strip() == "fake failure" for i in failed)
    result = CliRunner().invoke(main, ["status", str(work), "--check"])
    assert result.exit_code == 1
    data = json.loads(CliRunner().invoke(main, ["status", str(work), "--json"]).output)
    assert {(f["exit_code"], f["last_error"]) for f in data["failed"]} == {(7, "fake failure")}


@pytest.mark.parametrize(("code", "fix"), [
    (errno.EACCES, "check the permissions of that path"),
    (errno.EROFS, "mounted read-only"),
    (errno.ENOSPC, "free space on that file system"),
])
def test_os_faults_name_the_path_and_the_fix(code, fix):
    err = from_os_error(OSError(code, "strerror text", "/data/campaign/manifest.sqlite"))
    assert str(err).startswith("/data/campaign/manifest.sqlite: strerror text\n  hint: ")
    assert fix in err.hint


def test_an_os_fault_is_one_error_line_not_a_traceback(tmp_path, fake_bin):
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(blocker / "work")])
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"Error: {blocker / 'work'}: Not a directory"
    assert "a part of that path is a file, not a folder" in result.output and "Traceback" not in result.output


def test_a_folder_whose_creation_stopped_before_its_manifest_is_finished_by_resume(tmp_path, fake_bin, fake_env,
                                                                                     monkeypatch):
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS)
    work = tmp_path / "work"

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(work / "manifest.sqlite.ncclbot-part"))

    with monkeypatch.context() as patch:
        patch.setattr(Manifest, "create", full)
        result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines() == [
        f"Error: {work / 'manifest.sqlite.ncclbot-part'}: the file system is full (No space left on device)",
        f"  hint: free space on that file system, then 'ncclbot-sweep resume {work}' finishes the campaign"]
    assert not (work / "manifest.sqlite").exists() and (work / "campaign.yaml").exists()
    status = CliRunner().invoke(main, ["status", str(work)])
    assert status.exit_code == 1 and status.output.splitlines() == [
        f"Error: {work}: the campaign folder has no manifest.sqlite yet: its creation was interrupted",
        f"  hint: run 'ncclbot-sweep resume {work}' to finish it"]
    done = CliRunner().invoke(main, ["resume", str(work)])
    assert done.exit_code == 0 and "steps: 2/2 ok" in done.output, done.output


def test_a_folder_an_older_release_left_half_created_is_finished_by_submit(tmp_path, fake_bin, fake_env):
    """Older releases created the manifest first: a full disk left it empty and no YAML copies."""
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS)
    work = tmp_path / "work"
    work.mkdir()
    (work / "manifest.sqlite").write_bytes(b"")
    resumed = CliRunner().invoke(main, ["resume", str(work)])
    assert resumed.exit_code == 1 and resumed.output.splitlines() == [
        f"Error: {work}: the campaign folder has no campaign.yaml: its creation was interrupted before the copy "
        "was written",
        f"  hint: run the same 'ncclbot-sweep submit CAMPAIGN -i INVENTORY -w {work}' again: it finishes the folder "
        "and runs nothing twice"]
    done = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work)])
    assert done.exit_code == 0 and "steps: 2/2 ok" in done.output, done.output


def test_a_new_folder_that_got_nothing_of_the_campaign_is_removed_again(tmp_path, fake_bin, monkeypatch):
    camp, inv = _files(tmp_path, fake_bin, TWO_JOBS)
    work = tmp_path / "new" / "work"

    def full(src, dest, what):
        raise OSError(errno.ENOSPC, "No space left on device", str(dest))

    monkeypatch.setattr(campaign_folder, "_copy_source", full)
    result = CliRunner().invoke(main, ["submit", str(camp), "-i", str(inv), "-w", str(work)])
    assert result.exit_code == 1 and not work.exists()
    assert result.output.splitlines()[-1] == ("  hint: free space on that file system, then run the same "
                                              "'ncclbot-sweep submit' again (nothing of the campaign was kept)")
