"""Per-call behaviour of a simulated process: noise, lazy-connection transient, NVLS stall, seeds."""

from __future__ import annotations

import numpy as np

from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim import SimProcess, fabric
from ncclbot_sweep.sim.process import TRANSIENT_CALLS
from ncclbot_sweep.sim.sweep import forced_arm_pools

A = Arm.parse
H100 = fabric("sim-h100")


def _relative(pool: np.ndarray) -> np.ndarray:
    return pool / np.median(pool[20:])


def test_transient_is_heavy_tailed_and_gone_after_about_ten_calls():
    sizes = [1 << k for k in range(12, 30, 2)]
    rel = []
    for coll, arm in (("AllGather", "Ring/LL128"), ("AllReduce", "Tree/LL128"), ("ReduceScatter", "Ring/Simple")):
        pools = forced_arm_pools(H100, coll, 8, A(arm), sizes, iters=100, warmup=0)
        rel.extend(_relative(pools[s][1:]) for s in sizes[1:])  # skip the first call (connection set-up)
    rel = np.array(rel)
    early, steady = rel[:, :9].mean(), rel[:, 11:].mean()
    assert early > 1.08 * steady  # the transient segment is clearly elevated (paper: ~1.13x)
    assert abs(steady - 1.0) < 0.01
    assert rel[:, :9].max() > 1.5  # heavy tail
    assert np.abs(np.median(rel[:, 12:], axis=0) - 1.0).max() < 0.02  # no drift after the transient


def test_transient_counts_per_arm_and_size_and_in_place_is_warm():
    proc = SimProcess(H100, nodes=4, seed=7)
    first = proc.run("AllGather", A("Ring/LL"), 1 << 20, TRANSIENT_CALLS)
    warm = proc.run("AllGather", A("Ring/LL"), 1 << 20, 200)
    assert first[1:].mean() > warm.mean() * 1.05
    assert abs(warm.mean() / H100.steady_latency_us("AllGather", 4, A("Ring/LL"), 1 << 20) - 1) < 0.02
    again = proc.run("AllGather", A("Ring/LL"), 1 << 22, 5)  # a new size warms up again
    steady = H100.steady_latency_us("AllGather", 4, A("Ring/LL"), 1 << 22)
    assert again[1:].mean() > steady * 1.05


def test_nvls_stall_hits_the_first_nvls_call_of_a_process_once():
    for seed in (1, 2):
        proc = SimProcess(H100, nodes=8, seed=seed)
        ring = proc.run("AllReduce", A("Ring/LL"), 1 << 20, 3)
        assert ring.max() < 1e5
        first = proc.run("AllReduce", A("NVLSTree/Simple"), 1 << 20, 3)
        assert 5.7e6 <= first[0] <= 7.9e6
        assert first[1:].max() < 1e4
        later = proc.run("AllReduce", A("NVLSTree/Simple"), 1 << 24, 3)
        assert later.max() < 1e5


def test_first_use_of_an_algorithm_pays_the_connection_once():
    proc = SimProcess(H100, nodes=4, seed=3)
    a = proc.run("AllReduce", A("Tree/LL"), 4096, 2)
    b = proc.run("AllReduce", A("Tree/LL128"), 4096, 2)  # same algorithm: already connected
    steady = H100.steady_latency_us("AllReduce", 4, A("Tree/LL"), 4096)
    assert a[0] > steady + 500
    assert b[0] < a[0]


def test_same_seed_same_numbers_different_seed_different_numbers():
    def draw(seed):
        proc = SimProcess(H100, nodes=16, seed=seed)
        return proc.run("AllGather", A("Ring/Simple"), 1 << 26, 50)

    np.testing.assert_array_equal(draw(11), draw(11))
    assert not np.array_equal(draw(11), draw(12))
    p1 = forced_arm_pools(H100, "AllReduce", 4, A("Ring/LL"), [1024, 2048], iters=10)
    p2 = forced_arm_pools(H100, "AllReduce", 4, A("Ring/LL"), [1024, 2048], iters=10)
    np.testing.assert_array_equal(p1[1024], p2[1024])


def test_noise_is_small_on_large_messages_and_wider_on_small_ones():
    proc = SimProcess(H100, nodes=4, seed=5)
    proc.run("AllGather", A("Ring/LL128"), 512, 20)
    proc.run("AllGather", A("Ring/LL128"), 1 << 30, 20)
    small = proc.run("AllGather", A("Ring/LL128"), 512, 400)
    large = proc.run("AllGather", A("Ring/LL128"), 1 << 30, 400)
    cv = lambda x: np.std(x) / np.mean(x)  # noqa: E731
    assert cv(large) < 0.05 < 1.0
    assert cv(small) > cv(large)
