"""Pure parsers for sbatch/squeue/sacct output, on literal Slurm 22.05 text (no cluster needed)."""

from __future__ import annotations

import pytest

from ncclbot_sweep.sweep.executors import slurm_parse as sp
from ncclbot_sweep.sweep.executors.base import JobState


@pytest.mark.parametrize("raw, state", [
    ("PENDING", JobState.PENDING), ("RUNNING", JobState.RUNNING), ("COMPLETING", JobState.RUNNING),
    ("COMPLETED", JobState.COMPLETED), ("FAILED", JobState.FAILED), ("TIMEOUT", JobState.TIMEOUT),
    ("NODE_FAIL", JobState.NODE_FAIL), ("CANCELLED by 0", JobState.CANCELLED),
    ("PREEMPTED", JobState.PREEMPTED), ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
    ("BOOT_FAIL", JobState.FAILED), ("REQUEUED", JobState.PENDING), ("CANCELLED+", JobState.CANCELLED),
    ("WEIRD", JobState.UNKNOWN),
])
def test_map_state(raw, state):
    assert sp.map_state(raw) is state


def test_parse_sbatch():
    assert sp.parse_sbatch("1234\n") == "1234"
    assert sp.parse_sbatch("77;cluster2\n") == "77"
    with pytest.raises(ValueError):
        sp.parse_sbatch("Submitted batch job\n")


def test_parse_squeue_rows_and_garbage():
    text = ("1|RUNNING|None|ncclbot:c1:j1|ncclbot:c1:j1\n"
            "2|PENDING|ReqNodeNotAvail, UnavailableNodes:n2|ncclbot:c1:j2|(null)\n"
            "3|NODE_FAIL|NodeDown|other|a|b\n"
            "garbage line\n\n")
    rows = sp.parse_squeue(text)
    assert set(rows) == {"1", "2", "3"}
    assert rows["1"].status.state is JobState.RUNNING and rows["1"].status.reason == ""
    assert rows["2"].comment == "" and rows["2"].name == "ncclbot:c1:j2"
    assert rows["3"].comment == "a|b"
    assert sp.unavailable_reason(rows["2"]) == "ReqNodeNotAvail, UnavailableNodes:n2"
    assert sp.unavailable_reason(rows["1"]) is None


def test_parse_sacct_exit_codes_and_last_row_wins():
    text = ("10|COMPLETED|0:0|None|ncclbot:c:j\n"
            "11|FAILED|2:0|NonZeroExitCode|ncclbot:c:k\n"
            "12|CANCELLED by 0|0:15|None|x\n"
            "12|TIMEOUT|0:0|TimeLimit|x\n"
            "bad\n")
    rows = sp.parse_sacct(text)
    assert rows["10"].status.exit_code == 0
    assert rows["11"].status.exit_code == 2 and rows["11"].status.state is JobState.FAILED
    assert rows["12"].status.state is JobState.TIMEOUT
    assert sp.parse_exit_code("0:9") == 137
    assert sp.parse_exit_code("") is None


def test_classify_submit_error():
    bad = sp.classify_submit_error("sbatch: error: invalid partition specified: nosuch\n"
                                   "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert not bad.retryable and "invalid partition specified: nosuch" in bad.reason
    qos = sp.classify_submit_error("sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
                                   "sbatch: error: Batch job submission failed: Job violates accounting/QOS "
                                   "policy (job submit limit, user's size and/or time limits)\n")
    assert qos.retryable and not qos.ambiguous
    down = sp.classify_submit_error("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n")
    assert down.retryable and down.ambiguous
