"""``analyze tune``: resumable Optuna studies, champions that replay to their record, clear errors."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.study import read_champions
from ncclbot_sweep.analysis.study.spaces import defaults
from ncclbot_sweep.cli import main

from .simpools import write_sim_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune-ds")
    return write_sim_dataset(root, nodes=(4, 8, 16), sizes=tuple(2**k for k in range(12, 31, 3)), iters=40)


def _trials(out, family="UCB1"):
    """(number, params, value) of the complete trials of one study, read from the journal."""
    import optuna
    from optuna.trial import TrialState

    from ncclbot_sweep.analysis.study import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(out, None)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if family not in names:
        return [], []
    study = optuna.load_study(study_name=family, storage=storage)
    return (study.get_trials(states=(TrialState.COMPLETE,)), study.get_trials(states=(TrialState.FAIL,)))


def _tune_args(dataset, out, trials):
    return ["analyze", "tune", "--dataset", str(dataset), "--out", str(out), "--families", "UCB1",
            "--trials", str(trials), "--startup-trials", "10", "--horizon", "40"]


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """One collective, three node counts, three sizes: a 151-trial study in seconds."""
    root = tmp_path_factory.mktemp("tune-tiny")
    return write_sim_dataset(root, collectives=("AllReduce",), nodes=(4, 8, 16),
                             sizes=tuple(2**k for k in range(12, 31, 6)), iters=30)


def _full_budget_args(dataset, out):
    """The paper's budget from the CLI defaults: trial 0 + 50 random start-up + 100 TPE = 151."""
    return ["analyze", "tune", "--dataset", str(dataset), "--out", str(out), "--families", "UCB1", "--horizon", "40"]


