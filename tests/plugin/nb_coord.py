"""Start and stop the ncclbot-coordinator for tests (loopback, ephemeral port)."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import time
from pathlib import Path

import nb_host as H


class Coordinator:
    def __init__(self, token: str = "s3cret", exe: Path | None = None):
        exe = exe or Path(os.environ.get("NBTEST_COORD", H.PLUGIN_DIR / "build" / "ncclbot-coordinator"))
        env = dict(os.environ, NCCLBOT_SYNC_TOKEN=token)
        env.pop("LD_PRELOAD", None)
        self.proc = subprocess.Popen([str(exe), "--listen", "127.0.0.1:0"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        self.addr = line.split()[-1]
        self.token = token

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def kill_between_rounds(self, tries: int = 2000) -> None:
        """SIGKILL while the coordinator sits in poll(), not half way through sending one
        round's result to the ranks (the one case freeze mode cannot make consistent,
        plugin/README.md "Limit"). Stops it, checks /proc/<pid>/syscall, resumes, retries."""
        pid = self.proc.pid
        for _ in range(tries):
            if platform.machine() != "x86_64":
                break
            os.kill(pid, signal.SIGSTOP)
            while not open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("T"):
                time.sleep(0.0005)
            in_poll = open(f"/proc/{pid}/syscall").read().split()[0] == "7"  # poll on x86_64
            if in_poll:
                break
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.0005)
        self.kill()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err or ""
