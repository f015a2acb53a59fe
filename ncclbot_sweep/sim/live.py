"""The live path of a simulated nccl-tests process: every call played through the real plugin.

When the environment loads the plugin (``NCCL_TUNER_PLUGIN``/``NCCL_PROFILER_PLUGIN``, as
the live job script sets them), each call of the nccl-tests loop (warm-up, timed and check
calls, every size) goes: cost table from the simulator's NCCL cost model ->
``getCollInfo`` and NCCL's first-minimum scan in the C host -> a latency for the arm
played from :class:`~ncclbot_sweep.sim.process.SimProcess` (ground truth, lazy-connection
transient per arm, first-use NVLS stall once per process, noise, outliers) -> the launch,
whose profiler events carry that latency once the GPU has run it. Launches are
asynchronous (:mod:`ncclbot_sweep.sim.pluginhost`): the host runs ahead of the stream, and
an iteration costs its GPU time plus whatever time the stream waited for the host (a
plugin that waits in ``getCollInfo`` shows there). With ``-z`` the host waits for each
iteration instead, so the plugin's host time is in series; with ``-G`` the calls are
captured once (``getCollInfo`` then) and the graph is replayed, calling no tuner.

Which rank this process is: ``SLURM_PROCID`` among ``NCCLSWEEP_RANK_PROCESSES`` processes
(the local executor's srun stand-in sets it; without it every Slurm task is one rank
process). All of them derive the same communicator id from the job and step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim.fabric import SimFabric
from ncclbot_sweep.sim.pluginhost import CommInfo, PluginHost, host_library, plugin_paths
from ncclbot_sweep.sim.process import SimProcess, derive_seed
from ncclbot_sweep.sim.sweep import Play, Played, Runs, merge_runs
from ncclbot_sweep.sim.tunemodel import tuner_constants

__all__ = ["RANK_PROCESSES_ENV", "LiveFailure", "RankPlace", "choose_arm", "launch_call", "live_player", "open_host",
           "rank_place", "wants_plugin"]

#: How many rank processes stand for the job (set by the local executor's srun stand-in).
RANK_PROCESSES_ENV = "NCCLSWEEP_RANK_PROCESSES"


class LiveFailure(Exception):
    """A collective NCCL would fail: the tuner returned an error or left no arm available."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class RankPlace:
    """This process among the rank processes of the step."""

    rank: int
    processes: int


def wants_plugin(env: Mapping[str, str]) -> bool:
    """True when NCCL would load a tuner or profiler plugin from this environment."""
    return any(plugin_paths(dict(env)))


def rank_place(env: Mapping[str, str], tasks: int, procid: int) -> RankPlace:
    """Rank and process count of a live step (see the module docstring)."""
    text = env.get(RANK_PROCESSES_ENV, "").strip()
    processes = int(text) if text.isdigit() and int(text) > 0 else tasks
    return RankPlace(rank=min(procid, processes - 1), processes=processes)


