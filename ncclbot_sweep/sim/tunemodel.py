"""The simulated fabric's ``ncclTopoTuneModel``: graph parameters -> NCCL's init tuning table.

Written from ``docs/nccl-cost-model.md`` sections 2 and 3.1-3.4 with the
NCCL 2.30 constants (2.28.9+ latency table, 2.30 Blackwell caps). The table it returns is
unrounded; the simulator prints it with ``%8.1f/%6.1f`` and computes its costs from the
printed values (``TuningTable.as_printed``), exactly as the analysis does from the log.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ncclbot_sweep.costmodel import TuningTable, log2i
from ncclbot_sweep.names import (
    ALGORITHMS,
    COLLECTIVES,
    FULL_BUFFER_COLLECTIVES,
    NVLS_ALGORITHMS,
    PROTOCOLS,
    SIMPLE_ONLY_ALGORITHMS,
    collective_algorithms,
)

__all__ = ["Graph", "ModelSpec", "TunedModel", "tune_model", "tuner_constants"]

# Index helpers (NCCL order).
_LL, _LL128, _SIMPLE = range(3)
_NVLINK, _PCI, _NET = range(3)

# baseLat[algo][proto] (us), reference 2.2 (2.23+ values).
_BASE_LAT = {
    "Tree": (6.8, 14.0, 8.4),
    "Ring": (6.6, 14.0, 8.4),
    "CollNetDirect": (0.0, 0.0, 0.0),
    "CollNetChain": (0.0, 0.0, 0.0),
    "NVLS": (0.0, 0.0, 0.0),
    "NVLSTree": (0.0, 0.0, 0.0),
    "PAT": (8.0, 8.0, 8.0),
}
# hwLat[hw][algo][proto] (us), reference 2.3 (2.28.9+).
_HW_LAT = {
    _NVLINK: {
        "Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4), "CollNetDirect": (0.0, 0.0, 3.7),
        "CollNetChain": (0.0, 0.0, 2.8), "NVLS": (0.0, 0.0, 25.0), "NVLSTree": (0.0, 0.0, 25.0),
        "PAT": (0.0, 0.0, 4.0),
    },
    _PCI: {
        "Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7), "CollNetDirect": (0.0, 0.0, 3.7),
        "CollNetChain": (0.0, 0.0, 2.8), "NVLS": (0.0, 0.0, 0.0), "NVLSTree": (0.0, 0.0, 0.0),
        "PAT": (0.0, 0.0, 4.0),
    },
    _NET: {
        "Tree": (5.0, 8.5, 14.0), "Ring": (2.7, 4.0, 14.0), "CollNetDirect": (0.0, 0.0, 31.0),
        "CollNetChain": (0.0, 0.0, 30.0), "NVLS": (0.0, 0.0, 18.0), "NVLSTree": (0.0, 0.0, 20.9),
        "PAT": (0.0, 0.0, 14.0),
    },
}
# Bandwidth caps, rows = compute-capability index (0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell),
# columns = N1/N2/N4 (reference 2.4, 2.30 values).
_LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
_RING_LL128_BWS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
_TREE_LL128_BWS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
_NVLS_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
_NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)

# "Max NThreads" row of the printed table, per protocol (what an H100 build prints).
_MAX_THREADS = {"Tree": (512, 640, 512), "Ring": (512, 640, 512), "PAT": (0, 0, 512)}


@dataclasses.dataclass(frozen=True)
class Graph:
    """One algorithm's topology-search result (min-reduced over ranks), as NCCL logs it.

    ``bw_intra``/``bw_inter`` are GB/s per channel; ``nvl_intra`` says the intra path is
    direct NVLink (``PATH_NVL``), which selects NVLink rather than PCI latencies.
    """

    n_channels: int
    bw_intra: float
    bw_inter: float
    nvl_intra: bool = True
    same_channels: bool = False


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The NCCL-visible facts of a fabric that ``ncclTopoTuneModel`` consumes."""

    comp_cap: int  # e.g. 90 for H100, 100 for GB200
    graphs: dict[str, Graph]
    comm_channels: int  # runtime channels (ring plateau check, channel{Lo..Hi})
    nvls: bool = False
    collnet: bool = False
    pat_multi_gpu: bool = False
    ll128: bool = True
    amd_cpu: bool = False
    nvls_domain_nodes: int = 1  # nodes fused into one NCCL "node" (MNNVL clique)

    @property
    def comp_cap_index(self) -> int:
        return 0 if self.comp_cap < 80 else 1 if self.comp_cap < 90 else 2 if self.comp_cap < 100 else 3


@dataclasses.dataclass(frozen=True)
class TunedModel:
    """The init-time table of one communicator and what NCCL prints beside it."""

    table: TuningTable
    max_threads: np.ndarray  # [algorithm, protocol]
    nodes: int  # the model's node count (NVLink domains)
    ranks: int


