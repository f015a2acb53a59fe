"""Plugin pulls merged over ranks: one row per collective a live run played.

Every rank traces its own local latency of every pull; the plugin merges a pull as the
**maximum over ranks** (``plugin/README.md``, rank consistency), the application-visible
latency (paper appendix F). :func:`merge_pulls` does the same on ``live_events`` and
numbers each context's collectives ``call = 1..T`` in the order they ran. It also checks the
traces: ranks missing from a run, and ranks that disagree on an arm, become issues.
"""

from __future__ import annotations

import pandas as pd

from .inputs import LiveIssue

__all__ = ["PULL_KEYS", "CONTEXT_KEYS", "merge_pulls", "check_traces"]

#: One collective of a run: the pull index is per context and communicator.
PULL_KEYS = ["run_id", "comm_id", "collective", "size_bytes", "pull"]
#: A context inside one run (the run fixes fabric, nodes and ranks).
CONTEXT_KEYS = ["run_id", "collective", "size_bytes"]


def merge_pulls(events: pd.DataFrame) -> pd.DataFrame:
    """Pull rows of ``live_events`` merged over ranks, with ``call`` (1-based, per context).

    Columns: the :data:`PULL_KEYS`, ``arm``, ``auto_arm``, ``latency_us`` (max over the
    ranks that measured it; NaN when none did), ``t_ns`` (the last rank's), ``n_ranks``,
    ``n_arms`` (distinct arms the ranks logged; 1 when consistent) and ``call``.
    """
    cols = [*PULL_KEYS, "arm", "auto_arm", "latency_us", "t_ns", "n_ranks", "n_arms", "call"]
    pulls = events[events["kind"] == "pull"] if len(events) else events
    if pulls is None or pulls.empty:
        return pd.DataFrame(columns=cols)
    pulls = pulls.assign(comm_id=pulls["comm_id"].fillna(""), latency_us=pulls["latency_us"].astype(float),
                         t_ns=pulls["t_ns"].astype("float64")).sort_values("rank", kind="stable")
    grouped = pulls.groupby(PULL_KEYS, sort=False)
    merged = grouped.agg(arm=("arm", "first"), auto_arm=("auto_arm", "first"), latency_us=("latency_us", "max"),
                         t_ns=("t_ns", "max"), n_ranks=("rank", "nunique"), n_arms=("arm", "nunique")).reset_index()
    merged = merged.sort_values([*CONTEXT_KEYS, "t_ns", "comm_id", "pull"], kind="stable")
    merged["call"] = merged.groupby(CONTEXT_KEYS, sort=False).cumcount() + 1
    for col in ("size_bytes", "pull"):
        merged[col] = merged[col].astype("int64")
    return merged[cols].reset_index(drop=True)


def check_traces(runs: pd.DataFrame, events: pd.DataFrame, *, pulls: pd.DataFrame) -> list[LiveIssue]:
    """Issues for plugin runs without traces, with ranks missing, or with disagreeing ranks."""
    issues = []
    plugin = runs[~runs["is_stock"]]
    ranks_seen = events.groupby("run_id")["rank"].unique() if len(events) else pd.Series(dtype=object)
    # The communicator size the plugin was told (the trace's nranks); on the simulated fabric a
    # few rank processes stand for the job's ranks, so it can be smaller than the run's ranks.
    comm_ranks = events.groupby("run_id")["ranks"].max() if len(events) else pd.Series(dtype=float)
    for run in plugin.itertuples():
        seen = ranks_seen.get(run.run_id)
        if seen is None or len(seen) == 0:
            issues.append(LiveIssue(
                "traces", f"live run {run.run_id} ({run.label}) has no plugin trace (no live_events rows)",
                campaign=run.campaign, run_id=run.run_id,
                hint="run the step with NCCLBOT_TRACE_DIR set (the live job script sets it) and ingest its "
                     "trace/ folder; the plugin traces only the collectives it times (above NCCLBOT_MIN_BYTES). "
                     "Selection, learning curves and setup toll leave this run out; ladder and stock "
                     "comparison still use its nccl-tests output"))
            continue
        told = comm_ranks.get(run.run_id)
        expected = int(told) if pd.notna(told) else int(run.ranks) if pd.notna(run.ranks) else None
        if expected is not None:
            missing = sorted(set(range(expected)) - {int(r) for r in seen})
            if missing:
                shown = ", ".join(str(r) for r in missing[:8]) + (" ..." if len(missing) > 8 else "")
                issues.append(LiveIssue(
                    "traces", f"live run {run.run_id} ({run.label}): traces of {len(missing)} of {expected} ranks "
                              f"are missing (ranks {shown})", campaign=run.campaign, run_id=run.run_id,
                    hint="ingest every trace/ncclbot-<comm>-r<rank>.csv of the step; latencies are merged over "
                         "the ranks present, so they may read low"))
    if len(pulls):
        bad = pulls[pulls["n_arms"] > 1]
        for run_id, group in bad.groupby("run_id"):
            row = runs[runs["run_id"] == run_id].iloc[0]
            issues.append(LiveIssue(
                "traces", f"live run {run_id} ({row['label']}): ranks disagree on the arm of {len(group)} pulls "
                          f"(first: {group.iloc[0]['collective']} {int(group.iloc[0]['size_bytes'])} B pull "
                          f"{int(group.iloc[0]['pull'])})", campaign=row["campaign"], run_id=run_id,
                hint="the plugin must give every rank the same choice; the rank-0 arm is used"))
    return issues

