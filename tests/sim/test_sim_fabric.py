"""Physical properties of the simulated fabrics and the realism target of the cost model."""

from __future__ import annotations

import numpy as np
import pytest

from ncclbot_sweep import costmodel
from ncclbot_sweep.names import Arm, valid_arms
from ncclbot_sweep.sim import fabric, fabric_names
from ncclbot_sweep.sim.sweep import forced_arm_pools

A = Arm.parse
PAPER_SIZES = [512 * 2**i for i in range(26)]  # 512 B .. 16 GiB
PAPER_NODES = (4, 8, 16, 32)
PAPER_COLLECTIVES = ("AllGather", "AllReduce", "ReduceScatter")


@pytest.mark.parametrize("name", fabric_names())
def test_steady_latency_is_non_decreasing_in_size_for_every_arm(name):
    fab = fabric(name)
    for coll in ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"):
        for nodes in (1, 2, 4, 16, 32):
            for arm in fab.valid_arms(coll, nodes):
                times = [fab.steady_latency_us(coll, nodes, arm, s) for s in [0] + PAPER_SIZES]
                assert all(b >= a for a, b in zip(times, times[1:])), (coll, nodes, arm)
                assert times[1] > 0


def _crossover(fab, coll, nodes, low: Arm, high: Arm) -> int:
    """Smallest paper size from which ``high`` is truly faster than ``low``."""
    for size in PAPER_SIZES:
        if fab.steady_latency_us(coll, nodes, high, size) < fab.steady_latency_us(coll, nodes, low, size):
            return size
    return 2 * PAPER_SIZES[-1]


@pytest.mark.parametrize("coll", ["AllGather", "ReduceScatter"])
def test_protocol_crossovers_exist_and_move_to_larger_sizes_with_scale(coll):
    fab = fabric("sim-h100")
    for low, high in ((A("Ring/LL"), A("Ring/LL128")), (A("Ring/LL128"), A("Ring/Simple"))):
        points = [_crossover(fab, coll, n, low, high) for n in PAPER_NODES]
        assert all(p <= PAPER_SIZES[-1] for p in points), (low, high, points)
        assert points == sorted(points) and points[0] < points[-1], (low, high, points)


def test_simple_ramp_moves_with_the_ring_like_table_28():
    # Paper Table 28: Ring/Simple reaches ~320 GB/s bus bandwidth at 4-8 nodes, and at a fixed
    # size its bus bandwidth falls as the ring grows, while LL128 holds up better.
    fab = fabric("sim-h100")

    def busbw(nodes, arm, size):
        ranks = fab.ranks(nodes)
        return size * (ranks - 1) / ranks / fab.steady_latency_us("AllGather", nodes, arm, size) / 1000.0

    simple = [busbw(n, A("Ring/Simple"), 128 << 20) for n in PAPER_NODES]
    ll128 = [busbw(n, A("Ring/LL128"), 128 << 20) for n in PAPER_NODES]
    assert simple == sorted(simple, reverse=True)
    assert all(l_ > s for l_, s in zip(ll128, simple))
    assert 280 < busbw(4, A("Ring/Simple"), 16 << 30) < 330


def test_h100_arm_set_is_the_papers():
    fab = fabric("sim-h100")
    ring = ["Ring/LL", "Ring/LL128", "Ring/Simple"]
    for nodes in PAPER_NODES:
        assert [str(a) for a in fab.valid_arms("AllGather", nodes)] == ring
        assert [str(a) for a in fab.valid_arms("AllReduce", nodes)] == ["Tree/LL", "Tree/LL128", "Tree/Simple",
                                                                       *ring, "NVLSTree/Simple"]
        # the simulator's set is the names rules' set for the fabric's offer
        assert fab.valid_arms("AllReduce", nodes) == valid_arms("AllReduce", nodes=nodes, gpus_per_node=8,
                                                                offer=fab.offer)


def _audit(name: str):
    """AUTO against the measured-best arm (steady mean of iterations 11-99 of 100) on the paper sweep."""
    fab = fabric(name)
    rows = []
    for coll in PAPER_COLLECTIVES:
        for nodes in PAPER_NODES:
            arms = fab.valid_arms(coll, nodes)
            pools = {arm: forced_arm_pools(fab, coll, nodes, arm, PAPER_SIZES, iters=100, warmup=5) for arm in arms}
            for size in PAPER_SIZES:
                steady = {arm: float(pools[arm][size][11:100].mean()) for arm in arms}
                costs = fab.cost_table(coll, nodes, size)
                auto = costmodel.auto_arm(costs)
                best = min(steady, key=steady.get)
                rows.append((coll, nodes, size, auto, best, steady[auto] / steady[best] - 1,
                             costmodel.runner_up_margin(costs)))
    return rows


@pytest.fixture(scope="module")
def h100_audit():
    return _audit("sim-h100")


