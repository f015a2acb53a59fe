"""The local executor: runs job scripts as subprocesses of this machine, Slurm-style.

Used with the simulated fabric (the embedded default) and in tests. It behaves like a tiny
scheduler whose whole state lives in files under ``state_dir``, so a campaign command can
die at any point and the next one (``status``/``resume``) adopts what is still running:

* ``submit`` records the job (PENDING, with the environment it was submitted in, as
  ``sbatch --export=ALL`` keeps it) and starts it when fewer than ``max_concurrent`` jobs
  run; ``poll`` also starts pending jobs as slots free up (the scheduler's tick). A job is
  claimed (a file) before it starts and its wrapper records its own pid, so a caller killed
  mid-start neither hides the job nor lets it start twice;
* while a job is pending, a detached **runner** process (``python -m
  ncclbot_sweep.sweep.executors.local STATE_DIR``, its own session, its pid and start time in
  ``<state>/runner.pid``) ticks in its place: queued jobs go on after the command that
  submitted them exits or is interrupted, as Slurm's do, and ``status`` sees them advance. It
  ends when no job is pending or running;
* cancel and liveness follow the job's session (``timeout`` moves the script and every step
  into process groups of their own); a job that ended leaves no process behind;
* each job runs ``bash job.sh`` in its own session under ``timeout`` (the job's time
  limit), with the Slurm environment a batch script expects (``SLURM_JOB_ID``,
  ``SLURM_NNODES``, ``SLURM_NTASKS``, ``SLURM_JOB_NODELIST``, ...); a wrapper writes the
  exit code into ``<state>/<id>/rc`` when the script ends;
* an ``srun`` stand-in is first on ``PATH``. It accepts the flags the templates render
  (always ``--flag=value``), and starts **task 0 only** with the full ``SLURM_NTASKS`` and
  ``SLURM_NNODES``: launching one process per rank (32 nodes x 8 GPUs) would be far too
  slow, and the simulated nccl-tests binaries print only from ``SLURM_PROCID=0`` and take
  the job size from the environment. Container flags are accepted and ignored.
* a step that loads the plugin (``NCCL_TUNER_PLUGIN``/``NCCL_PROFILER_PLUGIN`` set) is
  different: the stand-in starts R rank processes (``SLURM_PROCID`` 0..R-1, and
  ``NCCLSWEEP_RANK_PROCESSES=R``), R being the inventory's
  ``scheduler.local_rank_processes`` or one per node, at most 8. They all load the plugin
  and share the job's coordinator; as with ``srun --kill-on-bad-exit``, the first rank
  that fails ends the others. The job script starts that coordinator on loopback only
  (``NCCLSWEEP_COORDINATOR_LISTEN=127.0.0.1:0``, any free port; ranks reach it through
  ``NCCLBOT_SYNC_ADDR``), so no port of this machine is opened to the network and jobs of
  concurrent campaigns never meet on a fixed port.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ncclbot_sweep.atomicfile import write_atomic
from ncclbot_sweep.errors import ExecutorError
from ncclbot_sweep.outcomes import job_state_for_exit
from ncclbot_sweep.paths import JOB_SCRIPT
from ncclbot_sweep.sweep.executors.base import Executor, JobSpec, JobState, JobStatus, job_tag
from ncclbot_sweep.sweep.mirror import CollectReport

__all__ = ["LocalExecutor", "session_members"]

log = logging.getLogger(__name__)

_CANCELLED = "cancelled"
#: The detached runner's record (``pid start-time``), its log, and the executor's settings it reads.
_RUNNER_PID = "runner.pid"
_RUNNER_LOG = "runner.log"
_SETTINGS = "executor.json"
#: Seconds between the runner's ticks.
_RUNNER_TICK_S = 0.25
#: What ``python -m`` runs for the runner (this module, also when it is itself ``__main__``).
_RUNNER_MODULE = "ncclbot_sweep.sweep.executors.local"
#: Seconds a claimed job may take to record its pid before it counts as never started.
_START_GRACE_S = 30.0
# The job's session leader: records its own pid and start time first (so a crash of the
# caller right after starting it cannot hide it; a job that cannot record it, on a full disk,
# does not run untracked), runs the job under its time limit, and records the exit code (each
# file written atomically). Arguments: script, rc, pid, limit.
_WRAPPER = (
    'script=$1 rcf=$2 pidf=$3 limit=$4; read -r stat </proc/$$/stat; set -- ${stat##*) }; '
    'echo "$$ ${20}" >"$pidf.tmp" && mv -f "$pidf.tmp" "$pidf" || exit 97; '
    'timeout --kill-after=10 "$limit" bash "$script"; rc=$?; '
    'echo "$rc" >"$rcf.tmp" && mv -f "$rcf.tmp" "$rcf"; exit "$rc"'
)
_SRUN = r"""#!/bin/bash
# srun stand-in of the ncclbot-sweep local executor: runs task 0 only, with the full job size in
# the environment (see ncclbot_sweep/sweep/executors/local.py). Accepts --flag=value options.
nodes="${SLURM_NNODES:-1}"
ntasks="${SLURM_NTASKS:-1}"
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes=*) nodes="${1#--nodes=}" ;;
        --ntasks=*) ntasks="${1#--ntasks=}" ;;
        --) shift; break ;;
        -*) ;;
        *) break ;;
    esac
    shift
