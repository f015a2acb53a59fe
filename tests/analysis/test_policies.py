"""Policy API: names and defaults, the per-step StepPolicy, and UCB1's documented formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ncclbot_sweep.analysis.policies import Estimator
from ncclbot_sweep.analysis.policies import POLICIES, StepPolicy, make_policy
from ncclbot_sweep.analysis.pools import pool_position
from ncclbot_sweep.analysis.replay import run_policy
from ncclbot_sweep.errors import AnalysisError

from .test_replay_reference import random_problem


def test_sixteen_policies_with_champion_defaults():
    assert len(POLICIES) == 16
    ucb = make_policy("ucb1")
    assert (ucb.alpha, ucb.pseudo_count) == (0.0928, 2.89)
    assert (ucb.estimator.kind, ucb.estimator.clip, ucb.estimator.lr, ucb.estimator.decay) == ("sgd", 0.389, 0.468, 0.467)
    assert make_policy("greedy").eps == 0.0 and make_policy("greedy").is_deterministic
    assert not make_policy("Softmax").is_deterministic


def test_make_policy_rejects_unknown_names_and_parameters():
    with pytest.raises(AnalysisError, match="policy must be one of"):
        make_policy("LinUCB")
    with pytest.raises(AnalysisError, match="has no parameter"):
        make_policy("UCB1", temperature=1.0)
    assert make_policy("UCB1", estimator={"kind": "mean"}).estimator == Estimator(kind="mean", clip=0.389, lr=0.468,
                                                                                   decay=0.467)


def test_ucb1_step_by_hand():
    """Two arms predicted 10 and 20 us: priors 1.0 and 0.5 with 2.89 virtual pulls each."""
    p = StepPolicy(make_policy("UCB1"), [10.0, 20.0])
    assert p.means() == [1.0, 0.5]
    assert p.select() == 0
    assert p.update(0, 12.5) == 0.8  # reward mu_hat_min / X
    n = 2.89 + 1.0
    step = 0.468 * n ** -0.467
    expect = 1.0 + step * max(-0.389, 0.8 - 1.0)
    assert p.means()[0] == pytest.approx(expect, rel=1e-15)
    big_n = n + 2.89
    scores = [expect + 0.0928 * math.sqrt(2 * math.log(big_n) / n), 0.5 + 0.0928 * math.sqrt(2 * math.log(big_n) / 2.89)]
    assert p.select() == int(np.argmax(scores))


def test_filter_drops_arms_predicted_beyond_rho_max_and_keeps_undefined():
    p = StepPolicy(make_policy("UCB1"), [10.0, 25.0, None, 19.0])
    assert p.offered == [True, False, True, True]
    assert p.select() == 2  # the undefined arm starts cold: unpulled arms first


def test_ties_go_to_the_lowest_arm_index():
    p = StepPolicy(make_policy("greedy"), [10.0, 10.0, 10.0])
    assert p.select() == 0


@pytest.mark.parametrize("name", ["UCB1", "greedy", "KL-UCB", "UCB-V"])
def test_step_policy_follows_the_engine(name):
    problem, _ = random_problem(11, n_ctx=4)
    policy = make_policy(name)
    run = run_policy(problem, policy, horizon=30, seeds=[0], record_arms=True)
    for c in range(len(problem)):
        pred = problem.predicted[c]
        measured = problem.pools.measured[c]
        step = StepPolicy(policy, [v if m else 1e30 for v, m in zip(pred, measured)], rho_max=problem.rho_max)
        pulls = np.zeros(len(pred), dtype=int)
        for t in range(30):
            arm = step.select()
            assert arm == run.arms[0, c, t]
            position = pool_position(pulls[arm], problem.pools.depth[c, arm], problem.pools.wrap[c, arm])
            step.update(arm, problem.pools.samples[c, arm, position])
            pulls[arm] += 1


def test_policy_specs_with_parameters_and_labels():
    from ncclbot_sweep.analysis.policies import parse_policy, split_policy_list

    specs = split_policy_list("AUTO, UCB1[estimator.kind=gain;estimator.gain=0.1;label=UCB1-gain],Softmax[tau=0.5;decay=false]")
    assert specs == ["AUTO", "UCB1[estimator.kind=gain;estimator.gain=0.1;label=UCB1-gain]", "Softmax[tau=0.5;decay=false]"]
    gain = parse_policy(specs[1])
    assert gain.display_name == "UCB1-gain" and gain.estimator.kind == "gain" and gain.estimator.gain == 0.1
    assert gain.alpha == 0.0928  # other fields keep the champion defaults
    soft = parse_policy(specs[2])
    assert soft.tau == 0.5 and soft.decay is False and soft.display_name == "Softmax"
    for bad in ("UCB1[alpha]", "UCB1[alpha=1", "UCB1[estimator.nope=1]", "UCB1[estimator.kind=median]"):
        with pytest.raises(AnalysisError):
            parse_policy(bad)


@pytest.mark.parametrize("latency", [0.0, -3.0, math.nan, math.inf, -math.inf])
def test_an_unusable_latency_gives_no_reward_and_is_not_counted(latency):
    """As the plugin's nb_reward: no reward, no learning, no pull counted (skip-first-k included)."""
    est = {"kind": "mean", "skip_first": 1}
    p = StepPolicy(make_policy("UCB1", estimator=est), [10.0, 20.0])
    before = (p.means(), p.counts(), p.state.pulls.tolist())
    assert p.update(0, latency) is None
    assert (p.means(), p.counts(), p.state.pulls.tolist()) == before
    assert p.update(0, 20.0) == 0.5 and p.means() == before[0]  # the first usable one is the one skipped
    assert p.update(0, 20.0) == 0.5 and p.means()[0] < before[0][0]  # the second is learned


