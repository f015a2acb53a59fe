"""The simulator's NCCL around the real plugin: a ctypes driver of ``plugin/host/simhost.c``.

A simulated nccl-tests process whose environment names ``NCCL_TUNER_PLUGIN`` /
``NCCL_PROFILER_PLUGIN`` (as the live job script sets them) opens one :class:`PluginHost`
for its communicator. The C host loads the library, calls profiler init then tuner init,
per collective ``getCollInfo`` on the cost table (then NCCL's first-minimum scan), the Coll
profiler event, the kernel-channel events from its proxy thread, and finalize in NCCL's
order. It launches asynchronously, as NCCL does: a host clock (the plugin's CPU time in its
calls, NCCL's enqueue time, waits) and a stream clock (a kernel starts once the stream is
free and every rank launched it); kernel events reach the plugin when the host clock passes
the kernel's end, and an iteration's time is its GPU time plus the time the stream waited
for a launch (:meth:`PluginHost.times`). The latency each call is served stays with
:class:`~ncclbot_sweep.sim.process.SimProcess`.

What the plugin is told when R rank processes stand for a job of N ranks (the local
executor starts R <= 8 processes for an 8x8 = 64-rank job): ``nRanks = R`` and ``rank =``
the process index, since the coordinator waits for ``nRanks`` joins; ``nNodes`` is the
job's (NCCL's view, MNNVL cliques fused); the cost table and ``nBytes`` are the full job's
(``nBytes`` of AllGather/ReduceScatter is the whole N-rank buffer, as NCCL passes it).
The profiler's per-rank ``count`` is ``nBytes / (type size * R)`` for those two, so the
plugin, which multiplies it back by its ``nRanks``, joins the sample to the tuner's call.
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import os
from pathlib import Path

import numpy as np

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.names import COLLECTIVES, FULL_BUFFER_COLLECTIVES, Arm, all_arms
from ncclbot_sweep.sim.fabrics import HostTiming

__all__ = ["CommInfo", "HostError", "LogRecord", "PluginHost", "host_library", "plugin_paths"]

_ARMS = all_arms()  # index = algorithm * 3 + protocol, NCCL's table order
_LOG_CHUNK = 1 << 16
#: NCCL_DEBUG spellings as logger levels (reference 2: NONE 0, VERSION 1, WARN 2, INFO 3, TRACE 5).
_LEVELS = {"": 0, "NONE": 0, "VERSION": 1, "WARN": 2, "INFO": 3, "ABORT": 3, "TRACE": 5}


class HostError(RuntimeError):
    """NCCL's communicator init would fail (library missing, no plugin symbol, init error)."""


@dataclasses.dataclass(frozen=True)
class CommInfo:
    """What NCCL's side of the communicator tells the plugin (see the module docstring)."""

    comm_id: int
    nranks: int
    nnodes: int
    rank: int
    nvl_domains: int
    nvl_ranks: int
    debug_level: str = "WARN"
    name: str = "ncclbot-sim"
    #: The ``nranks`` rank processes launch each collective together, as a collective makes real
    #: ranks do (a barrier outside the timed plugin calls; ``plugin/host/simhost.c``, "coupling").
    couple: bool = False


@dataclasses.dataclass(frozen=True)
class LogRecord:
    """One message the plugin gave NCCL's logger."""

    level: int  # 2 WARN, 3 INFO
    flags: int
    where: str  # file:line
    message: str


class _Comm(C.Structure):
    _fields_ = [("comm_id", C.c_uint64), ("nranks", C.c_int), ("nnodes", C.c_int), ("rank", C.c_int),
                ("nvl_domains", C.c_int), ("nvl_min_ranks", C.c_int), ("nvl_max_ranks", C.c_int),
                ("log_level", C.c_int), ("constants", C.POINTER(C.c_double)), ("comm_name", C.c_char_p),
                ("couple", C.c_int)]


class _Timing(C.Structure):
    _fields_ = [("enqueue_ns", C.c_int64), ("events_ns", C.c_int64), ("rtt_ns", C.c_int64),
                ("queue_depth", C.c_int)]


class _Stats(C.Structure):
    _fields_ = [("calls", C.c_uint64), ("collectives", C.c_uint64), ("kernel_events", C.c_uint64),
                ("host_ns", C.c_uint64), ("proxy_ns", C.c_uint64), ("waits", C.c_uint64), ("wait_ns", C.c_int64),
                ("tuner_version", C.c_int), ("profiler_version", C.c_int)]


