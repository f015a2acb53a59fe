"""How commands and files reach the machine that runs Slurm: the local shell, or SSH.

The Slurm executor and ``collect`` talk to the cluster only through a :class:`Transport`:
``run`` a command (an argv list, quoted once here), list files with their sizes and
checksums, and move files. :class:`LocalTransport` uses subprocesses and the local file
system (on a login node); :class:`SshTransport` uses paramiko with one connection per
campaign, SFTP for files, host keys verified against ``known_hosts`` and bounded retries
with backoff when the connection drops.

No secret (key passphrase) ever reaches a log line, an exception message or the manifest:
the passphrase is read from the environment variable named by :data:`PASSPHRASE_ENV` and
handed straight to paramiko.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import logging
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from ncclbot_sweep.errors import TransportError
from ncclbot_sweep.paths import PART_SUFFIX

if TYPE_CHECKING:  # paramiko is heavy: imported only when an SSH transport is opened
    from ncclbot_sweep.sweep.inventory import Access

__all__ = [
    "CommandResult",
    "LocalTransport",
    "PASSPHRASE_ENV",
    "RemoteFile",
    "SshTransport",
    "Transport",
    "make_transport",
    "sha256_file",
]

log = logging.getLogger(__name__)

#: Environment variable holding the SSH key's passphrase (never written anywhere).
PASSPHRASE_ENV = "NCCLBOT_SSH_KEY_PASSPHRASE"

_CHUNK = 1 << 20
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What a command printed and how it exited."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """A file below a listed folder: its path relative to that folder, size and SHA-256."""

    rel: str
    size: int
    sha256: str


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


# One remote command lists every file below a folder with size and checksum (coreutils and
# findutils only, so it works on any login node): sizes first, then a marker, then sums.
_SUMS_MARKER = "--ncclbot-sums--"
_LIST_SCRIPT = (
    'cd "$1" 2>/dev/null || exit 0; '
    f"find . -type f ! -name '*{PART_SUFFIX}' -printf '%s\\t%P\\n'; "
    f"echo '{_SUMS_MARKER}'; "
    f"find . -type f ! -name '*{PART_SUFFIX}' -print0 | xargs -0 -r sha256sum"
)


def parse_listing(text: str) -> list[RemoteFile]:
    """Parse the listing script's output (pure; tested on literal output).

    Files whose size or checksum line is missing or malformed (names with line breaks, a
    file that appeared between the two passes) are left out with a warning.
    """
    sizes_part, _, sums_part = text.partition(_SUMS_MARKER + "\n")
    sizes: dict[str, int] = {}
    for line in sizes_part.splitlines():
        size, sep, rel = line.partition("\t")
        if sep and size.isdigit() and rel:
            sizes[rel] = int(size)
        elif line.strip():
            log.warning("ignoring unexpected listing line %r", line)
    files = []
    for line in sums_part.splitlines():
        digest, sep, name = line.partition("  ")
        rel = name[2:] if name.startswith("./") else name
        if not sep or len(digest) != 64 or rel not in sizes:
            log.warning("ignoring unexpected checksum line %r", line)
            continue
        files.append(RemoteFile(rel=rel, size=sizes[rel], sha256=digest))
    return sorted(files, key=lambda f: f.rel)


class Transport(abc.ABC):
    """Runs commands and moves files on the scheduler's machine. One per campaign command."""

    #: Short description for messages, e.g. ``local`` or ``ssh root@127.0.0.1:2222``.
    where: str = "local"

    @abc.abstractmethod
    def run(self, argv: Sequence[str], *, timeout: float = 120.0, idempotent: bool = True,
            env: dict[str, str] | None = None) -> CommandResult:
        """Run ``argv`` (quoted here, never by the caller) and return what it printed.

        A non-zero exit is not an error here: callers read ``returncode``. Raises
        TransportError when the command could not be run at all. ``idempotent=False``
        (e.g. ``sbatch``) forbids a silent re-run after a connection drop: the caller must
        reconcile instead.
        """

    @abc.abstractmethod
    def put_file(self, local: Path, remote: PurePosixPath) -> None:
        """Copy one local file to ``remote`` (parent folders created), keeping its mode."""

    @abc.abstractmethod
    def get_file(self, remote: PurePosixPath, local: Path, *, offset: int = 0) -> None:
        """Copy ``remote`` into ``local``, appending from byte ``offset`` (resume)."""

    @abc.abstractmethod
    def makedirs(self, remote: PurePosixPath) -> None:
        """Create ``remote`` and its parents; an existing folder is fine."""

    def list_files(self, remote: PurePosixPath) -> list[RemoteFile]:
        """Every file below ``remote`` with size and SHA-256 (one command); [] if absent."""
        result = self.run(["bash", "-c", _LIST_SCRIPT, "ncclbot-list", str(remote)], timeout=600)
        if not result.ok:
            raise TransportError(f"cannot list {remote} on {self.where}: {result.stderr.strip()}",
                                 hint="check that the folder is readable on the cluster")
        return parse_listing(result.stdout)

    def put_tree(self, local: Path, remote: PurePosixPath) -> int:
        """Upload every file below ``local`` into ``remote``; returns the number of files sent."""
        if self.same_path(local, remote):
            return 0
        count = 0
        self.makedirs(remote)
        for path in sorted(local.rglob("*")):
            rel = path.relative_to(local)
            if path.is_dir():
                self.makedirs(remote / rel.as_posix())
            elif path.is_file():
                self.put_file(path, remote / rel.as_posix())
                count += 1
        return count

    def same_path(self, local: Path, remote: PurePosixPath) -> bool:
        """True when ``remote`` is ``local`` itself (local transport, shared folder)."""
        return False

    def close(self) -> None:
        """Release the connection; the transport may be used again (it reconnects)."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalTransport(Transport):
    """Commands as local subprocesses, files by copying: ``ncclbot-sweep`` on the login node."""

    where = "local"

    def run(self, argv: Sequence[str], *, timeout: float = 120.0, idempotent: bool = True,
            env: dict[str, str] | None = None) -> CommandResult:
        full_env = None if env is None else {**os.environ, **env}
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                  env=full_env, check=False)
        except FileNotFoundError as exc:
            raise TransportError(f"command not found: {argv[0]}",
                                 hint="install it or add its folder to PATH") from exc
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"command timed out after {timeout:.0f} s: {shlex.join(argv)}") from exc
        return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def put_file(self, local: Path, remote: PurePosixPath) -> None:
        target = Path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(local, target)

    def get_file(self, remote: PurePosixPath, local: Path, *, offset: int = 0) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        with open(Path(remote), "rb") as src, open(local, "ab" if offset else "wb") as dst:
            src.seek(offset)
            shutil.copyfileobj(src, dst, _CHUNK)

    def makedirs(self, remote: PurePosixPath) -> None:
        Path(remote).mkdir(parents=True, exist_ok=True)

    def same_path(self, local: Path, remote: PurePosixPath) -> bool:
        try:
            return Path(remote).resolve() == local.resolve()
        except OSError:
            return False


@dataclasses.dataclass(frozen=True)
class SshSettings:
    """What :class:`SshTransport` needs; built from an inventory's ``access`` section."""

    host: str
    port: int = 22
    user: str | None = None
    key_path: str | None = None
    known_hosts_path: str | None = None
    accept_new_host_key: bool = False
    connect_timeout_s: float = 30.0
    #: Attempts for one operation when the connection drops (1 = no retry).
    attempts: int = 4
    #: First backoff in seconds; doubles per attempt.
    backoff_s: float = 0.5

    @classmethod
    def from_access(cls, access: Access, **overrides: Any) -> SshSettings:
        values = dict(host=access.host or "", port=access.port, user=access.user,
                      key_path=access.key_path, known_hosts_path=access.known_hosts_path,
                      accept_new_host_key=access.accept_new_host_key,
                      connect_timeout_s=access.connect_timeout_s)
        values.update(overrides)
        return cls(**values)


