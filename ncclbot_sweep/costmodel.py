"""NCCL's per-call cost formula and AUTO's argmin, from a tuning table as NCCL prints it.

NCCL builds, once per communicator, a table of latencies (us) and algorithm bandwidths
(GB/s) per (collective, algorithm, protocol) (``ncclTopoTuneModel``) and prints it at
init with ``NCCL_DEBUG_SUBSYS=TUNING`` as ``%8.1f/%6.1f`` cells. Per call it turns the
table into a cost table (``ncclTopoGetAlgoTime``) and takes the argmin
(``topoGetAlgoInfo``). This module is that per-call part, written from
``docs/nccl-cost-model.md`` sections 2.5, 3.5 and 3.6:

    time_us = lat * latCount + nBytes / (1000 * bw)

with the tree correction factor (Tree AllReduce; NVLSTree AllReduce on Blackwell x86),
the ring "plateau" factor (Ring/Simple AllReduce across nodes) and ``latCount`` from the
number of pipelined operations. Entries whose bandwidth is 0 are unavailable (-1), and the
argmin scans algorithms 0..6 then protocols 0..2 with a strict ``<`` (ties go to the lower
index), skipping negative entries.

The simulator (``ncclbot_sweep.sim``) and the analysis both call this module on the
*printed* table values, so a cost table rebuilt from a parsed NCCL log reproduces the
simulator's exactly. It is a leaf: it imports only ``names`` and numpy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

import numpy as np

from ncclbot_sweep.names import ALGORITHMS, COLLECTIVES, PROTOCOLS, Arm, canonical_collective

__all__ = [
    "IGNORE",
    "TREE_CORRECTION_FACTOR",
    "CallContext",
    "TuningTable",
    "algo_time_us",
    "auto_arm",
    "cost_table",
    "log2i",
    "printed_value",
    "runner_up_margin",
]

#: Cost-table value of an unavailable entry (``NCCL_ALGO_PROTO_IGNORE``).
IGNORE = -1.0

#: ``treeCorrectionFactor[proto][log2i(nBytes >> 6)]`` (reference section 2.5): 24 columns,
#: 64 B .. 512 MiB; the 24th is reachable only by NVLSTree (Tree checks ``logSize < 23``).
TREE_CORRECTION_FACTOR: tuple[tuple[float, ...], ...] = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5,
     0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6,
     0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5,
     0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)

_TREE = ALGORITHMS.index("Tree")
_RING = ALGORITHMS.index("Ring")
_NVLS_TREE = ALGORITHMS.index("NVLSTree")
_SIMPLE = PROTOCOLS.index("Simple")
_ALLREDUCE = COLLECTIVES.index("AllReduce")
_SHAPE = (len(COLLECTIVES), len(ALGORITHMS), len(PROTOCOLS))


def log2i(value: int) -> int:
    """NCCL's ``log2i``: floor of log2 for a positive integer, -1 for 0 or less."""
    return int(value).bit_length() - 1 if value > 0 else -1


def printed_value(value: float) -> float:
    """The number NCCL's ``%.1f`` prints for ``value``, read back as a float.

    The simulator feeds its cost model these rounded values, so a table parsed from the
    log gives the same costs bit for bit.
    """
    return float(f"{value:.1f}")


@dataclasses.dataclass(frozen=True)
class TuningTable:
    """Latency (us) and algorithm bandwidth (GB/s) per (collective, algorithm, protocol).

    Arrays are indexed ``[collective, algorithm, protocol]`` in NCCL's index order
    (``names.COLLECTIVES``, ``names.ALGORITHMS``, ``names.PROTOCOLS``). A bandwidth of 0
    marks an unavailable entry, as in NCCL's printed table.
    """

    latency_us: np.ndarray
    bandwidth_gbs: np.ndarray

    def __post_init__(self) -> None:
        for name in ("latency_us", "bandwidth_gbs"):
            array = np.asarray(getattr(self, name), dtype=float)
            if array.shape != _SHAPE:
                raise ValueError(f"{name} must have shape {_SHAPE}, but got {array.shape}")
            array = array.copy()
            array.flags.writeable = False
            object.__setattr__(self, name, array)

    @classmethod
    def empty(cls) -> TuningTable:
        """A table with every entry unavailable (0.0/0.0)."""
        return cls(np.zeros(_SHAPE), np.zeros(_SHAPE))

    @classmethod
    def from_cells(cls, cells: Mapping[tuple[str, Arm | str], tuple[float, float]]) -> TuningTable:
        """Build a table from ``{(collective, arm): (latency_us, bandwidth_gbs)}``.

        This is how the analysis rebuilds a table from parsed ``tuning_tables`` rows;
        cells not given are unavailable.
        """
        lat = np.zeros(_SHAPE)
        bw = np.zeros(_SHAPE)
        for (collective, arm), (latency, bandwidth) in cells.items():
            arm = arm if isinstance(arm, Arm) else Arm.parse(arm)
            index = (COLLECTIVES.index(canonical_collective(collective)), arm.algorithm_index, arm.protocol_index)
            lat[index] = latency
            bw[index] = bandwidth
        return cls(lat, bw)

    def cell(self, collective: str, arm: Arm) -> tuple[float, float]:
        """``(latency_us, bandwidth_gbs)`` of one entry."""
        index = (COLLECTIVES.index(canonical_collective(collective)), arm.algorithm_index, arm.protocol_index)
        return float(self.latency_us[index]), float(self.bandwidth_gbs[index])

    def as_printed(self) -> TuningTable:
        """The table as NCCL prints it (each value rounded like ``%.1f``)."""
        rounded = np.vectorize(printed_value, otypes=[float])
        return TuningTable(rounded(self.latency_us), rounded(self.bandwidth_gbs))


