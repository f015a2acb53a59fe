"""Start and stop the ncclbot-coordinator for tests (loopback, ephemeral port), and a
relay in front of it that plays its failures exactly."""

from __future__ import annotations

import os
import platform
import signal
import socket
import struct
import subprocess
import threading
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


HDR = struct.Struct("<IIqQII")  # wire.h: magic, type, round, a, len, version
HELLO, START, RESULT = 1, 2, 5


class Proxy:
    """A loopback TCP relay between the ranks and the coordinator that can play the
    coordinator's failures exactly: hold START from one rank past its init timeout
    (``hold_start={rank: seconds}``), or die half way through one round's broadcast
    (``die_at_result=(round, ranks that get it)``: the others never do, then the
    coordinator is killed and every connection closes)."""

    def __init__(self, coord: Coordinator, nranks: int, hold_start=None, die_at_result=None):
        self.coord, self.nranks = coord, nranks
        self.hold_start, self.die_at_result = hold_start or {}, die_at_result
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.addr = f"127.0.0.1:{self.lsock.getsockname()[1]}"
        self.token = coord.token
        self.lock = threading.Lock()
        self.conns: list[socket.socket] = []
        self.results_seen = 0
        self.dead = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            host, port = self.coord.addr.split(":")
            up = socket.create_connection((host, int(port)))
            with self.lock:
                self.conns += [client, up]
            rank = [None]
            threading.Thread(target=self._pump, args=(client, up, rank, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, rank, False), daemon=True).start()

    @staticmethod
    def _messages(sock):
        buf = b""
        while True:
            while len(buf) >= HDR.size and len(buf) >= HDR.size + HDR.unpack_from(buf)[4]:
                n = HDR.size + HDR.unpack_from(buf)[4]
                yield buf[:n]
                buf = buf[n:]
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data

    def _pump(self, src, dst, rank, to_coord):
        for msg in self._messages(src):
            kind, rnd = HDR.unpack_from(msg)[1], HDR.unpack_from(msg)[2]
            if to_coord and kind == HELLO:
                rank[0] = struct.unpack_from("<I", msg, HDR.size + 20)[0]
            if not to_coord and kind == START and rank[0] in self.hold_start:
                time.sleep(self.hold_start[rank[0]])
            if not to_coord and kind == RESULT and self.die_at_result and rnd == self.die_at_result[0]:
                if rank[0] in self.die_at_result[1]:
                    self._send(dst, msg)
                with self.lock:
                    self.results_seen += 1
                    last = self.results_seen == self.nranks
                if last:
                    self.die()
                continue
            if not self._send(dst, msg):
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @staticmethod
    def _send(sock, msg) -> bool:
        try:
            sock.sendall(msg)
            return True
        except OSError:
            return False

    def die(self):
        """The coordinator dies: killed, and every rank's connection closes."""
        self.dead = True
        self.coord.kill()
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.lsock.close()
        with self.lock:
            for s in self.conns:
                s.close()