class SshTransport(Transport):
    """Commands over one reused SSH connection, files over SFTP (paramiko).

    Host keys are checked against ``known_hosts_path`` (default ``~/.ssh/known_hosts``); an
    unknown host is refused unless ``accept_new_host_key`` is set, in which case its key is
    added to that file and a warning is logged. A changed key is always refused.
    """

    def __init__(self, settings: SshSettings) -> None:
        self.settings = settings
        user = settings.user or ""
        self.where = f"ssh {user + '@' if user else ''}{settings.host}:{settings.port}"
        self._client: Any = None
        self._sftp: Any = None
        self.connects = 0  # how many times a connection was opened (tests check reuse)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> Any:
        import paramiko

        s = self.settings
        client = paramiko.SSHClient()
        known = Path(s.known_hosts_path or "~/.ssh/known_hosts").expanduser()
        if known.exists():
            client.load_host_keys(str(known))
        if s.accept_new_host_key:
            client.set_missing_host_key_policy(_AcceptAndRecord(known))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                s.host, port=s.port, username=s.user, key_filename=s.key_path,
                passphrase=os.environ.get(PASSPHRASE_ENV) or None,
                timeout=s.connect_timeout_s, banner_timeout=s.connect_timeout_s,
                auth_timeout=s.connect_timeout_s, allow_agent=s.key_path is None,
                look_for_keys=s.key_path is None)
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise TransportError(
                f"the host key of {s.host} does not match {known}: possible man-in-the-middle",
                hint=f"if the host was reinstalled, remove its line with 'ssh-keygen -R {s.host} -f {known}'",
            ) from exc
        except paramiko.SSHException as exc:
            # Connected, host key accepted, not logged in: paramiko's last word on a refused key
            # can be another key type's parse error ("expected OPENSSH key"), not the refusal.
            link = client.get_transport()
            authenticating = link is not None and link.is_active() and not link.is_authenticated()
            client.close()
            if isinstance(exc, paramiko.PasswordRequiredException) or "passphrase" in str(exc).lower() \
                    or "private key" in str(exc).lower() or "invalid key" in str(exc).lower():
                raise TransportError(
                    f"cannot use the SSH key {s.key_path} for {self.where}: {type(exc).__name__}",
                    hint=f"check access.key_path and the passphrase in ${PASSPHRASE_ENV}") from exc
            if "not found in known_hosts" in str(exc):
                raise TransportError(
                    f"{s.host}:{s.port} is not in {known}; refusing an unknown host key",
                    hint="add it with 'ssh-keyscan' after checking its fingerprint, or set "
                         "access.accept_new_host_key: true in the inventory") from exc
            if authenticating:
                raise _authentication_error(self.where) from exc
            raise _as_transport_error(exc, self.where, retryable=True) from exc
        except (OSError, EOFError) as exc:
            client.close()
            raise _as_transport_error(exc, self.where, retryable=True) from exc
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
        self.connects += 1
        log.info("connected to %s", self.where)
        return client

    def _ensure(self) -> Any:
        if self._client is None or not self._alive():
            self._drop()
            self._client = self._connect()
        return self._client

    def _alive(self) -> bool:
        transport = self._client.get_transport() if self._client is not None else None
        return bool(transport is not None and transport.is_active())

    def _sftp_client(self) -> Any:
        client = self._ensure()
        if self._sftp is None:
            self._sftp = client.open_sftp()
        return self._sftp

    def _drop(self) -> None:
        for thing in (self._sftp, self._client):
            if thing is not None:
                try:
                    thing.close()
                except Exception as exc:  # closing a dead connection: nothing else to do
                    log.debug("ignored while closing %s: %s", self.where, exc)
        self._sftp = None
        self._client = None

    def close(self) -> None:
        self._drop()

    def _with_retry(self, what: str, action: Callable[[], T], *, retry: bool = True) -> T:
        """Run ``action``; on a dropped connection reconnect and try again, with backoff."""
        attempts = self.settings.attempts if retry else 1
        delay = self.settings.backoff_s
        for attempt in range(1, attempts + 1):
            try:
                return action()
            except TransportError as exc:
                if not exc.retryable or attempt == attempts:
                    raise
                error: Exception = exc
            except (OSError, EOFError) as exc:
                error = exc
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                error = exc
            self._drop()
            if attempt == attempts:  # still a dropped connection: the caller may try again later
                raise _as_transport_error(error, self.where, what, retryable=True) from error
            log.warning("%s on %s failed (%s); retrying in %.1f s (attempt %d of %d)",
                        what, self.where, type(error).__name__, delay, attempt + 1, attempts)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ commands
    def run(self, argv: Sequence[str], *, timeout: float = 120.0, idempotent: bool = True,
            env: dict[str, str] | None = None) -> CommandResult:
        command = shlex.join(argv)
        if env:
            command = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + command

        def once() -> CommandResult:
            client = self._ensure()
            started = False
            try:
                stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
                started = True
                stdin.close()
                out = stdout.read().decode(errors="replace")
                err = stderr.read().decode(errors="replace")
                code = stdout.channel.recv_exit_status()
            except socket.timeout as exc:
                raise TransportError(f"command timed out after {timeout:.0f} s on {self.where}: "
                                     f"{command}") from exc
            except Exception as exc:
                if started and not idempotent and _is_connection_error(exc):
                    raise TransportError(
                        f"the connection to {self.where} dropped while running {argv[0]}; "
                        "it may or may not have run", hint="the caller reconciles") from exc
                raise
            if code == -1:  # the channel closed without an exit status: a dropped connection
                closed = EOFError("channel closed without exit status")
                if not idempotent:
                    raise TransportError(f"the connection to {self.where} dropped while running "
                                         f"{argv[0]}; it may or may not have run") from closed
                raise closed
            return CommandResult(tuple(argv), code, out, err)

        return self._with_retry(f"running {argv[0]}", once)

    # ------------------------------------------------------------------ files
    def makedirs(self, remote: PurePosixPath) -> None:
        def once() -> None:
            sftp = self._sftp_client()
            missing = []
            path = PurePosixPath(remote)
            while str(path) not in ("/", "."):
                try:
                    sftp.stat(str(path))
                    break
                except FileNotFoundError:
                    missing.append(path)
                    path = path.parent
            for folder in reversed(missing):
                try:
                    sftp.mkdir(str(folder))
                except OSError:
                    sftp.stat(str(folder))  # created meanwhile: fine; otherwise raises
        self._with_retry(f"creating {remote}", once)

    def put_file(self, local: Path, remote: PurePosixPath) -> None:
        def once() -> None:
            sftp = self._sftp_client()
            tmp = f"{remote}{PART_SUFFIX}"
            sftp.put(str(local), tmp)
            sftp.chmod(tmp, local.stat().st_mode & 0o7777)
            sftp.posix_rename(tmp, str(remote))
        self._with_retry(f"uploading {local.name}", once)

    def get_file(self, remote: PurePosixPath, local: Path, *, offset: int = 0) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)

        def once() -> None:
            sftp = self._sftp_client()
            start = local.stat().st_size if (offset and local.exists()) else 0
            with sftp.open(str(remote), "rb") as src, open(local, "ab" if start else "wb") as dst:
                src.seek(start)
                src.prefetch()
                for chunk in iter(lambda: src.read(_CHUNK), b""):
                    dst.write(chunk)
        self._with_retry(f"downloading {remote.name}", once)