@dataclasses.dataclass(frozen=True)
class CallContext:
    """What ``ncclTopoGetAlgoTime`` needs about one call besides the table.

    ``nodes`` is the model's node count (NVLink domains: an MNNVL clique counts as one),
    ``n_bytes`` the nccl-tests ``size`` (the full buffer for AllGather/ReduceScatter),
    ``comm_channels`` the communicator's runtime channel count (only the ring plateau
    check uses it), ``num_pipe_ops`` the number of aggregated operations (1 for nccl-tests),
    ``max_batch_colls`` ``NCCL_MAX_DEV_WORK_BATCH_COLLS`` (8 in 2.30, 10 in 2.23-2.29).
    """

    collective: str
    n_bytes: int
    nodes: int
    ranks: int
    comm_channels: int
    num_pipe_ops: int = 1
    min_comp_cap: int = 90
    x86_cpu: bool = True
    max_batch_colls: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "collective", canonical_collective(self.collective))
        if self.collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, but got {self.collective!r}")
        for name in ("nodes", "ranks", "comm_channels", "num_pipe_ops"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, but got {getattr(self, name)}")
        if self.n_bytes < 0:
            raise ValueError(f"n_bytes must be non-negative, but got {self.n_bytes}")


def algo_time_us(table: TuningTable, context: CallContext, arm: Arm) -> float:
    """NCCL's predicted time (us) of one call on ``arm``, or ``IGNORE`` if unavailable.

    Follows ``ncclTopoGetAlgoTime`` (reference section 3.5): corrections apply to the
    bandwidth (tree) and latency (ring plateau) before ``lat * latCount + nBytes/(1000*bw)``.
    """
    coll = COLLECTIVES.index(context.collective)
    algo, proto = arm.algorithm_index, arm.protocol_index
    bw = float(table.bandwidth_gbs[coll, algo, proto])
    lat = float(table.latency_us[coll, algo, proto])
    if bw <= 0.0:
        return IGNORE
    log_size = log2i(context.n_bytes >> 6)
    if coll == _ALLREDUCE and algo == _TREE and 0 <= log_size < 23:
        bw *= TREE_CORRECTION_FACTOR[proto][log_size]
    if (
        coll == _ALLREDUCE
        and algo == _NVLS_TREE
        and 0 <= log_size < 24
        and context.min_comp_cap >= 100
        and context.x86_cpu
    ):
        bw *= TREE_CORRECTION_FACTOR[proto][log_size]
    if (
        algo == _RING
        and proto == _SIMPLE
        and context.nodes > 1
        and coll == _ALLREDUCE
        and context.n_bytes / (context.comm_channels * context.ranks) >= 64
    ):
        lat *= 1.4 if context.min_comp_cap >= 80 else 1.9
    if algo == _RING:
        lat_count = context.num_pipe_ops
    else:
        lat_count = math.ceil(context.num_pipe_ops / context.max_batch_colls)
    return lat * lat_count + context.n_bytes / (1000.0 * bw)


def cost_table(table: TuningTable, context: CallContext, allowed: Iterable[Arm] | None = None) -> np.ndarray:
    """The per-call cost table ``[algorithm, protocol]`` in us, ``IGNORE`` where unavailable.

    ``allowed`` restricts the arms (what ``NCCL_ALGO``/``NCCL_PROTO`` or a validity rule
    leaves); every other entry stays ``IGNORE``, as ``initCollCostTable`` leaves it.
    """
    costs = np.full((len(ALGORITHMS), len(PROTOCOLS)), IGNORE)
    arms = [Arm(a, p) for a in ALGORITHMS for p in PROTOCOLS] if allowed is None else list(allowed)
    for arm in arms:
        costs[arm.algorithm_index, arm.protocol_index] = algo_time_us(table, context, arm)
    return costs


def auto_arm(costs: np.ndarray) -> Arm | None:
    """AUTO's choice: the argmin over entries >= 0, ties to the lowest (algorithm, protocol).

    Returns None when no entry is available (NCCL then fails the call).
    """
    best: tuple[int, int] | None = None
    best_time = math.inf
    for algo in range(costs.shape[0]):
        for proto in range(costs.shape[1]):
            value = float(costs[algo, proto])
            if value >= 0.0 and value < best_time:
                best_time = value
                best = (algo, proto)
    return None if best is None else Arm.from_indices(*best)


def runner_up_margin(costs: np.ndarray) -> float:
    """The predicted runner-up margin ``mu(2)/mu(1) - 1`` (paper Figure 13); inf with one arm."""
    values = np.sort(costs[costs >= 0.0].ravel())
    if values.size < 2:
        return math.inf
    if values[0] <= 0.0:
        return math.inf if values[1] > 0.0 else 0.0
    return float(values[1] / values[0] - 1.0)
