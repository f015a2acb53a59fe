"""``results.json`` from ``analyze report``: contexts, policies, provenance, schema version."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep import __version__
from ncclbot_sweep.analysis.report.results import SCHEMA_VERSION
from ncclbot_sweep.cli import main
from ncclbot_sweep.datasets import write_rows

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
    assert set(doc) == {"schema_version", "provenance", "options", "audit", "policies", "contexts"}
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
    # every data table sits in a box that scrolls sideways instead of widening the page
    tables = html.count('<table class="dataframe t">')
    assert tables >= 6 and html.count('<div class="scroll"><table class="dataframe t">') == tables
    assert ".scroll { max-width: 100%; overflow-x: auto; }" in html
