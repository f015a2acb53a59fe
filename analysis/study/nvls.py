"""The NVLS first-use stall (paper sections 6.5, 7, appendix F): priced as a one-time toll
(Table 22, and Table 23's pooled columns) or taken out of every arm set (Table 23).

The replay's pools drop iteration 0, where the stall lands (the paper's convention), so the
toll is measured from the dataset's own iteration 0: per forced-arm run of an NVLS-family
arm, the largest excess of iteration 0 over that context's steady mean (the stall lands on
the process's first NVLS call, whatever its size); the toll is the median over runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.names import Arm, algorithm_family

from ..pools import CONTEXT_COLUMNS, Pools
from ..replay import ReplayProblem, make_problem, run_policy
from ..summary import per_context, summarize
from .ablations import reference_policies
from .harness import Harness, Section

__all__ = ["nvls_arms", "measured_stall", "nvls_toll", "nvls_excluded"]


def nvls_arms(pools: Pools) -> np.ndarray:
    """``[K]`` mask of the NVLS-family arms (NVLS, NVLSTree) on the pools' arm axis."""
    return np.array([algorithm_family(Arm.parse(a).algorithm) == "nvls" for a in pools.arms], dtype=bool)


def measured_stall(problem: ReplayProblem, first_calls: pd.DataFrame | None) -> tuple[float | None, str]:
    """The first-use stall (us) measured from iteration 0, and a sentence saying how (or why not)."""
    if first_calls is None or first_calls.empty:
        return None, "the dataset has no iteration 0 (its runs started after a warm-up), so no stall was measured"
    pools = problem.pools
    nvls = nvls_arms(pools)
    ctx_index = {key: c for c, key in enumerate(pools.context_keys())}
    arm_index = {a: k for k, a in enumerate(pools.arms)}
    worst: dict[str, float] = {}
    for row in first_calls.itertuples(index=False):
        k = arm_index.get(str(Arm.parse(str(row.arm))))
        key = tuple(int(v) if isinstance(v, (int, np.integer)) else v
                    for v in (row.fabric, row.collective, row.nodes, row.ranks, row.size_bytes))
        c = ctx_index.get(key)
        if k is None or c is None or not nvls[k] or not pools.measured[c, k]:
            continue
        excess = float(row.time_us) - float(pools.steady[c, k])
        run = str(row.run_id) if row.run_id is not None else f"{key[:4]}/{pools.arms[k]}"
        worst[run] = max(worst.get(run, -np.inf), excess)
    if not worst:
        return None, "no NVLS-family run has an iteration 0 in the dataset, so no stall was measured"
    stalls = np.array(sorted(worst.values()))
    stall = float(np.median(stalls))
    return stall, (f"measured stall {stall / 1e6:.2f} s: the median over {len(stalls)} NVLS runs of iteration 0's "
                   f"largest excess over the steady mean (range {stalls[0] / 1e6:.2f}-{stalls[-1] / 1e6:.2f} s)")


def _communicators(problem: ReplayProblem) -> np.ndarray:
    """An integer per context naming its communicator size (fabric, nodes, ranks)."""
    keys = problem.contexts[["fabric", "nodes", "ranks"]].astype(str).agg("/".join, axis=1)
    return pd.factorize(keys)[0]


def _pooled(run, test: np.ndarray, touch: np.ndarray, comm: np.ndarray, toll: float) -> float:
    """Traffic-weighted TRLT (%) over the test contexts with ``toll`` once per communicator size
    touching NVLS, against a pre-warmed oracle; mean over seeds."""
    values = []
    for s in range(touch.shape[0]):
        tolls = toll * len(np.unique(comm[test & touch[s]]))
        values.append((run.served_us[s, test].sum() + tolls) / run.oracle_us[test].sum() - 1.0)
    return 100 * float(np.mean(values))


