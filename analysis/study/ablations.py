"""Ablations that toggle one knob of the replay (paper appendix D.4, I.7): the warm start
(Tables 2, 42), the arm filter (Table 13), the horizon (Table 11), diluted updates (Table 9),
the contexts AUTO mis-ranks (Table 10), and the plugin's live rules (safety gate, hold).

Each function takes a :class:`~.harness.Harness` and returns a :class:`~.harness.Section`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from ..policies import make_policy
from ..replay import make_problem
from ..summary import compare, per_context, summarize
from .harness import Harness, Section, relabel

__all__ = ["warm_cold", "arm_filter", "horizon", "mis_ranked", "dilution", "live_rules", "reference_policies"]


def reference_policies(h: Harness, *extra: str) -> list:
    """AUTO, the learners, then ``extra`` families (``ETC``, ``Random``) not among them, labels unique."""
    chosen = [make_policy("AUTO"), *h.learners(), *(make_policy(name) for name in extra)]
    seen, out = set(), []
    for policy in chosen:
        if policy.display_name not in seen:
            seen.add(policy.display_name)
            out.append(policy)
    return out


def _scored(summary: pd.DataFrame, name: str, tag: str) -> dict:
    s = summary.loc[name]
    return {f"{tag}_mean_pct": s["realized_mean_pct"], f"{tag}_sem_pct": s["realized_sem_pct"],
            f"{tag}_p99_pct": s["realized_p99_pct"], f"{tag}_selection_pct": s["selection_mean_pct"]}


def warm_cold(h: Harness) -> Section:
    """Tables 2 and 42: each warm-started learner cold at its warm knobs (pseudo-count 0), and
    cold-tuned when a cold study (``analyze tune --cold``) is given; realized test TRLT."""
    notes = [f"Policies: {h.policies.source}."]
    trios = []
    for warm in h.learners():
        if warm.pseudo_count <= 0:
            notes.append(f"{warm.display_name} has no warm start (pseudo-count 0): nothing to toggle, left out.")
            continue
        name = warm.display_name
        cold = relabel(warm, f"{name} cold", pseudo_count=0.0)
        tuned = h.policies.cold_tuned.get(warm.name)
        trios.append((warm, cold, relabel(tuned, f"{name} cold-tuned") if tuned else None))
    if not trios:
        raise AnalysisError("no warm-started learner to ablate", hint="pass learners with a pseudo-count > 0 "
                            "(the default UCB1, Softmax, KL-UCB, or --study DIR of 'analyze tune')")
    if h.policies.cold_source:
        notes.append(f"Cold-tuned column: {h.policies.cold_source}.")
    else:
        notes.append("No cold-tuned study given, so Table 42's cold-tuned column is absent: run "
                     "'analyze tune --cold --out COLD' and pass --cold-study COLD.")
    policies = [p for trio in trios for p in trio if p is not None]
    frame = h.replay(policies)
    summary = summarize(frame, threshold=h.options.threshold).set_index("policy")
    rows = []
    for warm, cold, tuned in trios:
        row = {"family": warm.display_name, **_scored(summary, cold.display_name, "cold"),
               **_scored(summary, warm.display_name, "warm")}
        test = compare(frame, (warm.display_name, cold.display_name), threshold=h.options.threshold)
        row.update(delta_pp=test["pooled_diff_pp"], p_wilcoxon=test["p_wilcoxon"], p_signflip=test["p_signflip_mean"])
        missing = tuned is None or tuned.display_name not in summary.index
        if not missing:
            row.update(_scored(summary, tuned.display_name, "cold_tuned"))
            test = compare(frame, (warm.display_name, tuned.display_name), threshold=h.options.threshold)
            row.update(delta_tuned_pp=test["pooled_diff_pp"], p_wilcoxon_tuned=test["p_wilcoxon"])
        elif tuned is not None:
            notes.append(f"The cold study has no {warm.name} champion.")
        rows.append(row)
    return Section("warm-cold", "Warm against cold start (Tables 2, 42)",
                   "Realized test TRLT (%) of each learner with its cost-model warm start, cold at the warm "
                   "champion's knobs (pseudo-count 0), and cold with its own search; delta is the paired "
                   "warm - cold mean (pp) with Wilcoxon (contexts) and sign-flip (scenarios) p-values.",
                   {"warm-cold": pd.DataFrame(rows)}, per_context(frame), notes)


def _offered_counts(problem, test: np.ndarray) -> dict:
    k = problem.offered.sum(axis=1)[test]
    c = np.arange(len(problem))[test]
    kept = problem.offered[c, problem.pools.best[c]]
    return {"K_min": int(k.min()), "K_median": float(np.median(k)), "K_max": int(k.max()), "K_mean": float(k.mean()),
            "best_offered_pct": 100 * float(kept.mean())}


def arm_filter(h: Harness) -> Section:
    """Table 13: the featured learner with the cost-model arm filter on (``rho_max``) and off."""
    on = h.problem
    off = make_problem(on.pools, on.predicted, rho_max=np.inf)
    policy = h.featured()
    test = h.test()
    rows, frames = [], []
    for label, problem in ((f"on (rho_max={on.rho_max:g})", on), ("off", off)):
        row = {"filter": label}
        for steps in sorted({50, h.options.horizon}):
            frame = h.replay([policy], problem=problem, horizon=steps)
            s = summarize(frame, threshold=h.options.threshold).iloc[0]
            row[f"T{steps}_realized_pct"], row[f"T{steps}_selection_pct"] = s["realized_mean_pct"], s["selection_mean_pct"]
            frames.append(per_context(frame).assign(filter=label, horizon=steps))
        rows.append({**row, **_offered_counts(problem, test)})
    return Section("filter", "Cost-model arm filter on and off (Table 13)",
                   f"Test TRLT (%) of {policy.display_name} at pulls 50 and {h.options.horizon} with the filter "
                   "on and off; K is the offered arm count per test context, and how often the measured-best arm "
                   "is offered.", {"filter": pd.DataFrame(rows)}, pd.concat(frames, ignore_index=True))


def horizon(h: Harness) -> Section:
    """Table 11: test TRLT against the horizon T for AUTO, Random, the learners and ETC."""
    policies = reference_policies(h, "ETC", "Random")
    frames, table = [], None
    for steps in h.options.horizons:
        frame = h.replay(policies, horizon=steps)
        s = summarize(frame, threshold=h.options.threshold, order=[p.display_name for p in policies])
        column = s[["policy"]].assign(**{f"T{steps}_realized_pct": s["realized_mean_pct"],
                                         f"T{steps}_selection_pct": s["selection_mean_pct"]})
        table = column if table is None else table.merge(column, on="policy", how="left")
        frames.append(per_context(frame).assign(horizon=steps))
    return Section("horizon", "Learning horizon (Table 11)",
                   "Mean test TRLT (%) at each horizon T, realized and selection-priced; a fixed selector such as "
                   "AUTO is horizon-invariant on selection price.", {"horizon": table},
                   pd.concat(frames, ignore_index=True))


def mis_ranked(h: Harness) -> Section:
    """Table 10: TRLT on the contexts where AUTO's arm is not the measured best (all contexts pooled)."""
    policies = reference_policies(h, "ETC")
    frame = h.replay(policies)
    ctx = per_context(frame, part=None)
    wrong = ctx["auto_arm"] != ctx["best_arm"]
    rows = []
    for name, g in ctx.groupby("policy", sort=False):
        bad, good = g[wrong.loc[g.index]], g[~wrong.loc[g.index]]
        rows.append({"policy": name, "misranked_contexts": len(bad),
                     "misranked_selection_pct": 100 * bad["trlt_selection"].mean(),
                     "misranked_realized_pct": 100 * bad["trlt_realized"].mean(),
                     "exact_contexts": len(good), "exact_selection_pct": 100 * good["trlt_selection"].mean()})
    table = pd.DataFrame(rows)
    auto = table.loc[table["policy"] == "AUTO", "misranked_selection_pct"]
    if len(auto):
        with np.errstate(divide="ignore", invalid="ignore"):
            table["auto_over_policy"] = float(auto.iloc[0]) / table["misranked_selection_pct"]
    notes = [] if wrong.any() else ["AUTO picks the measured-best arm on every context: nothing is mis-ranked."]
    return Section("mis-ranked", "Conditional TRLT where AUTO mis-ranks (Table 10)",
                   "Mean TRLT (%) on the contexts where AUTO's arm is not the measured best, all contexts of the "
                   "split pooled (exploratory), and the exploration tax on the contexts AUTO gets right.",
                   {"mis-ranked": table}, ctx.assign(misranked=wrong.to_numpy()), notes)


