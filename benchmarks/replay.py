"""Replay engine throughput: vectorised engine against the plain per-step reference loop.

Policy-steps per second (one step = one bandit choosing, being served and updating) for UCB1
and Softmax on the same random pools: 300 contexts x up to 7 arms, pool depth 100, T=100,
20 seeds. The reference (``tests/analysis/reference.py``, with the safety gate as the engine)
is timed on a sample of (context, seed) bandits and reported as a rate; both implementations
give identical arm sequences (checked here on the sample against the shared and the every-seed
runs, and for every policy in ``tests/analysis``). Each figure is the best of 3 runs; the load
average is printed before and after, since other work on the machine moves them.

Run from the repository root: ``.venv/bin/python benchmarks/replay.py`` (``--quick`` for a
smaller reference sample). Targets: engine >= 30x the reference and >= 10 million UCB1
policy-steps per second on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from _venv import require

require("numpy", "pandas", "ncclbot_sweep.analysis")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ncclbot_sweep.analysis.policies import make_policy  # noqa: E402
from ncclbot_sweep.analysis.pools import build_pools  # noqa: E402
from ncclbot_sweep.analysis.prior import predictions_from_cost_tables  # noqa: E402
from ncclbot_sweep.analysis.replay import make_problem, run_policy  # noqa: E402
from tests.analysis.reference import make_reference, reference_draws  # noqa: E402


def served_position(pulls: int, depth: int, wrap: int) -> int:
    """The pool position of an arm's pulls-th pull: in order, then its steady part again (as the engine)."""
    return pulls if pulls < depth else wrap + (pulls - depth) % (depth - wrap)

ARMS = ("Tree/LL", "Tree/LL128", "Tree/Simple", "Ring/LL", "Ring/LL128", "Ring/Simple", "NVLSTree/Simple")


def random_problem(n_ctx: int = 300, depth: int = 100, seed: int = 0):
    """Random pools with a heavy-tailed transient and a noisy cost model."""
    rng = np.random.default_rng(seed)
    frames, cost = [], []
    for c in range(n_ctx):
        arms = ARMS if c % 3 == 0 else ARMS[3:6]
        key = dict(fabric="bench", collective=("AllReduce", "AllGather", "ReduceScatter")[c % 3],
                   nodes=4 * 2 ** (c % 4), ranks=32 * 2 ** (c % 4), size_bytes=1024 * (c + 1))
        for arm in arms:
            true = rng.uniform(10, 1000)
            times = true * rng.lognormal(0, 0.03, depth)
            times[:10] *= 1 + 0.5 * np.exp(-np.arange(10) / 2.5) * rng.lognormal(0, 0.8, 10)
            frames.append(pd.DataFrame(key | {"arm": arm, "iteration": np.arange(depth), "time_us": times}))
            cost.append(key | {"arm": arm, "predicted_us": true * np.exp(rng.normal(0, 0.2))})
    pools = build_pools(pd.concat(frames, ignore_index=True), min_arms=2)
    return make_problem(pools, predictions_from_cost_tables(pools, pd.DataFrame(cost)))


def time_engine(problem, policy, horizon, seeds, *, share, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run = run_policy(problem, policy, horizon=horizon, seeds=seeds, share_deterministic=share, record_arms=True)
        best = min(best, time.perf_counter() - t0)
    return best, run


def time_reference(problem, policy, horizon, seeds, sample, engine_arms, *, repeats=3):
    """Run the reference on ``sample`` bandits ``repeats`` times; return the best seconds per step
    and whether its arms agree with every engine run in ``engine_arms`` (``[S, C, T]`` each)."""
    pools = problem.pools
    n_ctx, n_arms, _ = pools.samples.shape
    extra = {"lex_rank": problem.lex_rank, "group": problem.group}
    draws = {s: reference_draws(policy, n_ctx, n_arms, horizon, s) for s in {s for s, _ in sample}}
    best, agree = float("inf"), True
    for _ in range(repeats):
        t0 = time.perf_counter()
        for s, c in sample:
            us, zs = draws[s]
            b = make_reference(policy, problem.offered[c], problem.prior[c], int(problem.auto[c]), extra)
            trace = []
            for t in range(1, horizon + 1):
                k = b.gate(b.kind.select(b, t, us[t - 1, c], zs[t - 1, c]))  # the safety gate, as the engine
                x = float(pools.samples[c, k, served_position(b.pulls[k], pools.depth[c, k], pools.wrap[c, k])])
                r = float(problem.mu_min[c]) / x
                if b.pulls[k] >= policy.estimator.skip_first:
                    b.kind.update(b, k, r)
                b.pulls[k] += 1
                trace.append(k)
            agree &= all(np.array_equal(trace, arms[seeds.index(s), c]) for arms in engine_arms)
        best = min(best, time.perf_counter() - t0)
    return best / (len(sample) * horizon), agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=300)
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--sample", type=int, default=300, help="reference bandits timed (context, seed pairs)")
    parser.add_argument("--quick", action="store_true", help="reference sample of 60")
    args = parser.parse_args()
    problem = random_problem(args.contexts)
    seeds = list(range(args.seeds))
    rng = np.random.default_rng(1)
    n_sample = 60 if args.quick else args.sample
    sample = [(int(rng.integers(args.seeds)), int(rng.integers(len(problem)))) for _ in range(n_sample)]
    total = len(problem) * args.seeds * args.horizon
    print(f"{len(problem)} contexts, T={args.horizon}, {args.seeds} seeds: {total:,} policy-steps per policy; "
          f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'policy':10s} {'engine':>18s} {'engine, no sharing':>20s} {'reference':>12s} "
          f"{'speed-up':>9s} {'(no sharing)':>13s} agree")
    for name in ("UCB1", "Softmax"):
        policy = make_policy(name)
        shared, run = time_engine(problem, policy, args.horizon, seeds, share=True)
        plain, run_plain = time_engine(problem, policy, args.horizon, seeds, share=False)
        per_step, agree = time_reference(problem, policy, args.horizon, seeds, sample, (run.arms, run_plain.arms))
        rate, rate_plain, rate_ref = total / shared, total / plain, 1.0 / per_step
        print(f"{name:10s} {rate / 1e6:8.2f} M steps/s {rate_plain / 1e6:10.2f} M steps/s "
              f"{rate_ref / 1e3:8.1f} k/s {rate / rate_ref:8.0f}x {rate_plain / rate_ref:12.0f}x  {agree}")
    print("engine: deterministic policies are replayed once and shared by all seeds (zero seed variance);"
          " 'no sharing' replays every seed.")
    print(f"best of 3 runs each (engine and reference); load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
