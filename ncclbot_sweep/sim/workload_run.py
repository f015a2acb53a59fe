"""``ncclbot-sweep sim workload``: the simulator's stand-in for a training script.

It replays a training step (:mod:`ncclbot_sweep.sim.workload`) ``steps`` times through the
simulated NCCL, asynchronously as NCCL launches (:mod:`ncclbot_sweep.sim.pluginhost`: a host
clock and a stream clock), and prints one line per step as a training script does. Per step:
each compute gap costs the host its CPU time and queues its GPU kernels on the stream; each
collective goes through ``getCollInfo`` (the real plugin when ``NCCL_TUNER_PLUGIN`` /
``NCCL_PROFILER_PLUGIN`` name it, NCCL's own choice otherwise) and is served the GPU time the
simulator draws for the arm played; the step ends as a training loop's does, with the host
waiting for the stream (``loss.item()``), and its time is the host clock between two such
ends. Stock NCCL (no plugin) runs through the same host and clocks, so the two differ only by
the arms played and the plugin's own time.

The job's shape comes from Slurm (``SLURM_NNODES``, ``SLURM_NTASKS``, one rank per task);
``nodes`` overrides it for a run by hand (every GPU of those nodes a rank). With the plugin,
``SLURM_PROCID`` among ``NCCLSWEEP_RANK_PROCESSES`` rank processes share one coordinator
(:mod:`ncclbot_sweep.sim.live`); only rank 0 prints. Without it only task 0 runs.

Step lines (``log_format``): ``megatron`` (Megatron-LM's ``elapsed time per iteration (ms)``),
``lightning`` (PyTorch Lightning's progress bar) or ``hf`` (Hugging Face Trainer's progress
bar, then its ``train_runtime`` summary); ``profile_dir`` also writes a Kineto-style trace with
one ``ProfilerStep#N`` span per step, as ``torch.profiler`` does. Exit 0, or 1 with the reason
on stderr when NCCL would fail (plugin init, a collective no arm can run).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

import numpy as np

from ncclbot_sweep.errors import NcclbotError, WorkloadError
from ncclbot_sweep.names import SIMULATOR, Arm, dtype_bytes, nccl_type_name
from ncclbot_sweep.sim.fabric import SimFabric, fabric_for_env
from ncclbot_sweep.sim.fabrics import DEFAULT_FABRIC
from ncclbot_sweep.sim.live import LiveFailure, RankPlace, choose_arm, launch_call, open_host, rank_place, wants_plugin
from ncclbot_sweep.sim.nccltests.calls import call_channels, call_table
from ncclbot_sweep.sim.nccltests.environment import EnvError, job_layout
from ncclbot_sweep.sim.pluginhost import HostError, PluginHost
from ncclbot_sweep.sim.process import SimProcess, derive_seed
from ncclbot_sweep.sim.workload import Call, WorkloadStep, load_step

__all__ = ["LOG_FORMATS", "PROFILE_TRACE", "run_workload"]

#: The compute kernels' run-to-run jitter (log-normal sigma): a few microseconds per millisecond.
_COMPUTE_SIGMA = 0.01
#: The trace ``profile_dir`` receives (a ``torch.profiler`` trace names itself ``*.pt.trace.json``).
PROFILE_TRACE = "ncclbot-sim-workload.pt.trace.json"
_GLOBAL_BATCH = 512


@dataclasses.dataclass(frozen=True)
class _Job:
    """The job the player stands in for, and this process's place in it."""

    fabric: SimFabric
    nodes: int
    ranks: int
    place: RankPlace
    host: str


