"""Selection semantics of getCollInfo as NCCL sees them (reference 3.4-3.6):
forced arm = 0.0, -1 never selected nor overwritten, ties, the arm filter, the
size gate, nChannels untouched, bad configuration -> inert with one WARN."""

from __future__ import annotations

import ctypes as C
import math
import random
import struct

import pytest

import nb_host as H

AR = 4
MIB = 1 << 20
FLT_MIN = struct.unpack("f", struct.pack("I", 0x00800000))[0]


def static_rank(plugin, nb_env, comm_id, tmp_path, rows, nranks=1, **env):
    path = tmp_path / "table.csv"
    path.write_text("collective,nodes,ranks,size_bytes,arm\n" + "\n".join(rows) + "\n")
    nb_env(policy="static", static_table=path, min_bytes=0, **env)
    return H.Rank(plugin, comm_id, nranks, 1, 0)


def test_static_forces_arm_with_zero(plugin, nb_env, comm_id, tmp_path):
    r = static_rank(plugin, nb_env, comm_id, tmp_path, ["AllReduce,*,*,0,Ring/LL128"])
    table = H.cost_table({H.TREE_SIMPLE: 10.0, H.RING_LL128: 30.0, H.RING_SIMPLE: 12.0})
    rc, arm, after, nch = r.call(AR, MIB, table)
    assert (rc, arm, nch) == (0, H.RING_LL128, 0)
    assert after[H.RING_LL128] == 0.0
    assert [after[i] for i in range(21) if i != H.RING_LL128] == \
        [table[i] for i in range(21) if i != H.RING_LL128]
    r.finalize()


def test_forced_arm_wins_ties_with_existing_zero(plugin, nb_env, comm_id, tmp_path):
    r = static_rank(plugin, nb_env, comm_id, tmp_path, ["AllReduce,*,*,0,Ring/Simple"])
    table = H.cost_table({H.TREE_LL: 0.0, H.TREE_SIMPLE: 0.0, H.RING_SIMPLE: 5.0})
    rc, arm, after, _ = r.call(AR, MIB, table)
    assert arm == H.RING_SIMPLE
    assert after[H.TREE_LL] == FLT_MIN and after[H.TREE_SIMPLE] == FLT_MIN  # still available
    r.finalize()


def test_unavailable_arm_is_never_forced_or_overwritten(plugin, nb_env, comm_id, tmp_path):
    r = static_rank(plugin, nb_env, comm_id, tmp_path, ["AllReduce,*,*,0,NVLS/Simple"])
    table = H.cost_table({H.RING_SIMPLE: 5.0, H.RING_LL: 7.0})
    rc, arm, after, _ = r.call(AR, MIB, table)
    assert (rc, arm) == (0, H.RING_SIMPLE) and after == table
    rc, arm, after, _ = r.call(AR, MIB, [H.IGNORE] * 21)  # all -1: untouched, no error
    assert rc == 0 and arm is None and after == [H.IGNORE] * 21
    r.finalize()


def test_static_table_rows_floor_sizes_and_shapes(plugin, nb_env, comm_id, tmp_path):
    rows = ["AllReduce,*,*,1048576,Ring/LL", "AllReduce,1,1,4194304,Tree/Simple",
            "AllReduce,*,*,4194304,Ring/Simple", "AllReduce,2,16,1048576,Tree/LL",
            "AllGather,*,*,0,AUTO", "# comment", "Broadcast,*,*,1024,Ring/LL128"]
    r = static_rank(plugin, nb_env, comm_id, tmp_path, rows)
    table = H.cost_table({H.TREE_LL: 9.0, H.TREE_SIMPLE: 8.0, H.RING_LL: 7.0, H.RING_LL128: 6.5,
                          H.RING_SIMPLE: 6.0})
    assert r.call(AR, MIB, table)[1] == H.RING_LL
    assert r.call(AR, 3 * MIB, table)[1] == H.RING_LL           # floor on the size grid
    assert r.call(AR, 4 * MIB, table)[1] == H.TREE_SIMPLE       # exact shape beats '*'
    assert r.call(AR, 1000, table)[1] == H.RING_SIMPLE          # below the first row: AUTO
    assert r.call(2, MIB, table)[1] == H.RING_SIMPLE            # AUTO row
    assert r.call(0, 4096, table)[1] == H.RING_LL128
    r.finalize()


