"""Supervised selectors: fit on train contexts only, argmin per context, replay policies, tuning."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from ncclbot_sweep.analysis.policies import parse_policy
from ncclbot_sweep.analysis.replay import run_replay, split_labels
from ncclbot_sweep.analysis.study.supervised import fit_choices, selection_trlt, validation_folds
from ncclbot_sweep.errors import AnalysisError

from .simpools import write_sim_dataset


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    from ncclbot_sweep.analysis.inputs import load_problem

    root = write_sim_dataset(tmp_path_factory.mktemp("sup-ds"), nodes=(4, 8, 16),
                             sizes=tuple(2**k for k in range(10, 31, 2)), iters=30)
    return load_problem(root)


def _poisoned(problem, test):
    """The same problem with every test context's measured latencies scrambled."""
    rng = np.random.default_rng(1)
    pools = problem.pools
    factor = np.where(test[:, None], rng.uniform(0.1, 10.0, pools.depth.shape), 1.0)
    bad = dataclasses.replace(pools, samples=pools.samples * factor[:, :, None], steady=pools.steady * factor)
    return dataclasses.replace(problem, pools=bad)


@pytest.mark.parametrize("spec", ["GBM+cost", "RF[n_estimators=50]", "Linear+cost"])
def test_poisoning_test_labels_leaves_the_fit_unchanged(problem, spec):
    labels = split_labels(problem.contexts, "scale")
    test = (labels["part"] == "test").to_numpy()
    policy = parse_policy(spec)
    clean = fit_choices(policy, problem, labels)
    poisoned = fit_choices(policy, _poisoned(problem, test), labels)
    np.testing.assert_array_equal(clean, poisoned)
    # and the fit does depend on its train labels
    train_poisoned = fit_choices(policy, _poisoned(problem, ~test), labels)
    assert (train_poisoned != clean).any()


def test_supervised_selectors_replay_as_fixed_arms_beside_the_learners(problem):
    policies = [parse_policy(s) for s in ("AUTO", "UCB1", "GBM+cost", "RF")]
    frame = run_replay(problem, policies, horizon=30, seeds=range(2))
    gbm = frame[frame["policy"] == "GBM+cost"]
    assert set(frame["policy"]) == {"AUTO", "UCB1", "GBM+cost", "RF"}
    assert gbm["distinct_arms"].max() == 1 and gbm["deterministic"].all()
    # a fixed arm's selection price is its steady excess
    choice = fit_choices(parse_policy("GBM+cost"), problem, split_labels(problem.contexts, "scale"))
    first = gbm[gbm["seed"] == 0]
    np.testing.assert_allclose(first["trlt_selection"].to_numpy(), selection_trlt(problem, choice), atol=1e-12)
    assert (first["trlt_selection"] > -1e-12).all()


def test_leave_one_collective_out_fits_once_per_fold_on_the_others(problem):
    labels = split_labels(problem.contexts, "loco")
    policy = parse_policy("GBM")
    choice = fit_choices(policy, problem, labels)
    held = (labels["fold"] == "AllGather").to_numpy()
    poisoned = fit_choices(policy, _poisoned(problem, held), labels)
    np.testing.assert_array_equal(choice[held], poisoned[held])


def test_validation_folds_copy_the_shift_and_need_two_groups(problem):
    from ncclbot_sweep.analysis.study.tune import train_partition

    train = train_partition(problem, "scale")
    folds = validation_folds(train.contexts, "scale")
    assert len(folds) == 2 and all(set(train.contexts["nodes"][f]) in ({4}, {8}) for f in folds)
    with pytest.raises(AnalysisError, match="one group"):
        validation_folds(train.contexts[train.contexts["nodes"] == 4], "scale")


def test_unknown_supervised_name_and_parameter(problem):
    with pytest.raises(AnalysisError, match="GBM\\+cost"):
        parse_policy("GBM+price")
    with pytest.raises(AnalysisError, match="no parameter"):
        parse_policy("RF[depth=3]")


def test_tuned_selector_champion_is_written_in_the_policies_grammar(problem, tmp_path):
    from ncclbot_sweep.analysis.study import TuneOptions, read_champions, tune
    from ncclbot_sweep.analysis.study.supervised import validation_trlt
    from ncclbot_sweep.analysis.study.tune import train_partition

    path = tune(problem, tmp_path, options=TuneOptions(families=("GBM+cost",), trials=4, startup=2))
    doc = read_champions(path)
    champion = parse_policy(doc["policies"][0])
    assert champion.display_name == "GBM+cost-tuned" and champion.cost
    recorded = doc["studies"]["GBM+cost"]["train_trlt_best"]
    assert validation_trlt(champion, train_partition(problem, "scale"), "scale") == recorded
    assert recorded <= doc["studies"]["GBM+cost"]["train_trlt_default"]


@pytest.mark.parametrize("entry", ["ncclbot_sweep.analysis.study", "ncclbot_sweep.analysis.report.build"])
def test_what_resolves_policies_by_name_registers_the_supervised_selectors(entry):
    """The study and the report (``analyze report --policies GBM+cost``) know the selectors in a fresh process."""
    probe = f"import {entry}\nfrom ncclbot_sweep.analysis.policies import parse_policy\nparse_policy('GBM+cost')"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_analyze_replay_knows_the_supervised_selectors_in_a_fresh_process(tmp_path):
    """The policy registry never imports the study (no import circle): the selectors register
    when the study is imported, which ``analyze replay`` does before it parses ``--policies``."""
    root = write_sim_dataset(tmp_path / "ds", nodes=(4, 8, 16), sizes=tuple(2**k for k in range(10, 31, 4)), iters=20)
    command = ["analyze", "replay", "-d", str(root), "--policies", "AUTO,GBM+cost", "--horizon", "10", "--seeds", "1",
               "-o", str(tmp_path / "replay.parquet"), "--json"]
    done = subprocess.run([sys.executable, "-c", "from ncclbot_sweep.cli import main; main()", *command],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [row["policy"] for row in json.loads(done.stdout)["summary"]] == ["AUTO", "GBM+cost"]
