"""One outcome rule: every exit code / job state / log / stdout combination gives the same step
outcome in ``manifest.sqlite`` (the runner) and in the ``runs`` table (ingest)."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest

from orch_support import local_inventory_text
from ncclbot_sweep import sim
from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest
from ncclbot_sweep.outcomes import StepOutcome, classify_step
from ncclbot_sweep.sweep import campaign_folder, runner
from ncclbot_sweep.sweep.executors import JobState, JobStatus, make_executor

CODES = [None, 0, 1, 3, 124, 137, 139, 143, "garbage"]
STATES = [JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.CANCELLED,
          JobState.PREEMPTED]
#: What the step printed: a result table, nothing, a run cut before its table, not nccl-tests at all.
STDOUTS = ["table", "empty", "truncated", "garbage"]
COMBOS = list(itertools.product(STDOUTS, [False, True], CODES))  # (stdout, invalid-arm log, exit code)
SIZES = [1024 * (i + 1) for i in range(len(COMBOS))]  # one step per combination
CAMPAIGN = f"""\
name: outcomes
kind: forced
collectives: [AllReduce]
nodes: [{", ".join(str(n) for n in range(1, len(STATES) + 1))}]
sizes: {{list: {SIZES}}}
arms: [Ring/Simple]
packing: {{steps_per_job: {len(SIZES)}}}
"""
_WARN = ("h:1:1 [0] enqueue.cc:1 NCCL WARN No algorithm/protocol available for function AllReduce with "
         "datatype ncclFloat32. NCCL_ALGO was set to Ring.\n")


@pytest.fixture(scope="module")
def stdouts() -> dict[str, str]:
    """Each kind of stdout, from what the simulated all_reduce_perf prints (a well-formed table)."""
    env = {**os.environ, "SLURM_NTASKS": "8", "SLURM_NNODES": "1", "SLURM_PROCID": "0"}
    table = subprocess.run([str(Path(sim.bin_dir()) / "all_reduce_perf"), "-b", "1K", "-e", "4K", "-n", "3"],
                           env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    header = table[:table.index("#       size")]
    assert header.startswith("# nccl-tests version") and "out-of-place" in header
    return {"table": table, "empty": "", "truncated": header,
            "garbage": "Segmentation fault (core dumped)\n\x00\x7f binary noise \ufffd\n"}


def _write_step(files, code, invalid: bool, stdout: str) -> None:
    Path(files.root).mkdir(parents=True, exist_ok=True)
    Path(files.stdout).write_text(stdout)
    Path(files.nccl_log).write_text("h:1:1 [0] NCCL INFO NCCL version 2.23.4+cuda12.6\n" + (_WARN if invalid else ""))
    Path(files.stderr).write_text("test.cu:100 NCCL failure 'invalid usage'\n" if code not in (None, 0) else "")
    if code is not None:
        Path(files.exit_marker).write_text(f"{code}\n")


def test_manifest_and_ingest_agree_on_every_combination(tmp_path, stdouts):
    inv = tmp_path / "inv.yaml"
    inv.write_text(local_inventory_text(tmp_path / "no-binaries-needed"))
    camp_file = tmp_path / "campaign.yaml"
    camp_file.write_text(CAMPAIGN)
    root = tmp_path / "camp"
    folder = campaign_folder.create(camp_file, inv, root)
    camp = runner._Campaign(folder=folder, executor=make_executor(folder.plan.inventory,  # the runner's own pairing
                                                                  state_dir=folder.executor_state))
    expected = {}
    try:
        assert len(folder.plan.jobs) == len(STATES)
        for job, state in zip(folder.plan.jobs, STATES):
            assert len(job.steps) == len(COMBOS)
            for step, (stdout, invalid, code) in zip(job.steps, COMBOS):
                _write_step(folder.paths.step_files(job.key, step.key), code, invalid, stdouts[stdout])
                expected[step.key] = (code, state, invalid, stdout)
            folder.manifest.mark_submitted(job.key, f"id-{job.key}")
            # _finish is how reconcile records an ended job: fetch (nothing, locally), classify, update.
            runner._finish(camp, job.key, JobStatus(state))
        manifest = {s.step_key: s.outcome for s in folder.manifest.steps()}
    finally:
        camp.close()
    summary = ingest([root], tmp_path / "ds", include_unfinished=True)
    assert not summary.quarantined
    runs = datasets.read_table(tmp_path / "ds", "runs").set_index("step_key")
    assert len(runs) == len(expected) == len(STATES) * len(COMBOS)
    mismatches = {key: (expected[key], manifest[key], runs.loc[key, "outcome"]) for key in expected
                  if manifest[key] is None or manifest[key].value != runs.loc[key, "outcome"]}
    assert not mismatches
    seen = {expected[key]: manifest[key] for key in expected}
    assert seen[(137, JobState.COMPLETED, False, "table")] is StepOutcome.TIMEOUT  # killed after the grace
    assert seen[(139, JobState.NODE_FAIL, False, "table")] is StepOutcome.NODE_FAIL
    assert seen[(143, JobState.CANCELLED, True, "table")] is StepOutcome.CANCELLED
    assert seen[(3, JobState.COMPLETED, True, "table")] is StepOutcome.INVALID_ARM
    assert seen[(0, JobState.FAILED, True, "table")] is StepOutcome.OK
    assert seen[("garbage", JobState.COMPLETED, False, "table")] is StepOutcome.FAILED
    assert seen[(None, JobState.PREEMPTED, False, "table")] is StepOutcome.CANCELLED
    assert seen[(None, JobState.FAILED, False, "table")] is StepOutcome.FAILED
    # Exit 0 is ok only with a usable result; without one, NCCL's refusal of the arm says why.
    for stdout in ("empty", "truncated", "garbage"):
        assert seen[(0, JobState.COMPLETED, False, stdout)] is StepOutcome.FAILED, stdout
        assert seen[(0, JobState.COMPLETED, True, stdout)] is StepOutcome.INVALID_ARM, stdout
        assert seen[(None, JobState.NODE_FAIL, False, stdout)] is StepOutcome.NODE_FAIL, stdout
    bad = runs[runs["failure"].isna() & (runs["outcome"] != "ok")]
    assert bad.empty, bad[["outcome", "exit_code"]]


def test_a_step_that_never_started_stays_pending():
    for state in STATES:
        assert classify_step(None, job_state=state, started=False, invalid_arm=False) is None
    assert classify_step(None, job_state=None, started=True, invalid_arm=False) is None  # still running
    assert classify_step(0, job_state=None, started=True, invalid_arm=True, output_ok=False) is StepOutcome.INVALID_ARM


_FALLBACK = ("h:1:1 [0] learn.c:61 NCCL WARN NCCLBOT: staying AUTO (NCCL's own choice) for communicator "
             "0123456789abcdef: rank 0: NCCLBOT_SYNC_EVERY=0 is invalid (expected an integer in [1, 4096])\n")


@pytest.mark.parametrize(("learner", "code", "stdout", "expected"), [
    (True, 0, "table", StepOutcome.AUTO_FALLBACK),  # the learner's numbers are AUTO's
    (False, 0, "table", StepOutcome.OK),  # AUTO through the plugin, inert or not, is AUTO's run
    (True, 1, "table", StepOutcome.FAILED),  # a failure stays a failure
    (True, 0, "empty", StepOutcome.FAILED),  # no result at all
])
def test_a_learning_step_that_kept_nccls_choice_ends_auto_fallback(tmp_path, stdouts, learner, code, stdout, expected):
    from ncclbot_sweep.outcomes import outcome_reason, step_outcome
    from ncclbot_sweep.paths import StepFiles
    from ncclbot_sweep.step_output import step_output_usable

    files = StepFiles(tmp_path / "step")
    _write_step(files, code, False, stdouts[stdout])
    with open(files.nccl_log, "a") as log:
        log.write(_FALLBACK)
    outcome, _code = step_outcome(files, job_state=JobState.COMPLETED, output_ok=lambda: step_output_usable(files),
                                  learner=learner)
    assert outcome is expected
    if outcome is StepOutcome.AUTO_FALLBACK:
        assert outcome_reason(files, outcome) == _FALLBACK.split("NCCL WARN ", 1)[1].strip()