done
if [ $# -eq 0 ]; then
    echo "srun (ncclbot local stand-in): no command given" >&2
    exit 2
fi
counter="${NCCLSWEEP_LOCAL_JOB_STATE:-/tmp}/srun-steps"
echo x >>"$counter" 2>/dev/null
export SLURM_STEP_ID="$(( $(wc -l <"$counter" 2>/dev/null || echo 1) - 1 ))"
export SLURM_STEPID="$SLURM_STEP_ID"
export SLURM_NTASKS="$ntasks" SLURM_NPROCS="$ntasks" SLURM_NNODES="$nodes"
export SLURM_STEP_NUM_TASKS="$ntasks" SLURM_STEP_NUM_NODES="$nodes"
procs=1
if [ -n "${NCCL_TUNER_PLUGIN:-}${NCCL_PROFILER_PLUGIN:-}" ]; then
    procs="${NCCLSWEEP_RANK_PROCESSES:-$(( nodes < 8 ? nodes : 8 ))}"
fi
if [ "$procs" -le 1 ]; then
    export SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0
    exec "$@"
fi
# A step that loads the plugin: R rank processes; the first that fails ends the others.
export NCCLSWEEP_RANK_PROCESSES="$procs"
pids=()
for ((r = 0; r < procs; r++)); do
    SLURM_PROCID=$r SLURM_LOCALID=0 SLURM_NODEID=$(( r * nodes / procs )) "$@" &
    pids+=("$!")
done
trap 'kill "${pids[@]}" 2>/dev/null' TERM INT
rc=0
for ((left = procs; left > 0; left--)); do
    wait -n
    code=$?
    if [ "$code" != 0 ] && [ "$rc" = 0 ]; then
        rc=$code
        kill "${pids[@]}" 2>/dev/null
    fi
done
exit "$rc"
"""


def _submit_environment() -> dict[str, str]:
    """This process's environment as a job submitted from it keeps it (no scheduler variables)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}


def _stat(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError, PermissionError):
        return None


def _proc_start_time(pid: int) -> str | None:
    """Kernel start time of ``pid`` (to tell our process from a recycled pid), or None if gone."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":  # a zombie has finished
        return None
    return fields[19]


def session_members(sid: int, started: str) -> list[int]:
    """Live processes of the session ``sid`` started no earlier than its leader (``started``).

    A job runs in its own session; ``timeout`` moves the script and each step into process
    groups of their own, so the session, not a process group, is what holds the whole job.
    """
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if fields and fields[0] != "Z" and int(fields[3]) == sid and int(fields[19]) >= int(started):
            members.append(int(entry.name))
    return members


class LocalExecutor(Executor):
    """Runs jobs on this machine; see the module docstring. Safe to re-create after a crash."""

    name = "local"

    def __init__(self, *, state_dir: Path, gpus_per_node: int, max_concurrent: int = 2,
                 rank_processes: int | None = None) -> None:
        self.state_dir = Path(state_dir).resolve()  # jobs run in their own folder: PATH must be absolute
        self.gpus_per_node = gpus_per_node
        self.max_concurrent = max_concurrent
        self.rank_processes = rank_processes  # live steps; None = one per node, at most 8
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._bin = self.state_dir / "bin"
        self._bin.mkdir(exist_ok=True)
        srun = self._bin / "srun"
        if not srun.is_file() or srun.read_text() != _SRUN:
            write_atomic(srun, _SRUN, mode=0o755)
        settings = json.dumps({"gpus_per_node": gpus_per_node, "max_concurrent": max_concurrent,
                               "rank_processes": rank_processes})
        path = self.state_dir / _SETTINGS
        if not path.is_file() or path.read_text() != settings:
            write_atomic(path, settings)
        self._children: dict[str, subprocess.Popen] = {}

    # ------------------------------------------------------------------ records

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.state_dir / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _record_dir(self, job_id: str) -> Path:
        return self.state_dir / "jobs" / job_id

    def _ids(self) -> list[str]:
        root = self.state_dir / "jobs"
        if not root.exists():
            return []
        return sorted((p.name for p in root.iterdir() if p.name.isdigit()), key=int)

    def _read(self, job_id: str) -> dict:
        try:
            return json.loads((self._record_dir(job_id) / "spec.json").read_text())
        except (OSError, ValueError):
            return {}

    # ------------------------------------------------------------------ Executor

    def submit(self, job: JobSpec) -> str:
        """Record ``job`` and start it if a slot is free; returns its numeric id as a string."""
        script = Path(job.local_dir) / job.script_name
        if not script.is_file():
            raise ExecutorError(f"job {job.job_key}: no job script at {script}", hint="render the campaign first")
        with self._locked():
            job_id = str(int(self._ids()[-1]) + 1 if self._ids() else 1)
            record = self._record_dir(job_id)
            spec = {"tag": job.tag, "campaign_key": job.campaign_key, "job_key": job.job_key,
                    "dir": str(Path(job.local_dir).resolve()), "nodes": job.nodes,
                    "time_limit_s": job.time_limit_s, "submitted_at": time.time(), "env": job.rerun_env,
                    "environ": _submit_environment()}
            try:
                record.mkdir(parents=True)
                write_atomic(record / "spec.json", json.dumps(spec), mode=0o600)  # the environment may hold secrets
            except BaseException:  # a full disk: no half-recorded job that could never start
                shutil.rmtree(record, ignore_errors=True)
                raise
            log.info("local job %s queued for %s", job_id, job.tag)
            self._schedule()
        return job_id

    def poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Start pending jobs that fit, then report every id (unknown ids are UNKNOWN)."""
        with self._locked():
            self._schedule()
        return {job_id: self._status(job_id) for job_id in job_ids}

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Stop these jobs: pending ones never start, running ones get SIGTERM, then SIGKILL."""
        with self._locked():
            for job_id in job_ids:
                record = self._record_dir(job_id)
                if not record.exists() or (record / "rc").exists():
                    continue
                leader = self._leader(job_id)
                if leader is not None:
                    self._kill_session(*leader)
                (record / "rc").write_text(_CANCELLED)
                log.info("local job %s cancelled", job_id)

    def peek(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Report every id without starting pending jobs (for ``status``, which writes nothing)."""
        return {job_id: self._status(job_id) for job_id in job_ids}

    def fetch(self, job: JobSpec, *, ended: bool = True) -> CollectReport:
        """Nothing to copy: local jobs write straight into the campaign folder."""
        return CollectReport()

    def find_tagged(self, campaign_key: str) -> Mapping[str, str]:
        """``{tag: id}`` of every job of this campaign the executor has seen (the latest per tag)."""
        prefix = job_tag(campaign_key, "")
        found: dict[str, str] = {}
        for job_id in self._ids():
            tag = self._read(job_id).get("tag", "")
            if tag.startswith(prefix):
                found[tag] = job_id
        return found

    def close(self) -> None:
        """Reap finished children; running jobs keep running and the runner starts pending ones."""
        for child in self._children.values():
            child.poll()

    def serve(self) -> None:
        """The detached runner's loop: start pending jobs as slots free up, until none is pending or running.

        Ends at once when another runner has taken over (the record names another process).
        """
        me = (os.getpid(), _proc_start_time(os.getpid()))
        while True:
            with self._locked():
                if self._runner() != me:
                    return
                self._schedule()
                open_ids = [j for j in self._ids() if self._status(j).state in (JobState.PENDING, JobState.RUNNING)]
                if not open_ids:
                    (self.state_dir / _RUNNER_PID).unlink(missing_ok=True)
                    log.info("no local job pending or running: the runner ends")
                    return
            time.sleep(_RUNNER_TICK_S)

    # ------------------------------------------------------------------ internals

    def _status(self, job_id: str) -> JobStatus:
        record = self._record_dir(job_id)
        if not record.exists():
            return JobStatus(JobState.UNKNOWN, reason="no such local job")
        child = self._children.get(job_id)
        if child is not None:
            child.poll()  # reap, so a finished job is not seen as a zombie forever
        # Order matters: the wrapper writes pid, then runs, then writes rc. Looking for the pid
        # file before checking liveness, and for rc after, leaves no moment at which a job that
        # is starting or ending looks vanished.
        pid_recorded = (record / "pid").exists()
        alive = self._live_pid(job_id) is not None
        rc_file = record / "rc"
        if rc_file.exists():
            leader = self._leader(job_id)
            if alive and leader is not None:
                # The script ended (or hit its time limit) but steps in their own process groups
                # live on: end them, as Slurm ends every process of a finished job.
                self._kill_session(*leader)
            text = rc_file.read_text().strip()
            if text == _CANCELLED:
                return JobStatus(JobState.CANCELLED, reason="cancelled")
            code = int(text) if text.lstrip("-").isdigit() else -1
            state = job_state_for_exit(code)
            reason = {JobState.COMPLETED: "", JobState.TIMEOUT: "job time limit reached"}.get(
                state, f"job script exited with {code}")
            return JobStatus(state, code, reason=reason)
        if alive:
            return JobStatus(JobState.RUNNING)
        if not (record / "claim").exists():
            return JobStatus(JobState.PENDING, reason="waiting for a free slot")
        if not pid_recorded:
            if child is not None and child.returncode is not None:
                return JobStatus(JobState.FAILED, reason="the job could not record its start (is the disk full?)")
            if self._starting(job_id):
                return JobStatus(JobState.PENDING, reason="starting")
            return JobStatus(JobState.FAILED, reason="the job was claimed but never started (crash while starting?)")
        return JobStatus(JobState.FAILED, reason="the job's process vanished without an exit code (killed?)")

    def _starting(self, job_id: str) -> bool:
        """True while a claimed job may still be about to record its pid."""
        claim = self._record_dir(job_id) / "claim"
        try:
            return time.time() - claim.stat().st_mtime < _START_GRACE_S
        except FileNotFoundError:
            return False

    def _leader(self, job_id: str) -> tuple[int, str] | None:
        """(pid, start time) of the job's session leader, as recorded when it started."""
        try:
            pid_text, start = (self._record_dir(job_id) / "pid").read_text().split()
        except (OSError, ValueError):
            return None
        return int(pid_text), start

    def _live_pid(self, job_id: str) -> int | None:
        """The job's session id while any process of it runs (the wrapper, the script or a step)."""
        leader = self._leader(job_id)
        if leader is None:
            return None
        pid, start = leader
        if _proc_start_time(pid) == start or session_members(pid, start):
            return pid
        return None

    def _running_count(self) -> int:
        """Jobs that hold a slot: claimed, not ended, and alive or still starting."""
        count = 0
        for job_id in self._ids():
            record = self._record_dir(job_id)
            if not (record / "claim").exists() or (record / "rc").exists():
                continue
            if (record / "pid").exists():
                count += self._live_pid(job_id) is not None
            else:
                count += self._starting(job_id)
        return count

    def _schedule(self) -> None:
        """Start pending jobs, oldest first, while fewer than ``max_concurrent`` run (lock held).

        A job is claimed (a file) before it starts, so it can start only once even if the
        caller dies right after starting it. Jobs left pending get a runner if none is alive.
        """
        free = self.max_concurrent - self._running_count()
        waiting = False
        for job_id in self._ids():
            record = self._record_dir(job_id)
            if (record / "claim").exists() or (record / "rc").exists():
                continue
            if not self._read(job_id):
                log.warning("local job %s has no readable record (%s): not started", job_id, record)
                continue
            if free <= 0:
                waiting = True
                break
            self._start(job_id)
            free -= 1
        if waiting and self._runner() is None:
            self._start_runner()

    def _runner(self) -> tuple[int, str] | None:
        """(pid, start time) of the live runner, or None (lock held)."""
        try:
            pid_text, start = (self.state_dir / _RUNNER_PID).read_text().split()
        except (OSError, ValueError):
            return None
        return (int(pid_text), start) if _proc_start_time(int(pid_text)) == start else None

    def _start_runner(self) -> None:
        """Start the detached runner and record it (lock held, so it cannot start twice)."""
        with open(self.state_dir / _RUNNER_LOG, "ab") as out:
            child = subprocess.Popen([sys.executable, "-m", _RUNNER_MODULE, str(self.state_dir)],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        started = _proc_start_time(child.pid)
        if started is None:  # it died at once; the next tick of this command tries again
            log.warning("the local runner (pid %d) ended at once; see %s", child.pid, self.state_dir / _RUNNER_LOG)
            return
        write_atomic(self.state_dir / _RUNNER_PID, f"{child.pid} {started}")
        self._children[f"runner-{child.pid}"] = child
        log.info("local runner started (pid %d) for the jobs still pending", child.pid)

    def _start(self, job_id: str) -> None:
        spec = self._read(job_id)
        record = self._record_dir(job_id)
        job_dir = Path(spec["dir"])
        env = self._environment(job_id, spec)
        write_atomic(record / "claim", str(os.getpid()))  # whole or absent: a job half-claimed would never start
        with open(record / "output.txt", "ab") as out:
            child = subprocess.Popen(
                ["bash", "-c", _WRAPPER, "ncclbot-local-job", str(job_dir / JOB_SCRIPT), str(record / "rc"),
                 str(record / "pid"), str(max(1, int(spec["time_limit_s"])))],
                cwd=job_dir, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self._children[job_id] = child
        log.info("local job %s started (pid %d) for %s", job_id, child.pid, spec["tag"])

    def _environment(self, job_id: str, spec: dict) -> dict[str, str]:
        nodes = int(spec["nodes"])
        ntasks = nodes * self.gpus_per_node
        nodelist = "localhost" if nodes == 1 else f"local[1-{nodes}]"
        env = dict(spec.get("environ") or _submit_environment())
        env.update({
            "PATH": f"{self._bin}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
            "NCCLSWEEP_LOCAL_JOB_STATE": str(self._record_dir(job_id)),
            "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NAME": spec["tag"],
            "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
            "SLURM_NTASKS": str(ntasks), "SLURM_NPROCS": str(ntasks),
            "SLURM_NTASKS_PER_NODE": str(self.gpus_per_node), "SLURM_TASKS_PER_NODE": f"{self.gpus_per_node}(x{nodes})",
            "SLURM_GPUS_PER_NODE": str(self.gpus_per_node), "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NODELIST": nodelist, "SLURM_SUBMIT_DIR": spec["dir"], "SLURM_SUBMIT_HOST": socket.gethostname(),
            "SLURM_CLUSTER_NAME": "local", "SLURM_JOB_PARTITION": "local",
            "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1", "NCCLSWEEP_COORDINATOR_LISTEN": "127.0.0.1:0",
        })
        env.update(spec.get("env", {}))
        if self.rank_processes is not None:
            env["NCCLSWEEP_RANK_PROCESSES"] = str(self.rank_processes)
        else:
            env.pop("NCCLSWEEP_RANK_PROCESSES", None)
        return env

    @staticmethod
    def _kill_session(sid: int, started: str) -> None:
        """SIGTERM every process of the job's session, then SIGKILL what is left after 5 s."""
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 1.0)):
            members = session_members(sid, started)
            if not members:
                return
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and session_members(sid, started):
                time.sleep(0.05)


def _serve_main(argv: Sequence[str]) -> int:
    """``python -m ncclbot_sweep.sweep.executors.local STATE_DIR``: the detached runner."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s runner %(process)d: %(message)s")
    state_dir = Path(argv[0])
    try:
        settings = json.loads((state_dir / _SETTINGS).read_text())
        LocalExecutor(state_dir=state_dir, **settings).serve()
    except (OSError, ValueError, TypeError) as exc:  # the campaign folder went away, or its record is unreadable
        log.error("the runner stops: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_serve_main(sys.argv[1:]))
