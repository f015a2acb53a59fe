"""The three simulated fabrics: what NCCL sees (graphs, constants) and what the hardware does.

* ``sim-h100``: 8 x H100 SXM per node, NVLink 4 (NVSwitch), 8 x 400G RoCE (Spectrum-X) per
  node; NVLS and NVLSTree available; the paper's primary sweep fabric.
* ``sim-gb200-mnnvl-on``: 4 x GB200 per node in NVL72 racks whose NVLink is partitioned into
  cliques of 2 nodes (8 GPUs); NCCL fuses a clique into one node, so a job of N nodes is
  tuned as N/2 NVLink nodes joined by the network.
* ``sim-gb200-mnnvl-off``: the same nodes with MNNVL disabled: NVLink inside a node only,
  4 x 400G per node; PAT enabled for multi-GPU nodes.

Graph values follow ``docs/nccl-cost-model.md`` section 2.1 and 5 (H100 single
node: ring/tree 12 ch x 30, NVLS 8 x 40/60; multi-node: 8 ch x 48 on 8 NICs).
"""

from __future__ import annotations

import dataclasses

from ncclbot_sweep.names import FabricOffer
from ncclbot_sweep.sim.truth import ProtoTruth, TreeTruth, TruthParams
from ncclbot_sweep.sim.tunemodel import Graph, ModelSpec

__all__ = ["FABRICS", "FabricSpec", "DEFAULT_FABRIC", "HostTiming"]

DEFAULT_FABRIC = "sim-h100"


@dataclasses.dataclass(frozen=True)
class HostTiming:
    """What the host side of a launch costs (modelling assumptions, not measurements).

    NCCL's enqueue of one collective (task preparation, the kernel launch, the proxy
    upload) is a few microseconds of host time; the proxy thread reports a kernel's
    channel events one polling pass after the kernel ends; the coordinator merges a
    round one TCP round trip across the cluster after the last rank's sample; CUDA lets
    a stream hold about 1,024 pending launches before ``cudaLaunchKernel`` blocks.
    """

    enqueue_us: float = 5.0
    events_us: float = 3.0
    coordinator_rtt_us: float = 40.0
    queue_depth: int = 1024


@dataclasses.dataclass(frozen=True)
class FabricSpec:
    """Everything the simulator knows about one fabric."""

    name: str
    gpus_per_node: int
    gpu_name: str
    comp_cap: int
    offer: FabricOffer
    model_single: ModelSpec  # what NCCL sees on one node (or one NVLink domain)
    model_multi: ModelSpec  # ... across nodes
    truth: TruthParams
    nccl_version: str = "2.30.4"
    cuda_version: str = "12.9"
    nvls_stall_s: tuple[float, float] = (5.7, 7.8)
    x86_cpu: bool = True  # Grace (ARM) hosts skip NCCL's x86-only NVLSTree correction
    host: HostTiming = HostTiming()  # what launching costs the host (asynchronous launch)
    #: The same racks with multi-node NVLink off and on (``NCCL_MNNVL_ENABLE=0``/``1``); None
    #: where NCCL_MNNVL_ENABLE changes nothing.
    mnnvl_names: tuple[str, str] | None = None

    @property
    def nccl_version_code(self) -> int:
        major, minor, patch = (int(x) for x in self.nccl_version.split("."))
        return major * 10000 + minor * 100 + patch

    @property
    def clique_nodes(self) -> int:
        """Physical nodes NCCL fuses into one topology node (the MNNVL clique; 1 without MNNVL)."""
        return self.model_multi.nvls_domain_nodes

    def model_spec(self, nodes: int) -> ModelSpec:
        """The NCCL-visible spec for a job of ``nodes`` nodes."""
        return self.model_single if nodes <= self.clique_nodes else self.model_multi


def _h100() -> FabricSpec:
    single = ModelSpec(
        comp_cap=90,
        graphs={
            "Ring": Graph(12, 30.0, 30.0),
            "Tree": Graph(12, 30.0, 30.0),
            "NVLS": Graph(8, 40.0, 60.0),
            "NVLSTree": Graph(8, 40.0, 60.0),
        },
        comm_channels=24,
        nvls=True,
    )
    multi = dataclasses.replace(
        single,
        graphs={
            "Ring": Graph(8, 48.0, 48.0),
            "Tree": Graph(8, 48.0, 48.0),
            "NVLS": Graph(8, 40.0, 45.0),
            "NVLSTree": Graph(8, 40.0, 45.0),
        },
        comm_channels=16,
    )
    truth = TruthParams(
        gpus_per_node=8,
        domain_nodes=1,
        ring={
            "LL": ProtoTruth(base_us=5.0, step_us=1.1, growth=0.15, nvl_step_us=0.7, bus_gbs=30.0, nvl_bus_gbs=150.0),
            "LL128": ProtoTruth(base_us=9.0, step_us=1.9, growth=0.25, nvl_step_us=1.5, bus_gbs=305.0, nvl_bus_gbs=330.0),
            "Simple": ProtoTruth(base_us=10.0, step_us=2.03, growth=1.375, nvl_step_us=3.0, bus_gbs=325.0, nvl_bus_gbs=365.0),
        },
        tree={
            "LL": TreeTruth(base_us=6.0, hop_us=4.5, chain_us=0.6, alg_gbs=12.0, chunk_bytes=8192, channel_gbs=6.0),
            "LL128": TreeTruth(base_us=12.0, hop_us=7.5, chain_us=1.2, alg_gbs=118.0, chunk_bytes=65536, channel_gbs=32.0),
            "Simple": TreeTruth(base_us=9.0, hop_us=13.0, chain_us=3.5, alg_gbs=150.0, chunk_bytes=524288, channel_gbs=40.0),
        },
        nvls_tree=TreeTruth(base_us=31.0, hop_us=17.0, chain_us=0.0, alg_gbs=150.0, chunk_bytes=65536, channel_gbs=2.5),
        nvls=TreeTruth(base_us=22.0, hop_us=0.0, chain_us=0.0, alg_gbs=268.0, chunk_bytes=131072, channel_gbs=20.0),
        nvls_gather_gbs=230.0,
    )
    return FabricSpec(
        name="sim-h100",
        gpus_per_node=8,
        gpu_name="NVIDIA H100 80GB HBM3",
        comp_cap=90,
        offer=FabricOffer(families=frozenset({"tree", "ring", "nvls"})),
        model_single=single,
        model_multi=multi,
        truth=truth,
    )


