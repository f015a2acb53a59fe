"""End to end on the simulated H100 fabric (Python API): warm UCB1 beats AUTO on the held-out scales."""

from __future__ import annotations

from ncclbot_sweep.analysis.audit import run_audit
from ncclbot_sweep.analysis.policies import make_policy
from ncclbot_sweep.analysis.pools import build_pools
from ncclbot_sweep.analysis.prior import load_prior
from ncclbot_sweep.analysis.replay import make_problem, run_replay
from ncclbot_sweep.analysis.summary import confirmatory, summarize

from .simpools import sim_frames


def test_warm_ucb1_beats_auto_on_sim_h100():
    it, cost = sim_frames("sim-h100")
    pools = build_pools(it, min_arms=2)
    problem = make_problem(pools, load_prior(pools, cost_tables=cost))
    results = run_replay(problem, [make_policy(n) for n in ("AUTO", "UCB1", "Random")], seeds=range(4))
    table = summarize(results).set_index("policy")
    auto, ucb = table.loc["AUTO"], table.loc["UCB1"]
    assert ucb["realized_mean_pct"] < auto["realized_mean_pct"]
    assert ucb["realized_p99_pct"] < auto["realized_p99_pct"]
    assert ucb["realized_above"] < auto["realized_above"]
    assert table.loc["Random", "realized_mean_pct"] > auto["realized_mean_pct"]
    # AUTO is usually right but has a tail, as in the paper's audit
    audit = run_audit(problem)
    error = audit.summary.set_index("pricing").loc["selection", "error_rate_pct"]
    assert 5 < error < 50
    assert len(audit.tail) >= 1
    test = confirmatory(results, [("AUTO", "UCB1")]).iloc[0]
    assert test["scenarios"] == 6 and test["scen_b_better"] >= 4
