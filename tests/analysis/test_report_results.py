"""``results.json`` from ``analyze report``: contexts, policies, provenance, schema version."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep import __version__
from ncclbot_sweep.analysis.report.results import SCHEMA_VERSION
from ncclbot_sweep.cli import main
from ncclbot_sweep.ingest.datasets import write_rows

from .simpools import write_sim_dataset


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A small sim dataset with two runs rows, and the report (and results.json) built on it."""
    root = tmp_path_factory.mktemp("ds")
    write_sim_dataset(root, collectives=("AllReduce", "AllGather"), nodes=(2, 4, 8), sizes=(2**12, 2**18, 2**24),
                      iters=30, runs=False)
    base = dict(campaign="sweep-a", campaign_key="c0ffee", fabric="sim-h100", kind="forced", collective="AllReduce",
                nccl_version="2.27.5", nccl_tests_version="2.17.1", gpu_name="NVIDIA H100 80GB HBM3",
                outcome="ok", source_path="sim://runs")
    write_rows(root, "runs", [base | dict(run_id="r1", nodes=2, hosts="n1,n2", source_sha256="r1"),
                              base | dict(run_id="r2", nodes=4, hosts="n1,n2,n3,n4", source_sha256="r2")])
    out = tmp_path_factory.mktemp("report")
    args = ["analyze", "report", "--dataset", str(root), "--out", str(out), "--seeds", "2", "--horizon", "30",
            "--policies", "AUTO,UCB1,Random"]
    with pytest.MonkeyPatch.context() as mp:  # CliRunner leaves sys.argv alone; a shell would set it
        mp.setattr("sys.argv", ["/opt/venv/bin/ncclbot-sweep", *args])
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


def test_results_json_is_strict_json_with_a_schema_version(report):
    text = (report / "results.json").read_text()
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    assert set(doc) == {"schema_version", "provenance", "options", "headline", "audit", "policies", "contexts"}
    assert doc["options"]["horizon"] == 30 and doc["options"]["policies"] == ["AUTO", "UCB1", "Random"]


def test_results_contexts_match_the_audit_rows(report):
    doc = json.loads((report / "results.json").read_text())
    audit = pd.read_csv(report / "tables" / "audit_contexts.csv")
    assert len(doc["contexts"]) == len(audit) == 2 * 3 * 3
    for entry, row in zip(doc["contexts"], audit.itertuples(index=False)):
        assert (entry["collective"], entry["nodes"], entry["size_bytes"]) == (row.collective, row.nodes, row.size_bytes)
        assert entry["auto_arm"] == row.auto_arm and entry["best_arm"] == row.best_arm
        steady = entry["steady_us"]
        assert len(steady) == row.n_arms >= 2
        # the best arm is the fastest steady mean; AUTO's loss is its steady mean over the best's
        assert min(steady, key=steady.get) == entry["best_arm"]
        assert entry["loss"] == pytest.approx(steady[entry["auto_arm"]] / steady[entry["best_arm"]] - 1)
        assert entry["auto_errs"] == (entry["auto_arm"] != entry["best_arm"])
        assert entry["margin"] is None or (entry["margin"] >= 0 and math.isfinite(entry["margin"]))
        assert set(entry["trlt"]) == {"AUTO", "UCB1", "Random"} and entry["part"] in ("train", "test")
        assert entry["trlt"]["AUTO"]["selection"] == pytest.approx(entry["loss"])
        assert entry["predicted_us"][entry["auto_arm"]] == min(entry["predicted_us"].values())