#: Nodes per MNNVL clique (IMEX partition) of the GB200 fabric. The NVL72 rack is cut into
#: 8-GPU cliques, as the paper's GB200 sweep implies: NVLSTree was offered from 4 nodes up,
#: which NCCL allows only when the job spans more than one (fused) NVLink node.
_MNNVL_CLIQUE_NODES = 2


def _gb200(mnnvl: bool) -> FabricSpec:
    domain = _MNNVL_CLIQUE_NODES if mnnvl else 1
    single = ModelSpec(
        comp_cap=100,
        graphs={
            "Ring": Graph(16, 45.0, 45.0),
            "Tree": Graph(16, 45.0, 45.0),
            "NVLS": Graph(16, 40.0, 80.0),
            "NVLSTree": Graph(16, 40.0, 80.0),
        },
        comm_channels=32,
        nvls=mnnvl,
        nvls_domain_nodes=domain,
    )
    multi = dataclasses.replace(
        single,
        graphs={
            "Ring": Graph(4, 48.0, 48.0),
            "Tree": Graph(4, 48.0, 48.0),
            "NVLS": Graph(16, 40.0, 48.0),
            "NVLSTree": Graph(16, 40.0, 48.0),
        },
        comm_channels=16,
        pat_multi_gpu=not mnnvl,
    )
    single = dataclasses.replace(single, pat_multi_gpu=not mnnvl)
    nvl_ring = {
        "LL": ProtoTruth(base_us=5.0, step_us=1.1, growth=0.15, nvl_step_us=0.55, bus_gbs=30.0, nvl_bus_gbs=260.0),
        "LL128": ProtoTruth(base_us=9.0, step_us=2.0, growth=0.3, nvl_step_us=1.1, bus_gbs=165.0, nvl_bus_gbs=600.0),
        "Simple": ProtoTruth(base_us=10.0, step_us=2.4, growth=1.1, nvl_step_us=2.6, bus_gbs=180.0, nvl_bus_gbs=700.0),
    }
    truth = TruthParams(
        gpus_per_node=4,
        domain_nodes=domain,
        ring=nvl_ring,
        tree={
            "LL": TreeTruth(base_us=6.0, hop_us=4.5, chain_us=0.6, alg_gbs=12.0, chunk_bytes=8192, channel_gbs=6.0),
            "LL128": TreeTruth(base_us=12.0, hop_us=7.0, chain_us=1.0, alg_gbs=80.0, chunk_bytes=65536, channel_gbs=20.0),
            "Simple": TreeTruth(base_us=9.0, hop_us=12.0, chain_us=3.0, alg_gbs=95.0, chunk_bytes=524288, channel_gbs=40.0),
        },
        nvls_tree=(
            TreeTruth(base_us=31.0, hop_us=15.0, chain_us=0.0, alg_gbs=300.0, chunk_bytes=131072, channel_gbs=12.0)
            if mnnvl
            else None
        ),
        nvls=(
            TreeTruth(base_us=24.0, hop_us=0.0, chain_us=0.0, alg_gbs=460.0, chunk_bytes=131072, channel_gbs=30.0)
            if mnnvl
            else None
        ),
        nvls_gather_gbs=400.0,
        pat_step_us=5.0,
        pat_bus_gbs=120.0,
    )
    families = {"tree", "ring", "nvls"} if mnnvl else {"tree", "ring", "pat"}
    names = ("sim-gb200-mnnvl-off", "sim-gb200-mnnvl-on")
    return FabricSpec(
        name=names[mnnvl],
        mnnvl_names=names,
        x86_cpu=False,
        gpus_per_node=4,
        gpu_name="NVIDIA GB200",
        comp_cap=100,
        offer=FabricOffer(families=frozenset(families), pat_multi_gpu=not mnnvl),
        model_single=single,
        model_multi=multi,
        truth=truth,
    )


FABRICS: dict[str, FabricSpec] = {spec.name: spec for spec in (_h100(), _gb200(True), _gb200(False))}
