"""Cost-model prior: cost tables aligned to pools; tuning tables through NCCL's formula."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import CallParams, load_prior, predictions_from_cost_tables, predictions_from_tuning_tables
from ncclbot_sweep.sim.fabric import fabric

from .simpools import sim_frames

NODES = (2, 4, 16)


def _tuning_rows(fab, nodes):
    rows = []
    for n in nodes:
        table = fab.printed_table(n)
        for coll in ("AllGather", "AllReduce", "ReduceScatter"):
            for arm in fab.valid_arms(coll, n):
                lat, bw = table.cell(coll, arm)
                rows.append(dict(run_id=f"run-{n}", fabric=fab.name, collective=coll, nodes=n, ranks=fab.ranks(n),
                                 arm=str(arm), latency_us=lat, algbw_gbs=bw, nccl_version="2.30.4"))
    return pd.DataFrame(rows)


def test_derived_predictions_equal_the_simulators_cost_table():
    fab = fabric("sim-h100")
    it, cost = sim_frames(nodes=NODES, sizes=(1024, 1 << 16, 1 << 22, 1 << 26, 1 << 30), iters=3)
    pools = build_pools(it, min_arms=2)

    def params(_fabric, nodes, ranks):
        ctx = fab.call_context("AllReduce", nodes, 1, ranks)
        return CallParams(comm_channels=ctx.comm_channels, comp_cap=ctx.min_comp_cap, model_nodes=ctx.nodes)

    derived = predictions_from_tuning_tables(pools, _tuning_rows(fab, NODES), params=params)
    direct = predictions_from_cost_tables(pools, cost)
    assert np.isfinite(direct).sum() > 100
    np.testing.assert_array_equal(np.isnan(derived), np.isnan(direct))
    np.testing.assert_array_equal(derived[np.isfinite(derived)], direct[np.isfinite(direct)])


def test_cost_tables_first_tuning_tables_fill_gaps():
    fab = fabric("sim-h100")
    it, cost = sim_frames(nodes=(2, 4), sizes=(1 << 20,), iters=3)
    pools = build_pools(it, min_arms=2)
    partial = cost[cost["nodes"] == 2].assign(predicted_us=lambda d: d["predicted_us"] * 2)
    pred = load_prior(pools, cost_tables=partial, tuning_tables=_tuning_rows(fab, (2, 4)))
    direct = predictions_from_cost_tables(pools, cost)
    at2 = (pools.contexts["nodes"] == 2).to_numpy()
    np.testing.assert_allclose(pred[at2], 2 * direct[at2])
    np.testing.assert_allclose(pred[~at2], direct[~at2])


def test_duplicate_cost_rows_are_averaged_and_unknown_contexts_ignored():
    it = pd.DataFrame([dict(fabric="f", collective="AllReduce", nodes=1, ranks=8, size_bytes=64, arm=a, iteration=1,
                            time_us=1.0) for a in ("Ring/LL", "Tree/LL")])
    pools = build_pools(it)
    cost = pd.DataFrame([dict(fabric="f", collective="AllReduce", nodes=1, ranks=8, size_bytes=64, arm="ring/ll",
                              predicted_us=v) for v in (2.0, 4.0)]
                        + [dict(fabric="f", collective="AllReduce", nodes=9, ranks=8, size_bytes=64, arm="Tree/LL",
                                predicted_us=1.0)])
    pred = predictions_from_cost_tables(pools, cost)
    assert pools.arms == ("Tree/LL", "Ring/LL")
    assert np.isnan(pred[0, 0]) and pred[0, 1] == 3.0


def test_call_facts_from_runs_and_choices_reproduce_gb200():
    from ncclbot_sweep.analysis.prior import call_params_from_runs

    fab = fabric("sim-gb200-mnnvl-off")
    nodes = (2, 4, 16)
    it, cost = sim_frames(fab.name, nodes=nodes, sizes=(1 << 12, 1 << 20, 1 << 26, 1 << 30), iters=3)
    pools = build_pools(it, min_arms=2)
    runs = pd.DataFrame([dict(fabric=fab.name, nodes=n, ranks=fab.ranks(n), gpu_name=fab.spec.gpu_name) for n in nodes])
    choices = pd.DataFrame([dict(fabric=fab.name, nodes=n, ranks=fab.ranks(n),
                                 channels=fab.call_context("AllReduce", n, 1).comm_channels) for n in nodes])
    params = call_params_from_runs(runs, choices)
    assert params(fab.name, 4, fab.ranks(4)).x86_cpu is False and params(fab.name, 4, fab.ranks(4)).comp_cap == 100
    derived = predictions_from_tuning_tables(pools, _tuning_rows(fab, nodes), params=params)
    direct = predictions_from_cost_tables(pools, cost)
    np.testing.assert_array_equal(derived, direct)
