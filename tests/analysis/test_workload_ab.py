"""``analyze workload-ab`` on small workload campaigns written through the dataset writer.

The step times are built to the test: a drift that moves every environment of a repetition
alike (what interleaving is for), a learner a fixed fraction faster than stock inside each
repetition, a failed run, a campaign where the learner changes nothing. The paired numbers must
see through the drift where the environments' own intervals cannot, the failed run must be
named and left out, and the headline must say paid, not paid, or that it cannot tell.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.live.workload_ab import WORKLOAD_KIND, analyze_workload_ab
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.ingest.datasets import write_rows
from ncclbot_sweep.sweep.campaign import Campaign

STEPS = 20


def _write(root, campaign: str, factors: dict[str, float], *, repeats: int, drift_ms: float = 12.0,
           failed: tuple[str, int] | None = None, seed: int = 1) -> None:
    """One run per environment and repetition: step times (100 ms + drift x repetition) x factor, with noise."""
    rng = np.random.default_rng(seed)
    runs, steps = [], []
    for rep in range(repeats):
        for env, factor in factors.items():
            run_id = f"{campaign}-{env}-{rep}"
            ok = failed != (env, rep)
            runs.append({"run_id": run_id, "campaign": campaign, "fabric": "sim-h100", "kind": WORKLOAD_KIND,
                         "nodes": 8, "ranks": 64, "policy": env, "outcome": "ok" if ok else "timeout",
                         "failure": None if ok else "exit code 124 (timeout)", "synthetic": True,
                         "source_path": run_id, "source_sha256": run_id})
            base = (100.0 + drift_ms * rep) * factor / 1e3
            for step in range(STEPS if ok else 3):
                steps.append({"run_id": run_id, "campaign": campaign, "fabric": "sim-h100", "nodes": 8,
                              "environment": env, "repetition": rep, "step": step, "warmup": step < 2,
                              "step_time_s": base * (5.0 if step == 0 else rng.lognormal(0.0, 0.004)),
                              "source": "megatron", "line": step + 3, "source_path": run_id,
                              "source_sha256": run_id})
    write_rows(root, "runs", runs)
    write_rows(root, "workload_steps", steps)


def test_paired_repetitions_see_a_saving_through_the_drift(tmp_path):
    _write(tmp_path, "drift", {"stock": 1.0, "AUTO": 1.0, "ucb1": 0.95}, repeats=5, failed=("AUTO", 3))
    result = analyze_workload_ab(tmp_path, out=tmp_path / "out", n_boot=1000)
    envs = result.tables["workload_environments"].set_index("environment")
    assert list(envs.index) == ["stock", "AUTO", "UCB1"], "stock first, then AUTO, then the learners"
    assert envs.loc["UCB1", "ci_high_ms"] > envs.loc["stock", "ci_low_ms"], \
        "the drift makes the environments' own intervals overlap"
    assert (envs.loc["AUTO", "runs"], envs.loc["AUTO", "failed_runs"], envs.loc["AUTO", "steps"]) == (4, 1, 72)
    comp = result.tables["workload_comparisons"].set_index(["environment", "reference"])
    ucb1 = comp.loc[("UCB1", "stock")]
    assert ucb1["saving"] == pytest.approx(0.05, abs=0.004) and ucb1["saving_ci_low"] > 0.04
    assert ucb1["speedup"] == pytest.approx(1 / 0.95, abs=0.005)
    assert ucb1["repetitions"] == 5 and ucb1["p_value"] == pytest.approx(2 / 32)
    assert comp.loc[("UCB1", "AUTO"), "repetitions"] == 4, "the repetition whose AUTO run failed pairs nothing"
    auto = comp.loc[("AUTO", "stock")]
    assert auto["saving_ci_low"] < 0 < auto["saving_ci_high"]
    (issue,) = result.tables["workload_issues"].itertuples()
    assert (issue.environment, issue.what) == ("AUTO", "timeout: exit code 124 (timeout)")
    (scenario,) = result.headline["scenarios"]
    assert re.fullmatch(r"On drift \(sim-h100, 8 nodes\) the plugin paid: UCB1 cut the median step time by "
                        r"(4\.[89]|5\.[01])% against stock \(95% CI \d\.\d% to \d\.\d%, paired sign-flip "
                        r"p = 0\.0625 over 5 repetitions\)\.", scenario["sentence"]), scenario["sentence"]
    headline = json.loads((tmp_path / "out" / "headline.json").read_text())
    assert headline["scenarios"][0]["best_vs_stock"]["repetitions"] == 5
    reps = result.tables["workload_repetitions"]
    assert len(reps) == 14 and (tmp_path / "out" / "figures" / "workload_ab-drift-8n.png").stat().st_size > 10_000


def test_a_learner_that_changes_nothing_did_not_pay_and_one_repetition_cannot_tell(tmp_path):
    _write(tmp_path, "flat", {"stock": 1.0, "greedy": 1.0, "ucb1": 1.004}, repeats=6)
    _write(tmp_path, "once", {"stock": 1.0, "ucb1": 0.9}, repeats=1)
    result = analyze_workload_ab(tmp_path, n_boot=500)
    sentences = {s["campaign"]: s["sentence"] for s in result.headline["scenarios"]}
    assert "the plugin did not measurably pay: greedy, the best learner, changed the median step time by" \
        in sentences["flat"]
    assert sentences["once"] == ("On once (sim-h100, 8 nodes) UCB1, the best learner, ran beside stock in one "
                                 "repetition only: whether the plugin paid needs two or more (the campaign's repeats).")


def test_errors_name_the_dataset_and_the_campaigns(tmp_path):
    _write(tmp_path, "drift", {"stock": 1.0, "ucb1": 0.95}, repeats=2)
    with pytest.raises(AnalysisError, match=r"no run of workload campaign 'drif' \(did you mean 'drift'\?\)"):
        analyze_workload_ab(tmp_path, campaign="drif")
    result = CliRunner().invoke(main, ["analyze", "workload-ab", "-d", str(tmp_path / "none"), "-o", str(tmp_path)])
    assert result.exit_code == 1 and "dataset folder does not exist" in result.output
    assert WORKLOAD_KIND in Campaign.model_fields["kind"].annotation.__args__
