"""The simulator and the planner agree on which arms a context offers, and every offered arm has physics.

With MNNVL, NCCL fuses an NVLink clique into one node, so the validity rules see NCCL's
nodes (``Inventory.nccl_view`` for planning, ``SimFabric.nccl_view`` in the simulator).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from ncclbot_sweep import names
from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim import fabric, fabric_names
from ncclbot_sweep.sim.nccltests import main
from ncclbot_sweep.sweep.inventory import load_inventory

A = Arm.parse
INVENTORIES = sorted((Path(__file__).resolve().parents[2] / "inventories").glob("sim-*.yaml"))
NODES = (1, 2, 4, 8, 16, 32)
SIZES = [0] + [2**k for k in range(0, 35)]  # 0 B, 1 B .. 16 GiB


def test_every_sim_fabric_has_an_inventory():
    assert sorted(p.stem for p in INVENTORIES) == fabric_names()


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.stem)
def test_planner_keeps_exactly_the_arms_the_simulator_runs(path):
    inventory = load_inventory(path)
    fab = fabric(inventory.name)
    for nodes in NODES:
        nccl_nodes, nccl_gpus = inventory.nccl_view(nodes)
        assert fab.nccl_view(nodes) == (nccl_nodes, nccl_gpus), nodes
        for coll in names.COLLECTIVES:
            kept, _pruned = names.prune_arms(coll, nodes=nccl_nodes, gpus_per_node=nccl_gpus,
                                             offer=inventory.offer())
            assert fab.valid_arms(coll, nodes) == kept, (coll, nodes)
            for arm in names.all_arms():
                assert (fab.invalid_reason(coll, arm, nodes) is None) == (arm in kept), (coll, nodes, arm)


@pytest.mark.parametrize("name", fabric_names())
def test_printed_table_zeroes_exactly_the_invalid_arms(name):
    fab = fabric(name)
    for nodes in NODES:
        table = fab.printed_table(nodes)
        for coll in names.COLLECTIVES:
            offered = [arm for arm in names.all_arms() if table.cell(coll, arm)[1] > 0.0]
            assert offered == fab.valid_arms(coll, nodes), (coll, nodes)


@pytest.mark.parametrize("name", fabric_names())
def test_every_valid_arm_has_ground_truth_physics(name):
    fab = fabric(name)
    for nodes in NODES:
        for coll in names.COLLECTIVES:
            arms = fab.valid_arms(coll, nodes)
            assert arms, (coll, nodes)
            for arm in arms:
                times = [fab.steady_latency_us(coll, nodes, arm, size) for size in SIZES]
                assert all(math.isfinite(t) and t > 0 for t in times), (coll, nodes, arm)
                assert all(b >= a for a, b in zip(times, times[1:])), (coll, nodes, arm)


def test_single_node_nvls_is_offered_for_every_nvls_collective():
    for name, nodes in (("sim-h100", 1), ("sim-gb200-mnnvl-on", 1), ("sim-gb200-mnnvl-on", 2)):
        fab = fabric(name)
        for coll in ("AllGather", "ReduceScatter", "AllReduce"):
            assert A("NVLS/Simple") in fab.valid_arms(coll, nodes), (name, nodes, coll)


def test_mnnvl_cliques_are_nccl_nodes_for_validity():
    on = fabric("sim-gb200-mnnvl-on")
    # 2 physical nodes = one 8-GPU clique = one NCCL node: single-node NVLS, no NVLSTree
    assert on.nccl_view(2) == (1, 8) and on.nccl_view(4) == (2, 8) and on.nccl_view(1) == (1, 4)
    assert on.invalid_reason("AllReduce", A("NVLS/Simple"), 2) is None
    assert "NVLSTree needs more than one node" in on.invalid_reason("AllReduce", A("NVLSTree/Simple"), 2)
    assert "MNNVL" in on.invalid_reason("AllReduce", A("NVLSTree/Simple"), 2)
    assert "needs CollNet" in on.invalid_reason("AllGather", A("NVLS/Simple"), 4)
    assert on.invalid_reason("AllReduce", A("NVLSTree/Simple"), 4) is None
    # without MNNVL the physical view holds: PAT with 4 GPUs per node (NCCL_PAT_ENABLE=1)
    off = fabric("sim-gb200-mnnvl-off")
    assert off.nccl_view(2) == (2, 4)
    assert A("PAT/Simple") in off.valid_arms("AllGather", 2)
    assert A("NVLSTree/Simple") not in off.valid_arms("AllReduce", 2)


def _run(binary: str, nodes: int, **env: str) -> int:
    base = {"SLURM_NNODES": str(nodes), "SLURM_NTASKS": str(4 * nodes), "NCCLBOT_SIM_FABRIC": "sim-gb200-mnnvl-on"}
    base.update(env)
    return main([f"/opt/nccl-tests/build/{binary}", "-b", "1M", "-e", "1M", "-w", "1", "-n", "2"],
                env=base, stdout=io.StringIO())


@pytest.mark.parametrize("binary", ["all_gather_perf", "reduce_scatter_perf", "all_reduce_perf"])
def test_binaries_run_single_nccl_node_nvls_on_a_two_node_clique(binary):
    assert _run(binary, 2, NCCL_ALGO="NVLS", NCCL_PROTO="Simple") == 0
    assert _run(binary, 4, NCCL_ALGO="NVLS", NCCL_PROTO="Simple") == 1  # two NCCL nodes, no CollNet


def test_binaries_run_nvlstree_only_across_cliques():
    assert _run("all_reduce_perf", 2, NCCL_ALGO="NVLSTree") == 1
    assert _run("all_reduce_perf", 4, NCCL_ALGO="NVLSTree") == 0
