"""Stochastic policies on real rank processes with the real coordinator: every rank draws
the same numbers (counter-based generator) and so plays the same arm on every call; and
every setting that can change a decision or a failure is compared across ranks."""

from __future__ import annotations

import pytest

from nb_coord import Coordinator
from nb_trace import read_trace, trace_path
from test_plugin_ranks import SCALE, assert_identical, run_job

STOCHASTIC = {
    "softmax": {},
    "thompson": {"NCCLBOT_TS_PRIOR_VAR": "0.01"},
    "eps-greedy": {"NCCLBOT_EPSILON": "0.1"},
    "etc": {"NCCLBOT_ETC_M": "2"},
}


@pytest.mark.parametrize("policy", list(STOCHASTIC))
def test_stochastic_policy_is_rank_consistent(tmp_path, policy):
    comm = 0x5EED00 + list(STOCHASTIC).index(policy)
    calls = max(1000, int(3000 * SCALE))
    coord = Coordinator()
    try:
        results = run_job(tmp_path, coord, nranks=4, calls=calls, contexts=20, comm_id=comm,
                          env={"NCCLBOT_POLICY": policy, "NCCLBOT_SYNC_EVERY": "16", "NCCLBOT_SEED": "42",
                               **STOCHASTIC[policy]})
    finally:
        err = coord.stop()
    assert all(res["active"] for res in results), results[0]["log"][-500:]
    assert_identical(results)
    assert all(rc == 0 for res in results for rc in res["rc"])
    assert len(set(results[0]["arms"])) > 2, "the policy never explored: nothing was tested"
    traces = [read_trace(trace_path(tmp_path, comm, r)) for r in range(4)]
    rewards = [[x["reward"] for x in t if x["kind"] == "pull"] for t in traces]
    assert all(rw == rewards[0] for rw in rewards), "merged rewards differ between ranks"
    assert "different pulls" not in err


@pytest.mark.parametrize("setting,value", [
    ("NCCLBOT_SYNC_TIMEOUT_MS", "15000"),
    ("NCCLBOT_SYNC_INIT_TIMEOUT_MS", "50000"),
    ("NCCLBOT_SEED", "7"),
    ("NCCLBOT_SOFTMAX_TAU", "0.2"),
    ("NCCLBOT_SKIP_FIRST", "2"),
    ("NCCLBOT_SYNC_ON_FAILURE", "freeze"),
])
def test_ranks_with_different_settings_are_refused(tmp_path, setting, value):
    coord = Coordinator()
    try:
        results = run_job(tmp_path, coord, nranks=3, calls=200, comm_id=0xD1F0 + len(setting),
                          env={"NCCLBOT_POLICY": "softmax"}, rank_env={1: {setting: value}})
    finally:
        coord.stop()
    assert [res["active"] for res in results] == [False] * 3
    assert all("NCCLBOT_* settings or saved state differ" in res["log"] for res in results)
    assert_identical(results)