def test_bad_static_table_is_inert_with_line_number(plugin, nb_env, comm_id, tmp_path):
    r = static_rank(plugin, nb_env, comm_id, tmp_path, ["AllReduce,*,*,0,Ring/LL", "AllReduce,*,*,x,Ring"])
    assert not r.active
    log = H.take_log()
    assert "table.csv:3: bad row" in log and "staying AUTO" in log
    r.finalize()


@pytest.mark.parametrize("var,value,fragment", [
    ("POLICY", "ucb2", 'NCCLBOT_POLICY="ucb2" is invalid (expected one of auto, static, greedy, ucb1, etc, '
                       'softmax, thompson, eps-greedy)'),
    ("EPSILON", "1.5", 'NCCLBOT_EPSILON="1.5" is invalid (expected a number in [0, 1])'),
    ("ETC_M", "0", 'NCCLBOT_ETC_M="0" is invalid (expected an integer in [1, 1000000])'),
    ("SOFTMAX_DECAY", "yes", 'NCCLBOT_SOFTMAX_DECAY="yes" is invalid (expected an integer in [0, 1])'),
    ("SEED", "-1", 'NCCLBOT_SEED="-1" is invalid (expected an integer >= 0)'),
    ("SYNC_TIMEOUT_MS", "0", 'NCCLBOT_SYNC_TIMEOUT_MS="0" is invalid (expected an integer in [1, 86400000])'),
    ("RHO_MAX", "abc", 'NCCLBOT_RHO_MAX="abc" is invalid'),
    ("RHO_MAX", "0.5", 'NCCLBOT_RHO_MAX="0.5" is invalid (expected a number in [1, '),
    ("SYNC_ADDR", "nohost", 'NCCLBOT_SYNC_ADDR="nohost" is invalid (expected host:port with port in [1, 65535]'),
    ("SYNC_EVERY", "0", 'NCCLBOT_SYNC_EVERY="0" is invalid'),
    ("MIN_BYTES", "-5", 'NCCLBOT_MIN_BYTES="-5" is invalid'),
    ("ESTIMATOR", "median", 'NCCLBOT_ESTIMATOR="median" is invalid'),
])
def test_bad_setting_leaves_plugin_inert_with_one_warn(plugin, nb_env, comm_id, var, value, fragment):
    nb_env(**{var.lower(): value})
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    assert not r.active
    table = H.cost_table({H.RING_LL: 3.0, H.RING_SIMPLE: 4.0})
    assert r.call(AR, 64 * MIB, table)[2] == table
    warns = [l for l in H.take_log().splitlines() if l.startswith("2 ")]
    assert len(warns) == 1 and fragment in warns[0] and "staying AUTO" in warns[0]
    r.finalize()


def test_etc_is_always_cold(plugin, nb_env, comm_id):
    nb_env(policy="etc", pseudo_count="1.5")
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    assert not r.active
    assert 'NCCLBOT_PSEUDO_COUNT="1.5" is invalid (etc is always cold' in H.take_log()
    r.finalize()


def test_misspelt_variable_is_a_typo_not_a_default(plugin, nb_env, comm_id):
    nb_env(polcy="static")
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    assert not r.active
    assert "NCCLBOT_POLCY is not a setting of this plugin; did you mean NCCLBOT_POLICY?" in H.take_log()
    r.finalize()


def test_other_parts_ncclbot_variables_are_left_alone(plugin, nb_env, comm_id):
    """The simulator and the job scripts use NCCLBOT_SIM_*, NCCLBOT_STEP_KEY and the like."""
    nb_env(sim_fabric="sim-h100", sim_seed="3", sim_bin_cache="/x", step_key="k", ssh_key_passphrase="p",
           policy="ucb1", min_bytes=0)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    assert r.active
    r.finalize()


def test_slurm_default_coordinator_address(plugin, nb_env, comm_id, monkeypatch):
    monkeypatch.setenv("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1")
    monkeypatch.setenv("SLURM_JOB_ID", "12345")
    nb_env(sync_token="t", sync_init_timeout_ms=150)
    r = H.Rank(plugin, comm_id, 2, 1, 0)
    assert not r.active
    assert "cannot connect to the coordinator at 127.0.0.1:32345" in H.take_log()
    r.finalize()
    nb_env(sync_addr="")  # an empty address turns the Slurm default off: learning refuses
    r = H.Rank(plugin, comm_id + 1, 2, 1, 0)
    assert not r.active and "need NCCLBOT_SYNC_ADDR" in H.take_log()
    r.finalize()


