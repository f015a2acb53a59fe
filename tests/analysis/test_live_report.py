"""The live campaign as the report and ``analyze live`` present it.

A live campaign ingested apart from its forced sweep is read with it (``analyze report
--live-dataset``, ``analyze live -d LIVE -d SWEEP``); its verdicts are the headline's numbers
in words; the best learner is chosen from the numbers; policy names are spelled as the
offline registry spells them; empty tables keep their columns and types for DuckDB and pandas.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from html import escape as html_escape
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.live import TABLE_COLUMNS, TABLES, analyze_live, best_learner, scenario_verdicts
from ncclbot_sweep.analysis.live.schema import conform
from ncclbot_sweep.analysis.policies import PLUGIN_POLICIES, POLICIES, live_policy_name
from ncclbot_sweep.cli import main

from .live_synth import FABRIC, RUNS, SIZES, write_live_dataset
from .simpools import write_sim_dataset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def apart(tmp_path_factory):
    """(live dataset, sweep dataset): the live campaign and its forced sweep ingested apart."""
    root = tmp_path_factory.mktemp("apart")
    write_live_dataset(root / "live")
    write_sim_dataset(root / "sweep", FABRIC, collectives=("AllReduce",), nodes=(2,), sizes=SIZES, iters=100)
    return root / "live", root / "sweep"


def test_the_plugin_policies_are_the_plugins_and_spelled_as_offline():
    source = (REPO / "plugin" / "src" / "config.c").read_text()
    listed = re.search(r"k_policies\[[^]]*\]\s*=\s*\{([^}]*)\}", source).group(1)
    assert set(PLUGIN_POLICIES) == set(re.findall(r'"([^"]+)"', listed))
    families = {name for name in PLUGIN_POLICIES.values() if name not in ("greedy", "static")}
    assert families <= set(POLICIES), families - set(POLICIES)
    assert [live_policy_name(v) for v in ("ucb1", "UCB1", "auto", "thompson", "stock")] == [
        "UCB1", "UCB1", "AUTO", "GaussianTS", "stock"]


def test_the_best_learner_is_the_lowest_learner_not_auto_stock_or_static():
    runs = pd.DataFrame({"label": ["AUTO", "static", "UCB1", "greedy", "stock"],
                         "is_learner": [False, False, True, True, False]})
    selection = {"AUTO": 0.5, "static": 0.0, "UCB1": 4.0, "greedy": 3.0, "stock": 0.1}
    assert best_learner(selection, runs) == "greedy"
    assert best_learner({**selection, "UCB1": 2.0}, runs) == "UCB1"
    assert best_learner({"AUTO": 1.0}, runs) is None


def _headline(ucb: float, auto: float, bands: list[tuple[str, float]]) -> dict:
    entries = [{"band": b, "sizes": b, "n": 2, "median": m} for b, m in bands]
    return {"scenarios": [{
        "campaign": "c", "fabric": "f", "collective": "AllReduce", "nodes": 4, "ranks": 32, "sizes": "4-64 MiB",
        "selection_trlt_mean_pct": {"AUTO": auto, "UCB1": ucb}, "selection_sizes": {"AUTO": 5, "UCB1": 5},
        "best_learner": "UCB1", "auto": "AUTO", "overhead_pct": {"stock": 0.0, "AUTO": 0.4, "UCB1": 1.2},
        "setup_stall_s": {"runs": 0}, "speed_vs_stock_bands": {"UCB1": entries, "AUTO": entries}}]}


def test_verdicts_say_the_numbers_they_are_given():
    (won,) = scenario_verdicts(_headline(3.1, 7.8, [("1-8 MiB", 1.02), ("16-64 MiB", 1.31)]))
    assert won.lines[0].startswith("UCB1 was faster than stock at 16-64 MiB (1.31x); on par with stock at 1-8 MiB "
                                   "(1.02x). Per band")
    assert "UCB1 1-8 MiB 1.02x, 16-64 MiB 1.31x" in won.lines[0]
    assert won.lines[1].startswith("UCB1 (the best learner): selection loss 3.1% against AUTO's 7.8%")
    assert won.lines[1].endswith("UCB1 beat AUTO.")
    assert won.lines[2].startswith("Overhead of the plugin (AUTO through the plugin, selection fixed): 0.4%")
    (lost,) = scenario_verdicts(_headline(9.0, 7.8, [("1-8 MiB", 0.8)]))
    assert "slower than stock at 1-8 MiB (0.80x)" in lost.lines[0] and lost.lines[1].endswith("UCB1 did not beat AUTO.")


def test_a_win_over_auto_never_reads_before_a_loss_against_stock():
    # Slower than stock at small sizes, faster at large ones, and better than AUTO: the loss is said first.
    (mixed,) = scenario_verdicts(_headline(3.1, 7.8, [("4-8 MiB", 0.91), ("16-64 MiB", 1.31)]))
    short = " ".join(mixed.short)
    assert short.startswith("UCB1 was slower than stock at 4-8 MiB (0.91x); faster than stock at 16-64 MiB (1.31x)")
    assert short.index("slower than stock") < short.index("UCB1 beat AUTO")
    text = " ".join(mixed.lines)
    assert text.index("slower than stock") < text.index("beat AUTO")


def test_live_reads_the_sweep_from_a_second_dataset(apart, tmp_path):
    live, sweep = apart
    alone = analyze_live(live)
    assert alone.tables["forced_vs_stock"].empty and alone.tables["auto_vs_audit"].empty
    assert "no offline audit" in " ".join(alone.issues["what"])
    result = CliRunner().invoke(main, ["analyze", "live", "-d", str(live), "-d", str(sweep), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(tmp_path / "forced_vs_stock.csv")) == len(SIZES)
    audit = pd.read_csv(tmp_path / "auto_vs_audit.csv")
    assert (audit["policy"] == "AUTO").sum() == len(SIZES)
    headline = json.loads((tmp_path / "headline.json").read_text())
    assert headline["datasets"] == [str(live), str(sweep)] and headline["issues"] == []
    (scenario,) = headline["scenarios"]
    ucb, auto = scenario["selection_trlt_mean_pct"]["UCB1"], scenario["selection_trlt_mean_pct"]["AUTO"]
    assert f"UCB1 (the best learner): selection loss {ucb:.1f}% against AUTO's {auto:.1f}%" in result.output


def test_the_report_of_a_sweep_shows_a_live_dataset_beside_it(apart, tmp_path, monkeypatch):
    live, sweep = apart
    args = ["analyze", "report", "-d", str(sweep), "--live-dataset", str(live), "-o", str(tmp_path), "--seeds", "2",
            "--horizon", "40", "--split", "random", "--policies", "AUTO,UCB1"]
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/ncclbot-sweep", *args])  # what the shell would have run
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    html = (tmp_path / "index.html").read_text()
    for name in ("forced_vs_stock", "auto_vs_audit", "selection_summary", "stock_bands"):
        assert len(pd.read_csv(tmp_path / "tables" / f"live_{name}.csv")), name
    headline = json.loads((tmp_path / "live" / "headline.json").read_text())
    (verdict,) = scenario_verdicts(headline)
    box = html[html.index('id="headline"'):html.index("</section>")]
    assert f"{verdict.title}: {' '.join(verdict.short)}" in box.replace("&#39;", "'")
    assert "UCB1 (the best learner)" in box
    assert f"<th>Command</th><td><code>{html_escape(shlex.join(['ncclbot-sweep', *args]))}</code>" in html
    assert f"<code>{live.resolve()}</code>" in html


def test_empty_tables_keep_their_columns_for_duckdb_and_pandas(tmp_path):
    assert set(TABLE_COLUMNS) == set(TABLES)
    for name, columns in TABLE_COLUMNS.items():
        frame = conform(name, pd.DataFrame())
        frame.to_parquet(tmp_path / f"{name}.parquet", index=False)
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
        assert list(pd.read_parquet(tmp_path / f"{name}.parquet").columns) == list(columns), name
        assert list(pd.read_csv(tmp_path / f"{name}.csv").columns) == list(columns), name
        described = duckdb.sql(f"describe select * from read_parquet('{tmp_path / f'{name}.parquet'}')").fetchall()
        assert [row[0] for row in described] == list(columns), name
        types = {row[0]: row[1] for row in described}
        for column, dtype in columns.items():
            assert types[column] == {"string": "VARCHAR", "int64": "BIGINT", "Int64": "BIGINT",
                                     "float64": "DOUBLE", "boolean": "BOOLEAN"}[dtype], (name, column, types[column])


def test_an_analysis_without_stock_writes_its_empty_tables_with_columns(tmp_path):
    root = tmp_path / "ds"
    write_live_dataset(root, runs=RUNS[1:3])
    analyze_live(root, out=tmp_path / "out")
    for name in ("overhead_ladder", "stock_bands", "forced_vs_stock", "auto_vs_audit"):
        path = tmp_path / "out" / f"{name}.csv"
        assert path.read_text().strip() == ",".join(TABLE_COLUMNS[name]), name
        count = duckdb.sql(f"select count(*) from read_parquet('{tmp_path / 'out' / f'{name}.parquet'}')").fetchall()
        assert count == [(0,)]


def test_a_table_that_drifts_from_its_schema_is_refused():
    with pytest.raises(ValueError, match="'issues' does not match its schema.*unexpected \\['extra'\\]"):
        conform("issues", pd.DataFrame({c: ["x"] for c in [*TABLE_COLUMNS["issues"], "extra"]}))


def _drawn_lines(ax):
    return [line for line in ax.get_lines() if len(line.get_xdata())]


def test_live_figures_name_every_line_and_hide_none(apart, tmp_path, kept_figures):
    from ncclbot_sweep.analysis.live.figures import plot_learning_curves, plot_timeline

    live, sweep = apart
    tables = analyze_live([live, sweep]).tables
    curves = tables["learning_curves"]
    plot_learning_curves(curves, dict(zip(curves["run_id"], curves["policy"])), path=tmp_path / "curves.png",
                         title="t", synthetic=True)
    ax = kept_figures[-1].axes[0]
    lines = _drawn_lines(ax)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [line.get_label() for line in lines] == legend and "UCB1" in legend and "AUTO" in legend
    assert len({(str(line.get_linestyle()), line.get_marker()) for line in lines}) == len(lines), "styles repeat"
    reference = lines[-1]
    assert reference.get_label() == "AUTO's loss (no learning)"
    assert reference.get_zorder() > max(line.get_zorder() for line in lines[:-1])
    assert reference.get_linewidth() < min(line.get_linewidth() for line in lines[:-1]), "it would cover AUTO's run"

    plot_timeline(tables["timeline"], tmp_path / "timeline.png", title="t", synthetic=True)
    fig = kept_figures[-1]
    named = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"this run's finish", "oracle's finish", "AUTO's finish"} | set(tables["timeline"]["arm"]) == named
    for ax in fig.axes:
        finishes = sorted(_drawn_lines(ax), key=lambda line: line.get_zorder())
        assert [line.get_linewidth() for line in finishes] == sorted((l.get_linewidth() for l in finishes),
                                                                     reverse=True), "a wider line drawn on top"