def plugin_paths(env: dict[str, str]) -> tuple[str | None, str | None]:
    """(tuner, profiler) libraries NCCL would load from this environment; None = not loaded.

    Unset, empty and ``none`` (NCCL 2.28+) load nothing: the simulator has no default plugin.
    """
    def one(name: str) -> str | None:
        value = env.get(name, "").strip()
        return None if value in ("", "none") else value
    return one("NCCL_TUNER_PLUGIN"), one("NCCL_PROFILER_PLUGIN")


def host_library(env: dict[str, str]) -> Path:
    """The compiled host: ``NCCLBOT_SIM_HOST_LIB``, else the build of the shipped sources (built on first use)."""
    override = env.get("NCCLBOT_SIM_HOST_LIB", "").strip()
    return Path(override) if override else pluginbuild.built_file(pluginbuild.SIM_HOST)


def _load(path: Path) -> C.CDLL:
    lib = C.CDLL(str(path))
    lib.nbh_open.restype = C.c_void_p
    lib.nbh_open.argtypes = [C.c_char_p, C.c_char_p, C.POINTER(_Comm), C.POINTER(_Timing), C.c_char_p, C.c_size_t]
    lib.nbh_choose.restype = C.c_int
    lib.nbh_choose.argtypes = [C.c_void_p, C.c_int, C.c_uint64, C.c_void_p, C.POINTER(C.c_int),
                               C.POINTER(C.c_int), C.POINTER(C.c_uint64)]
    lib.nbh_played.restype = C.c_uint64
    lib.nbh_played.argtypes = [C.c_void_p, C.c_int, C.c_uint64, C.c_char_p, C.c_int, C.c_int, C.c_double, C.c_int,
                               C.POINTER(C.c_uint64)]
    lib.nbh_times.restype = C.c_int
    lib.nbh_times.argtypes = [C.c_void_p, C.c_uint64, C.c_uint64, C.c_void_p, C.c_void_p]
    lib.nbh_compute.restype = C.c_uint64
    lib.nbh_compute.argtypes = [C.c_void_p, C.c_int64, C.c_int64]
    lib.nbh_clock.restype = C.c_int64
    lib.nbh_clock.argtypes = [C.c_void_p]
    lib.nbh_close.restype = C.c_int
    lib.nbh_close.argtypes = [C.c_void_p, C.POINTER(C.c_uint64), C.POINTER(_Stats)]
    lib.nbh_sync.restype = None
    lib.nbh_sync.argtypes = [C.c_void_p]
    lib.nbh_stats_get.restype = None
    lib.nbh_stats_get.argtypes = [C.c_void_p, C.POINTER(_Stats)]
    lib.nbh_log_take.restype = C.c_size_t
    lib.nbh_log_take.argtypes = [C.c_char_p, C.c_size_t]
    return lib