def _kill_at(cmd, out, target, pause, timeout=300):
    """Run ``cmd`` and SIGKILL its process group ``pause`` s after ``target`` trials completed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while len(_trials(out)[0]) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # each poll re-reads the journal: keep it light beside the tuner
        time.sleep(pause)  # lands anywhere: inside a trial, between trials, mid journal write
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)


def test_a_study_killed_at_a_random_point_resumes_to_exactly_151_trials_and_the_same_champion(tiny_dataset, tmp_path):
    n = 151
    seed = time.time_ns()
    rng = random.Random(seed)
    target, pause = rng.randint(1, 130), rng.uniform(0.0, 0.2)
    where = f"kill after {target} trials + {pause:.3f} s (random.Random({seed}))"
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    _kill_at([sys.executable, "-c", "from ncclbot_sweep.cli import main; main()", *_full_budget_args(tiny_dataset, killed)],
             killed, target, pause)
    before = len(_trials(killed)[0])
    assert target <= before < n, f"{where}: the study should be cut short, but had {before} of {n} trials"
    resumed = CliRunner().invoke(main, _full_budget_args(tiny_dataset, killed))
    assert resumed.exit_code == 0, resumed.output
    again = CliRunner().invoke(main, _full_budget_args(tiny_dataset, straight))
    assert again.exit_code == 0, again.output
    done, failed = _trials(killed)
    reference, _ = _trials(straight)
    assert len(done) == n and len(reference) == n, where
    assert done[0].params == reference[0].params == defaults("UCB1"), where  # trial 0: the educated guess
    assert [t.params for t in done] == [t.params for t in reference], where
    assert [t.value for t in done] == [t.value for t in reference], where
    assert len(failed) <= 1, where  # the trial the kill interrupted, if it was mid-trial
    assert read_champions(killed / "champions.yaml") == read_champions(straight / "champions.yaml"), where
    # running a finished campaign again adds nothing
    assert CliRunner().invoke(main, _full_budget_args(tiny_dataset, killed)).exit_code == 0
    assert len(_trials(killed)[0]) == n


def test_champions_replay_to_the_train_trlt_their_study_recorded(dataset, tmp_path):
    from ncclbot_sweep.analysis.inputs import load_problem
    from ncclbot_sweep.analysis.policies import expand_policy_list, parse_policy
    from ncclbot_sweep.analysis.replay import run_policy
    from ncclbot_sweep.analysis.study import TuneOptions, read_champions, train_partition, tune
    from ncclbot_sweep.analysis.study.tune import objective_value

    problem = load_problem(dataset)
    options = TuneOptions(families=("Softmax", "ETC", "Hierarchical"), trials=6, startup=3, horizon=40, seeds=2)
    path = tune(problem, tmp_path, options=options)
    doc = read_champions(path)
    train = train_partition(problem, "scale")
    specs = expand_policy_list(f"@{path}")
    assert len(specs) == 3
    for spec in specs:
        policy = parse_policy(spec)
        run = run_policy(train, policy, horizon=40, seeds=options.replay_seeds)
        assert objective_value(run, "selection") == doc["studies"][policy.display_name]["train_trlt_best"]
    assert (tmp_path / "search_progress.png").stat().st_size > 1000
    progress = pd.read_csv(tmp_path / "search_progress.csv")  # the figure's data: best-so-far per line
    assert "global best so far" in set(progress["line"])
    assert progress.groupby("line")["best_so_far_pct"].apply(lambda v: v.is_monotonic_decreasing).all()
    table = (tmp_path / "tables" / "table16.md").read_text()
    assert "best_trial" in table and "Softmax" in table
    assert doc["studies"]["Softmax"]["trials"] == 6
    realized = tune(problem, tmp_path / "realized", options=TuneOptions(families=("UCB1",), trials=4, startup=2,
                                                                       horizon=40, objective="realized"))
    record = read_champions(realized)
    run = run_policy(train, parse_policy(record["policies"][0]), horizon=40, seeds=[42])
    assert objective_value(run, "realized") == record["studies"]["UCB1"]["train_trlt_best"]
    assert "realized-priced" in record["objective"]


def test_replay_takes_the_champions_file(dataset, tmp_path):
    (tmp_path / "champions.yaml").write_text("policies:\n- UCB1[alpha=0.2;label=UCB1-a]\n- ETC[m=2]\n")
    out = tmp_path / "r.parquet"
    result = CliRunner().invoke(main, ["analyze", "replay", "--dataset", str(dataset), "--policies",
                                       f"AUTO,@{tmp_path / 'champions.yaml'}", "--seeds", "1", "--horizon", "20",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "| UCB1-a" in result.output and "| ETC" in result.output
    missing = CliRunner().invoke(main, ["analyze", "replay", "--dataset", str(dataset), "--policies",
                                        f"@{tmp_path / 'nope.yaml'}", "--out", str(out)])
    assert missing.exit_code == 1 and "nope.yaml' does not exist" in missing.output


def test_bad_inputs_name_the_fix(dataset, tmp_path):
    runner = CliRunner()
    unknown = runner.invoke(main, ["analyze", "tune", "--dataset", str(dataset), "--out", str(tmp_path / "a"),
                                   "--families", "UCB1,UCB9"])
    assert unknown.exit_code == 1
    assert "Error: unknown learning family 'UCB9'" in unknown.output and "--families" in unknown.output
    url = "postgresql://nobody@127.0.0.1:9/none"
    storage = runner.invoke(main, ["analyze", "tune", "--dataset", str(dataset), "--out", str(tmp_path / "b"),
                                   "--families", "UCB1", "--trials", "2", "--storage", url])
    assert storage.exit_code == 1
    assert f"Error: cannot open Optuna storage '{url}'" in storage.output and "leave --storage out" in storage.output
    one = write_sim_dataset(tmp_path / "one", nodes=(8,), sizes=(4096, 1 << 20), iters=20)
    single = runner.invoke(main, ["analyze", "tune", "--dataset", str(one), "--out", str(tmp_path / "c"),
                                  "--families", "UCB1", "--trials", "2"])
    assert single.exit_code == 1
    assert "Error: the scale split needs at least two node counts" in single.output and "--split random" in single.output


def test_a_torn_journal_line_from_a_killed_writer_is_cut(dataset, tmp_path):
    assert CliRunner().invoke(main, _tune_args(dataset, tmp_path, 3)).exit_code == 0
    journal = tmp_path / "studies.journal"
    with open(journal, "ab") as handle:
        handle.write(b'{"op_code": 4, "worker_id": "x", "study_id": 0, "datetime_sta')
    result = CliRunner().invoke(main, _tune_args(dataset, tmp_path, 5))
    assert result.exit_code == 0, result.output
    assert len(_trials(tmp_path)[0]) == 5 and journal.read_bytes().endswith(b"\n")


def test_workers_share_the_studies_and_a_later_family_joins_the_champions(dataset, tmp_path):
    from ncclbot_sweep.analysis.study import read_champions

    first = CliRunner().invoke(main, ["analyze", "tune", "--dataset", str(dataset), "--out", str(tmp_path),
                                      "--families", "UCB1,ETC", "--trials", "3", "--horizon", "20", "--workers", "2"])
    assert first.exit_code == 0, first.output
    assert len(_trials(tmp_path, "UCB1")[0]) == 3 and len(_trials(tmp_path, "ETC")[0]) == 3
    later = CliRunner().invoke(main, ["analyze", "tune", "--dataset", str(dataset), "--out", str(tmp_path),
                                      "--families", "Softmax", "--trials", "3", "--horizon", "20"])
    assert later.exit_code == 0, later.output
    doc = read_champions(tmp_path / "champions.yaml")
    assert set(doc["studies"]) == {"Softmax", "UCB1", "ETC"}
    assert sorted(s.split("[")[0] for s in doc["policies"]) == ["ETC", "Softmax", "UCB1"]


def test_resuming_with_other_options_is_refused(dataset, tmp_path):
    assert CliRunner().invoke(main, _tune_args(dataset, tmp_path, 2)).exit_code == 0
    other = CliRunner().invoke(main, [*_tune_args(dataset, tmp_path, 2), "--objective", "realized"])
    assert other.exit_code == 1
    assert "Error: study 'UCB1' was tuned with" in other.output and "tune into a new --out" in other.output


def test_every_learning_family_searches_the_observed_max_wrapper_off_at_trial_0():
    """Table 16's AOM knob: off in every educated guess, and a spec with it on replays with it on."""
    from ncclbot_sweep.analysis.policies import parse_policy
    from ncclbot_sweep.analysis.study import FAMILIES
    from ncclbot_sweep.analysis.study.spaces import policy_spec

    for name in FAMILIES:
        assert defaults(name)["aom"] is False
        assert not parse_policy(policy_spec(name, defaults(name))).estimator.observed_max
        assert parse_policy(policy_spec(name, {**defaults(name), "aom": True})).estimator.observed_max