def dilution(h: Harness) -> Section:
    """Table 9: the featured learner updating only every k pulls (the plugin's sync period)."""
    policy = h.featured()
    steps = h.options.dilution_horizon
    rows, frames = [], []
    auto = h.replay([make_policy("AUTO")], horizon=steps)
    runs = [("AUTO", None, auto)]
    for k in h.options.dilutions:
        label = f"{policy.display_name}, update every {k}"
        runs.append((label, int(k), h.replay([relabel(policy, label)], horizon=steps, dilution=int(k))))
    for label, k, frame in runs:
        ctx = per_context(frame, part=None)
        rows.append({"policy": label, "k": k, "sync_rounds": None if k is None else steps // k,
                     **h.stats(ctx["trlt_realized"]), "selection_mean_pct": 100 * ctx["trlt_selection"].mean()})
        frames.append(ctx.assign(k=k))
    table = pd.DataFrame(rows).astype({"k": "Int64", "sync_rounds": "Int64"})
    return Section("dilution", "Diluted updates: the sync period's cost to learning (Table 9)",
                   f"Realized TRLT (%) over every context at T={steps}: the learner selects on every collective "
                   "but its rewards are applied, in pull order, only every k pulls (NCCLBOT_SYNC_EVERY); k=1 is "
                   "the plain replay.", {"dilution": table}, pd.concat(frames, ignore_index=True),
                   ["Per context, as one communicator running one size back to back; the plugin's rounds span every "
                    "context of a communicator and apply a round's rewards one round after it ends on several "
                    "ranks (the live-rules ablation replays that, with the hold rule)."])


