"""The C bandit against its per-call reference, the analysis package's StepPolicy (the
families the offline replay evaluates, driven one call at a time, with the plugin's
counter-based draws): fed the same rewards, every policy chooses the same arms and ends
with the same per-arm counts and means, bit for bit, up to 21 arms. Also the shared
generator and the UCB1 index (N and every arm's index) compared directly."""

from __future__ import annotations

import csv
import ctypes
import itertools
import random
import struct
import zlib

import numpy as np
import pytest

import nb_host as H
from ncclbot_sweep.analysis import policies as P
from ncclbot_sweep.analysis.policies import counter_rng
from ncclbot_sweep.analysis.policies.base import held as held_arms

MIB = 1 << 20
_RUNS = itertools.count()
# plugin policy -> (family, plugin settings, family parameters)
CASES = {
    "ucb1": ("UCB1", {"policy": "ucb1"}, {}),
    "ucb1-mean": ("UCB1", {"policy": "ucb1", "estimator": "mean", "ucb_alpha": 0.3},
                  {"alpha": 0.3, "estimator": {"kind": "mean"}}),
    "ucb1-gain-cold": ("UCB1", {"policy": "ucb1", "estimator": "gain", "pseudo_count": 0, "ucb_alpha": 0.3},
                       {"alpha": 0.3, "pseudo_count": 0.0, "estimator": {"kind": "gain"}}),
    # the clipped-SGD step stops decaying at a count the 160 steps pass (NCCLBOT_SGD_NMAX)
    "ucb1-nmax": ("UCB1", {"policy": "ucb1", "sgd_nmax": 9.5}, {"estimator": {"kind": "sgd", "n_max": 9.5}}),
    "greedy": ("greedy", {"policy": "greedy"}, {}),
    "greedy-sgd": ("greedy", {"policy": "greedy", "estimator": "sgd"}, {"estimator": {"kind": "sgd"}}),
    "eps-greedy": ("eps-greedy", {"policy": "eps-greedy", "epsilon": 0.2, "epsilon_decay": 1},
                   {"eps": 0.2, "decay": True}),
    "softmax": ("Softmax", {"policy": "softmax"}, {}),
    "softmax-cold": ("Softmax", {"policy": "softmax", "pseudo_count": 0, "softmax_tau": 0.05,
                                 "softmax_decay": 0}, {"pseudo_count": 0.0, "tau": 0.05, "decay": False}),
    "thompson": ("GaussianTS", {"policy": "thompson"}, {}),
    "thompson-sgd": ("GaussianTS", {"policy": "thompson", "estimator": "sgd", "ts_prior_var": 0.01},
                     {"prior_var": 0.01, "estimator": {"kind": "sgd"}}),
    "etc": ("ETC", {"policy": "etc"}, {}),
    "etc-m3": ("ETC", {"policy": "etc", "etc_m": 3, "skip_first": 2}, {"m": 3, "estimator": {"skip_first": 2}}),
}


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def random_table(rng: random.Random, most: int) -> list[float]:
    """A cost table with 2..most available arms (the rest IGNORE), all within the filter."""
    arms = rng.sample(range(21), rng.randint(2, most))
    return H.cost_table({a: f32(rng.uniform(20.0, 39.0)) for a in arms})


def saved_state(folder) -> dict[str, tuple[float, float]]:
    """arm -> (n, mean) of the one context in the state file the plugin saved at finalize."""
    lines = (folder / "ncclbot-state-n1-r1.csv").read_text().splitlines()
    assert lines[0] == "# ncclbot-state v1"
    return {r["arm"]: (float(r["n"]), float(r["mean"])) for r in csv.DictReader(lines[1:])}


