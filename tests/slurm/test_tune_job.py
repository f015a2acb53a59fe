"""Tuning workers as one Slurm job (``analyze tune -i INVENTORY --nodes N``) on the loopback cluster.

The job runs the venv's own ``ncclbot-sweep`` on the nodes (the loopback nodes are this
machine), so the tests check the real path end to end: render, sbatch through the executor,
one ``analyze tune`` per node, the studies shared out by their locks, the poll, the mirror
back over SSH, and the report.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e_files import inventory, ssh_access
from ncclbot_sweep.cli import main

pytestmark = [pytest.mark.slurm]

FAMILIES = ("KL-UCB", "Tsallis-INF")
TRIALS = 12
#: About 5 s of trials per study, far longer than the nodes' start-up skew: both nodes get one.
HEAVY = ["--families", ",".join(FAMILIES), "--trials", str(TRIALS), "--startup-trials", "4", "--horizon", "1000",
         "--seeds", "8"]
LIGHT = ["--families", ",".join(FAMILIES), "--trials", str(TRIALS), "--startup-trials", "4", "--horizon", "40"]


def _sim_dataset(root: Path) -> Path:
    """A small simulated dataset, written the way the analysis tests write theirs (tests/analysis/simpools.py)."""
    spec = importlib.util.spec_from_file_location("simpools", Path(__file__).parents[1] / "analysis" / "simpools.py")
    simpools = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(simpools)
    return simpools.write_sim_dataset(root, collectives=("AllReduce",), nodes=(4, 8, 16),
                                      sizes=tuple(2**k for k in range(12, 31, 6)), iters=30)


def _inventory(tmp_path: Path, access: str) -> Path:
    """A loopback inventory whose nodes run this venv's ncclbot-sweep."""
    command = Path(sys.executable).parent / "ncclbot-sweep"
    return inventory(tmp_path / "inventory.yaml", bin_dir=tmp_path, access=access, environment={},
                     extra=f"ncclbot_sweep: {{command: '{command}'}}\n")


def _tune(dataset: Path, out: Path, inv: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["analyze", "tune", "-d", str(dataset), "-o", str(out), "-i", str(inv), *args])
    log = out / "job.log"
    return result.exit_code, result.output + (f"\n--- job.log\n{log.read_text()}" if log.is_file() else "")


def _studies(out: Path) -> dict:
    """{family: complete trials} read from the folder's journal."""
    import optuna
    from optuna.trial import TrialState

    from ncclbot_sweep.analysis.study import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(out, None)
    return {name: optuna.load_study(study_name=name, storage=storage).get_trials(states=(TrialState.COMPLETE,))
            for name in FAMILIES}


def _squeue(cluster, job_id: str) -> tuple[str, str, str]:
    """(name, comment, state) of one job as Slurm lists it."""
    listed = cluster.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%j|%k|%T").stdout.strip()
    name, comment, state = listed.split("|")
    return name, comment, state


def _job_id(output: str) -> str:
    return output.split("tuning job ")[1].split()[0]


def test_a_tuning_job_shares_the_studies_over_nodes_and_matches_one_process(tmp_path, slurm_cluster):
    from ncclbot_sweep.analysis.inputs import load_problem
    from ncclbot_sweep.analysis.study import TuneOptions, read_champions, tune

    dataset, out = _sim_dataset(tmp_path / "ds"), tmp_path / "tune"
    code, output = _tune(dataset, out, _inventory(tmp_path, "{kind: local}"), *HEAVY, "--nodes", "2", "--wait")
    assert code == 0, output
    job_id = _job_id(output)
    assert "ended COMPLETED" in output and f"| {FAMILIES[0]}" in output
    name, comment, state = _squeue(slurm_cluster, job_id)
    assert (name, state) == ("tune", "COMPLETED") and comment.startswith("ncclbot:tune-")  # readable name, tag
    studies = _studies(out)
    assert {family: len(trials) for family, trials in studies.items()} == {f: TRIALS for f in FAMILIES}
    hosts = {family: {t.user_attrs["host"] for t in trials} for family, trials in studies.items()}
    assert all(len(h) == 1 for h in hosts.values()), hosts  # one process at a time per study
    assert len(set().union(*hosts.values())) == 2 and set().union(*hosts.values()) <= {"n1", "n2", "n3", "n4"}, hosts
    logs = sorted((out / "workers").iterdir())  # one per task: <job id>-<task>-<host>.log
    assert [p.name.split("-")[:2] for p in logs] == [[job_id, "0"], [job_id, "1"]]
    assert all("Search summary (Table 16)" in p.read_text() for p in logs)
    # The tuner's determinism: trial k is sampled with seed 42+k from the k trials before it, on any node.
    reference = tmp_path / "one-process"
    tune(load_problem(dataset), reference, options=TuneOptions(families=FAMILIES, trials=TRIALS, startup=4,
                                                                horizon=1000, seeds=8))
    assert read_champions(out / "champions.yaml") == read_champions(reference / "champions.yaml")
    for family, trials in _studies(reference).items():
        assert [(t.params, t.value) for t in trials] == [(t.params, t.value) for t in studies[family]], family