def test_results_policies_carry_summary_and_tests(report):
    doc = json.loads((report / "results.json").read_text())
    summary = pd.read_csv(report / "tables" / "summary.csv").set_index("policy")
    assert list(doc["policies"]) == ["AUTO", "UCB1", "Random"]
    for name, entry in doc["policies"].items():
        assert entry["summary"]["realized_mean_pct"] == pytest.approx(summary.loc[name, "realized_mean_pct"])
    (test,) = doc["policies"]["UCB1"]["tests"]
    assert test["a"] == "AUTO" and test["b"] == "UCB1" and 0 <= test["p_holm_mean"] <= 1
    assert doc["policies"]["AUTO"]["tests"] == []
    test_contexts = [c for c in doc["contexts"] if c["part"] == "test"]
    mean = np.mean([c["trlt"]["UCB1"]["realized"] for c in test_contexts])
    assert 100 * mean == pytest.approx(summary.loc["UCB1", "realized_mean_pct"])


def test_results_provenance_names_versions_hosts_and_command(report):
    prov = json.loads((report / "results.json").read_text())["provenance"]
    assert prov["tool"] == "ncclbot-sweep" and prov["tool_version"] == __version__
    assert prov["nccl_versions"] == ["2.27.5"] and prov["nccl_tests_versions"] == ["2.17.1"]
    assert prov["gpu_models"] == ["NVIDIA H100 80GB HBM3"] and prov["nodes"] == [2, 4]
    assert prov["hosts"] == ["n1", "n2", "n3", "n4"] and prov["runs"] == 2
    assert prov["campaigns"] == ["sweep-a"] and prov["campaign_keys"] == ["c0ffee"]
    assert prov["fabrics"] == ["sim-h100"] and (Path(prov["dataset"]) / "runs").is_dir()
    assert prov["command"].startswith("ncclbot-sweep analyze report --dataset ")
    assert "--horizon 30" in prov["command"]


def test_page_names_campaign_and_fabric_and_shows_provenance_and_glossary(report):
    html = (report / "index.html").read_text()
    assert "<title>NCCL-BOT analysis of sweep-a on sim-h100</title>" in html
    for part in ("<h2>Provenance</h2>", "2.27.5", "NVIDIA H100 80GB HBM3", "n1, n2, n3, n4", "c0ffee",
                 "ncclbot-sweep analyze report --dataset", "<h2>Glossary</h2>", "<dt>TRLT</dt>", "<dt>Margin</dt>",
                 "<dt>Scenario</dt>", "<dt>Realized</dt>", "<dt>Selection-priced</dt>", 'href="results.json"'):
        assert part in html, part
    # every data table sits in a box that scrolls (sideways instead of widening the page, down under its header)
    tables = html.count('<table class="dataframe t">')
    assert tables >= 6 and html.count('<div class="scroll"><table class="dataframe t">') == tables
    assert ".scroll { max-width: 100%; max-height: 32em; overflow: auto;" in html


def test_every_html_table_header_is_readable_words(report):
    html = (report / "index.html").read_text()
    headers = re.findall(r"<th>([^<]*)</th>", html)
    assert len(headers) > 60
    assert not [h for h in headers if "_" in h], "snake_case header on the page"
    for header in ("Realized TRLT mean (%)", "p Holm, mean", "UCB1 mean TRLT (%)", "UCB1: contexts above 10%",
                   "Switch point (iteration)", "AUTO error rate (%)", "Contexts above 10%"):
        assert f"<th>{header}</th>" in html, header
    assert pd.read_csv(report / "tables" / "summary.csv").columns[2] == "realized_mean_pct"  # CSV keeps names


def test_headline_claims_carry_the_scenario_test_and_its_holm_p(report):
    html = (report / "index.html").read_text()
    test = pd.read_csv(report / "tables" / "tests.csv").set_index("b").loc["UCB1"]
    (line,) = [li for li in re.findall(r"<li>(UCB1:[^<]*)</li>", html)]
    # p-values with two significant digits, as in the tables
    assert f"Holm p = {test['p_holm_mean']:#.2g}".rstrip(".") in line
    assert f"sign-flip over scenarios p = {test['p_signflip_mean']:#.2g}".rstrip(".") in line
    assert f"Holm p = {test['p_holm_above']:#.2g}".rstrip(".") in line
    assert not re.search(r"p = \d\.\d{3}", line), line
    # one test scenario per collective at 8 nodes: the smallest attainable p is stated
    assert "not significant at 0.05 after Holm (with 2 scenarios the smallest attainable sign-flip p is 0.50)" in line


