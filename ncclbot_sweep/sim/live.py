"""The live path of a simulated nccl-tests process: every call played through the real plugin.

When the environment loads the plugin (``NCCL_TUNER_PLUGIN``/``NCCL_PROFILER_PLUGIN``, as
the live job script sets them), each call of the nccl-tests loop (warm-up, timed and check
calls, every size) goes: cost table from the simulator's NCCL cost model ->
``getCollInfo`` and NCCL's first-minimum scan in the C host -> a latency for the arm
played from :class:`~ncclbot_sweep.sim.process.SimProcess` (ground truth, lazy-connection
transient per arm, first-use NVLS stall once per process, noise, outliers) -> the profiler
events carrying that latency. The iteration's time is that GPU time plus the host time the
plugin's calls really took (:mod:`ncclbot_sweep.sim.pluginhost`).

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
from ncclbot_sweep.sim.sweep import Play, Played
from ncclbot_sweep.sim.tunemodel import tuner_constants

__all__ = ["RANK_PROCESSES_ENV", "LiveFailure", "RankPlace", "live_player", "open_host", "rank_place", "wants_plugin"]

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
                      constants=tuner_constants())


def live_player(host: PluginHost, process: SimProcess, collective: str, *, table: Callable[[int], np.ndarray],
                channels: Callable[[Arm, int], int], elt: int, dtype: str) -> Play:
    """``play(size, count)`` for :func:`~ncclbot_sweep.sim.sweep.run_sweep`: one plugin call per call.

    ``table(size)`` is the cost table NCCL computes for the call (us, -1 unavailable);
    ``channels(arm, size)`` the channels NCCL runs it on. Raises :class:`LiveFailure` where
    NCCL would fail the collective.
    """
    tables: dict[int, np.ndarray] = {}

    def play(size: int, count: int) -> Played:
        if size not in tables:
            tables[size] = np.ascontiguousarray(table(size), dtype=np.float32)
        costs = tables[size]
        times = np.empty(count)
        runs: list[tuple[Arm | None, int]] = []
        for i in range(count):
            rc, arm, host_us = host.choose(collective, size, costs)
            if rc != 0:
                raise LiveFailure(f"tuner getCollInfo failed for {collective} of {size} bytes (error {rc})", code=rc)
            if arm is None:
                raise LiveFailure(f"no algorithm/protocol available for function {collective}", code=3)
            gpu_us = float(process.run(collective, arm, size, 1)[0])
            host_us += host.played(collective, size, elt=elt, dtype=dtype, arm=arm, channels=channels(arm, size),
                                   latency_us=gpu_us)
            times[i] = gpu_us + host_us
            if runs and runs[-1][0] == arm:
                runs[-1] = (arm, runs[-1][1] + 1)
            else:
                runs.append((arm, 1))
        host.sync()  # nccl-tests synchronises the stream after each loop of calls
        return Played(times, tuple(runs))
    return play
