"""The simulated fabric as a Python object: its NCCL cost model and its ground truth.

The analysis uses this to check itself against the simulator (the cost table NCCL would
print, AUTO's choice, the true steady-state latency), and the nccl-tests stand-ins use it
to compute what they print. Costs always go through :mod:`ncclbot_sweep.costmodel` on the
table as NCCL prints it, so a table parsed from the simulator's log gives the same costs.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ncclbot_sweep import costmodel
from ncclbot_sweep.errors import did_you_mean
from ncclbot_sweep.names import COLLECTIVES, Arm, FabricOffer, all_arms, arm_invalid_reason, canonical_collective
from ncclbot_sweep.sim.fabrics import DEFAULT_FABRIC, FABRICS, FabricSpec
from ncclbot_sweep.sim.truth import steady_latency_us
from ncclbot_sweep.sim.tunemodel import TunedModel, tune_model

__all__ = ["SimFabric", "fabric", "fabric_for_env", "fabric_names"]

_ALL_ARMS = all_arms()


def fabric_names() -> list[str]:
    """The names of the simulated fabrics (``sim-h100``, ...)."""
    return sorted(FABRICS)


@functools.cache
def fabric(name: str = DEFAULT_FABRIC) -> SimFabric:
    """The simulated fabric called ``name``; raises ``ValueError`` listing the valid names."""
    try:
        return SimFabric(FABRICS[name])
    except KeyError:
        raise ValueError(f"simulated fabric must be one of {', '.join(fabric_names())}, but got {name!r}"
                         + did_you_mean(name, fabric_names())) from None


def fabric_for_env(name: str, env: dict[str, str]) -> SimFabric:
    """The fabric as a process with this environment sees it.

    Honours two NCCL switches the hardware cannot override: ``NCCL_NVLS_ENABLE=0`` removes
    NVLS and NVLSTree (no NVLS resources are allocated), and ``NCCL_MNNVL_ENABLE`` turns
    a GB200 fabric's multi-node NVLink on (``1``) or off (``0``).
    """
    mnnvl = env.get("NCCL_MNNVL_ENABLE", "").strip()
    twins = FABRICS[name].mnnvl_names if name in FABRICS else None
    if twins and mnnvl in ("0", "1"):
        name = twins[int(mnnvl)]
    nvls = env.get("NCCL_NVLS_ENABLE", "").strip() != "0"
    return fabric(name) if nvls else _without_nvls(name)


@functools.cache
def _without_nvls(name: str) -> SimFabric:
    spec = fabric(name).spec
    offer = dataclasses.replace(spec.offer, families=spec.offer.families - {"nvls"})
    return SimFabric(dataclasses.replace(
        spec,
        offer=offer,
        model_single=dataclasses.replace(spec.model_single, nvls=False),
        model_multi=dataclasses.replace(spec.model_multi, nvls=False),
    ))


class SimFabric:
    """One simulated fabric: offer, NCCL tuning model, cost tables and true latencies.

    Node counts are physical nodes; ranks default to ``nodes * gpus_per_node``. Validity is
    judged on NCCL's view of the job (:meth:`nccl_view`): with MNNVL every NVLink clique is
    one NCCL node, as ``Inventory.nccl_view`` has it for planning.
    """

    def __init__(self, spec: FabricSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def offer(self) -> FabricOffer:
        """What the fabric offers, for ``names.valid_arms`` and inventories."""
        return self.spec.offer

    @property
    def gpus_per_node(self) -> int:
        """GPUs per physical node."""
        return self.spec.gpus_per_node

    def ranks(self, nodes: int) -> int:
        return nodes * self.spec.gpus_per_node

    def nccl_view(self, nodes: int, ranks: int | None = None) -> tuple[int, int]:
        """(nodes, GPUs per node) as NCCL sees a job of ``nodes`` physical nodes.

        MNNVL fuses each NVLink clique (``spec.clique_nodes`` physical nodes) into one NCCL
        node, exactly as the tuning model does; without MNNVL this is the physical view. The
        arm validity rules (``names.arm_invalid_reason``) take these numbers.
        """
        nccl_nodes = max(1, -(-nodes // self.spec.clique_nodes))
        ranks = self.ranks(nodes) if ranks is None else max(1, ranks)
        return nccl_nodes, max(1, -(-ranks // nccl_nodes))

    def _rule_reason(self, collective: str, arm: Arm, nodes: int, ranks: int | None = None) -> str | None:
        """``names.arm_invalid_reason`` on NCCL's view of the job."""
        nccl_nodes, nccl_gpus = self.nccl_view(nodes, ranks)
        return arm_invalid_reason(collective, arm, nodes=nccl_nodes, gpus_per_node=nccl_gpus, offer=self.offer)

    @functools.lru_cache(maxsize=256)  # noqa: B019 - fabrics are module-level singletons
    def tuned(self, nodes: int, ranks: int | None = None) -> TunedModel:
        """NCCL's init-time tuning model of a communicator over ``nodes`` nodes."""
        ranks = self.ranks(nodes) if ranks is None else ranks
        tuned = tune_model(self.spec.model_spec(nodes), nodes=nodes, ranks=ranks)
        return self._without_unoffered(tuned, nodes)

    def _without_unoffered(self, tuned: TunedModel, nodes: int) -> TunedModel:
        """Zero the bandwidth of arms the fabric does not run at this scale.

        NCCL disables these by fabric facts the model spec does not carry (no CollNet/SHARP
        for multi-node NVLS, PAT on multi-GPU nodes); the printed table then shows 0.0 for
        them, so table, cost table and valid arms agree. The rules see NCCL's nodes (MNNVL
        cliques fused), not physical ones.
        """
        bandwidth = tuned.table.bandwidth_gbs.copy()
        for c, coll in enumerate(COLLECTIVES):
            for arm in _ALL_ARMS:
                if self._rule_reason(coll, arm, nodes, tuned.ranks):
                    bandwidth[c, arm.algorithm_index, arm.protocol_index] = 0.0
        table = costmodel.TuningTable(tuned.table.latency_us, bandwidth)
        return dataclasses.replace(tuned, table=table)

    def printed_table(self, nodes: int, ranks: int | None = None) -> costmodel.TuningTable:
        """The tuning table exactly as the simulator's NCCL log prints it."""
        return self.tuned(nodes, ranks).table.as_printed()

    def call_context(self, collective: str, nodes: int, size_bytes: int, ranks: int | None = None) -> costmodel.CallContext:
        """The per-call inputs of NCCL's cost formula for one nccl-tests call."""
        tuned = self.tuned(nodes, ranks)
        spec = self.spec.model_spec(nodes)
        return costmodel.CallContext(
            collective=collective,
            n_bytes=int(size_bytes),
            nodes=tuned.nodes,
            ranks=tuned.ranks,
            comm_channels=spec.comm_channels,
            min_comp_cap=self.spec.comp_cap,
            x86_cpu=self.spec.x86_cpu,
        )

    def cost_table(
        self, collective: str, nodes: int, size_bytes: int, *, ranks: int | None = None, allowed=None
    ) -> np.ndarray:
        """AUTO's cost table ``[algorithm, protocol]`` (us; -1 unavailable) for one context."""
        context = self.call_context(collective, nodes, size_bytes, ranks)
        return costmodel.cost_table(self.printed_table(nodes, ranks), context, allowed)

    def auto_arm(self, collective: str, nodes: int, size_bytes: int, *, ranks: int | None = None) -> Arm | None:
        """The arm NCCL's cost model picks (None if nothing is available)."""
        return costmodel.auto_arm(self.cost_table(collective, nodes, size_bytes, ranks=ranks))

    def valid_arms(self, collective: str, nodes: int, ranks: int | None = None) -> list[Arm]:
        """Arms that are valid by ``names`` rules (on NCCL's view of the nodes) and available
        in NCCL's table, in scan order."""
        coll = canonical_collective(collective)
        if coll not in COLLECTIVES:
            return []
        table = self.printed_table(nodes, ranks)
        arms = []
        for arm in _ALL_ARMS:
            if self._rule_reason(coll, arm, nodes, ranks):
                continue
            if table.cell(coll, arm)[1] > 0.0:
                arms.append(arm)
        return arms

    def invalid_reason(self, collective: str, arm: Arm, nodes: int, ranks: int | None = None) -> str | None:
        """Why forcing ``arm`` fails on this fabric and scale (None if it runs)."""
        coll = canonical_collective(collective)
        reason = self._rule_reason(coll, arm, nodes, ranks)
        if reason is None and self.printed_table(nodes, ranks).cell(coll, arm)[1] <= 0.0:
            reason = f"NCCL's tuning model disables {arm} for {coll} at {nodes} node(s)"
        nccl_nodes, nccl_gpus = self.nccl_view(nodes, ranks)
        if reason is not None and nccl_nodes != nodes:
            reason += f" (MNNVL: NCCL sees the {nodes} nodes as {nccl_nodes} node(s) of {nccl_gpus} GPUs)"
        return reason

    def best_arm(self, collective: str, nodes: int, size_bytes: int) -> Arm | None:
        """The truly fastest valid arm (lowest steady-state latency), what a sweep should find."""
        arms = self.valid_arms(collective, nodes)
        if not arms:
            return None
        return min(arms, key=lambda arm: self.steady_latency_us(collective, nodes, arm, size_bytes))

    def steady_latency_us(
        self, collective: str, nodes: int, arm: Arm, size_bytes: int, *, ranks: int | None = None
    ) -> float:
        """The true warm steady-state mean latency (us) of ``arm``; noise is drawn around it.

        ``ranks`` defaults to full nodes (``nodes * gpus_per_node``).
        """
        return steady_latency_us(self.spec.truth, canonical_collective(collective), arm, nodes=nodes,
                                 size_bytes=size_bytes, ranks=ranks)