def _enabled(spec: ModelSpec, coll: str, algo: str, proto: int, *, nodes: int, ranks: int) -> bool:
    """NCCL's enable rules after the table is built (reference 3.4); False -> bandwidth 0."""
    if algo in SIMPLE_ONLY_ALGORITHMS and proto != _SIMPLE:
        return False
    if proto == _LL128 and not spec.ll128:
        return False
    local_ranks = ranks // nodes
    if algo == "NVLSTree" and (nodes == 1 or not spec.nvls):
        return False
    if algo == "NVLS" and (not spec.nvls or (nodes > 1 and not spec.collnet)):
        return False
    if algo in NVLS_ALGORITHMS and coll != "AllReduce" and local_ranks > 32:
        return False
    if algo.startswith("CollNet") and not spec.collnet:
        return False
    if algo == "PAT" and not (nodes == ranks or spec.pat_multi_gpu):
        return False
    return True


_GRAPH_OF = {"PAT": "Tree", "NVLSTree": "NVLS", "CollNetChain": "CollNetDirect"}


def _graph(spec: ModelSpec, algo: str) -> Graph | None:
    """The graph an algorithm is tuned from: NVLSTree uses the NVLS graph, PAT the tree graph."""
    return spec.graphs.get(algo) or spec.graphs.get(_GRAPH_OF.get(algo, ""))


def _bandwidth(spec: ModelSpec, coll: str, algo: str, proto: int, *, nodes: int, ranks: int) -> float:
    """Stored algorithm bandwidth (reference 3.2 steps 1-5)."""
    graph = _graph(spec, algo)
    if graph is None or graph.n_channels == 0:
        return 0.0
    cc = spec.comp_cap_index
    n2 = nodes - 1 if nodes <= 2 else 2
    ll_row = cc if nodes == 1 else (1 if spec.amd_cpu else 0)
    ll_max = _LL_MAX_BWS[ll_row][n2]
    ppn = ranks / nodes
    n_ch = graph.n_channels
    bw = graph.bw_intra if nodes <= 2 or algo.startswith("CollNet") else graph.bw_inter
    if algo in NVLS_ALGORITHMS:
        if n_ch < 2:
            return 0.0
        intra = graph.bw_intra * _NVLS_EFFICIENCY[cc] * (n_ch - 1) / n_ch
        intra *= 2.0 if coll == "AllReduce" else (ppn - 1) / ppn
        inter = graph.bw_inter * (2.0 if nodes <= 2 and algo == "NVLSTree" else 1.0)
        bw = min(intra, inter)
        if algo == "NVLSTree":
            bw = min(bw, _NVLS_TREE_BWS[cc][n2])
    bus = n_ch * bw
    if algo == "Ring" and proto == _LL:
        bus = min(ll_max, 0.5 * bus)
    if algo == "Ring" and proto == _LL128:
        bus = min(0.92 * bus, n_ch * _RING_LL128_BWS[cc][n2])
    if algo == "Tree" and coll == "AllReduce":
        bus = min(0.92 * bus, n_ch * _TREE_BWS[cc][n2])
    if algo == "Tree" and proto == _LL:
        bus = min(bus / 3.8, ll_max)
    if algo == "Tree" and proto == _LL128:
        bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0), n_ch * _TREE_LL128_BWS[cc][n2])
    if algo == "PAT":
        bus *= 0.75
    if algo == "CollNetDirect" and proto == _SIMPLE:
        if coll in FULL_BUFFER_COLLECTIVES:
            bus = ppn * min(graph.bw_intra, 0.9 * graph.bw_inter)
        else:
            factor = ppn / n_ch
            factor -= (factor - 1) / 2
            bus /= factor
            if spec.comp_cap >= 90:
                bus *= 0.85
    if algo in ("NVLS", "CollNetDirect") and coll in FULL_BUFFER_COLLECTIVES and nodes > 1:
        bus = 0.0  # needs the CollNet plugin's iallgather/ireducescatter, not simulated
    if algo in ("Ring", "NVLS", "NVLSTree") and not (algo == "NVLS" and coll in FULL_BUFFER_COLLECTIVES):
        nsteps = _ring_steps(coll, ranks)
        bus *= ranks / nsteps if nsteps > 0 else 1.0
    elif algo in ("Tree", "CollNetDirect", "CollNetChain") and coll == "AllReduce":
        bus *= 0.5
    return bus


def _ring_steps(coll: str, ranks: int) -> int:
    """``nsteps`` of the bandwidth and latency formulas (reference 3.2-3.3): 2(n-1) for AllReduce,
    n-1 for AllGather and ReduceScatter, n for Broadcast and Reduce."""
    if coll == "AllReduce":
        return 2 * (ranks - 1)
    return ranks - 1 if coll in FULL_BUFFER_COLLECTIVES else ranks