def open_host(env: Mapping[str, str], fabric: SimFabric, *, nodes: int, ranks: int, place: RankPlace,
              seed_parts: tuple) -> PluginHost:
    """Initialise this rank's communicator with the plugin (profiler, then tuner)."""
    tuner, profiler = plugin_paths(dict(env))
    nccl_nodes = fabric.tuned(nodes, ranks).nodes
    comm = CommInfo(
        comm_id=derive_seed("ncclbot-sim-comm", *seed_parts),
        nranks=place.processes, nnodes=nccl_nodes, rank=place.rank,
        nvl_domains=nccl_nodes, nvl_ranks=max(1, ranks // nccl_nodes),
        debug_level=env.get("NCCL_DEBUG", "").strip() or "NONE", couple=place.processes > 1,
    )
    return PluginHost(comm, tuner=tuner, profiler=profiler, host_lib=host_library(dict(env)),
                      constants=tuner_constants(), timing=fabric.spec.host)


def live_player(host: PluginHost, process: SimProcess, collective: str, *, table: Callable[[int], np.ndarray],
                channels: Callable[[Arm, int], int], elt: int, dtype: str, blocking: int = 0, agg: int = 1,
                graph: int = 0) -> Play:
    """``play(size, count)`` for :func:`~ncclbot_sweep.sim.sweep.run_sweep`: one plugin call per call.

    ``table(size)`` is the cost table NCCL computes for the call (us, -1 unavailable);
    ``channels(arm, size)`` the channels NCCL runs it on; ``blocking``, ``agg`` and ``graph`` are
    nccl-tests' ``-z``, ``-m`` and ``-G``. Raises :class:`LiveFailure` where NCCL would fail the
    collective.
    """
    tables: dict[int, np.ndarray] = {}
    # -z 1 and 2 wait after each call, -z 3 after each group of -m calls
    group = 0 if not blocking else agg if blocking == 3 else 1

    def decide(size: int) -> Arm:
        return choose_arm(host, collective, size, tables[size])

    def launch(size: int, arm: Arm, *, replay: bool = False) -> int:
        return launch_call(host, process, collective, size, arm, channels=channels(arm, size), elt=elt, dtype=dtype,
                           replay=replay)

    def play(size: int, count: int) -> Played:
        if size not in tables:
            tables[size] = np.ascontiguousarray(table(size), dtype=np.float32)
        if graph:
            return _replayed(host, [decide(size) for _ in range(count)], graph, lambda arm: launch(size, arm,
                                                                                                  replay=True))
        arms: list[Arm] = []
        if not group:
            first = -1
            for _ in range(count):
                arm = decide(size)
                kernel = launch(size, arm)
                first = kernel if first < 0 else first
                arms.append(arm)
            host.sync()  # nccl-tests synchronises the stream after each loop of calls
            times, idle = host.times(first, count)
            return Played(times, _runs(arms), idle)
        times = np.empty(count)
        for start in range(0, count, group):
            began = host.clock_us()
            n = min(group, count - start)
            for _ in range(n):
                arm = decide(size)
                launch(size, arm)
                arms.append(arm)
            host.sync()  # -z: the host waits for the stream after each (group of) call(s)
            times[start:start + n] = (host.clock_us() - began) / n
        return Played(times, _runs(arms), np.zeros(count))
    return play


def choose_arm(host: PluginHost, collective: str, size: int, table: np.ndarray) -> Arm:
    """``getCollInfo`` and NCCL's scan for one call; raises :class:`LiveFailure` where NCCL would fail it."""
    rc, arm, _host_us = host.choose(collective, size, table)
    if rc != 0:
        raise LiveFailure(f"tuner getCollInfo failed for {collective} of {size} bytes (error {rc})", code=rc)
    if arm is None:
        raise LiveFailure(f"no algorithm/protocol available for function {collective}", code=3)
    return arm


def launch_call(host: PluginHost, process: SimProcess, collective: str, size: int, arm: Arm, *, channels: int,
                elt: int, dtype: str, replay: bool = False) -> int:
    """The call's Coll event and launch, served the GPU time ``process`` draws for ``arm``; its kernel's index."""
    gpu_us = float(process.run(collective, arm, size, 1)[0])
    return host.played(collective, size, elt=elt, dtype=dtype, arm=arm, channels=channels, latency_us=gpu_us,
                       replay=replay)


def _replayed(host: PluginHost, arms: list[Arm], replays: int, launch: Callable[[Arm], int]) -> Played:
    """A captured loop (``arms``, one getCollInfo each) replayed ``replays`` times: each
    iteration's time is its mean over the replays."""
    first = -1
    for _ in range(replays):
        for arm in arms:
            kernel = launch(arm)
            first = kernel if first < 0 else first
    host.sync()
    times, idle = host.times(first, replays * len(arms))
    shape = (replays, len(arms))
    return Played(times.reshape(shape).mean(axis=0), _runs(arms * replays), idle.reshape(shape).sum(axis=0))


def _runs(arms: list[Arm]) -> Runs:
    """Consecutive calls per arm."""
    return merge_runs(tuple((arm, 1) for arm in arms))