def test_per_scenario_table_is_scenarios_by_policies_and_names_its_split(report):
    pivot = pd.read_csv(report / "tables" / "scenarios.csv")
    assert list(pivot.columns) == ["fabric", "collective", "nodes", "contexts", "AUTO_mean_pct", "UCB1_mean_pct",
                                   "Random_mean_pct", "AUTO_above_0.1", "UCB1_above_0.1", "Random_above_0.1"]
    assert set(pivot["nodes"]) == {8} and len(pivot) == 2  # the scale split tests the largest node count
    summary = pd.read_csv(report / "tables" / "summary.csv").set_index("policy")
    means = pivot["UCB1_mean_pct"].to_numpy() @ pivot["contexts"].to_numpy() / pivot["contexts"].sum()
    assert means == pytest.approx(summary.loc["UCB1", "realized_mean_pct"])
    html = (report / "index.html").read_text()
    assert "Scores the <b>test</b> part of split <b>scale</b>: node counts 8" in html
    assert "the train part (node counts 2, 4)" in html


def test_report_has_learning_curves_transients_and_zero_shares(report):
    curves = pd.read_csv(report / "learning_curves.csv")
    summary = pd.read_csv(report / "tables" / "summary.csv").set_index("policy")
    last = curves[curves["step"] == 30].set_index("policy")["mean_pct"]
    assert last.to_dict() == pytest.approx(summary["realized_mean_pct"].to_dict())
    transient = pd.read_csv(report / "figures" / "transient_sim-h100.csv")
    assert transient["iteration"].min() == 1 and (transient["contexts"] > 0).all()
    html = (report / "index.html").read_text()
    for src in ("learning_curves.png", "figures/transient_sim-h100.png"):
        assert f'src="{src}"' in html
    survival = pd.read_csv(report / "survival.csv")
    zero = survival.groupby("policy")["zero_share"].first()
    assert f"AUTO {100 * zero['AUTO']:.0f}%" in html and "Each curve ends at its last non-zero value" in html


def test_degenerate_contexts_are_flagged_in_page_tables_results_and_dataset(report):
    from ncclbot_sweep.ingest.datasets import read_table

    html = (report / "index.html").read_text()
    assert '<h2 id="degenerate">Degenerate contexts</h2>' in html
    summary = pd.read_csv(report / "tables" / "degenerate.csv").set_index("flag")
    assert summary.loc["short_window", "contexts"] == 18  # 30 iterations cannot fill the 11-99 window
    audit = pd.read_csv(report / "tables" / "audit_contexts.csv")
    assert (audit["flags"] == "short_window").all()
    doc = json.loads((report / "results.json").read_text())
    assert all(c["flags"] == ["short_window"] for c in doc["contexts"])
    dataset = Path(doc["provenance"]["dataset"])
    table = read_table(dataset, "contexts")  # the report replaced the dataset's contexts table
    assert len(table) == 18 and set(table["flags"]) == {"short_window"}
    assert "The dataset's <code>contexts</code> table holds the same 18" in html


def test_provenance_lists_hosts_in_natural_order(tmp_path):
    from ncclbot_sweep.analysis.inputs import load_provenance
    from ncclbot_sweep.ingest.datasets import write_rows

    write_rows(tmp_path, "runs", [dict(run_id=f"r{i}", fabric="sim-h100", kind="forced", hosts=hosts,
                                       source_path=f"r{i}.txt", source_sha256=f"r{i}")
                                  for i, hosts in enumerate(["local10,local2", "local1,local9", "gpu-b3,gpu-a12"])])
    assert load_provenance(tmp_path)["hosts"] == ["gpu-a12", "gpu-b3", "local1", "local2", "local9", "local10"]
