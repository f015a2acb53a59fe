"""``analyze live`` on the small fixed live campaign of :mod:`.live_synth` (plus a forced sweep).

The decomposition's parts must agree with what the campaign was built to contain: the run
that plays the oracle arm scores 0, AUTO through the plugin matches the offline audit, the
ladder reproduces the injected overhead, every process that used NVLS stalls once, stock
against itself is 1.0, and missing inputs are named while the rest is computed. Golden
tables pin the numbers (regenerate with ``NCCLBOT_UPDATE_GOLDEN=1``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.live import TABLES, analyze_live
from ncclbot_sweep.analysis.live.inputs import STOCK_POLICY, load_live
from ncclbot_sweep.analysis.live.stock import stock_bands, stock_per_size
from ncclbot_sweep.analysis.policies import live_policy_name
from ncclbot_sweep.cli import main
from ncclbot_sweep.sim import fabric

from .live_synth import FABRIC, ITERS, PROFILE_US, RUNS, SIZES, SYNC_US, write_live_dataset
from .simpools import write_sim_dataset

GOLDEN = Path(__file__).parent / "golden" / "live"
GOLDEN_TABLES = ("selection_summary", "learning_windows", "overhead_ladder", "overhead_bins", "setup_toll",
                 "stock_bands")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("live") / "ds"
    played = write_live_dataset(root)
    write_sim_dataset(root, FABRIC, collectives=("AllReduce",), nodes=(2,), sizes=SIZES, iters=100)
    out = root.parent / "out"
    return root, played, analyze_live(root, out=out), out


def _rows(result, name: str, policy: str) -> pd.DataFrame:
    frame = result.tables[name]
    return frame[frame["policy"] == policy]


def test_the_oracle_playing_run_scores_zero_where_it_plays_the_oracle(campaign):
    _, played, result, _ = campaign
    static = _rows(result, "selection_per_size", "static")
    on_oracle = static[static["oracle_arm"] == played["live-synth.static.default"].groupby("size_bytes")["arm"]
                       .first().reindex(static["size_bytes"]).to_numpy()]
    assert len(on_oracle) >= 7
    np.testing.assert_allclose(on_oracle["selection_trlt_pct"], 0.0, atol=1e-9)
    assert (on_oracle["last100_on_oracle_pct"] == 100.0).all()
    windows = _rows(result, "learning_windows", "static")
    np.testing.assert_allclose(windows["lost_bw_pct"], 0.0, atol=1e-9)


def test_a_run_that_never_leaves_auto_scores_as_auto(campaign):
    _, _, result, _ = campaign
    summary = result.tables["selection_summary"].set_index("policy")
    mean = summary["selection_trlt_mean_pct"]
    assert mean["greedy"] == pytest.approx(mean["AUTO"])
    assert summary.loc["UCB1", "selection_trlt_mean_pct"] < summary.loc["AUTO", "selection_trlt_mean_pct"]
    assert summary.loc["AUTO", "last_auto_collective_median"] == 2 * (ITERS + 1)
    ucb = _rows(result, "learning_windows", "UCB1").set_index("window")["lost_bw_pct"]
    assert ucb["1-10"] > ucb["11-30"] > ucb["31-100"]


def test_auto_through_the_plugin_matches_the_offline_audit(campaign):
    _, _, result, _ = campaign
    table = _rows(result, "auto_vs_audit", "AUTO")
    assert len(table) == len(SIZES)
    assert (table["live_auto_arm"] == table["audit_auto_arm"]).all()
    same = table[table["live_oracle_arm"] == table["audit_best_arm"]]
    assert len(same) >= len(SIZES) - 1
    assert same["difference_pp"].abs().max() < 3.0, same
    assert (same.loc[same["audit_selection_trlt_pct"] > 10, "live_selection_trlt_pct"] > 10).all()


def _expected_time_overhead(played: dict, run_id: str) -> pd.Series:
    def per_size(frame):
        timed = frame[frame["iteration"].notna() & ~frame["in_place"]]
        return timed.groupby("size_bytes")["host_us"].mean()

    return 100 * (per_size(played[run_id]) / per_size(played["live-synth.stock.default"]) - 1)


def test_the_overhead_ladder_reproduces_the_injected_overhead(campaign):
    _, played, result, _ = campaign
    ladder = result.tables["overhead_ladder"].set_index("rung")
    auto = ladder.loc[["AUTO", "AUTO [sync-64]", "AUTO [sync-16]", "AUTO [sync-4]"]]
    assert auto["selection_fixed"].all() and auto["monotone"].all()
    assert 0 < auto["overhead_pct"].iloc[0] < auto["overhead_pct"].iloc[1] < auto["overhead_pct"].iloc[2] \
        < auto["overhead_pct"].iloc[3]
    assert (auto["measured_sync_us_median"].dropna() == SYNC_US).all()
    # Rounds count every pull (check calls too), so a timed iteration carries 122/120 of 1/K rounds;
    # at K=64 a size holds one or two rounds, so the estimate is quantised (within 10%).
    np.testing.assert_allclose(auto["implied_us_per_sync"].dropna(), SYNC_US * 122 / 120, rtol=0.1)
    bins = result.tables["overhead_bins"]
    for rung, run_id in (("AUTO", "live-synth.auto.default"), ("AUTO [sync-4]", "live-synth.auto.sync-4")):
        expected = _expected_time_overhead(played, run_id)
        mine = bins[bins["rung"] == rung].set_index("size_bin")
        small = expected[expected.index < 1 << 20]
        assert mine.loc["<1 MiB", "median_time_overhead_pct"] == pytest.approx(small.median(), rel=1e-9)
        assert mine["share_of_bw_drop_pct"].sum() == pytest.approx(100.0)
    off = bins[(bins["rung"] == "AUTO") & (bins["size_bin"] == ">=1 GiB")]["median_time_overhead_pct"].iloc[0]
    stock_1g = played["live-synth.stock.default"]
    t = stock_1g[(stock_1g["size_bytes"] == 1 << 30) & stock_1g["iteration"].notna() & ~stock_1g["in_place"]]
    assert off == pytest.approx(100 * PROFILE_US / t["host_us"].mean(), rel=1e-6)


def test_setup_toll_finds_the_nvls_stall_once_per_process_that_used_nvls(campaign):
    root, _, result, _ = campaign
    procs = result.tables["setup_processes"]
    assert len(procs) == 16 * sum(1 for r in RUNS if r.plugin)
    assert (procs["stall_found"] == procs["used_nvls"]).all()
    assert procs.loc[procs["stall_found"], "arm"].str.startswith("NVLS").all()
    assert not procs.loc[procs["run_id"] == "live-synth.static.default", "used_nvls"].any()
    events = load_live(root).events
    pulls = events[events["kind"] == "pull"].sort_values(["run_id", "rank", "t_ns"])
    gaps = pulls.groupby(["run_id", "rank"])["t_ns"].diff() / 1e9
    big = (gaps >= 1.0).groupby([pulls["run_id"], pulls["rank"]]).sum()
    nvls = procs.set_index(["run_id", "rank"])["used_nvls"]
    assert (big.reindex(nvls.index) == nvls.astype(int)).all()
    low, high = fabric(FABRIC).spec.nvls_stall_s
    toll = result.tables["setup_toll"].dropna(subset=["stall_median_s"])
    assert len(toll) == 6 and toll["stall_min_s"].between(low, high).all()
    assert (toll["collective_time_to_amortise_1pct_s"] == 100 * toll["stall_median_s"]).all()


def test_stock_against_itself_is_one_everywhere(campaign):
    root, _, _, _ = campaign
    data = load_live(root)
    stock = data.runs[data.runs["policy"] == STOCK_POLICY].iloc[0]
    rows = stock_per_size(data.runs[data.runs["run_id"] == stock["run_id"]], stock, iterations=data.iterations,
                          stalled={})
    assert len(rows) == len(SIZES) and (rows["speed_vs_stock"] == 1.0).all() and (rows["verdict"] == "on par").all()
    bands = stock_bands(rows)
    ratio_cols = [c for c in bands.columns if c.endswith(("median", "min", "max"))]
    assert (bands[ratio_cols + ["avg_busbw_ratio"]] == 1.0).all().all()


def test_stock_comparison_removes_each_runs_stalled_size(campaign):
    _, _, result, _ = campaign
    per_size = result.tables["stock_per_size"]
    assert 1 << 22 not in set(per_size["size_bytes"])  # stock stalled at 4 MiB in its timed pass
    forced = result.tables["forced_vs_stock"]
    assert len(forced) == len(SIZES) and forced["forced_auto_over_stock"].between(0.95, 1.05).all()


def test_every_table_is_written_as_parquet_and_csv_and_figures_say_synthetic(campaign):
    _, _, result, out = campaign
    for name in TABLES:
        assert (out / f"{name}.parquet").exists() and (out / f"{name}.csv").exists(), name
    assert result.tables["issues"].empty, result.tables["issues"]
    pngs = sorted(out.glob("*.png"))
    assert [p.name.split("-")[0] for p in pngs] == ["learning_curves", "timeline"]
    assert all(b"synthetic" in p.read_bytes() for p in pngs)
    for png in pngs:  # each figure's data beside it, the rows of its scenario only
        data = pd.read_csv(png.with_suffix(".csv"))
        assert len(data) and set(data["collective"]) == {png.stem.split("-")[-2]}
    headline = json.loads((out / "headline.json").read_text())
    # static replays a table (it scores lowest here) and greedy never leaves AUTO: UCB1 is the best learner.
    assert headline["scenarios"][0]["best_learner"] == "UCB1"


@pytest.mark.parametrize("name", GOLDEN_TABLES)
def test_golden_tables(campaign, name):
    _, _, _, out = campaign
    got = pd.read_csv(out / f"{name}.csv")
    path = GOLDEN / f"{name}.csv"
    if os.environ.get("NCCLBOT_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        got.to_csv(path, index=False)
    assert path.exists(), f"no golden copy of {name}; run with NCCLBOT_UPDATE_GOLDEN=1 to write it"
    want = pd.read_csv(path)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9, atol=1e-12,
                                  obj=f"{name} (accept a deliberate change with NCCLBOT_UPDATE_GOLDEN=1)")


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken") / "ds"
    write_live_dataset(root, runs=RUNS[1:], no_trace=("ucb1",), drop_ranks={"static": {3, 5}})
    return root


def test_bad_inputs_are_named_and_the_rest_is_computed(broken, tmp_path):
    result = CliRunner().invoke(main, ["analyze", "live", "--dataset", str(broken), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Warning: live run live-synth.ucb1.default (UCB1) has no plugin trace (no live_events rows)" in out
    assert ("Warning: live run live-synth.static.default (static): traces of 2 of 16 ranks are missing "
            "(ranks 3, 5)") in out
    assert ("Warning: campaign 'live-synth' has no stock run for AllReduce at 2 nodes (16 ranks) on sim-h100: "
            "overhead ladder and stock comparison not computed") in out
    issues = pd.read_csv(tmp_path / "issues.csv")
    assert set(issues["part"]) == {"traces", "stock", "forced"} and issues["hint"].notna().all()
    summary = pd.read_csv(tmp_path / "selection_summary.csv")
    assert set(summary["policy"]) == {"AUTO", "AUTO [sync-4]", "AUTO [sync-16]", "AUTO [sync-64]", "static", "greedy"}
    assert pd.read_csv(tmp_path / "setup_toll.csv")["run_id"].nunique() == 6
    assert pd.read_parquet(tmp_path / "overhead_ladder.parquet").empty
    assert pd.read_parquet(tmp_path / "stock_bands.parquet").empty


def test_json_prints_the_headline(campaign, tmp_path):
    root, _, _, _ = campaign
    result = CliRunner().invoke(main, ["analyze", "live", "--dataset", str(root), "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    headline = json.loads(result.output, parse_constant=lambda token: pytest.fail(f"non-standard JSON {token}"))
    scenario = headline["scenarios"][0]
    assert scenario["ladder_monotone"]["AUTO [sync-4]"] is True
    assert scenario["setup_stall_s"]["runs"] == 6 and 5.7 <= scenario["setup_stall_s"]["median"] <= 7.8
    named = {r: live_policy_name(r.policy) for r in RUNS[1:]}
    assert set(scenario["avg_busbw_ratio_vs_stock"]) == {named[r] if r.variant == "default" else
                                                         f"{named[r]} [{r.variant}]" for r in RUNS[1:]}


def test_a_dataset_without_live_runs_is_a_user_error(tmp_path):
    write_sim_dataset(tmp_path / "ds", FABRIC, collectives=("AllReduce",), nodes=(2,), sizes=SIZES[:2], iters=5)
    result = CliRunner().invoke(main, ["analyze", "live", "--dataset", str(tmp_path / "ds"), "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert f"Error: {tmp_path / 'ds'}: dataset has no live, stock or overhead runs\n" in result.output
    assert "hint: ingest the campaign folder of a live campaign" in result.output


def test_an_unknown_campaign_lists_the_live_ones(campaign, tmp_path):
    root, _, _, _ = campaign
    result = CliRunner().invoke(main, ["analyze", "live", "--dataset", str(root), "--out", str(tmp_path),
                                       "--campaign", "nope"])
    assert result.exit_code == 1
    assert "no live, stock or overhead run of campaign 'nope'" in result.output and "live-synth" in result.output
    assert "did you mean" not in result.output
    result = CliRunner().invoke(main, ["analyze", "live", "-d", str(root), "-o", str(tmp_path), "--campaign", "live-synt"])
    assert result.exit_code == 1 and "campaign 'live-synt' (did you mean 'live-synth'?)" in result.output


def test_stock_policy_is_the_campaign_spelling():
    from ncclbot_sweep.sweep.campaign import STOCK

    assert STOCK_POLICY == STOCK


def test_the_report_gains_a_live_section(campaign, tmp_path):
    from ncclbot_sweep.analysis.report import ReportOptions, build_report

    root, _, _, _ = campaign
    options = ReportOptions(policies=("AUTO", "UCB1"), seeds=2, horizon=40, split="random")
    html = build_report(root, tmp_path, options=options).read_text()
    assert "Live campaigns (section 6.5, appendix F)" in html and "holds no live runs" not in html
    for name in ("selection_summary", "overhead_ladder", "setup_toll", "stock_bands", "forced_vs_stock"):
        assert (tmp_path / "tables" / f"live_{name}.csv").exists(), name
    assert "live/learning_curves-live-synth-AllReduce-2n.png" in html
    assert (tmp_path / "live" / "timeline-live-synth-AllReduce-2n.png").exists()


def test_a_run_without_its_shape_is_left_out_by_name(tmp_path):
    from ncclbot_sweep.ingest.datasets import write_rows

    write_live_dataset(tmp_path, runs=RUNS[:2])
    write_rows(tmp_path, "runs", [dict(run_id="loose", campaign="live-synth", fabric=FABRIC, kind="live",
                                       collective="AllReduce", ranks=16, policy="ucb1", outcome="ok",
                                       source_path="loose.txt", source_sha256="loose")])
    result = analyze_live(tmp_path)
    assert "run loose (ucb1) lacks nodes: left out" in set(result.issues["what"])
    assert set(result.tables["overhead_ladder"]["rung"]) == {"stock", "AUTO"}