def test_sync_without_token_is_refused(plugin, nb_env, comm_id):
    nb_env(sync_addr="127.0.0.1:1", sync_init_timeout_ms=100)
    r = H.Rank(plugin, comm_id, 2, 1, 0)
    assert not r.active and "NCCLBOT_SYNC_TOKEN" in H.take_log()
    r.finalize()


def test_learning_refuses_multi_rank_without_sync_but_static_works(plugin, nb_env, comm_id, tmp_path):
    nb_env(policy="ucb1", min_bytes=0)
    r = H.Rank(plugin, comm_id, 4, 1, 0)
    assert not r.active
    assert "need NCCLBOT_SYNC_ADDR" in H.take_log()
    r.finalize()
    s = static_rank(plugin, nb_env, comm_id + 1, tmp_path, ["AllReduce,*,*,0,Ring/LL"], nranks=4)
    assert s.active and s.call(AR, MIB, H.cost_table({H.RING_LL: 9.0, H.RING_SIMPLE: 1.0}))[1] == H.RING_LL
    s.finalize()
    nb_env(policy="auto")  # timed without rounds (tests/plugin/test_plugin_auto.py), NCCL's arm kept
    table = H.cost_table({H.RING_LL: 9.0, H.RING_SIMPLE: 1.0})
    a = H.Rank(plugin, comm_id + 2, 4, 1, 0)
    assert a.active and a.call(AR, MIB, table)[1:3] == (H.RING_SIMPLE, table)
    a.finalize()
    a = H.Rank(plugin, comm_id + 3, 4, 1, 0, profiler=False)
    assert not a.active and a.call(AR, MIB, table)[1] == H.RING_SIMPLE
    a.finalize()
    assert not [l for l in H.take_log().splitlines() if l.startswith("2 ")], "auto warned"


def test_learning_without_profiler_is_inert(plugin, nb_env, comm_id):
    nb_env(policy="ucb1", min_bytes=0)
    r = H.Rank(plugin, comm_id, 1, 1, 0, profiler=False)
    assert not r.active and "needs the profiler" in H.take_log()
    r.finalize()


def test_filter_and_cold_start_explore_only_kept_arms(plugin, nb_env, comm_id):
    nb_env(policy="ucb1", min_bytes=0, pseudo_count=0, rho_max=2)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    table = H.cost_table({H.TREE_SIMPLE: 10.0, H.RING_LL: 19.0, H.RING_LL128: 20.0, H.RING_SIMPLE: 21.0})
    seen = []
    for _ in range(3):
        rc, arm, _, _ = r.call(AR, MIB, table)
        seen.append(arm)
        r.measure(AR, MIB, arm, 10.0)
    assert seen == [H.TREE_SIMPLE, H.RING_LL, H.RING_LL128]  # cold: lowest unpulled first; 21 > 2*10 dropped
    for _ in range(30):
        arm = r.call(AR, MIB, table)[1]
        assert arm != H.RING_SIMPLE
        r.measure(AR, MIB, arm, 10.0)
    r.finalize()


def test_size_gate_keeps_ncclc_choice_and_times_nothing(plugin, nb_env, comm_id):
    nb_env(policy="ucb1", min_bytes=MIB, pseudo_count=0)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    table = H.cost_table({H.TREE_SIMPLE: 10.0, H.RING_LL: 1.0})
    for _ in range(5):
        rc, arm, after, _ = r.call(AR, MIB - 1, table)
        assert arm == H.RING_LL and after == table
    r.finalize()
    assert "0 timed pulls" in H.take_log()


def test_null_contexts_are_harmless(plugin):
    nch = C.c_int(0)
    arr = (C.c_float * 21)(*([1.0] * 21))
    assert plugin.tuner.getCollInfo(None, AR, MIB, 1, arr, 7, 3, 0, C.byref(nch)) == 0
    assert plugin.tuner.finalize(None) == 0
    h = C.c_void_p(1234)
    d = H.ProfDescrV6()
    d.type = H.PROFILE_COLL
    assert plugin.profiler.startEvent(None, C.byref(h), C.byref(d)) == 0 and h.value is None
    assert plugin.profiler.stopEvent(None) == 0
    assert plugin.profiler.recordEventState(None, H.KERNEL_CH_STOP, None) == 0
    assert plugin.profiler.finalize(None) == 0


