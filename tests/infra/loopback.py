"""A real Slurm cluster and sshd on loopback, for the Slurm and SSH tests.

Starts Debian's ``munged``, one ``slurmctld`` and four ``slurmd -N nX`` (nodes ``n[1-4]``,
ports 17001-17004, all on 127.0.0.1) and an ``sshd`` on a free loopback port with a
generated host key and user key. Everything lives in one temporary folder; nothing in
``/etc`` is touched. Used by ``tests/slurm/conftest.py``; can also be run by hand::

    python tests/infra/loopback.py /tmp/cluster   # start, print the environment, wait
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NODES = ("n1", "n2", "n3", "n4")
SLURMD_PORTS = (17001, 17002, 17003, 17004)
SLURMCTLD_PORT = 16817
PARTITION = "debug"
TEMPLATES = Path(__file__).resolve().parent


class InfraUnavailable(RuntimeError):
    """A daemon could not be installed or started; tests skip with this reason."""


def _wait_for(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise InfraUnavailable(f"{what} did not come up within {timeout:.0f} s{tail}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _render(template: str, out: Path, **values: object) -> Path:
    text = (TEMPLATES / template).read_text()
    out.write_text(text.format(**values))
    return out


def _cgroup_conf() -> str:
    """cgroup.conf for this host: v2 when the unified hierarchy is the root, else v1."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"
    return "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"


def _kill_pidfile(pidfile: Path, sig: int = signal.SIGTERM) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return None
    return pid


