"""The C bandit against Python references fed the same rewards: our own plain
reference (nb_ref_policy.py, every policy and estimator) and the analysis
package's StepPolicy (the policy the offline replay evaluates)."""

from __future__ import annotations

import random
import struct

import pytest

import nb_host as H
from nb_ref_policy import CHAMPION, RefBandit


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def random_table(rng: random.Random, most: int = 7) -> list[float]:
    """A cost table with a few available arms (the rest IGNORE), all within the filter."""
    arms = rng.sample(range(21), rng.randint(2, most))
    return H.cost_table({a: f32(rng.uniform(20.0, 39.0)) for a in arms})


def drive(rank: H.Rank, table, nbytes, steps, latency_ns, on_choice):
    """Call, measure, repeat; the sample of call t reaches the tuner before call t+1."""
    for t in range(steps):
        rc, arm, _, nch = rank.call(4, nbytes, table)
        assert rc == 0 and nch == 0
        on_choice(t, arm)
        ns = latency_ns(arm, t)
        h = rank.coll_start(4, nbytes, arm, 2)
        rank.channel(h, 0, 10_000, 10_000 + ns)
        rank.channel(h, 1, 10_000, 10_000 + ns // 2)


@pytest.mark.parametrize("policy,estimator", [("ucb1", "sgd"), ("ucb1", "mean"), ("ucb1", "gain"),
                                              ("greedy", "mean"), ("greedy", "sgd")])
def test_c_policy_matches_python_reference(plugin, nb_env, comm_id, policy, estimator):
    nb_env(policy=policy, estimator=estimator, min_bytes=0, ucb_alpha=0.3, pseudo_count=1.5)
    params = dict(CHAMPION, alpha=0.3, pseudo_count=1.5)
    rng = random.Random(7)
    switches = 0
    for ctx in range(6):
        table = random_table(rng)
        ref = RefBandit.from_table(table, pseudo_count=params["pseudo_count"], rho_max=2.0)
        truth = {a: rng.uniform(15.0, 70.0) for a in ref.arms}
        rank = H.Rank(plugin, comm_id + ctx, 1, 1, 0)
        chosen = []

        def lat(arm, t):
            return int(truth[arm] * 1000 * rng.uniform(0.9, 1.1))

        def check(t, arm):
            i = ref.select(policy, params["alpha"])
            assert arm == ref.arms[i], f"context {ctx} step {t}"
            chosen.append(arm)

        def lat_and_learn(arm, t):
            ns = lat(arm, t)
            ref.update(ref.arms.index(arm), ref.reward(f32(ns / 1000.0)), estimator, params)
            return ns

        drive(rank, table, 1 << 22, 150, lat_and_learn, check)
        switches += len(set(chosen)) > 1
        rank.finalize()
    assert switches > 0, "no context ever left its first arm: the test would prove nothing"


def test_pairwise_sum_is_numpys_order():
    np = pytest.importorskip("numpy")
    from nb_ref_policy import pairwise_sum
    rng = random.Random(2)
    for _ in range(3000):
        x = [rng.randint(0, 400) * rng.choice([1.0, 1.0000001, 0.37]) + 2.89 for _ in range(rng.randint(1, 21))]
        assert pairwise_sum(x) == np.array([x]).sum(axis=1)[0]


@pytest.mark.parametrize("alpha,most", [(None, 7), (0.3, 14), (0.3, 21)])
def test_c_ucb1_matches_analysis_step_policy(plugin, nb_env, comm_id, alpha, most):
    """Champion UCB1 (alpha 0.0928, nu 2.89, clipped SGD) versus ncclbot_sweep.analysis,
    also with a larger alpha and up to 21 arms (numpy's pairwise order for N)."""
    policies = pytest.importorskip("ncclbot_sweep.analysis.policies")
    nb_env(policy="ucb1", min_bytes=0, **({"ucb_alpha": alpha} if alpha else {}))
    rng = random.Random(11)
    differing = []
    switched = 0
    for ctx in range(8):
        table = random_table(rng, most)
        arms = [a for a in range(21) if table[a] >= 0]
        step = policies.StepPolicy(policies.make_policy("UCB1", **({"alpha": alpha} if alpha else {})),
                                   [table[a] for a in arms])
        truth = {a: table[a] * rng.uniform(0.6, 1.5) for a in arms}
        rank = H.Rank(plugin, comm_id + ctx, 1, 1, 0)
        played = set()

        def check(t, arm):
            expect = step.select()
            played.add(arm)
            if arm != arms[expect] and not differing:
                differing.append((ctx, t, H.arm_name(arm), H.arm_name(arms[expect])))

        def lat(arm, t):
            ns = int(truth[arm] * 1000 * rng.uniform(0.95, 1.05))
            step.update(arms.index(arm), f32(ns / 1000.0))
            return ns

        drive(rank, table, 1 << 22, 200, lat, check)
        rank.finalize()
        switched += len(played) > 1
    assert not differing, f"C and analysis UCB1 differ first at (context, step, C, analysis) {differing[0]}"
    assert switched > 0, "no context left its first arm: the comparison would prove little"


def test_c_greedy_matches_analysis_greedy(plugin, nb_env, comm_id):
    """Greedy with its own champion defaults (nu 0.892, sample mean) versus EpsilonGreedy(eps=0)."""
    policies = pytest.importorskip("ncclbot_sweep.analysis.policies")
    nb_env(policy="greedy", min_bytes=0)
    rng = random.Random(12)
    differing, switched = [], 0
    for ctx in range(8):
        table = random_table(rng, 10)
        arms = [a for a in range(21) if table[a] >= 0]
        step = policies.StepPolicy(policies.make_policy("greedy"), [table[a] for a in arms])
        truth = {a: table[a] * rng.uniform(0.6, 1.5) for a in arms}
        rank = H.Rank(plugin, comm_id + ctx, 1, 1, 0)
        played = set()

        def check(t, arm):
            expect = step.select()
            played.add(arm)
            if arm != arms[expect] and not differing:
                differing.append((ctx, t, H.arm_name(arm), H.arm_name(arms[expect])))

        def lat(arm, t):
            ns = int(truth[arm] * 1000 * rng.uniform(0.9, 1.1))
            step.update(arms.index(arm), f32(ns / 1000.0))
            return ns

        drive(rank, table, 1 << 22, 150, lat, check)
        rank.finalize()
        switched += len(played) > 1
    assert not differing, f"C and analysis greedy differ first at {differing[0]}"
    assert switched > 0