#: The plugin's synchronisation as the live-rules ablation replays it: rounds of 16 pulls
#: (the live campaigns' NCCLBOT_SYNC_EVERY) applied one round after they end (NCCLBOT_SYNC_LAG=1).
LIVE_ROUNDS = (16, 1)


def live_rules(h: Harness) -> Section:
    """Each learner with the safety gate and the hold rule each on and off, replayed with the
    plugin's delay (rounds of 16, applied one round late) and without it (the gate alone)."""
    every, lag = LIVE_ROUNDS
    steps = h.options.dilution_horizon
    variants = [("gate and hold (default)", {}), ("no gate", {"safety_gate": False}),
                ("no hold", {"probe": 10**9}), ("neither", {"safety_gate": False, "probe": 10**9})]
    rows, frames = [], []
    for learner in h.learners():
        for delayed in (True, False):
            for name, change in variants if delayed else variants[:2]:
                label = f"{learner.display_name}, {name}" + ("" if delayed else ", no delay")
                engine = {"dilution": every, "lag": lag} if delayed else {}
                frame = h.replay([relabel(learner, label, **change)], horizon=steps, **engine)
                ctx = per_context(frame, part=None)
                rows.append({"policy": learner.display_name, "rules": name, "delayed": delayed,
                             **h.stats(ctx["trlt_realized"]), "selection_mean_pct": 100 * ctx["trlt_selection"].mean()})
                frames.append(ctx.assign(rules=name, delayed=delayed))
    table = pd.DataFrame(rows)
    return Section("live-rules", "The plugin's live rules: safety gate and hold",
                   f"Realized TRLT (%) over every context at T={steps}, each learner with its safety gate (AUTO's "
                   "arm where the choice measures 10% worse) and its hold rule (an arm waits for its pending "
                   f"rewards) on and off, with the plugin's delay (rounds of {every} pulls applied {lag} round late) "
                   "and without it (where nothing is pending, the hold never acts).",
                   {"live-rules": table}, pd.concat(frames, ignore_index=True),
                   ["Per context, as one communicator running one size back to back."])
