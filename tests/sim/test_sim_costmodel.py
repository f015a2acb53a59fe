"""The shared cost formula and the simulated fabric's tuning model against the reference anchors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ncclbot_sweep import costmodel
from ncclbot_sweep.costmodel import IGNORE, CallContext, TuningTable, algo_time_us, auto_arm, cost_table
from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim import fabric

A = Arm.parse


def _cell(fab, coll, arm, nodes):
    return fab.tuned(nodes).table.cell(coll, A(arm))


# Reference section 5.1: H100, 8 GPUs per node, non-AMD CPU, built-in IB, 2.28.9+ constants.
@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (2, {"Tree/LL": 25.2, "Tree/LL128": 48.5, "Tree/Simple": 92.4, "Ring/LL": 40.0, "Ring/LL128": 75.2,
             "Ring/Simple": 131.6, "NVLSTree/Simple": 66.8}),
        (16, {"Tree/LL": 55.2, "Tree/LL128": 99.5, "Tree/Simple": 176.4, "Ring/LL": 311.6, "Ring/LL128": 559.6,
              "Ring/Simple": 1190.0, "NVLSTree/Simple": 192.2}),
        (128, {"Tree/LL": 85.2, "Tree/LL128": 150.5, "Tree/Simple": 260.4, "Ring/LL": 2484.4, "Ring/LL128": 4434.8,
               "Ring/Simple": 9657.2, "NVLSTree/Simple": 317.6}),
    ],
)
def test_multi_node_allreduce_latencies_match_the_reference(nodes, expected):
    fab = fabric("sim-h100")
    for arm, latency in expected.items():
        assert _cell(fab, "AllReduce", arm, nodes)[0] == pytest.approx(latency, abs=0.05), arm


@pytest.mark.parametrize(("nodes", "expected"), [(2, (23.3, 44.6, 70.0)), (16, (159.1, 286.8, 599.2)),
                                                 (128, (1245.5, 2224.4, 4832.8))])
def test_multi_node_allgather_ring_latencies_match_the_reference(nodes, expected):
    fab = fabric("sim-h100")
    for proto, latency in zip(("LL", "LL128", "Simple"), expected):
        assert _cell(fab, "AllGather", f"Ring/{proto}", nodes)[0] == pytest.approx(latency, abs=0.05)


def test_single_node_h100_table_matches_the_reference():
    fab = fabric("sim-h100")
    expected_ar = {"Ring/LL": (15.0, 80.6), "Ring/LL128": (40.6, 189.3), "Ring/Simple": (56.0, 205.7),
                   "Tree/LL": (15.2, None), "NVLS/Simple": (25.0, 272.0)}
    for arm, (lat, bw) in expected_ar.items():
        got_lat, got_bw = fab.printed_table(1).cell("AllReduce", A(arm))
        assert got_lat == pytest.approx(lat, abs=0.05), arm
        if bw is not None:
            assert got_bw == pytest.approx(bw, abs=0.05), arm
    assert fab.printed_table(1).cell("AllGather", A("NVLS/Simple"))[1] == pytest.approx(208.2, abs=0.05)
    assert fab.printed_table(1).cell("AllGather", A("Ring/Simple")) == pytest.approx((32.2, 411.4), abs=0.05)


def test_issue_1453_tree_ll_latency_anchor():
    # 3 nodes x 8 H100: 6.8 + 2 * (7 * 0.6 + log2i(3) * 5.0) = 25.2 us
    assert _cell(fabric("sim-h100"), "AllReduce", "Tree/LL", 3)[0] == pytest.approx(25.2, abs=1e-9)


def _table(lat, bw, coll="AllReduce", arm="Ring/Simple"):
    return TuningTable.from_cells({(coll, arm): (lat, bw)})


def test_time_is_latency_plus_bytes_over_bandwidth():
    ctx = CallContext("AllGather", n_bytes=1_000_000, nodes=4, ranks=32, comm_channels=16)
    table = _table(10.0, 100.0, "AllGather", "Ring/LL128")
    assert algo_time_us(table, ctx, A("Ring/LL128")) == pytest.approx(10.0 + 1_000_000 / 100_000)
    assert algo_time_us(table, ctx, A("Ring/Simple")) == IGNORE


def test_tree_correction_factor_scales_bandwidth_by_size_bucket():
    table = _table(0.0, 100.0, "AllReduce", "Tree/LL")
    for n_bytes, factor in ((64, 1.0), (1 << 16, 0.6), (1 << 17, 0.5), (1 << 19, 0.4), (1 << 30, 1.0)):
        ctx = CallContext("AllReduce", n_bytes=n_bytes, nodes=2, ranks=16, comm_channels=16)
        assert algo_time_us(table, ctx, A("Tree/LL")) == pytest.approx(n_bytes / (100_000 * factor))
    # AllGather has no tree correction (and Tree has no AllGather in NCCL anyway).
    assert costmodel.log2i(0) == -1 and costmodel.log2i(1) == 0 and costmodel.log2i(1023) == 9


def test_ring_plateau_applies_to_multi_node_simple_allreduce_only():
    table = TuningTable.from_cells({("AllReduce", "Ring/Simple"): (100.0, 1e9), ("AllGather", "Ring/Simple"): (100.0, 1e9)})
    big = CallContext("AllReduce", n_bytes=1 << 24, nodes=2, ranks=16, comm_channels=16)
    small = CallContext("AllReduce", n_bytes=1 << 10, nodes=2, ranks=16, comm_channels=16)
    one_node = CallContext("AllReduce", n_bytes=1 << 24, nodes=1, ranks=8, comm_channels=16)
    ag = CallContext("AllGather", n_bytes=1 << 24, nodes=2, ranks=16, comm_channels=16)
    assert algo_time_us(table, big, A("Ring/Simple")) == pytest.approx(140.0, abs=1e-3)
    assert algo_time_us(table, small, A("Ring/Simple")) == pytest.approx(100.0, abs=1e-3)
    assert algo_time_us(table, one_node, A("Ring/Simple")) == pytest.approx(100.0, abs=1e-3)
    assert algo_time_us(table, ag, A("Ring/Simple")) == pytest.approx(100.0, abs=1e-3)


def test_lat_count_uses_batches_except_for_ring():
    table = TuningTable.from_cells({("AllReduce", "Ring/LL"): (10.0, 1e12), ("AllReduce", "Tree/LL"): (10.0, 1e12)})
    ctx = CallContext("AllReduce", n_bytes=64, nodes=1, ranks=8, comm_channels=16, num_pipe_ops=9, max_batch_colls=8)
    assert algo_time_us(table, ctx, A("Ring/LL")) == pytest.approx(90.0, abs=1e-6)
    assert algo_time_us(table, ctx, A("Tree/LL")) == pytest.approx(20.0, abs=1e-6)


def test_argmin_skips_unavailable_and_ties_go_to_the_lower_index():
    costs = np.full((7, 3), IGNORE)
    assert auto_arm(costs) is None
    costs[1, 2] = 5.0  # Ring/Simple
    costs[0, 1] = 5.0  # Tree/LL128, same time, lower index
    costs[5, 2] = -1.0
    assert auto_arm(costs) == A("Tree/LL128")
    costs[1, 0] = 4.999
    assert auto_arm(costs) == A("Ring/LL")
    assert costmodel.runner_up_margin(costs) == pytest.approx(5.0 / 4.999 - 1)


def test_printed_table_reproduces_the_simulators_cost_table_exactly():
    fab = fabric("sim-h100")
    printed = fab.printed_table(16)
    cells = {}
    for c, coll in enumerate(("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")):
        for arm in costmodel_arms():
            lat, bw = printed.cell(coll, arm)
            # what a log parser sees: the %8.1f/%6.1f text read back
            cells[(coll, arm)] = (float(f"{lat:8.1f}"), float(f"{bw:6.1f}"))
    rebuilt = TuningTable.from_cells(cells)
    for size in (512, 1 << 20, 1 << 27, 1 << 34):
        ctx = fab.call_context("AllReduce", 16, size)
        np.testing.assert_array_equal(cost_table(rebuilt, ctx), fab.cost_table("AllReduce", 16, size))


def costmodel_arms():
    from ncclbot_sweep.names import all_arms

    return all_arms()


def test_table_shape_is_checked():
    with pytest.raises(ValueError, match="shape"):
        TuningTable(np.zeros((5, 7)), np.zeros((5, 7, 3)))
    with pytest.raises(ValueError, match="at least 1"):
        CallContext("AllReduce", n_bytes=1, nodes=0, ranks=8, comm_channels=1)
    assert math.isinf(costmodel.runner_up_margin(np.array([[1.0, -1.0]])))
