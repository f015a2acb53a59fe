"""The local and SSH transports against the real loopback sshd (no mocks)."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import threading
import time
from pathlib import Path, PurePosixPath

import pytest

from ncclbot_sweep.errors import TransportError
from ncclbot_sweep.sweep.transport import (
    PASSPHRASE_ENV, LocalTransport, SshTransport, parse_listing, sha256_file)

pytestmark = pytest.mark.ssh


def _tree(root: Path) -> None:
    (root / "steps" / "s 1").mkdir(parents=True)
    (root / "job.sh").write_text("#!/bin/bash\necho hi\n")
    (root / "job.sh").chmod(0o755)
    (root / "steps" / "s 1" / "stdout.txt").write_bytes(b"x" * 300_000)
    (root / "steps" / "s 1" / "exit").write_text("0\n")


def test_parse_listing_skips_garbage():
    sha = "a" * 64
    text = (f"12\tsteps/a b/exit\n5\tjob.log\nnot a line\n--ncclbot-sums--\n"
            f"{sha}  ./steps/a b/exit\nshort  ./job.log\n{sha}  ./appeared-later\n")
    files = parse_listing(text)
    assert [(f.rel, f.size, f.sha256) for f in files] == [("steps/a b/exit", 12, sha)]
    assert parse_listing("") == []


def test_local_run_and_list(tmp_path):
    t = LocalTransport()
    result = t.run(["sh", "-c", 'printf "%s" "$1"; exit 3', "sh", "a b;c"])
    assert (result.returncode, result.stdout) == (3, "a b;c")
    _tree(tmp_path / "job")
    listing = {f.rel: f for f in t.list_files(PurePosixPath(tmp_path / "job"))}
    assert set(listing) == {"job.sh", "steps/s 1/stdout.txt", "steps/s 1/exit"}
    big = listing["steps/s 1/stdout.txt"]
    assert big.size == 300_000 and big.sha256 == sha256_file(tmp_path / "job/steps/s 1/stdout.txt")
    assert t.list_files(PurePosixPath(tmp_path / "missing")) == []
    with pytest.raises(TransportError, match="command not found"):
        t.run(["no-such-command-ncclbot"])


def test_ssh_runs_commands_on_one_connection(ssh_settings):
    with SshTransport(ssh_settings) as t:
        for i in range(5):
            result = t.run(["sh", "-c", 'echo "$1"; echo err >&2; exit "$2"', "sh", f"it's {i}", str(i)])
            assert (result.stdout, result.stderr, result.returncode) == (f"it's {i}\n", "err\n", i)
        assert t.run(["printenv", "SLURM_CONF"]).stdout.strip().endswith("slurm.conf")
        assert t.connects == 1


def test_ssh_sftp_roundtrip_and_resume(ssh_settings, tmp_path):
    _tree(tmp_path / "src")
    remote = PurePosixPath(tmp_path / "remote" / "job")
    with SshTransport(ssh_settings) as t:
        assert t.put_tree(tmp_path / "src", remote) == 3
        listing = {f.rel: f for f in t.list_files(remote)}
        assert listing["job.sh"].sha256 == sha256_file(tmp_path / "src" / "job.sh")
        assert Path(remote / "job.sh").stat().st_mode & 0o777 == 0o755
        # resume: a partial local copy is completed from its current size
        target = tmp_path / "back" / "stdout.txt"
        target.parent.mkdir()
        target.write_bytes(b"x" * 1000)
        t.get_file(remote / "steps" / "s 1" / "stdout.txt", target, offset=1000)
        assert sha256_file(target) == listing["steps/s 1/stdout.txt"].sha256


def test_ssh_reconnects_after_a_dropped_connection(ssh_settings, sshd):
    with SshTransport(ssh_settings) as t:
        assert t.run(["true"]).ok
        assert sshd.kill_sessions() >= 1
        time.sleep(0.3)
        assert t.run(["echo", "again"]).stdout == "again\n"
        assert t.connects == 2


def test_ssh_retries_with_backoff_while_the_server_is_down(ssh_settings, sshd, caplog):
    with SshTransport(ssh_settings) as t:
        assert t.run(["true"]).ok
        sshd.kill_sessions()
        sshd.stop()
        restart = threading.Timer(1.0, sshd.start)
        restart.start()
        try:
            with caplog.at_level(logging.WARNING, logger="ncclbot_sweep.sweep.transport"):
                assert t.run(["echo", "back"]).stdout == "back\n"
        finally:
            restart.join()
        assert any("retrying in" in r.message for r in caplog.records)


def test_ssh_gives_up_after_bounded_attempts(ssh_settings):
    dead = dataclasses.replace(ssh_settings, port=1, attempts=3, backoff_s=0.05)
    started = time.monotonic()
    with pytest.raises(TransportError, match="connecting on ssh .*127.0.0.1:1 failed"):
        SshTransport(dead).run(["true"])
    assert time.monotonic() - started < 5


def test_non_idempotent_command_is_not_rerun_after_a_drop(ssh_settings, sshd, tmp_path):
    marker = tmp_path / "ran"
    with SshTransport(ssh_settings) as t:
        assert t.run(["true"]).ok
        cutter = threading.Timer(0.7, sshd.kill_sessions)
        cutter.start()
        with pytest.raises(TransportError, match="may or may not have run"):
            t.run(["sh", "-c", f"echo x >> {marker}; sleep 3"], idempotent=False)
        cutter.join()
    assert marker.read_text() == "x\n"  # ran exactly once


def test_unknown_host_key_is_refused(ssh_settings, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    settings = dataclasses.replace(ssh_settings, known_hosts_path=str(empty))
    with pytest.raises(TransportError, match="refusing an unknown host key") as info:
        SshTransport(settings).run(["true"])
    assert "accept_new_host_key" in info.value.hint
    assert empty.read_text() == ""


def test_accept_new_host_key_records_it(ssh_settings, sshd, tmp_path, caplog):
    known = tmp_path / "known_hosts"
    settings = dataclasses.replace(ssh_settings, known_hosts_path=str(known), accept_new_host_key=True)
    with caplog.at_level(logging.WARNING, logger="ncclbot_sweep.sweep.transport"):
        assert SshTransport(settings).run(["true"]).ok
    assert any("accepted new host key" in r.message for r in caplog.records)
    host_key = sshd.host_key.with_suffix(".pub").read_text().split()[1]
    assert host_key in known.read_text()
    # the recorded key now verifies without the option
    assert SshTransport(dataclasses.replace(settings, accept_new_host_key=False)).run(["true"]).ok


def test_changed_host_key_is_refused(ssh_settings, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = other.with_suffix(".pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{ssh_settings.port} {kind} {key}\n")
    settings = dataclasses.replace(ssh_settings, known_hosts_path=str(known), accept_new_host_key=True)
    with pytest.raises(TransportError, match="does not match"):
        SshTransport(settings).run(["true"])


def test_passphrase_never_appears_in_errors_or_logs(ssh_settings, sshd, tmp_path, monkeypatch, caplog):
    secret = "s3cret-passphrase-XYZ"
    key = tmp_path / "locked_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", secret, "-f", str(key)], check=True)
    authorized = sshd.root / "authorized_keys"
    original = authorized.read_text()
    authorized.write_text(original + key.with_suffix(".pub").read_text())
    settings = dataclasses.replace(ssh_settings, key_path=str(key))
    try:
        with caplog.at_level(logging.DEBUG):
            monkeypatch.setenv(PASSPHRASE_ENV, secret)
            with SshTransport(settings) as t:
                assert t.run(["true"]).ok
            monkeypatch.setenv(PASSPHRASE_ENV, "wrong-" + secret)
            with pytest.raises(TransportError) as info:
                SshTransport(settings).run(["true"])
    finally:
        authorized.write_text(original)
    assert secret not in str(info.value) and secret not in (info.value.hint or "")
    assert all(secret not in r.getMessage() for r in caplog.records)
