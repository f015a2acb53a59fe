"""SSH transport errors keep their cause and say whether another attempt is worth it.

No sshd needed: a paramiko server runs in this process on a loopback port the kernel picks
(port 0), with generated host and user keys, and answers each command the way a failing
server would (never finishing, closing without an exit status).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import paramiko
import pytest

from ncclbot_sweep.errors import TransportError
from ncclbot_sweep.sweep.transport import SshSettings, SshTransport


class _Handler(paramiko.ServerInterface):
    def __init__(self, server: _Server) -> None:
        self.server = server

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = key.get_base64() == self.server.user_key.get_base64()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.server.commands.append(command.decode())
        threading.Thread(target=self.server.answer, args=(channel, command.decode()), daemon=True).start()
        return True


class _Server:
    """A paramiko SSH server on loopback: ``ok`` exits 0, ``hang`` never ends, ``drop`` closes
    its channel without an exit status (what a dropped connection looks like to the client)."""

    def __init__(self, tmp: Path) -> None:
        self.host_key = paramiko.ECDSAKey.generate()
        self.user_key = paramiko.ECDSAKey.generate()
        self.key_path = tmp / "id_ecdsa"
        self.user_key.write_private_key_file(str(self.key_path))
        self.commands: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.known_hosts = tmp / "known_hosts"
        keys = paramiko.HostKeys()
        keys.add(f"[127.0.0.1]:{self.port}", self.host_key.get_name(), self.host_key)
        keys.save(str(self.known_hosts))
        self._transports: list[paramiko.Transport] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            self._transports.append(transport)
            transport.start_server(server=_Handler(self))

    def answer(self, channel: paramiko.Channel, command: str) -> None:
        channel.recv(1)  # the client closes stdin once its exec request is granted: answer after that
        if command == "ok":
            channel.sendall(b"fine\n")
            channel.send_exit_status(0)
            channel.close()
        elif command == "drop":
            channel.close()
        # "hang": say nothing, keep the channel open

    def settings(self, **overrides) -> SshSettings:
        values = dict(host="127.0.0.1", port=self.port, user="tester", key_path=str(self.key_path),
                      known_hosts_path=str(self.known_hosts), connect_timeout_s=5.0, attempts=3, backoff_s=0.01)
        return SshSettings(**(values | overrides))

    def close(self) -> None:
        self.sock.close()
        for transport in self._transports:
            transport.close()


@pytest.fixture
def server(tmp_path):
    srv = _Server(tmp_path)
    yield srv
    srv.close()


def test_a_working_command_runs_once(server):
    with SshTransport(server.settings()) as transport:
        result = transport.run(["ok"])
    assert (result.returncode, result.stdout, server.commands) == (0, "fine\n", ["ok"])


def test_a_command_timeout_chains_the_timeout_that_happened(server):
    with SshTransport(server.settings()) as transport, pytest.raises(TransportError, match="timed out") as info:
        transport.run(["hang"], timeout=0.3)
    cause = info.value.__cause__
    assert isinstance(cause, socket.timeout) and cause.__traceback__ is not None  # raised, not made up
    assert not info.value.retryable and server.commands == ["hang"]  # a slow command is not re-run


def test_a_drop_during_a_non_idempotent_command_is_not_retried_and_says_why(server):
    with SshTransport(server.settings()) as transport, pytest.raises(TransportError, match="may or may not") as info:
        transport.run(["drop"], idempotent=False)
    assert isinstance(info.value.__cause__, EOFError) and "without exit status" in str(info.value.__cause__)
    assert not info.value.retryable and server.commands == ["drop"]


def test_an_idempotent_command_is_retried_then_the_last_drop_is_the_cause(server, caplog):
    with SshTransport(server.settings(attempts=3)) as transport, pytest.raises(TransportError) as info:
        transport.run(["drop"])
    assert server.commands == ["drop"] * 3
    assert info.value.retryable  # still a dropped connection: worth another attempt later
    assert isinstance(info.value.__cause__, EOFError) and info.value.__cause__.__traceback__ is not None
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 2


def test_a_refused_connection_is_retryable_and_keeps_the_refusal(server):
    with socket.socket() as closed:  # bound but not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        settings = server.settings(port=closed.getsockname()[1], attempts=2)
        started = time.monotonic()
        with pytest.raises(TransportError, match="connecting on ssh .* failed") as info:
            SshTransport(settings).run(["ok"])
    cause = info.value.__cause__  # paramiko's own error, which holds the refusal per address
    assert info.value.retryable and isinstance(cause, paramiko.ssh_exception.NoValidConnectionsError)
    assert all(isinstance(e, ConnectionRefusedError) for e in cause.errors.values())
    assert time.monotonic() - started < 5


def test_a_refused_key_is_an_authentication_failure_tried_once(server, tmp_path, caplog):
    stranger = tmp_path / "stranger"  # an ECDSA key: paramiko's last error is the Ed25519 parser's
    paramiko.ECDSAKey.generate().write_private_key_file(str(stranger))
    with pytest.raises(TransportError, match="authentication to .* failed") as info:
        SshTransport(server.settings(key_path=str(stranger))).run(["ok"])
    assert not info.value.retryable and isinstance(info.value.__cause__, paramiko.SSHException)
    assert server.commands == [] and not any("retrying" in r.getMessage() for r in caplog.records)