def test_over_ssh_the_dataset_goes_up_once_and_the_folder_comes_back(tmp_path, sshd, slurm_cluster):
    remote = tmp_path / "remote"
    dataset, out = _sim_dataset(tmp_path / "ds"), tmp_path / "local" / "tune"
    inv = _inventory(tmp_path, ssh_access(sshd, remote))
    code, output = _tune(dataset, out, inv, *LIGHT, "--nodes", "2")  # no --wait: submit and return
    assert code == 0, output
    job_id = _job_id(output)
    assert f"Submitted: tuning job {job_id} (2 node(s) x 1 worker(s)), folder {remote / 'tune'}" in output
    uploaded = list((remote / "datasets").iterdir())
    assert len(uploaded) == 1 and uploaded[0].name.startswith("ds-")
    assert sorted(p.relative_to(uploaded[0]) for p in uploaded[0].rglob("*.parquet")) == \
        sorted(p.relative_to(dataset) for p in dataset.rglob("*.parquet"))
    # The same command again adopts the job: one job, never two.
    code, output = _tune(dataset, out, inv, *LIGHT, "--nodes", "2", "--wait")
    assert code == 0, output
    assert f"Already queued or running: tuning job {job_id}" in output
    assert f"Tuning job {job_id} ended COMPLETED" in output
    assert {family: len(trials) for family, trials in _studies(out).items()} == {f: TRIALS for f in FAMILIES}
    for name in ("champions.yaml", "job.sh", "job.log", "provenance.json", "tables/table16.csv", "trials.csv"):
        assert (out / name).is_file() and (remote / "tune" / name).read_bytes() == (out / name).read_bytes(), name
    # Once more after the end: a new job finds every study complete; the dataset is not sent again.
    sent = {p: p.stat().st_mtime_ns for p in uploaded[0].rglob("*") if p.is_file()}
    code, output = _tune(dataset, out, inv, *LIGHT, "--nodes", "2", "--wait")
    assert code == 0 and "Submitted: tuning job" in output and _job_id(output) != job_id, output
    assert {p: p.stat().st_mtime_ns for p in uploaded[0].rglob("*") if p.is_file()} == sent
    assert {family: len(trials) for family, trials in _studies(out).items()} == {f: TRIALS for f in FAMILIES}


def test_the_same_command_adopts_the_open_job_and_cancel_stops_it(tmp_path, slurm_cluster):
    dataset, out = _sim_dataset(tmp_path / "ds"), tmp_path / "tune"
    inv = _inventory(tmp_path, "{kind: local}")
    long = ["--families", ",".join(FAMILIES), "--trials", "151", "--horizon", "1000", "--seeds", "8"]
    code, output = _tune(dataset, out, inv, *long, "--nodes", "2")
    assert code == 0, output
    job_id = _job_id(output)
    code, again = _tune(dataset, out, inv, *long, "--nodes", "2")
    assert code == 0 and f"Already queued or running: tuning job {job_id}" in again, again
    tagged = [line for line in slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%k").stdout.split()
              if line.split("|")[1].startswith("ncclbot:tune-")]
    assert [line.split("|")[0] for line in tagged if _squeue(slurm_cluster, line.split("|")[0])[2] in
            ("PENDING", "RUNNING", "CONFIGURING")] == [job_id]
    code, cancelled = _tune(dataset, out, inv, *long, "--nodes", "2", "--cancel")
    assert code == 0 and f"Cancelled tuning job(s) {job_id}" in cancelled, cancelled
    slurm_cluster.wait_nodes_idle(30)
    assert _squeue(slurm_cluster, job_id)[2] == "CANCELLED"
    code, none = _tune(dataset, out, inv, *long, "--nodes", "2", "--cancel")
    assert code == 0 and "No tuning job of" in none