def test_auto_is_exact_on_most_contexts_and_badly_wrong_on_a_few(h100_audit):
    exact = np.mean([auto == best for *_, auto, best, _loss, _m in h100_audit])
    losses = np.array([loss for *_, loss, _m in h100_audit])
    assert 0.70 <= exact <= 0.90, exact
    assert (losses > 0.10).sum() >= 5  # several
    assert 1 <= (losses > 0.50).sum() <= 12  # a few
    assert losses.mean() < 0.10


def test_misses_are_crossovers_with_a_close_runner_up(h100_audit):
    tail = [(coll, auto, best, m) for coll, _n, _s, auto, best, loss, m in h100_audit if loss > 0.10]
    margins = np.array([m for *_, m in tail])
    assert np.median(margins) < 0.5
    # the tail mixes protocol crossovers (same algorithm) and algorithm crossovers
    assert any(a.algorithm == b.algorithm and a.protocol != b.protocol for _c, a, b, _m in tail)
    assert any(a.algorithm != b.algorithm for _c, a, b, _m in tail)
    # and it spans every collective of the sweep
    assert {c for c, *_ in tail} == set(PAPER_COLLECTIVES)


@pytest.mark.parametrize("name", ["sim-gb200-mnnvl-on", "sim-gb200-mnnvl-off"])
def test_gb200_fabrics_have_an_auto_tail_too(name):
    fab = fabric(name)
    exact, total, bad = 0, 0, 0
    for coll in PAPER_COLLECTIVES:
        for nodes in PAPER_NODES:
            arms = fab.valid_arms(coll, nodes)
            for size in PAPER_SIZES[::3]:
                truth = {arm: fab.steady_latency_us(coll, nodes, arm, size) for arm in arms}
                auto = fab.auto_arm(coll, nodes, size)
                assert auto in truth
                best = min(truth, key=truth.get)
                total += 1
                exact += auto == best
                bad += truth[auto] / truth[best] > 1.1
    assert 0.6 < exact / total < 1.0 and bad >= 1


def test_gb200_arm_sets():
    on, off = fabric("sim-gb200-mnnvl-on"), fabric("sim-gb200-mnnvl-off")
    assert A("NVLSTree/Simple") in on.valid_arms("AllReduce", 32)
    assert A("PAT/Simple") in off.valid_arms("AllGather", 16)
    assert A("PAT/Simple") not in on.valid_arms("AllGather", 16)
    assert on.gpus_per_node == off.gpus_per_node == 4
    # MNNVL fuses each 2-node NVLink clique into one NCCL node
    assert on.tuned(16).nodes == 8 and off.tuned(16).nodes == 16 and on.tuned(2).nodes == 1
    assert A("NVLSTree/Simple") in on.valid_arms("AllReduce", 4)  # as on the paper's GB200 sweep


def test_unknown_fabric_lists_the_valid_names():
    with pytest.raises(ValueError, match="sim-h100"):
        fabric("sim-a100")


def test_best_arm_is_the_argmin_of_the_truth_and_differs_from_auto_somewhere():
    fab = fabric("sim-h100")
    differ = 0
    for size in PAPER_SIZES:
        best = fab.best_arm("AllGather", 16, size)
        truth = {a: fab.steady_latency_us("AllGather", 16, a, size) for a in fab.valid_arms("AllGather", 16)}
        assert truth[best] == min(truth.values())
        differ += best != fab.auto_arm("AllGather", 16, size)
    assert 0 < differ < len(PAPER_SIZES) // 2
    assert fab.best_arm("AlltoAll", 4, 1024) is None


def test_fewer_ranks_per_node_shorten_rings_and_chains():
    fab = fabric("sim-h100")
    for arm in (A("Ring/LL"), A("Tree/LL")):
        full = fab.steady_latency_us("AllReduce", 4, arm, 4096)
        half = fab.steady_latency_us("AllReduce", 4, arm, 4096, ranks=16)
        assert half < full
    assert fab.steady_latency_us("AllReduce", 4, A("Ring/LL"), 4096, ranks=32) == fab.steady_latency_us(
        "AllReduce", 4, A("Ring/LL"), 4096)


def test_nccl_mnnvl_enable_switches_between_the_gb200_twins_and_leaves_others_alone():
    from ncclbot_sweep.sim import fabric_for_env

    for name in ("sim-gb200-mnnvl-on", "sim-gb200-mnnvl-off"):
        assert fabric_for_env(name, {"NCCL_MNNVL_ENABLE": "0"}).name == "sim-gb200-mnnvl-off"
        assert fabric_for_env(name, {"NCCL_MNNVL_ENABLE": "1"}).name == "sim-gb200-mnnvl-on"
        assert fabric_for_env(name, {}).name == name
    assert fabric_for_env("sim-h100", {"NCCL_MNNVL_ENABLE": "1"}).name == "sim-h100"
    assert fabric_for_env("sim-h100", {"NCCL_NVLS_ENABLE": "0"}).offer.families == {"tree", "ring"}