def test_six_algorithm_table_of_nccl_2_22(plugin, nb_env, comm_id, tmp_path):
    r = static_rank(plugin, nb_env, comm_id, tmp_path, ["AllReduce,*,*,0,PAT/Simple"])
    table = [H.IGNORE] * 18
    table[H.RING_SIMPLE] = 3.0
    rc, arm, after, _ = r.call(AR, MIB, table, num_algo=6)
    assert rc == 0 and after == table  # PAT does not exist with numAlgo = 6
    r.finalize()


@pytest.mark.parametrize("policy", ["ucb1", "greedy", "static", "auto", "etc", "softmax", "thompson",
                                    "eps-greedy"])
def test_fuzzed_cost_tables_keep_nccl_invariants(plugin, nb_env, comm_id, tmp_path, policy):
    specials = [math.nan, math.inf, -math.inf, -1.0, -0.5, -0.0, 0.0, 3.4028234663852886e38, 1e-30]
    if policy == "static":
        r = static_rank(plugin, nb_env, comm_id, tmp_path, [f"AllReduce,*,*,0,{H.arm_name(a)}" for a in (5,)])
    else:
        nb_env(policy=policy, min_bytes=0, epsilon=0.3, **({} if policy == "etc" else {"pseudo_count": 0.5}))
        r = H.Rank(plugin, comm_id, 1, 1, 0)
    rng = random.Random(3)
    for i in range(400):
        table = [rng.choice(specials) if rng.random() < 0.5 else rng.uniform(0, 100) for _ in range(21)]
        table = [struct.unpack("f", struct.pack("f", v))[0] for v in table]
        rc, arm, after, nch = r.call(AR, MIB * (1 + i % 7), table)
        assert rc == 0 and nch == 0
        for j, (v0, v1) in enumerate(zip(table, after)):
            usable = v0 >= 0 and v0 < 3.4028234663852886e38  # NaN compares False
            if not usable:
                assert struct.pack("f", v0) == struct.pack("f", v1), f"unusable cell {j} changed"
            elif v1 != v0:
                assert v1 in (0.0, FLT_MIN), f"cell {j} got {v1}"
        if arm is not None:
            assert table[arm] >= 0 and table[arm] < 3.4028234663852886e38
            if policy != "static":
                r.measure(AR, MIB * (1 + i % 7), arm, rng.uniform(1, 50))
    r.finalize()


def test_tuner_v4_static_works_learning_refused(plugin, nb_env, tmp_path):
    """NCCL 2.24-2.27 load ncclTunerPlugin_v4: init(nRanks, nNodes, logger, &ctx), no commId."""
    v4 = H.TunerV6.in_dll(plugin.lib, "ncclTunerPlugin_v4")  # name, init, getCollInfo, destroy
    init4 = C.CFUNCTYPE(C.c_int, C.c_size_t, C.c_size_t, C.c_void_p, C.POINTER(C.c_void_p))
    init_fn = C.cast(C.cast(C.addressof(v4) + 8, C.POINTER(C.c_void_p)).contents.value, init4)
    path = tmp_path / "t.csv"
    path.write_text("AllReduce,*,*,0,Ring/LL\n")
    nb_env(policy="static", static_table=path, min_bytes=0)
    ctx = C.c_void_p()
    assert init_fn(1, 1, H.logger_ptr(), C.byref(ctx)) == 0 and ctx.value
    arr = (C.c_float * 21)(*H.cost_table({H.RING_LL: 9.0, H.RING_SIMPLE: 1.0}))
    nch = C.c_int(0)
    assert v4.getCollInfo(ctx, AR, MIB, 1, arr, 7, 3, 0, C.byref(nch)) == 0
    assert H.nccl_choice(list(arr)) == H.RING_LL
    assert v4.finalize(ctx) == 0
    nb_env(policy="ucb1")
    ctx = C.c_void_p()
    assert init_fn(1, 1, H.logger_ptr(), C.byref(ctx)) == 0 and not ctx.value
    assert "learning needs tuner v5+" in H.take_log()