class _AcceptAndRecord:
    """paramiko host-key policy for ``accept_new_host_key``: add the key and say so loudly."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        client.save_host_keys(str(self.known_hosts))
        log.warning("accepted new host key %s %s for %s (access.accept_new_host_key) and recorded it in %s",
                    key.get_name(), key.fingerprint if hasattr(key, "fingerprint") else "", hostname,
                    self.known_hosts)


def _is_connection_error(exc: BaseException) -> bool:
    import paramiko

    return isinstance(exc, (OSError, EOFError, paramiko.SSHException, ConnectionError)) and not \
        isinstance(exc, (paramiko.AuthenticationException, FileNotFoundError, PermissionError))


def _as_transport_error(exc: BaseException, where: str, what: str = "connecting", *,
                        retryable: bool = False) -> TransportError:
    """A TransportError that names the place and the cause, never credentials.

    ``retryable`` marks failures worth another attempt (refused or dropped connections);
    authentication and host-key problems never are.
    """
    import paramiko

    if isinstance(exc, paramiko.AuthenticationException):
        return _authentication_error(where)
    if isinstance(exc, TransportError):
        return exc
    return TransportError(f"{what} on {where} failed: {type(exc).__name__}: {exc}",
                          hint="check that the host is reachable; the command can be run again",
                          retryable=retryable)


def _authentication_error(where: str) -> TransportError:
    """The server refused the login: not worth another attempt with the same settings."""
    return TransportError(f"authentication to {where} failed",
                          hint="check access.user and access.key_path (and the key's passphrase "
                               f"in ${PASSPHRASE_ENV} if it has one)")


def make_transport(access: Access) -> Transport:
    """The transport an inventory's ``access`` asks for (local shell or SSH)."""
    if access.kind == "local":
        return LocalTransport()
    return SshTransport(SshSettings.from_access(access))
