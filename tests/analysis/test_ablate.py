"""``analyze ablate``: each ablation reproduces its defining property on a small simulated sweep.

The sweep is run without a warm-up, so iteration 0 of every NVLS process holds the simulator's
multi-second first-use stall, which the pools drop and the toll ablation measures.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.inputs import load_first_calls, load_problem
from ncclbot_sweep.analysis.policies import make_policy
from ncclbot_sweep.analysis.replay import make_problem, run_policy
from ncclbot_sweep.analysis.study import ablations, gates, nvls
from ncclbot_sweep.analysis.study.ablate import ABLATIONS, run_ablations, select_ablations
from ncclbot_sweep.analysis.study.drift import SwapEnvironment, drift
from ncclbot_sweep.analysis.study.harness import AblateOptions, Harness, resolve_policies
from ncclbot_sweep.analysis.summary import per_context, summarize
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.sim.fabric import fabric

from .simpools import write_sim_dataset

SIZES = tuple(2**k for k in range(12, 29, 2))  # 4 KiB .. 256 MiB
OPTIONS = AblateOptions(horizon=40, seeds=2, visits=(40, 160), horizons=(20, 40), dilutions=(1, 4, 16),
                        dilution_horizon=40, discounts=(0.9, 1.0), gains=(0.2,), drift_seeds=2)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablate") / "dataset"
    return write_sim_dataset(root, collectives=("AllGather", "AllReduce"), nodes=(2, 4, 8), sizes=SIZES, iters=30,
                             warmup=0)


@pytest.fixture(scope="module")
def harness(dataset, tmp_path_factory):
    return Harness(load_problem(dataset), OPTIONS, resolve_policies(), load_first_calls(dataset),
                   figures=tmp_path_factory.mktemp("figures"))


def _row(table, column, value):
    return table[table[column] == value].iloc[0]


def _test_scores(h, policy, **replay):
    return summarize(h.replay([policy], **replay), threshold=OPTIONS.threshold).iloc[0]


def test_size_gate_at_zero_is_the_learner_and_at_infinity_is_auto(harness):
    table = gates.size_gate(harness).tables["size-gate"]
    none, everywhere = _row(table, "threshold_bytes", 0), _row(table, "threshold_bytes", np.inf)
    learner, auto = _test_scores(harness, harness.featured()), _test_scores(harness, make_policy("AUTO"))
    assert none["test_mean_pct"] == pytest.approx(learner["realized_mean_pct"])
    assert none["test_p99_pct"] == pytest.approx(learner["realized_p99_pct"]) and none["to_bandit_pct"] == 100
    assert everywhere["test_mean_pct"] == pytest.approx(auto["realized_mean_pct"]) and everywhere["to_bandit_pct"] == 0
    assert (table["chosen"] == "*").sum() == 1
    chosen = table.loc[table["chosen"] == "*", "train_selection_pct"].item()
    assert chosen == table["train_selection_pct"].min(), "the threshold is chosen on train"
    share = [(harness.problem.contexts["size_bytes"][harness.test()] >= g).mean() * 100 for g in OPTIONS.gates]
    assert table["to_bandit_pct"].tolist() == pytest.approx(share)


def test_hybrid_at_tau_zero_is_auto_and_at_infinity_the_learner(harness):
    section = gates.hybrid(harness)
    table = section.tables["hybrid"]
    zero, never = _row(table, "tau", 0.0), _row(table, "tau", np.inf)
    learner, auto = _test_scores(harness, harness.featured()), _test_scores(harness, make_policy("AUTO"))
    assert zero["test_mean_pct"] == pytest.approx(auto["realized_mean_pct"]) and zero["to_bandit_pct"] == 0
    assert never["test_mean_pct"] == pytest.approx(learner["realized_mean_pct"]) and never["to_bandit_pct"] == 100
    assert table["to_bandit_pct"].is_monotonic_increasing
    curve = section.tables["hybrid-gate"]
    assert curve["kept_pct"].iloc[0] == 100 and curve["kept_pct"].is_monotonic_decreasing
    assert section.figures[0].is_file() and section.figures[0].with_suffix(".csv").is_file()


def test_gated_policy_takes_each_context_from_exactly_one_side():
    auto, learner = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    sizes, margins = np.array([1024, 1 << 20, 1 << 30]), np.array([0.0, 0.4, np.inf])
    assert gates.gated(auto, learner, gates.size_mask(sizes, 1 << 20)).tolist() == [1.0, 20.0, 30.0]
    assert gates.gated(auto, learner, gates.size_mask(sizes, 0)).tolist() == [10.0, 20.0, 30.0]
    assert gates.gated(auto, learner, gates.size_mask(sizes, np.inf)).tolist() == [1.0, 2.0, 3.0]
    assert gates.gated(auto, learner, gates.margin_mask(margins, 0.3)).tolist() == [10.0, 2.0, 3.0]
    assert gates.gated(auto, learner, gates.margin_mask(margins, np.inf)).tolist() == [10.0, 20.0, 30.0]


def test_dilution_one_equals_the_undiluted_replay_and_larger_k_learns_slower(harness):
    table = ablations.dilution(harness).tables["dilution"]
    plain = per_context(harness.replay([harness.featured()], horizon=OPTIONS.dilution_horizon), part=None)
    one = _row(table, "k", 1)
    assert one["mean_pct"] == pytest.approx(100 * plain["trlt_realized"].mean())
    assert one["sync_rounds"] == OPTIONS.dilution_horizon
    assert _row(table, "k", 16)["sync_rounds"] == OPTIONS.dilution_horizon // 16
    assert _row(table, "k", 16)["mean_pct"] != one["mean_pct"], "holding rewards back changes what is learned"


def test_live_rules_default_row_is_the_delayed_replay_and_the_rules_change_it(harness):
    table = ablations.live_rules(harness).tables["live-rules"]
    featured = harness.featured()
    delayed = per_context(harness.replay([featured], horizon=OPTIONS.dilution_horizon, dilution=16, lag=1), part=None)
    rows = table[(table["policy"] == featured.display_name) & table["delayed"]].set_index("rules")
    assert rows.loc["gate and hold (default)", "mean_pct"] == pytest.approx(100 * delayed["trlt_realized"].mean())
    assert rows.loc["no hold", "mean_pct"] != rows.loc["gate and hold (default)", "mean_pct"], "the hold acted on nothing"
    undelayed = table[(table["policy"] == featured.display_name) & ~table["delayed"]].set_index("rules")
    assert set(undelayed.index) == {"gate and hold (default)", "no gate"}


def test_filter_off_never_drops_an_arm(harness):
    problem = harness.problem
    off = make_problem(problem.pools, problem.predicted, rho_max=np.inf)
    assert (off.offered == off.pools.measured).all()
    assert (problem.offered <= off.offered).all() and (problem.offered < off.offered).any()
    table = ablations.arm_filter(harness).tables["filter"]
    test = harness.test()
    row = _row(table, "filter", "off")
    assert row["K_mean"] == pytest.approx(problem.pools.measured.sum(axis=1)[test].mean())
    assert row["best_offered_pct"] == 100
    assert _row(table, "filter", "on (rho_max=2)")["K_mean"] < row["K_mean"]


def test_warm_cold_toggles_only_the_prior_and_says_when_no_cold_study_exists(harness):
    section = ablations.warm_cold(harness)
    table = section.tables["warm-cold"]
    assert list(table["family"]) == ["UCB1", "Softmax", "KL-UCB"]
    cold = _test_scores(harness, make_policy("UCB1", pseudo_count=0.0))
    ucb1 = _row(table, "family", "UCB1")
    assert ucb1["cold_mean_pct"] == pytest.approx(cold["realized_mean_pct"])
    assert ucb1["delta_pp"] == pytest.approx(ucb1["warm_mean_pct"] - ucb1["cold_mean_pct"])
    assert "cold_tuned_mean_pct" not in table
    assert any("analyze tune --cold" in n for n in section.notes) and any("default settings" in n for n in section.notes)


def test_warm_cold_with_a_cold_tuned_study(dataset, harness, tmp_path):
    cold = tmp_path / "cold"
    result = CliRunner().invoke(main, ["analyze", "tune", "--dataset", str(dataset), "--out", str(cold), "--cold",
                                       "--families", "UCB1", "--trials", "2", "--horizon", "20"])
    assert result.exit_code == 0, result.output
    h = Harness(harness.problem, OPTIONS, resolve_policies(cold_study=cold, specs=["UCB1"]))
    table = ablations.warm_cold(h).tables["warm-cold"]
    spec = h.policies.cold_tuned["UCB1"]
    assert "pseudo_count=0.0" in spec
    tuned = _test_scores(h, spec)
    assert table["cold_tuned_mean_pct"].item() == pytest.approx(tuned["realized_mean_pct"])


def test_nvls_toll_is_measured_from_iteration_0_and_charged_once(harness):
    section = nvls.nvls_toll(harness)
    table = section.tables["nvls-toll"]
    stall, _ = nvls.measured_stall(harness.problem, harness.first_calls)
    low, high = fabric("sim-h100").spec.nvls_stall_s
    assert low * 1e6 <= stall <= high * 1e6 + 50e3, "the simulator's stall plus the channel set-up"
    assert any(f"{stall / 1e6:.2f} s" in n for n in section.notes)
    auto = _test_scores(harness, make_policy("AUTO"))
    assert _row(table, "policy", "AUTO")["toll_none_pct"] == pytest.approx(auto["realized_mean_pct"])
    touching = table[table["touches_nvls_pct"] > 0]
    assert len(touching) and (touching["toll_1s_pct"] > touching["toll_none_pct"]).all()
    assert (touching["toll_3s_pct"] > touching["toll_1s_pct"]).all()
    assert (table["pooled_V160_pct"] < table["pooled_V40_pct"]).all(), "more visits amortise the toll"


def test_nvls_excluded_takes_nvls_out_of_every_arm_set(harness):
    table = nvls.nvls_excluded(harness).tables["nvls-excluded"]
    drop = nvls.nvls_arms(harness.problem.pools)
    assert drop.any()
    pools = harness.problem.pools.without_arms(drop)
    assert not pools.measured[:, drop].any() and not np.isin(pools.best, np.flatnonzero(drop)).any()
    left = harness.problem.pools.measured[:, ~drop].any(axis=1)
    reduced = make_problem(pools, harness.problem.predicted[left], rho_max=2.0)
    assert not reduced.offered[:, drop].any()
    auto = _test_scores(harness, make_policy("AUTO"), problem=reduced)
    assert _row(table, "policy", "AUTO")["excluded_mean_pct"] == pytest.approx(auto["realized_mean_pct"])
    assert _row(table, "policy", "AUTO")["offered_contexts"] == harness.test().sum()


def test_horizon_and_mis_ranked_tables(harness):
    table = ablations.horizon(harness).tables["horizon"]
    assert list(table["policy"]) == ["AUTO", "UCB1", "Softmax", "KL-UCB", "ETC", "Random"]
    auto = _row(table, "policy", "AUTO")
    assert auto["T20_selection_pct"] == pytest.approx(auto["T40_selection_pct"]), "a fixed arm is horizon-invariant"
    misranked = ablations.mis_ranked(harness).tables["mis-ranked"]
    problem = harness.problem
    assert (misranked["misranked_contexts"] == (problem.auto != problem.pools.best).sum()).all()
    assert _row(misranked, "policy", "AUTO")["exact_selection_pct"] == pytest.approx(0.0, abs=1e-9)


def test_swap_environment_serves_the_worst_pool_to_the_best_arm_after_the_change(harness):
    problem = harness.problem
    env = SwapEnvironment("abrupt")
    ctx = np.arange(len(problem))
    env.bind(problem, ctx, [0], 10)
    steady = np.where(problem.offered, problem.pools.steady, np.nan)
    best, worst = np.nanargmin(steady, axis=1), np.nanargmax(steady, axis=1)
    before, price_before = env.serve(5, best)
    after, price_after = env.serve(6, best)
    assert (price_before == steady[ctx, best]).all() and (price_after == steady[ctx, worst]).all()
    start, depth = problem.pools.wrap[ctx, worst], problem.pools.depth[ctx, worst]
    for c in range(len(problem)):
        assert after[c] in problem.pools.samples[c, worst[c], start[c]:depth[c]]
    again = SwapEnvironment("abrupt")
    again.bind(problem, ctx, [0], 10)
    assert (again.u == env.u).all(), "the world depends on the seed only, not on the policy"
    with pytest.raises(AnalysisError, match="drift regime must be one of"):
        SwapEnvironment("sideways")


def test_drift_hurts_a_frozen_choice_and_discount_is_chosen_on_train(harness):
    section = drift(harness)
    table = section.tables["drift"]
    auto = _row(table, "policy", "AUTO")
    assert auto["abrupt_mean_pct"] > 5 * max(auto["stationary_mean_pct"], 1.0)
    assert auto["stationary_sequential_mean_pct"] == pytest.approx(_test_scores(
        harness, make_policy("AUTO"), seeds=range(OPTIONS.drift_seeds))["realized_mean_pct"])
    grid = section.tables["drift-discount"]
    assert grid.groupby("policy")["chosen"].sum().eq(1).all()
    gamma = grid[(grid["policy"] == "UCB1") & grid["chosen"]]["discount"].item()
    best = grid[grid["policy"] == "UCB1"]["competitive_ratio"].min()
    assert grid[(grid["policy"] == "UCB1") & grid["chosen"]]["competitive_ratio"].item() == best
    assert {"UCB1", f"UCB1 discount {gamma:g}", "UCB1 gain 0.2", "ETC"} <= set(table["policy"])
    run = run_policy(harness.problem, make_policy("AUTO"), horizon=OPTIONS.horizon, seeds=[0, 1],
                     environment=SwapEnvironment("stationary"))
    assert run.oracle_us.shape == (2, len(harness.problem)), "an environment prices its own oracle per seed"
    assert section.figures[0].is_file()


def test_selecting_ablations_by_name():
    from ncclbot_sweep.cli.analyze import _ABLATION_NAMES

    assert _ABLATION_NAMES == ", ".join(ABLATIONS), "the CLI help (kept light) lists every ablation"
    assert select_ablations(None) == list(ABLATIONS)
    assert select_ablations("dilution,size-gate") == ["size-gate", "dilution"]
    with pytest.raises(AnalysisError) as err:
        select_ablations("size-gate,warm-start")
    assert "'warm-start'" in str(err.value) and "warm-cold, nvls-toll, nvls-excluded" in str(err.value)


def test_cli_ablate_writes_sections_the_report_renders(dataset, tmp_path):
    out = tmp_path / "ablate"
    result = CliRunner().invoke(main, ["analyze", "ablate", "--dataset", str(dataset), "--out", str(out),
                                       "--only", "hybrid,filter", "--seeds", "1", "--horizon", "30"])
    assert result.exit_code == 0, result.output
    assert "Margin hybrid" in result.output and "Cost-model arm filter" in result.output
    doc = json.loads((out / "sections.json").read_text())
    assert [s["name"] for s in doc["sections"]] == ["hybrid", "filter"]
    assert "default settings" in doc["about"]
    for name in ("hybrid", "hybrid-gate", "filter"):
        assert not pd.read_csv(out / "tables" / f"{name}.csv").empty
    report = tmp_path / "report"
    result = CliRunner().invoke(main, ["analyze", "report", "--dataset", str(dataset), "--out", str(report),
                                       "--study", str(out), "--seeds", "1", "--horizon", "30", "--policies", "AUTO,UCB1"])
    assert result.exit_code == 0, result.output
    page = (report / "index.html").read_text()
    assert "Margin hybrid: trust AUTO when it is sure (Table 54, Figure 13)" in page
    assert "Cost-model arm filter on and off (Table 13)" in page
    assert "studies/ablate-hybrid-gate.png" in page and (report / "studies" / "ablate-hybrid-gate.png").is_file()
    assert (report / "tables" / "ablate-hybrid.csv").is_file()


def test_cli_ablate_names_unknown_ablations_and_missing_studies(dataset, tmp_path):
    result = CliRunner().invoke(main, ["analyze", "ablate", "--dataset", str(dataset), "--out", str(tmp_path / "o"),
                                       "--only", "hybrid,margins"])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: unknown ablation 'margins' in --only",
        "  hint: choose from warm-cold, nvls-toll, nvls-excluded, size-gate, hybrid, filter, horizon, mis-ranked, "
        "drift, dilution, live-rules"]
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["analyze", "ablate", "--dataset", str(dataset), "--out", str(tmp_path / "o"),
                                       "--study", str(empty)])
    assert result.exit_code == 1 and "has no champions.yaml" in result.output
    assert "analyze tune" in result.output


def test_run_ablations_replaces_a_rerun_section_in_place(harness, tmp_path):
    run_ablations(harness.problem, tmp_path, only="filter,mis-ranked", options=OPTIONS)
    run_ablations(harness.problem, tmp_path, only="filter", options=OPTIONS)
    doc = json.loads((tmp_path / "sections.json").read_text())
    assert [s["name"] for s in doc["sections"]] == ["filter", "mis-ranked"]