class PluginHost:
    """One communicator of one rank process, with the plugin loaded as NCCL loads it.

    Use :meth:`choose` then :meth:`played` for every collective call, :meth:`take_log` to
    collect what the plugin logged, :meth:`close` once. Not thread-safe (NCCL's user thread).
    """

    def __init__(self, comm: CommInfo, *, tuner: str | None, profiler: str | None, host_lib: Path,
                 constants: list[float] | None = None, timing: HostTiming = HostTiming()) -> None:
        self._lib = _load(host_lib)
        self.comm = comm
        self._constants = (C.c_double * 144)(*(constants or [0.0] * 144))
        info = _Comm(comm.comm_id, comm.nranks, comm.nnodes, comm.rank, comm.nvl_domains, comm.nvl_ranks,
                     comm.nvl_ranks, _LEVELS.get(comm.debug_level.upper(), 2), self._constants,
                     comm.name.encode(), int(comm.couple))
        clock = _Timing(round(timing.enqueue_us * 1000), round(timing.events_us * 1000),
                        round(timing.coordinator_rtt_us * 1000), timing.queue_depth)
        err = C.create_string_buffer(1024)
        handle = self._lib.nbh_open(_encode(tuner), _encode(profiler), C.byref(info), C.byref(clock), err, len(err))
        if not handle:
            raise HostError(err.value.decode(errors="replace") or "plugin host init failed")
        self._h: C.c_void_p | None = C.c_void_p(handle)
        self._final: dict[str, int] = {}
        self._arm, self._nch, self._ns = C.c_int(), C.c_int(), C.c_uint64()
        self._buf = C.create_string_buffer(_LOG_CHUNK)

    def choose(self, collective: str, n_bytes: int, table: np.ndarray) -> tuple[int, Arm | None, float]:
        """Deliver the kernel events due, then ``getCollInfo`` and NCCL's scan: (result code, arm
        played, the plugin's CPU us inside the call).

        ``table`` is the ``[7, 3]`` float32 cost table, C-contiguous (-1 unavailable).
        """
        self._ns.value = 0
        rc = self._lib.nbh_choose(self._h, COLLECTIVES.index(collective), n_bytes, table.ctypes.data,
                                  C.byref(self._arm), C.byref(self._nch), C.byref(self._ns))
        arm = _ARMS[self._arm.value] if self._arm.value >= 0 else None
        return rc, arm, self._ns.value / 1000.0

    def played(self, collective: str, n_bytes: int, *, elt: int, dtype: str, arm: Arm, channels: int,
               latency_us: float, replay: bool = False) -> int:
        """The call's Coll event and launch (GPU time ``latency_us``); its kernel's index.

        ``replay``: a CUDA graph's replay (no ``getCollInfo``; CUDA's host callback issues the
        Coll event on another thread).
        """
        count = n_bytes // elt
        if collective in FULL_BUFFER_COLLECTIVES:
            count //= self.comm.nranks
        return self._lib.nbh_played(self._h, COLLECTIVES.index(collective), count, dtype.encode(),
                                    arm.algorithm_index * 3 + arm.protocol_index, channels, latency_us,
                                    int(replay), C.byref(self._ns))

    def compute(self, *, host_us: float, gpu_us: float) -> None:
        """The application's work between collectives: the host busy for ``host_us`` (its launches
        included), then a kernel of ``gpu_us`` on the stream, which no profiler event reports and
        which starts without waiting for the other ranks (a workload's compute gap)."""
        self._lib.nbh_compute(self._h, round(host_us * 1000.0), round(gpu_us * 1000.0))

    def times(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(iteration times, stream idle before each) in us of kernels ``first`` .. ``first + count - 1``,
        as CUDA events on the stream measure them; call :meth:`sync` first."""
        times, idle = np.empty(count), np.empty(count)
        if self._lib.nbh_times(self._h, first, count, times.ctypes.data, idle.ctypes.data) != 0:
            raise RuntimeError(f"kernels {first}..{first + count - 1} are not known yet (sync first)")
        return times, idle

    def clock_us(self) -> float:
        """The host clock: simulated us since the communicator opened."""
        return self._lib.nbh_clock(self._h) / 1000.0

    def stats(self) -> dict[str, int]:
        """Counters of the C host (calls, collectives, kernel events, host and proxy ns, versions);
        after :meth:`close`, the final ones (every kernel event delivered)."""
        if self._h is None:
            return dict(self._final)
        out = _Stats()
        self._lib.nbh_stats_get(self._h, C.byref(out))
        return {name: getattr(out, name) for name, _type in _Stats._fields_}

    def take_log(self) -> list[LogRecord]:
        """Everything the plugin logged since the last call, oldest first."""
        records = []
        while True:
            n = self._lib.nbh_log_take(self._buf, len(self._buf))
            if n == 0:
                return records
            for line in self._buf.value.decode(errors="replace").splitlines():
                level, flags, where, message = (line.split(" ", 3) + ["", "", ""])[:4]
                if level.isdigit():
                    records.append(LogRecord(int(level), int(flags or "0", 16), where, message))

    def sync(self) -> None:
        """``cudaStreamSynchronize``: the host clock moves to the stream's last kernel end."""
        self._lib.nbh_sync(self._h)

    def close(self) -> float:
        """Finalize (tuner, then profiler) and unload; returns host us inside the finalizes."""
        if self._h is None:
            return 0.0
        ns, final = C.c_uint64(), _Stats()
        self._lib.nbh_close(self._h, C.byref(ns), C.byref(final))
        self._h = None
        self._final = {name: getattr(final, name) for name, _type in _Stats._fields_}
        return ns.value / 1000.0


def _encode(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)