def _job(env: Mapping[str, str], nodes: int | None) -> _Job | None:
    """The job from Slurm (``nodes`` overrides it); None for a task that has nothing to do."""
    fabric = fabric_for_env(env.get("NCCLBOT_SIM_FABRIC", "").strip() or DEFAULT_FABRIC, dict(env))
    layout = job_layout(env, fabric.name)
    live = wants_plugin(env)
    if layout.procid != 0 and not live:
        return None  # only task 0 plays stock NCCL; the others would print nothing
    count = nodes or layout.nodes
    ranks = count * fabric.gpus_per_node if nodes else layout.tasks
    if -(-ranks // count) > fabric.gpus_per_node:
        raise WorkloadError(f"{ranks} ranks on {count} node(s) are more than the {fabric.gpus_per_node} GPUs per node "
                            f"of {fabric.name}", hint="launch at most one task per GPU")
    place = rank_place(env, layout.tasks, layout.procid) if live else RankPlace(rank=0, processes=1)
    return _Job(fabric, count, ranks, place, layout.hosts[0])


def _seed(env: Mapping[str, str], job: _Job, step: WorkloadStep, steps: int) -> int:
    """The run's noise: the step key (each run of a campaign its own), shape and workload; rank 0
    keeps it, the other rank processes derive theirs from it."""
    base = env.get("NCCLBOT_SIM_SEED", "").strip() or job.fabric.name
    seed = derive_seed(base, "workload", step.name, job.nodes, job.ranks, steps, env.get("NCCLSWEEP_STEP_KEY", ""))
    return seed if job.place.rank == 0 else derive_seed(seed, "rank", job.place.rank)


class _Player:
    """One step played through the host: per call NCCL's table and channels, computed once."""

    def __init__(self, job: _Job, step: WorkloadStep, *, host: PluginHost, process: SimProcess,
                 env: Mapping[str, str], rng: np.random.Generator) -> None:
        self.job, self.step, self.host, self.process, self.rng = job, step, host, process, rng
        self._tables: dict[tuple[str, int], np.ndarray] = {}
        self._channels: dict[tuple[int, Arm], int] = {}
        self._env = env

    def _table(self, call: Call) -> np.ndarray:
        key = (call.collective, call.size_bytes)
        if key not in self._tables:
            table = call_table(self.job.fabric, call.collective, nodes=self.job.nodes, size=call.size_bytes,
                               ranks=self.job.ranks, env=self._env)
            self._tables[key] = np.ascontiguousarray(table, dtype=np.float32)
        return self._tables[key]

    def _call_channels(self, call: Call, arm: Arm) -> int:
        key = (call.size_bytes, arm)
        if key not in self._channels:
            self._channels[key] = call_channels(self.job.fabric, arm, nodes=self.job.nodes, ranks=self.job.ranks,
                                                n_bytes=call.size_bytes)
        return self._channels[key]

    def play(self) -> float:
        """Play the step once; its time (us) from the last step's end to this one's."""
        began = self.host.clock_us()
        for op in self.step.ops:
            if not isinstance(op, Call):
                jitter = self.rng.lognormal(-0.5 * _COMPUTE_SIGMA ** 2, _COMPUTE_SIGMA) if op.gpu_us else 1.0
                self.host.compute(host_us=op.host_us, gpu_us=op.gpu_us * jitter)
                continue
            arm = choose_arm(self.host, op.collective, op.size_bytes, self._table(op))
            channels = self._call_channels(op, arm)
            launch_call(self.host, self.process, op.collective, op.size_bytes, arm, channels=channels,
                        elt=dtype_bytes(op.dtype) or 4, dtype=nccl_type_name(op.dtype))
        self.host.sync()  # the loop's loss.item(): the host waits for the step's last kernel
        return self.host.clock_us() - began


# --------------------------------------------------------------------------- step lines


def _mmss(us: float) -> str:
    seconds = int(us / 1e6)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def _rate(step_us: float) -> str:
    """tqdm's rate field: ``8.41it/s``, or ``1.25s/it`` below one step per second."""
    per_s = 1e6 / step_us
    return f"{per_s:.2f}it/s" if per_s >= 1.0 else f"{step_us / 1e6:.2f}s/it"


def _bar(done: int, total: int) -> str:
    filled = done * 10 // total
    return f"{100 * done // total:3d}%|{'#' * filled}{' ' * (10 - filled)}| {done}/{total}"


def _megatron(index: int, total: int, step_us: float, elapsed_us: float) -> str:
    done = index + 1
    return (f" iteration {done:8d}/{total:8d} | consumed samples: {done * _GLOBAL_BATCH:12d} | "
            f"elapsed time per iteration (ms): {step_us / 1000.0:.1f} | learning rate: 1.000000E-04 | "
            f"global batch size: {_GLOBAL_BATCH:5d} | loss scale: 1.0 | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |\n")


def _lightning(index: int, total: int, step_us: float, elapsed_us: float) -> str:
    left = elapsed_us / (index + 1) * (total - index - 1)
    end = "\n" if index + 1 == total else "\r"
    return f"Epoch 0: {_bar(index + 1, total)} [{_mmss(elapsed_us)}<{_mmss(left)}, {_rate(step_us)}, v_num=0]{end}"


def _hf(index: int, total: int, step_us: float, elapsed_us: float) -> str:
    left = elapsed_us / (index + 1) * (total - index - 1)
    line = f"{_bar(index + 1, total)} [{_mmss(elapsed_us)}<{_mmss(left)}, {_rate(step_us):>10s}]"
    if index + 1 < total:
        return line + "\r"
    return (line + f"\n{{'train_runtime': {elapsed_us / 1e6:.4f}, 'train_samples_per_second': "
            f"{total * _GLOBAL_BATCH / (elapsed_us / 1e6):.3f}, 'train_steps_per_second': "
            f"{total / (elapsed_us / 1e6):.3f}, 'epoch': 1.0}}\n")


#: How each framework prints a step: ``(0-based index, steps, step us, elapsed us) -> text``.
LOG_FORMATS: dict[str, Callable[[int, int, float, float], str]] = {
    "megatron": _megatron, "lightning": _lightning, "hf": _hf,
}


def _write_profile(folder: Path, spans: list[tuple[float, float]], host: str) -> None:
    """A Kineto-style trace of the run: one ``ProfilerStep#N`` span (ts, dur in us) per step."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": os.getpid(), "tid": 1,
               "ts": round(start, 3), "dur": round(dur, 3)} for i, (start, dur) in enumerate(spans)]
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "hostName": host, "traceEvents": events}
    (folder / PROFILE_TRACE).write_text(json.dumps(doc) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- the run


def run_workload(source: str, *, steps: int, log_format: str = "megatron", profile_dir: Path | None = None,
                 nodes: int | None = None, env: Mapping[str, str] | None = None, out: TextIO,
                 err: TextIO) -> int:
    """Play ``steps`` training steps of ``source`` (a shipped spec's name, a spec file or a Kineto
    trace) and print a step line per step into ``out`` (rank 0). Returns the exit status; raises
    :class:`WorkloadError` for a spec, trace or job shape that cannot be played."""
    env = dict(os.environ) if env is None else dict(env)
    if log_format not in LOG_FORMATS:
        raise WorkloadError(f"log format must be one of {', '.join(LOG_FORMATS)}, but got {log_format!r}")
    try:
        job = _job(env, nodes)
    except ValueError as exc:
        raise WorkloadError(f"NCCLBOT_SIM_FABRIC: {exc}") from None
    if job is None:
        return 0
    step = load_step(source, ranks=job.ranks)
    quiet = job.place.rank != 0
    for note in step.notes:
        err.write(f"NCCLBOT-SIM workload {step.name}: {note}\n")
    seed = _seed(env, job, step, steps)
    process = SimProcess(job.fabric, nodes=job.nodes, ranks=job.ranks, seed=seed)
    try:
        host = open_host(env, job.fabric, nodes=job.nodes, ranks=job.ranks, place=job.place,
                         seed_parts=(env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", ""),
                                     env.get("NCCLSWEEP_STEP_KEY", ""), "workload", step.name, job.nodes, job.ranks))
    except (HostError, NcclbotError) as exc:
        err.write(f"{job.host}: NCCL WARN {exc}\nworkload: communicator init failed (internal error)\n")
        return 1
    if not quiet:
        out.write(f"NCCLBOT-SIM workload {step.name} on {job.fabric.name}: {job.nodes} nodes, {job.ranks} ranks, "
                  f"{step.calls} collectives and {len(step.ops) - step.calls} compute gaps per step (synthetic) "
                  f"simulator={SIMULATOR}\n")
    player = _Player(job, step, host=host, process=process, env=env,
                     rng=np.random.default_rng(derive_seed(seed, "compute")))
    status = 0
    spans: list[tuple[float, float]] = []
    try:
        for index in range(steps):
            step_us = player.play()
            spans.append((host.clock_us() - step_us, step_us))
            if not quiet:
                out.write(LOG_FORMATS[log_format](index, steps, step_us, host.clock_us()))
                out.flush()
            _relay_warnings(host, err, job.host)
    except (LiveFailure, EnvError) as exc:
        err.write(f"{job.host}: NCCL WARN {exc}\nworkload: step {len(spans)} failed: unhandled system error\n")
        status = 1
    finally:
        host.close()
        _relay_warnings(host, err, job.host)
    if profile_dir is not None and not quiet and spans:
        _write_profile(profile_dir, spans, job.host or socket.gethostname())
    return status


def _relay_warnings(host: PluginHost, err: TextIO, hostname: str) -> None:
    """The plugin's WARN lines, as NCCL prints them to stderr (INFO stays with NCCL_DEBUG=INFO runs)."""
    for record in host.take_log():
        if record.level <= 2:
            err.write(f"{hostname}:{os.getpid()} NCCL WARN {record.message}\n")