def _wait_gone(pid: int | None, timeout: float = 10.0) -> None:
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclasses.dataclass
class SlurmCluster:
    """munged + slurmctld + 4 slurmd on loopback, configured under ``root``."""

    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """Environment a Slurm client needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        for sub in ("munge", "ctld", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            os.chmod(key, 0o400)
        for node in NODES:
            (self.root / f"spool-{node}").mkdir(exist_ok=True)
        _render("slurm.conf.in", self.conf, root=self.root, host=socket.gethostname(),
                ctld_port=SLURMCTLD_PORT, partition=PARTITION,
                ports=f"{SLURMD_PORTS[0]}-{SLURMD_PORTS[-1]}")
        # slurmd 22.05 initialises a cgroup plugin even with proctrack/linuxproc and
        # task/none; it has no "disabled" plugin, so point it at whatever is mounted.
        (self.root / "cgroup.conf").write_text(_cgroup_conf())
        (self.root / "gres.conf").write_text("NodeName=n[1-4] Name=gpu File=/dev/null\n")

    def start(self) -> None:
        for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
            if shutil.which(tool) is None:
                raise InfraUnavailable(f"{tool} is not installed (run tests/infra/install-test-packages.sh)")
        busy = [p for p in (SLURMCTLD_PORT, *SLURMD_PORTS) if _port_open(p)]
        if busy:
            raise InfraUnavailable(f"loopback ports {busy} are already in use (another test cluster "
                                   "running?); stop it first")
        self.write_config()
        self.start_munge()
        self.start_ctld()
        for node in NODES:
            self.start_slurmd(node)
        self.wait_nodes_idle()

    def start_munge(self) -> None:
        m = self.root / "munge"
        subprocess.run(["munged", "--force", f"--socket={self.munge_socket}",
                        f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                        f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}"],
                       check=False, capture_output=True, timeout=30)
        _wait_for(self.munge_socket.exists, 15, "munged", m / "munged.log")

    def start_ctld(self) -> None:
        subprocess.run(["slurmctld", "-f", str(self.conf)], env=self._daemon_env(),
                       check=False, capture_output=True, timeout=30)
        _wait_for(lambda: _port_open(SLURMCTLD_PORT), 30, "slurmctld",
                  self.root / "log" / "slurmctld.log")

    def start_slurmd(self, node: str) -> None:
        subprocess.run(["slurmd", "-f", str(self.conf), "-N", node], env=self._daemon_env(),
                       check=False, capture_output=True, timeout=30)
        port = SLURMD_PORTS[NODES.index(node)]
        _wait_for(lambda: _port_open(port), 30, f"slurmd {node}",
                  self.root / "log" / f"slurmd-{node}.log")

    def _daemon_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env())
        return env

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env=self._daemon_env(), capture_output=True, text=True,
                              check=check, timeout=timeout)

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        states: dict[str, str] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1].lower()
        return states

    def wait_nodes_idle(self, timeout: float = 60) -> None:
        def all_idle() -> bool:
            states = self.node_states()
            return len(states) == len(NODES) and all(s.rstrip("*") in ("idle", "mixed", "allocated")
                                                      for s in states.values())
        _wait_for(all_idle, timeout, "four idle Slurm nodes", self.root / "log" / "slurmctld.log")

    def restart_ctld(self) -> None:
        """Stop and start slurmctld (state is kept in StateSaveLocation)."""
        self.stop_ctld()
        self.start_ctld()

    def stop_ctld(self) -> None:
        _wait_gone(_kill_pidfile(self.root / "slurmctld.pid"))
        deadline = time.monotonic() + 15
        while _port_open(SLURMCTLD_PORT) and time.monotonic() < deadline:
            time.sleep(0.2)

    def resume_node(self, node: str) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def stop(self) -> None:
        """Stop every daemon (signalled together: each takes about 2 s to exit)."""
        if self.conf.exists():
            self.run("scancel", "--full", "-u", "root", check=False)
        pids = [_kill_pidfile(self.root / f"slurmd-{node}.pid") for node in NODES]
        pids.append(_kill_pidfile(self.root / "slurmctld.pid"))
        for pid in pids:
            _wait_gone(pid)
        _wait_gone(_kill_pidfile(self.root / "munge" / "munged.pid"))


@dataclasses.dataclass
class Sshd:
    """An sshd on 127.0.0.1:<free port> accepting one generated key for the current user."""

    root: Path
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    port: int = 0

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def user_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def user(self) -> str:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name

    def start(self) -> None:
        sshd = Path("/usr/sbin/sshd")
        if not sshd.exists() or shutil.which("ssh-keygen") is None:
            raise InfraUnavailable("openssh-server is not installed (run tests/infra/install-test-packages.sh)")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        for key in (self.host_key, self.user_key):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                               check=True, capture_output=True)
        options = ",".join(f'environment="{k}={v}"' for k, v in self.env.items())
        pub = self.user_key.with_suffix(".pub").read_text().strip()
        (self.root / "authorized_keys").write_text(f"{options} {pub}\n" if options else pub + "\n")
        host_pub = self.host_key.with_suffix(".pub").read_text().split()
        self.port = self.port or free_port()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        _render("sshd_config.in", self.root / "sshd_config", root=self.root, port=self.port,
                user=self.user)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([str(sshd), "-f", str(self.root / "sshd_config"),
                               "-E", str(self.root / "sshd.log")],
                              capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise InfraUnavailable(f"sshd failed to start: {proc.stderr.strip()}")
        _wait_for(lambda: _port_open(self.port), 15, "sshd", self.root / "sshd.log")

    def kill_sessions(self) -> int:
        """Cut every open connection (kill the per-connection sshd children); returns how many."""
        try:
            listener = int((self.root / "sshd.pid").read_text().strip())
        except (OSError, ValueError):
            return 0
        killed = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == listener:
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed

    def stop(self) -> None:
        _wait_gone(_kill_pidfile(self.root / "sshd.pid"))


if __name__ == "__main__":  # manual use: start both, print how to reach them, stop on Ctrl-C
    base = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ncclbot-loopback")
    cluster = SlurmCluster(base / "slurm")
    sshd = Sshd(base / "ssh", env=cluster.env())
    try:
        cluster.start()
        sshd.start()
        print(f"export SLURM_CONF={cluster.conf}")
        print(f"ssh -p {sshd.port} -i {sshd.user_key} -o UserKnownHostsFile={sshd.known_hosts} "
              f"{sshd.user}@127.0.0.1")
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        sshd.stop()
        cluster.stop()
