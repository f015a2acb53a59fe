"""The plugin's shared generator on the Python side (analysis.policies.counter_rng) and
StepPolicy driven by it: fixed values (a change would break plugin/Python agreement), no
hidden state, and the families consume its draws as they consume numpy's."""

from __future__ import annotations

import numpy as np

from ncclbot_sweep.analysis import policies as P
from ncclbot_sweep.analysis.policies import counter_rng


def test_splitmix64_known_values():
    # SplitMix64 seeded with 0: its first two outputs are mix64 of the golden-ratio steps.
    assert counter_rng.mix64(0) == 0xE220A8397B1DCDAF
    assert counter_rng.mix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


def test_draws_are_a_pure_function_of_their_key():
    a = P.CounterDraws(seed=1, comm_id=99, collective="AllReduce", nbytes=1 << 22)
    b = P.CounterDraws(seed=1, comm_id=99, collective="allreduce", nbytes=1 << 22)
    later = [a.draw(t, 2, 3) for t in (5, 0, 5)]
    assert later[0][0].tolist() == later[2][0].tolist() == b.draw(5, 2, 3)[0].tolist()
    assert later[0][1].tolist() == b.draw(5, 2, 3)[1].tolist()
    assert later[0][0].tolist() != later[1][0].tolist()
    for other in (P.CounterDraws(seed=2, comm_id=99, collective="AllReduce", nbytes=1 << 22),
                  P.CounterDraws(seed=1, comm_id=98, collective="AllReduce", nbytes=1 << 22),
                  P.CounterDraws(seed=1, comm_id=99, collective="AllGather", nbytes=1 << 22),
                  P.CounterDraws(seed=1, comm_id=99, collective="AllReduce", nbytes=1 << 21)):
        assert other.draw(5, 2, 0)[0].tolist() != later[0][0].tolist()


def test_step_policy_with_counter_draws_replays_identically():
    pred = [10.0, 10.5, 11.0, 12.0]
    truth = [14.0, 10.0, 11.0, 12.5]
    runs = []
    for _ in range(2):
        step = P.StepPolicy(P.make_policy("Softmax"), pred,
                            draws=P.CounterDraws(seed=3, comm_id=7, collective="AllReduce", nbytes=1 << 20))
        arms = []
        for t in range(300):
            arm = step.select()
            arms.append(arm)
            step.update(arm, truth[arm] * (1.0 + 0.01 * np.sin(t)))
        runs.append((arms, step.means()))
    assert runs[0] == runs[1]
    assert len(set(runs[0][0])) > 1
    assert max(set(runs[0][0][-100:]), key=runs[0][0][-100:].count) == 1  # learns the fastest arm
