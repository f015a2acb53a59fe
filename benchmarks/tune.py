"""Tuning campaign throughput: trials per second of ``analyze tune`` on the demo sweep's train contexts.

Builds (or takes, ``--dataset``) the demo sweep's dataset: simulated H100, AllGather/AllReduce/
ReduceScatter x 4/8/16/32 nodes x 26 sizes (512 B .. 16 GiB) x every valid arm, 100 iterations;
the studies see the scale split's train part (4/8 nodes). Runs the campaign (14 families x 151
trials by default) into a fresh folder and prints wall time, CPU time (this process and its
workers) and trials per second of each. The machine may be shared, so the budget is checked on
CPU time: the campaign must need less than 10 minutes of 2 cores (1200 CPU seconds).

Run from the repository root: ``.venv/bin/python benchmarks/tune.py`` (``--trials 20`` for a
quick look, ``--workers 2`` to use both cores, ``--dataset demo-out/dataset`` to reuse the demo's).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from _venv import require

require("numpy", "optuna", "ncclbot_sweep.analysis")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ncclbot_sweep.analysis.inputs import load_problem  # noqa: E402
from ncclbot_sweep.analysis.study import FAMILIES, TuneOptions, tune  # noqa: E402
from tests.analysis.simpools import write_sim_dataset  # noqa: E402

DEMO_SIZES = tuple(512 * 2**k for k in range(26))
BUDGET_CPU_S = 2 * 600.0


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=None, help="dataset root (default: generate the demo sweep)")
    parser.add_argument("--trials", type=int, default=151)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ncclbot-tune-bench-") as tmp:
        dataset = args.dataset
        if dataset is None:
            dataset = write_sim_dataset(Path(tmp) / "dataset", nodes=(4, 8, 16, 32), sizes=DEMO_SIZES, iters=100,
                                        warmup=0)
        problem = load_problem(dataset)
        families = tuple(args.families.split(","))
        options = TuneOptions(families=families, trials=args.trials, workers=args.workers)
        cpu0, wall0 = _cpu(), time.perf_counter()
        tune(problem, Path(tmp) / "campaign", options=options,
             dataset_args={"dataset": dataset}, progress=None)
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    total = len(families) * args.trials
    n_train = int((problem.contexts["nodes"].isin(sorted(problem.contexts["nodes"].unique())[:2])).sum())
    print(f"{len(families)} families x {args.trials} trials = {total} trials on {n_train} train contexts "
          f"({len(problem)} contexts), {args.workers} worker(s)")
    print(f"wall {wall:8.1f} s   {total / wall:7.2f} trials/s (wall; depends on the machine's load)")
    print(f"CPU  {cpu:8.1f} s   {total / cpu:7.2f} trials/CPU-s")
    print(f"on 2 free cores: {cpu / 2 / 60:.1f} min (budget 10 min) -> {'OK' if cpu < BUDGET_CPU_S else 'OVER'}")


if __name__ == "__main__":
    main()