def nvls_toll(h: Harness) -> Section:
    """Table 22 (toll once per context replay, the oracle paying too when its arm is NVLS) and
    Table 23's pooled columns (once per communicator size, pre-warmed oracle, V visits)."""
    problem, test = h.problem, h.test()
    nvls = nvls_arms(problem.pools)
    stall, how = measured_stall(problem, h.first_calls)
    notes = [how[0].upper() + how[1:] + "."]
    tolls = [("none", 0.0), *((f"{t:g}s", t * 1e6) for t in h.options.tolls_s)]
    if stall is not None:
        tolls.append(("measured", stall))
    pooled_toll = stall if stall is not None else max(h.options.tolls_s, default=0.0) * 1e6
    notes.append(f"Pooled columns charge {pooled_toll / 1e6:.2f} s once per communicator size in which a policy "
                 "plays an NVLS arm, against a pre-warmed oracle, replaying V visits per context."
                 + ("" if stall is not None else " (the largest toll of the grid, no stall being measured)"))
    if not nvls.any():
        notes.append("No NVLS-family arm was measured: no toll is ever charged.")
    oracle_touch = nvls[problem.pools.best]
    comm = _communicators(problem)
    rows, long = [], []
    for policy in reference_policies(h, "ETC", "Random"):
        policy = h.prepared(policy)
        run = run_policy(problem, policy, horizon=h.options.horizon, seeds=h.seeds)
        touch = run.played[:, :, nvls].any(axis=2)
        row = {"policy": policy.display_name, "touches_nvls_pct": 100 * float(touch[:, test].mean())}
        per_ctx = {}
        for key, toll in tolls:
            trlt = ((run.served_us + toll * touch) / (run.oracle_us + toll * oracle_touch) - 1.0).mean(axis=0)
            row[f"toll_{key}_pct"] = 100 * float(trlt[test].mean())
            per_ctx[f"trlt_toll_{key}"] = trlt
        for visits in h.options.visits:
            again = run if visits == h.options.horizon else run_policy(problem, policy, horizon=int(visits),
                                                                       seeds=h.seeds)
            touched = again.played[:, :, nvls].any(axis=2)
            row[f"pooled_V{visits}_pct"] = _pooled(again, test, touched, comm, pooled_toll)
        rows.append(row)
        long.append(problem.contexts[list(CONTEXT_COLUMNS)].assign(policy=policy.display_name,
                                                                   touches_nvls=touch.mean(axis=0), **per_ctx))
    return Section("nvls-toll", "NVLS first-use toll (Tables 22, 23 pooled)",
                   "Realized test TRLT (%) when the first NVLS collective of a context replay costs a one-time toll "
                   "(an upper bound: a communicator pays it once), and pooled over the test contexts with the toll "
                   "paid once per communicator size, at V visits per context.",
                   {"nvls-toll": pd.DataFrame(rows)},
                   pd.concat(long, ignore_index=True).assign(part=np.tile(h.labels()["part"].to_numpy(), len(rows))),
                   notes)


def nvls_excluded(h: Harness) -> Section:
    """Table 23: NVLS-family arms removed from every arm set (filter, AUTO's argmin, the oracle)."""
    problem = h.problem
    drop = nvls_arms(problem.pools)
    notes = []
    if not drop.any():
        notes.append("No NVLS-family arm was measured: both columns replay the same arm sets.")
    left = (problem.pools.depth[:, ~drop] > 0).any(axis=1)
    reduced = make_problem(problem.pools.without_arms(drop), problem.predicted[left], rho_max=problem.rho_max)
    if len(reduced) < len(problem):
        notes.append(f"{len(problem) - len(reduced)} contexts have no measured arm with a prediction left and are "
                     "not replayed with NVLS excluded.")
    policies = reference_policies(h, "ETC")
    scored, frames = {}, []
    for tag, prob in (("offered", problem), ("excluded", reduced)):
        frame = h.replay(policies, problem=prob)
        scored[tag] = summarize(frame, threshold=h.options.threshold).set_index("policy")
        frames.append(per_context(frame, part=None).assign(arm_set=f"NVLS {tag}"))
    rows = []
    for policy in policies:
        row = {"policy": policy.display_name}
        for tag, s in scored.items():
            got = s.loc[policy.display_name]
            row.update({f"{tag}_mean_pct": got["realized_mean_pct"], f"{tag}_p99_pct": got["realized_p99_pct"],
                        f"{tag}_above": int(got["realized_above"]), f"{tag}_contexts": int(got["contexts"])})
        rows.append(row)
    long = pd.concat(frames, ignore_index=True)
    return Section("nvls-excluded", "NVLS excluded from every arm set (Table 23)",
                   "Realized test TRLT (%) with NVLS offered (the main replay) and with every NVLS-family arm "
                   "removed from each policy's arm set, the filter, AUTO's argmin and the oracle.",
                   {"nvls-excluded": pd.DataFrame(rows)}, long, notes)
