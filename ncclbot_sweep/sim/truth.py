"""Ground-truth steady-state latency of the simulated fabric: the physics the cost model simplifies.

Each (collective, algorithm, protocol) is a pipeline of steps over NVLink and the network:

* **Ring**: ``nsteps`` synchronised steps. Every rank sends at once, so a step lasts as long
  as its slowest hop: a network hop plus a jitter term that grows with the ring
  (``a * (1 + g * log2(nodes))``; strongest for Simple, whose steps fence and go through the
  network proxy). NCCL's model instead charges the intra-node steps NVLink latency, so it
  underestimates large rings, and the bandwidth ramp of Simple moves to larger messages as
  the ring grows (paper Table 28), taking the LL128/Simple crossover with it.
* **Protocol efficiencies**: measured plateaus (LL above NCCL's ``llMaxBw`` cap, LL128 near
  95% of Simple, Simple at ~80% of the NIC aggregate) rather than NCCL's fixed factors.
* **Tree** (AllReduce): an intra-node chain plus a binary tree across nodes, with a pipeline
  fill of one chunk per stage (what NCCL's ``treeCorrectionFactor`` approximates).
* **NVLSTree** (AllReduce): NVLink SHARP inside nodes plus a tree across nodes, with small
  (64 KiB) chunks at scale that cost bandwidth and a long pipeline fill.

Times are microseconds, sizes bytes, bandwidths GB/s (1 GB/s = 1000 B/us).
"""

from __future__ import annotations

import dataclasses
import math

from ncclbot_sweep.names import Arm

__all__ = ["ProtoTruth", "TreeTruth", "TruthParams", "steady_latency_us"]


@dataclasses.dataclass(frozen=True)
class ProtoTruth:
    """Ring behaviour of one protocol.

    ``step_us``/``growth``: network-ring step time ``step_us * (1 + growth * log2(domains))``;
    ``nvl_step_us``: step time inside one NVLink domain; ``bus_gbs``/``nvl_bus_gbs``: bus
    bandwidth plateau across the network / inside a domain; ``base_us``: launch and sync.
    """

    base_us: float
    step_us: float
    growth: float
    nvl_step_us: float
    bus_gbs: float
    nvl_bus_gbs: float


@dataclasses.dataclass(frozen=True)
class TreeTruth:
    """A tree-shaped pipeline (Tree or NVLSTree AllReduce), one protocol.

    ``hop_us`` per network tree level, ``chain_us`` per intra-node hop, ``alg_gbs`` the
    algorithm-bandwidth plateau, ``chunk_bytes`` and ``channel_gbs`` the pipeline chunk and
    per-channel speed that set the fill time, ``channels`` how the message is split.
    """

    base_us: float
    hop_us: float
    chain_us: float
    alg_gbs: float
    chunk_bytes: int
    channel_gbs: float
    channels: int = 8


@dataclasses.dataclass(frozen=True)
class TruthParams:
    """The physical parameters of one fabric."""

    gpus_per_node: int
    domain_nodes: int  # nodes per NVLink domain (1 without MNNVL)
    ring: dict[str, ProtoTruth]
    tree: dict[str, TreeTruth]
    nvls_tree: TreeTruth | None = None
    # NVLink SHARP inside one NVLink domain (one NCCL node): AllReduce at nvls.alg_gbs,
    # AllGather/ReduceScatter at nvls_gather_gbs; NCCL offers it on one NCCL node only.
    nvls: TreeTruth | None = None
    nvls_gather_gbs: float = 0.0  # NVLS AllGather/ReduceScatter bandwidth (no faster than Ring)
    pat_step_us: float = 6.0
    pat_bus_gbs: float = 150.0
    pat_linear_us: float = 3.0  # per rank: PAT still walks every peer


def _ring_steps(collective: str, ranks: int) -> int:
    return 2 * (ranks - 1) if collective == "AllReduce" else ranks - 1


def _ring_us(params: TruthParams, collective: str, proto: str, nodes: int, ranks: int, size: int) -> float:
    truth = params.ring[proto]
    domains = max(1, -(-nodes // params.domain_nodes))
    if domains == 1:
        step, bus = truth.nvl_step_us, truth.nvl_bus_gbs
    else:
        step = truth.step_us * (1.0 + truth.growth * math.log2(domains))
        bus = truth.bus_gbs
    steps = max(1, _ring_steps(collective, ranks))
    if collective in ("Broadcast", "Reduce"):
        data = size / (1000.0 * bus)  # pipelined chunks: the whole buffer crosses each link once
    else:
        data = (steps / ranks) * size / (1000.0 * bus) if ranks > 1 else 0.0
    return truth.base_us + steps * step + data


def _tree_us(truth: TreeTruth, *, chain: int, node_chain: int, size: int, levels: int) -> float:
    """Latency of a tree pipeline: ``chain`` NVLink hops (``node_chain`` of them pipelined
    through one node's channels) and ``levels`` network tree levels, up and down."""
    stages = 2 * (node_chain + levels)
    fill_bytes = min(size / truth.channels, truth.chunk_bytes)
    fill = stages * fill_bytes / (1000.0 * truth.channel_gbs)
    latency = truth.base_us + 2.0 * (chain * truth.chain_us + levels * truth.hop_us)
    return latency + size / (1000.0 * truth.alg_gbs) + fill


def steady_latency_us(
    params: TruthParams, collective: str, arm: Arm, *, nodes: int, size_bytes: int, ranks: int | None = None
) -> float:
    """Steady-state (warm, noise-free) latency of one call; the mean the noise is drawn around.

    ``ranks`` defaults to full nodes; fewer ranks per node shorten rings and intra-node chains.
    Raises ``ValueError`` for an arm the fabric has no physics for (the caller checks
    validity first).
    """
    ranks = nodes * params.gpus_per_node if ranks is None else max(1, ranks)
    per_node = max(1, ranks // nodes)
    size = max(int(size_bytes), 0)
    domains = max(1, -(-nodes // params.domain_nodes))
    levels = max(0, math.ceil(math.log2(domains))) if domains > 1 else 0
    if arm.algorithm == "Ring":
        return _ring_us(params, collective, arm.protocol, nodes, ranks, size)
    if arm.algorithm == "Tree" and arm.protocol in params.tree:
        # Inside an NVLink domain the tree is a chain over every GPU of the domain.
        chain = min(ranks, per_node * min(nodes, params.domain_nodes)) - 1
        node_chain = min(chain, per_node - 1)
        return _tree_us(params.tree[arm.protocol], chain=chain, node_chain=node_chain, size=size, levels=levels)
    if arm.algorithm == "NVLSTree" and params.nvls_tree is not None:
        return _tree_us(params.nvls_tree, chain=0, node_chain=0, size=size, levels=max(levels, 1))
    if arm.algorithm == "NVLS" and params.nvls is not None:
        if collective == "AllReduce":
            return _tree_us(params.nvls, chain=0, node_chain=0, size=size, levels=0)
        gather = dataclasses.replace(params.nvls, alg_gbs=params.nvls_gather_gbs or params.nvls.alg_gbs)
        return _tree_us(gather, chain=0, node_chain=0, size=size, levels=0)
    if arm.algorithm == "PAT":
        steps = math.ceil(math.log2(max(ranks, 2)))
        return 8.0 + steps * params.pat_step_us + ranks * params.pat_linear_us + size / (1000.0 * params.pat_bus_gbs)
    raise ValueError(f"the simulated fabric has no physics for {arm} on {collective}")