def test_a_cold_campaign_never_warm_starts_and_cannot_resume_a_warm_one(dataset, tmp_path):
    """``--cold`` (Table 42): every trial of a warm-capable family replays with pseudo-count 0."""
    from ncclbot_sweep.analysis.policies import parse_policy

    cold = tmp_path / "cold"
    result = CliRunner().invoke(main, [*_tune_args(dataset, cold, 6), "--families", "UCB1,Hierarchical", "--cold"])
    assert result.exit_code == 0, result.output
    for family in ("UCB1", "Hierarchical"):
        done, _ = _trials(cold, family)
        assert len(done) == 6 and all("warm" not in t.params and "pc" not in t.params for t in done)
        assert all(parse_policy(t.user_attrs["spec"]).pseudo_count == 0.0 for t in done)
    doc = read_champions(cold / "champions.yaml")
    assert "warm start pinned off" in doc["objective"]
    warm = CliRunner().invoke(main, _tune_args(dataset, cold, 6))
    assert warm.exit_code == 1 and "was tuned with" in warm.output


def test_the_slurm_options_need_a_slurm_inventory_and_say_so(dataset, tmp_path):
    from ncclbot_sweep.resources import resource_path

    base = ["analyze", "tune", "-d", str(dataset), "-o", str(tmp_path / "t"), "--families", "UCB1", "--trials", "2"]
    alone = CliRunner().invoke(main, [*base, "--nodes", "2", "--wait"])
    assert alone.exit_code == 2 and "--nodes, --wait only apply to a Slurm job: add -i INVENTORY" in alone.output
    local = CliRunner().invoke(main, [*base, "-i", "sim-h100", "--nodes", "2"])
    assert local.exit_code == 1, local.output
    assert "Error: inventory 'sim-h100' runs jobs with the local executor, not Slurm" in local.output
    assert "leave -i out to tune on this machine" in local.output
    text = resource_path("inventories", "h100-spectrumx.yaml").read_text()
    no_workdir = tmp_path / "no-workdir.yaml"
    no_workdir.write_text("\n".join(line for line in text.splitlines() if "remote_workdir" not in line))
    ssh = CliRunner().invoke(main, [*base, "-i", str(no_workdir)])
    assert ssh.exit_code == 1 and "over SSH without access.remote_workdir" in ssh.output, ssh.output
    assert not (tmp_path / "t").exists()  # nothing rendered, nothing submitted
