"""Workload-weighted replay (paper section 6.4, appendices G and H; Tables 24, 25, Figure 12).

A Kineto trace ingested into the ``workload`` table becomes the job's ordered sequence of
contexts (``call_seq`` gives the issue order): each call's collective, its group size mapped
onto a communicator the sweep measured (``ranks`` if given; else the one with as many ranks;
else the one with as many nodes, the paper's mapping of 4-GPU groups onto 4-node pools) and
its size rounded to the nearest swept size of that (collective, communicator), in log2, when
within a factor ``max_ratio``. Calls the sweep cannot price (a collective without arms, a
communicator or size the sweep lacks, an unknown size) are listed with the reason, never
invented, and left out of the path.

The sequence is replayed for ``cycles`` cycles with every bandit's state carried across
cycles. Bandits are independent per context, so the j-th visit of a context is step j of
that context's bandit in one engine run (arms recorded); each visit is priced at the chosen
arm's steady mean (selection pricing, as the paper) and path TRLT is the summed price over
the oracle's, minus 1, per cycle and overall; its running value is Figure 12's curve.

The balanced uniform workload (Table 24) visits every test context ``horizon`` times. The
per-context bank's result does not depend on how the visits interleave, so it is the
per-context selection-priced replay, with its traffic-weighted path TRLT beside it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from ..figures import plot_crlt
from ..pools import CONTEXT_COLUMNS
from ..replay import ReplayProblem, run_policy
from ..summary import per_context
from .ablations import reference_policies
from .harness import Harness, Section

__all__ = ["map_trace", "trace_sequence", "trace_replay", "uniform_workload", "run_workload"]

_MAX_POINTS = 2000  # points of a curve kept in Figure 12's CSV


def _reason(row, problem: ReplayProblem, ranks: int | None, max_ratio: float) -> tuple[int, str]:
    """The context index a workload row maps to, or -1 and why not."""
    ctx = problem.contexts
    coll = str(row.collective)
    here = ctx[ctx["collective"] == coll]
    if here.empty:
        return -1, f"collective {coll} not in the sweep"
    if ranks is not None:
        comm = here[here["ranks"] == ranks]
        if comm.empty:
            return -1, f"no {ranks}-rank communicator swept for {coll}"
    elif row.group_size is None or pd.isna(row.group_size):
        return -1, "group size unknown (pass --ranks)"
    else:
        group = int(row.group_size)
        comm = here[here["ranks"] == group]
        if comm.empty:
            comm = here[here["nodes"] == group]
        if comm.empty:
            return -1, f"no {group}-rank or {group}-node communicator swept for {coll} (pass --ranks)"
    comm = comm[(comm["ranks"] == comm["ranks"].min())]
    comm = comm[comm["nodes"] == comm["nodes"].min()]
    if row.size_bytes is None or pd.isna(row.size_bytes) or int(row.size_bytes) <= 0:
        return -1, "message size unknown or 0"
    size = int(row.size_bytes)
    swept = comm["size_bytes"].to_numpy(np.int64)
    distance = np.abs(np.log2(swept / size))
    best = int(np.argmin(distance))
    if distance[best] > math.log2(max_ratio):
        return -1, f"size {size} B outside the swept sizes ({swept.min()}-{swept.max()} B) by more than {max_ratio:g}x"
    return int(comm.index[best]), ""


def map_trace(rows: pd.DataFrame, problem: ReplayProblem, *, ranks: int | None = None,
              max_ratio: float = 2.0) -> pd.DataFrame:
    """Each workload row with ``context`` (the problem row it maps to, -1 if none) and ``reason``."""
    if problem.contexts["fabric"].nunique() != 1:
        raise AnalysisError("a workload is replayed on one fabric's sweep, and the dataset holds several",
                            hint="choose one with --fabric NAME")
    found = [_reason(row, problem, ranks, max_ratio) for row in rows.itertuples(index=False)]
    out = rows.assign(context=[c for c, _ in found], reason=[r for _, r in found])
    keys = problem.contexts.reindex(out["context"].where(out["context"] >= 0))
    swept = {f"swept_{c}": pd.array(keys[c].to_numpy(), dtype="Int64") for c in ("nodes", "ranks", "size_bytes")}
    return out.assign(**swept)


def trace_sequence(mapped: pd.DataFrame) -> tuple[np.ndarray, bool]:
    """The problem row of every mapped call in issue order, and whether the order was stored.

    Without ``call_seq`` (a dataset ingested before it existed) each row's calls come
    together in row order: path totals are the same, the curve's shape is not.
    """
    rows = mapped[mapped["context"] >= 0]
    ordered = rows["call_seq"].map(lambda v: v is not None and len(v) > 0).all() if len(rows) else True
    if ordered and len(rows):
        position = np.concatenate([np.asarray(v, dtype=np.int64) for v in rows["call_seq"]])
        context = np.repeat(rows["context"].to_numpy(np.int64), [len(v) for v in rows["call_seq"]])
        return context[np.argsort(position, kind="stable")], True
    return np.repeat(rows["context"].to_numpy(np.int64), rows["calls"].to_numpy(np.int64)), bool(ordered)


def _fitted_for(policy, used: np.ndarray):
    """A fit-once selector's choices restricted to the contexts ``used`` (others pass through)."""
    if getattr(policy, "choice", None) is None:
        return policy
    return dataclasses.replace(policy, choice=tuple(np.asarray(policy.choice)[used]))