def test_adaptive_observed_max_divides_by_the_running_max_and_rescales_on_a_new_one():
    """Paper D.8: rewards are divided by their running maximum (from 1, the prior's scale); a new
    maximum first rescales every arm's statistics by old/new."""
    est = {"kind": "mean", "observed_max": True}
    p = StepPolicy(make_policy("UCB1", estimator=est, pseudo_count=1.0), [10.0, 20.0])
    assert p.means() == [1.0, 0.5]  # warm start on the reward scale
    assert p.update(0, 20.0) == 0.5  # r = 10/20 below the max 1: learned as is
    assert p.means() == [0.75, 0.5]
    assert p.update(1, 5.0) == 1.0  # r = 2 is a new max: arms rescaled by 1/2, reward 2/2
    assert p.means() == [0.375, (0.25 + 1.0) / 2]
    assert p.update(0, 8.0) == 1.25 / 2  # r = 1.25 below the max 2
    plain = StepPolicy(make_policy("UCB1", estimator={"kind": "mean"}, pseudo_count=1.0), [10.0, 20.0])
    assert [plain.update(a, x) for a, x in ((0, 20.0), (1, 5.0), (0, 8.0))] == [0.5, 2.0, 1.25]


def _random_state(rng, rows=400, arms=7):
    """Bandits with a few shared counts (the replay's case), near-equal and unpulled ones."""
    from ncclbot_sweep.analysis.policies import BanditState

    offered = rng.random((rows, arms)) < 0.6
    offered[np.arange(rows), rng.integers(0, arms, rows)] = True
    auto = np.array([rng.choice(np.flatnonzero(o)) for o in offered])
    state = BanditState.empty(offered, np.ones((rows, arms)), auto)
    n = rng.choice([0.0, 1.0, 2.89, 3.89, 12.89], size=(rows, arms))
    n[rng.random((rows, arms)) < 0.05] = np.nextafter(3.89, 9.0)
    state.n, state.mu = np.where(offered, n, 0.0), np.where(offered, rng.random((rows, arms)), 0.0)
    state.mu[rng.random((rows, arms)) < 0.05] = 0.5  # ties
    state.learned = np.where(offered, rng.integers(0, 3, (rows, arms)), 0)
    return state


def test_log_n_is_the_c_librarys_log_of_every_row():
    """ln max(N, 1) by math.log, row by row, whether rows share N (computed once per value),
    differ in the last bit, are infinite or NaN, or are all distinct."""
    from ncclbot_sweep.analysis.policies import BanditState
    from ncclbot_sweep.analysis.policies.base import log_n, total_n

    rng = np.random.default_rng(5)
    base = np.array([2.89 * m + 37.0 for m in (1, 2, 3, 6, 7)])
    shared = base[rng.integers(0, 5, 3000)]
    shared[::7] = np.nextafter(shared[::7], np.inf)
    cases = [shared, rng.uniform(0.0, 500.0, 3000), np.array([0.5, np.inf, np.nan, 3.0] * 50), np.full(100, 4.0),
             np.array([7.0, 2.0])]
    for totals in cases:
        state = BanditState.empty(np.ones((totals.size, 1), dtype=bool), np.ones((totals.size, 1)),
                                  np.zeros(totals.size, dtype=np.int64))
        state.n = totals[:, None].copy()
        expected = [math.log(max(v, 1.0)) if not math.isnan(v) else math.nan for v in total_n(state).tolist()]
        np.testing.assert_array_equal(log_n(state), expected)


@pytest.mark.parametrize("held", [False, True])
def test_ucb1_select_is_the_argmax_of_its_index_over_the_selectable_arms(held):
    """The lowest selectable arm maximising ``UCB1.index`` (an unpulled selectable arm first),
    the index ``select`` computes on the offered arms only."""
    from ncclbot_sweep.analysis.policies.base import masked_argmax

    rng = np.random.default_rng(11)
    ucb = make_policy("UCB1")
    for _ in range(5):
        state = _random_state(rng)
        if held:
            state.selectable = state.offered & (rng.random(state.offered.shape) < 0.7)
        index = ucb.index(state)
        chosen = masked_argmax(index, state.selectable)
        unpulled = state.selectable & (state.n == 0)
        expected = np.where(unpulled.any(axis=1), np.argmax(unpulled, axis=1), chosen)
        np.testing.assert_array_equal(ucb.select(state, 1, None, None), expected)


def test_the_safety_gate_row_by_row():
    from ncclbot_sweep.analysis.policies.base import safety_gate

    rng = np.random.default_rng(3)
    state = _random_state(rng, rows=2000)
    arms = np.array([rng.choice(np.flatnonzero(o)) for o in state.offered])
    for margin, min_learned in ((0.1, 1), (0.0, 2), (0.5, 10)):
        expected = [int(state.auto[r]) if (k != a and state.learned[r, k] >= min_learned and state.learned[r, a] >= 1
                                           and state.mu[r, k] < (1.0 - margin) * state.mu[r, a]) else int(k)
                    for r, (k, a) in enumerate(zip(arms, state.auto))]
        gated = safety_gate(state, arms, margin, min_learned)
        np.testing.assert_array_equal(gated, expected)
        assert (gated != arms).any() or min_learned == 10