def run_context(plugin, nb_env, tmp_path, comm, case, table, rng, *, seed, steps):
    """Drive the plugin and StepPolicy with the same rewards; returns (C arms, reference)."""
    family, env, params = CASES[case]
    state_dir = tmp_path / f"state-{next(_RUNS)}"
    state_dir.mkdir()
    nb_env(**env, min_bytes=0, seed=seed, state_dir=state_dir)
    arms = [a for a in range(21) if table[a] >= 0]
    ref = P.StepPolicy(P.make_policy(family, **params), [table[a] for a in arms],
                       draws=P.CounterDraws(seed=seed, comm_id=comm, collective="AllReduce", nbytes=4 * MIB))
    best_predicted = min(arms, key=lambda a: table[a])  # AUTO's arm is truly slow: learners leave it
    truth = {a: table[a] * (2.0 if a == best_predicted else rng.uniform(0.6, 1.2)) for a in arms}
    rank = H.Rank(plugin, comm, 1, 1, 0)
    assert rank.active, H.take_log()
    played = []
    for t in range(steps):
        rc, arm, _, nch = rank.call(4, 4 * MIB, table)
        assert rc == 0 and nch == 0
        expect = arms[ref.select()]
        assert arm == expect, f"{case}: step {t} C played {H.arm_name(arm)}, reference {H.arm_name(expect)}"
        played.append(arm)
        ns = int(truth[arm] * 1000 * rng.uniform(0.9, 1.1))
        h = rank.coll_start(4, 4 * MIB, arm, 2)
        rank.channel(h, 0, 10_000, 10_000 + ns)
        rank.channel(h, 1, 10_000, 10_000 + ns // 2)
        ref.update(arms.index(arm), f32(ns / 1000.0))
    rank.finalize()
    state = saved_state(state_dir)
    for i, a in enumerate(arms):
        assert state[H.arm_name(a)] == (ref.counts()[i], ref.means()[i]), f"{case}: state of {H.arm_name(a)}"
    return played


@pytest.mark.parametrize("case", list(CASES))
def test_c_policy_matches_step_policy_arms_and_state(plugin, nb_env, comm_id, tmp_path, case):
    rng = random.Random(zlib.crc32(case.encode()))
    moved = 0
    for ctx, most in enumerate([4, 7, 12, 21]):
        table = random_table(rng, most)
        played = run_context(plugin, nb_env, tmp_path, comm_id + ctx, case, table, rng,
                             seed=1000 + ctx, steps=160)
        moved += len(set(played)) > 1
    assert moved > 0, f"{case}: no context ever left its first arm, the comparison would prove little"


@pytest.mark.parametrize("case", ["ucb1", "greedy", "softmax", "thompson", "etc", "etc-m3"])
def test_delayed_rewards_hold_and_gate_match_step_policy(plugin, nb_env, comm_id, tmp_path, case):
    """Samples that arrive `lag` calls late (a GPU behind its host): the plugin's hold rule and
    safety gate choose what StepPolicy chooses when fed the same rewards at the same calls."""
    family, env, params = CASES[case]
    if P.make_policy(family, **params).probe == 0:  # hold off by default: test it switched on
        env, params = {**env, "probe": 1}, {**params, "probe": 1}
    rng = random.Random(zlib.crc32(f"delayed-{case}".encode()))
    moved = held = 0
    for ctx, (most, lag) in enumerate([(4, 3), (7, 6), (12, 2), (21, 9)]):
        table = random_table(rng, most)
        nb_env(**env, min_bytes=0, seed=500 + ctx)
        arms = [a for a in range(21) if table[a] >= 0]
        ref = P.StepPolicy(P.make_policy(family, **params), [table[a] for a in arms],
                           draws=P.CounterDraws(seed=500 + ctx, comm_id=comm_id + 40 + ctx, collective="AllReduce",
                                                nbytes=4 * MIB))
        best_predicted = min(arms, key=lambda a: table[a])  # AUTO's arm truly slow: others get tried
        truth = {a: table[a] * (2.0 if a == best_predicted else rng.uniform(0.6, 1.2)) for a in arms}
        rank = H.Rank(plugin, comm_id + 40 + ctx, 1, 1, 0)
        assert rank.active, H.take_log()
        queue, played = [], []
        for t in range(200):
            rc, arm, _, _ = rank.call(4, 4 * MIB, table)
            assert rc == 0
            held += bool((held_arms(ref.state, ref.policy.probe) & ref.state.offered).any())
            expect = arms[ref.select()]
            assert arm == expect, f"{case}: step {t} C played {H.arm_name(arm)}, reference {H.arm_name(expect)}"
            played.append(arm)
            ns = int(truth[arm] * 1000 * rng.uniform(0.9, 1.1))
            queue.append((rank.coll_start(4, 4 * MIB, arm, 1), arm, ns))
            if len(queue) > lag:  # the oldest collective finishes: applied at the next call's start
                h, a, n = queue.pop(0)
                rank.channel(h, 0, 10_000, 10_000 + n)
                ref.update(arms.index(a), f32(n / 1000.0))
        rank.finalize()
        moved += len(set(played)) > 1
    assert moved and held > 20, f"{case}: moved {moved}, held {held}: the comparison would prove little"


@pytest.mark.parametrize("case", ["softmax", "thompson", "eps-greedy", "etc"])
def test_same_seed_same_arms_other_seed_other_arms(plugin, nb_env, comm_id, tmp_path, case):
    """Randomness is an argument: NCCLBOT_SEED (with the communicator id) fixes every draw."""
    table = H.cost_table({a: v for a, v in zip([1, 2, 4, 5, 14], [20.0, 21.0, 22.0, 23.0, 24.0])})
    env = {"etc": {"etc_m": 4}, "eps-greedy": {"epsilon": 0.3}}.get(case, {})
    CASES[f"{case}-seeded"] = (CASES[case][0], {"policy": case, **env},
                               {"etc": {"m": 4}, "eps-greedy": {"eps": 0.3}}.get(case, {}))
    # The communicator id differs per run (it holds the pid), and one other seed can happen to
    # draw the same arms (Thompson's prior variance is small): several other seeds cannot.
    runs = [run_context(plugin, nb_env, tmp_path, comm_id, f"{case}-seeded", table, random.Random(5),
                        seed=seed, steps=120) for seed in (7, 7, 8, 9, 10, 11)]
    del CASES[f"{case}-seeded"]
    assert runs[0] == runs[1], "the same seed and communicator gave other arms"
    assert any(other != runs[0] for other in runs[2:]), "other NCCLBOT_SEEDs gave the same arms"


def test_shared_generator_is_bit_identical(policy_probe):
    rng = random.Random(4)
    for _ in range(3000):
        seed, comm = rng.getrandbits(64), rng.getrandbits(64)
        key = counter_rng.context_key(rng.randrange(5), rng.getrandbits(40))
        t, lane = rng.getrandbits(32), rng.randrange(64)
        base = counter_rng.mix64(counter_rng.stream(seed, comm, key) ^ t)
        assert policy_probe.nb_probe_uniform(seed, comm, key, t, lane) == counter_rng.uniform(base, lane)
        arm = rng.randrange(21)
        assert policy_probe.nb_probe_normal(seed, comm, key, t, arm) == counter_rng.normal(base, arm)


def test_shared_generator_is_uniform_and_normal():
    draws = P.CounterDraws(seed=3, comm_id=0xABC, collective="AllReduce", nbytes=MIB)
    u = np.concatenate([draws.draw(t, 2, 0)[0][0] for t in range(20000)])
    z = np.concatenate([draws.draw(t, 0, 4)[1][0] for t in range(10000)])
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 0.9 * len(u) / 10
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03
    other = P.CounterDraws(seed=4, comm_id=0xABC, collective="AllReduce", nbytes=MIB)
    assert draws.draw(0, 2, 2)[0].tolist() != other.draw(0, 2, 2)[0].tolist()


@pytest.mark.parametrize("narms", range(1, 22))
def test_ucb1_total_and_every_index_equal_python(policy_probe, narms):
    """N summed in the one order (left to right) and each arm's index, not only the argmax."""
    rng = random.Random(narms)
    ucb = P.make_policy("UCB1", alpha=0.3)
    for _ in range(200):
        n = [rng.choice([2.89, 0.892, 1.0]) + rng.randint(0, 400) * rng.choice([1.0, 1.0000001, 0.37])
             for _ in range(narms)]
        mu = [rng.uniform(0.3, 1.2) for _ in range(narms)]
        stats = (H.ArmStat * narms)(*[H.ArmStat(m, 0.0, 0.0, 0.0, 0, 0) for m in mu])
        for i, c in enumerate(n):
            policy_probe.nb_probe_set_n(stats[i], c)
        state = P.BanditState.empty(np.ones((1, narms), dtype=bool), np.ones((1, narms)), np.array([0]))
        state.n, state.mu = np.array([n]), np.array([mu])
        total = policy_probe.nb_ucb_total(stats, narms)
        assert total == P.base.total_n(state)[0]
        index = ucb.index(state)[0]
        for i in range(narms):
            arm = ctypes.cast(ctypes.byref(stats, i * ctypes.sizeof(H.ArmStat)), ctypes.POINTER(H.ArmStat))
            assert policy_probe.nb_ucb_index(arm, total, 0.3) == index[i], (narms, i)
