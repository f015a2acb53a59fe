"""Durable per-context statistics: saved at finalize under NCCLBOT_STATE_DIR and
loaded as the warm start of the next run with the same communicator shape."""

from __future__ import annotations

import nb_host as H

AR, MIB = 4, 1 << 20
TABLE = H.cost_table({H.RING_LL128: 10.0, H.RING_SIMPLE: 11.0, H.TREE_SIMPLE: 12.0})
TRUTH = {H.RING_LL128: 30.0, H.RING_SIMPLE: 31.0, H.TREE_SIMPLE: 9.0}  # the model is wrong


def run(plugin, comm_id, calls):
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    arms = []
    for _ in range(calls):
        arm = r.call(AR, MIB, TABLE)[1]
        arms.append(arm)
        r.measure(AR, MIB, arm, TRUTH[arm])
    r.finalize()
    return arms


def test_state_round_trip_warm_starts_next_run(plugin, nb_env, comm_id, tmp_path):
    nb_env(policy="ucb1", min_bytes=0, state_dir=tmp_path, ucb_alpha=0.3)
    fresh = run(plugin, comm_id, 200)
    assert fresh[0] == H.RING_LL128 and fresh[-1] == H.TREE_SIMPLE
    state = tmp_path / "ncclbot-state-n1-r1.csv"
    lines = state.read_text().splitlines()
    assert lines[:2] == ["# ncclbot-state v1", "collective,size_bytes,mu_min,arm,n,mean"]
    rows = {l.split(",")[3]: l.split(",") for l in lines[2:]}
    assert set(rows) == {"Tree/Simple", "Ring/LL128", "Ring/Simple"}
    assert float(rows["Tree/Simple"][4]) > 150  # n: pseudo-count plus its pulls
    resumed = run(plugin, comm_id + 1, 5)
    assert resumed == [H.TREE_SIMPLE] * 5, "the next run starts from what was learned"
    nb_env(state_dir="")
    assert run(plugin, comm_id + 2, 1) == [H.RING_LL128]  # without the state: the model's arm


def test_other_shapes_do_not_load_the_state(plugin, nb_env, comm_id, tmp_path):
    nb_env(policy="ucb1", min_bytes=0, state_dir=tmp_path, ucb_alpha=0.3)
    run(plugin, comm_id, 100)
    assert (tmp_path / "ncclbot-state-n1-r1.csv").exists()
    assert not (tmp_path / "ncclbot-state-n2-r1.csv").exists()


def test_corrupt_state_is_ignored_with_a_message(plugin, nb_env, comm_id, tmp_path):
    (tmp_path / "ncclbot-state-n1-r1.csv").write_text("# ncclbot-state v1\nAllReduce,x\n")
    nb_env(policy="ucb1", min_bytes=0, state_dir=tmp_path)
    assert run(plugin, comm_id, 1) == [H.RING_LL128]
    assert "ncclbot-state-n1-r1.csv:2: bad row" in H.take_log()