def _latency(spec: ModelSpec, coll: str, algo: str, proto: int, *, nodes: int, ranks: int) -> float:
    """Latency in us (reference 3.3)."""
    graph = _graph(spec, algo) or Graph(0, 0.0, 0.0)
    intra_hw = _NVLINK if graph.nvl_intra else _PCI
    hw = intra_hw if nodes == 1 else _NET
    ppn = ranks / nodes
    lat = _BASE_LAT[algo][proto]
    intra_lat = _HW_LAT[intra_hw][algo][proto]
    inter_lat = _HW_LAT[_NET]["Tree" if ppn == 1 else algo][proto]
    if algo == "Ring":
        nsteps = _ring_steps(coll, ranks)
        if coll == "AllReduce" or coll in FULL_BUFFER_COLLECTIVES:
            overhead = 0.0 if nodes == 1 else (2.0 if spec.amd_cpu else 1.0)
            if proto == _SIMPLE:
                overhead *= 3
            intra_lat = max(intra_lat, overhead)
            inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "AllReduce" else nodes - 1)
            lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
        else:
            ring_lat = _HW_LAT[hw]["Ring"][proto]
            if graph.same_channels:
                lat += ring_lat
            else:
                lat += nsteps * (_HW_LAT[hw]["Tree"][_SIMPLE] if proto == _SIMPLE else ring_lat)
    elif algo == "Tree":
        lat += 2 * ((ranks // nodes - 1) * intra_lat + log2i(nodes) * inter_lat)
    elif algo == "CollNetDirect":
        lat += 2 * (min(1.0, ppn - 1) * intra_lat + (ppn - 1) * 0.4) + inter_lat
    elif algo == "CollNetChain":
        lat += 2 * (ppn - 1) * intra_lat + inter_lat
    elif algo == "NVLS":
        lat = intra_lat + (inter_lat if nodes > 1 else 0.0)
    elif algo == "NVLSTree":
        lat += intra_lat + 2 * log2i(nodes) * inter_lat
    elif algo == "PAT":
        lat += log2i(nodes) * inter_lat / 3.5 + ranks * 2.8
    return lat


def tune_model(spec: ModelSpec, *, nodes: int, ranks: int) -> TunedModel:
    """Build the communicator's tuning table for ``nodes`` physical nodes and ``ranks`` ranks.

    MNNVL cliques are fused first (``spec.nvls_domain_nodes`` nodes count as one), as
    NCCL does when it merges the topologies of an NVLink domain.
    """
    model_nodes = max(1, -(-nodes // spec.nvls_domain_nodes))
    shape = (len(COLLECTIVES), len(ALGORITHMS), len(PROTOCOLS))
    lat = np.zeros(shape)
    bw = np.zeros(shape)
    threads = np.zeros((len(ALGORITHMS), len(PROTOCOLS)), dtype=int)
    for c, coll in enumerate(COLLECTIVES):
        for a, algo in enumerate(ALGORITHMS):
            if algo not in collective_algorithms(coll):  # the cells ncclTopoTuneModel computes (ref. 3.1)
                continue
            for p in range(len(PROTOCOLS)):
                lat[c, a, p] = _latency(spec, coll, algo, p, nodes=model_nodes, ranks=ranks)
                if _enabled(spec, coll, algo, p, nodes=model_nodes, ranks=ranks):
                    bw[c, a, p] = _bandwidth(spec, coll, algo, p, nodes=model_nodes, ranks=ranks)
    for a, algo in enumerate(ALGORITHMS):
        row = _MAX_THREADS.get(algo, (0, 0, 640))
        if algo == "PAT" and not (model_nodes == ranks or spec.pat_multi_gpu):
            row = (0, 0, 0)
        threads[a] = row
    return TunedModel(TuningTable(lat, bw), threads, model_nodes, ranks)


def tuner_constants() -> list[float]:
    """NCCL's default ``ncclTunerConstants_v5`` as 144 doubles in struct order (reference 3.2).

    What the plugin host hands the tuner's init (NCCL passes ``comm->tunerConstants`` after
    ``ncclTopoInitTunerConstants``): the same tables this model tunes with.
    """
    values = [v for algo in ALGORITHMS for v in _BASE_LAT[algo]]
    values += [v for hw in (_NVLINK, _PCI, _NET) for algo in ALGORITHMS for v in _HW_LAT[hw][algo]]
    for table in (_LL_MAX_BWS, _RING_LL128_BWS, _TREE_LL128_BWS, _TREE_BWS, _NVLS_TREE_BWS):
        values += [v for row in table for v in row]
    return values