def _path(h: Harness, policy, sequence: np.ndarray, cycles: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed and step the price of the policy and of the oracle along ``cycles`` cycles of ``sequence``."""
    used, where = np.unique(sequence, return_inverse=True)
    sub = h.problem.subset(used)
    path = np.tile(where, cycles)
    visit = pd.Series(path).groupby(path).cumcount().to_numpy()
    run = run_policy(sub, _fitted_for(h.prepared(policy), used), horizon=int(visit.max()) + 1, seeds=h.seeds,
                     record_arms=True)
    steady = sub.pools.steady
    chosen = run.arms[:, path, visit]
    price = steady[path[None, :], chosen]
    return price, steady[path, sub.pools.best[path]]


def _thin(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, _MAX_POINTS)).round().astype(np.int64))


def trace_replay(h: Harness, rows: pd.DataFrame, *, trace_id: str, cycles: int = 2, ranks: int | None = None,
                 max_ratio: float = 2.0) -> Section:
    """Table 25 and Figure 12: the trace's path TRLT per policy over ``cycles`` cycles."""
    if cycles < 1:
        raise AnalysisError(f"--cycles must be at least 1, but got {cycles}")
    mapped = map_trace(rows, h.problem, ranks=ranks, max_ratio=max_ratio)
    sequence, ordered = trace_sequence(mapped)
    missing = mapped[mapped["context"] < 0]
    unmeasured = missing[["collective", "group_size", "size_bytes", "dtype", "calls", "reason"]].reset_index(drop=True)
    total = int(mapped["calls"].sum())
    notes = [f"Trace {trace_id}: {total} calls, {len(sequence)} of them on {len(np.unique(sequence))} swept "
             f"contexts, replayed for {cycles} cycles with bandit state carried across cycles; selection-priced."]
    if len(missing):
        notes.append(f"{int(missing['calls'].sum())} calls in {len(missing)} (collective, group, size) groups are "
                     "not in the sweep and left out: see the workload-unmeasured table.")
    if not ordered:
        notes.append("The dataset stores no call order for this trace (ingested before workload.call_seq): each "
                     "context's calls are replayed together; re-ingest the trace for the real order.")
    contexts = mapped[mapped["context"] >= 0]
    contexts = contexts[["collective", "group_size", "size_bytes", "dtype", "calls", "swept_nodes", "swept_ranks",
                         "swept_size_bytes"]].reset_index(drop=True)
    tables = {"workload": pd.DataFrame(columns=["policy"]), "workload-contexts": contexts,
              "workload-unmeasured": unmeasured}
    figures, long = [], pd.DataFrame()
    if len(sequence):
        rows_out, curves = [], []
        length = len(sequence)
        for policy in reference_policies(h):
            price, oracle = _path(h, policy, sequence, cycles)
            row = {"policy": policy.display_name}
            for k in range(cycles):
                part = slice(k * length, (k + 1) * length)
                lost = 100 * (price[:, part].sum(axis=1) / oracle[part].sum() - 1.0)
                row[f"cycle{k + 1}_pct"] = float(lost.mean())
            lost = 100 * (price.sum(axis=1) / oracle.sum() - 1.0)
            spread = 0.0 if policy.is_deterministic or len(lost) < 2 else float(lost.std(ddof=1))
            row.update(path_pct=float(lost.mean()), path_sd_pct=spread)
            rows_out.append(row)
            curve = 100 * (np.cumsum(price, axis=1) / np.cumsum(oracle)[None, :] - 1.0)
            keep = _thin(curve.shape[1])
            curves.append(pd.DataFrame({"policy": policy.display_name, "step": keep + 1,
                                        "value_pct": curve.mean(axis=0)[keep]}))
        tables["workload"] = pd.DataFrame(rows_out)
        long = pd.concat(curves, ignore_index=True)
        if h.figures is not None:
            figures.append(plot_crlt(long, h.figures / "workload.png", title=f"Trace replay ({cycles} cycles)",
                                     ylabel="cumulative path TRLT (% of the oracle's time)",
                                     marks=tuple(k * length for k in range(1, cycles)), marks_label="cycle boundary",
                                     synthetic=h.synthetic))
    else:
        notes.append("None of the trace's calls maps onto a swept context: nothing to replay.")
    return Section("workload", "Workload-weighted trace replay (Table 25, Figure 12)",
                   "Path TRLT (% of the oracle's time) of each policy along the trace's ordered calls, per cycle and "
                   "over the whole replay (mean over seeds, SD for stochastic policies); the contexts the calls map "
                   "to, and the calls the sweep did not measure, follow.", tables, long, notes, figures)


def uniform_workload(h: Harness) -> Section:
    """Table 24: the balanced uniform workload, ``horizon`` visits to each test context."""
    policies = reference_policies(h, "Random")
    ctx = per_context(h.replay(policies))
    pools = h.problem.pools
    best = pools.contexts[list(CONTEXT_COLUMNS)].assign(
        best_us=pools.steady[np.arange(len(pools)), pools.best])
    ctx = ctx.merge(best, on=list(CONTEXT_COLUMNS), how="left")
    rows = []
    for name, mine in ctx.groupby("policy", sort=False):
        weight = mine["best_us"].to_numpy(float)
        stats = h.stats(mine["trlt_selection"])
        rows.append({"policy": name, "contexts": len(mine), "mean_pct": stats["mean_pct"], "sem_pct": stats["sem_pct"],
                     "p99_pct": stats["p99_pct"],
                     "path_pct": 100 * float((mine["trlt_selection"].to_numpy() * weight).sum() / weight.sum())})
    return Section("workload-uniform", "Balanced uniform workload (Table 24)",
                   f"Per-context selection-priced TRLT (%) with {h.options.horizon} visits to each test context, and "
                   "the traffic-weighted path TRLT over all visits (each context weighted by its oracle time); "
                   "independent per-context bandits do not depend on how the visits interleave, so no reshuffles "
                   "are needed.", {"workload-uniform": pd.DataFrame(rows)}, ctx,
                   ["Shared-model policies (LinUCB) of Table 24 are not implemented; every row is a per-context bank."])


def run_workload(h: Harness, out, *, rows: pd.DataFrame | None = None, trace_id: str | None = None,
                 cycles: int = 2, ranks: int | None = None, max_ratio: float = 2.0) -> list[Section]:
    """The trace replay (when ``rows`` of a trace are given) and the balanced uniform workload,
    written into ``out`` as report sections (:mod:`.sections`)."""
    from pathlib import Path

    from .sections import write_section

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sections = [] if rows is None else [trace_replay(h, rows, trace_id=str(trace_id), cycles=cycles, ranks=ranks,
                                                     max_ratio=max_ratio)]
    sections.append(uniform_workload(h))
    about = (f"Workload replays on {len(h.problem)} swept contexts (split {h.options.split}, {h.options.seeds} seeds); "
             f"{h.problem.pools.convention}. Policies: {h.policies.source}.")
    for section in sections:
        write_section(out, section, about=about)
    return sections
