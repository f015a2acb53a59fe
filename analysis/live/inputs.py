"""Read the live side of a dataset: runs, their nccl-tests iterations and plugin traces.

The live analysis's view of a dataset, read through
:func:`~ncclbot_sweep.analysis.inputs.read_dataset_table` (the analysis's one reader). It
also names the runs (``label``), tells stock runs and plugin runs apart, reads the
overhead-ladder rung off the ``variant`` column, and collects :class:`LiveIssue` records for
inputs that are missing, so that a part that cannot be computed says why while the others
still are.

The live runs and the forced sweep they are compared with may sit in one dataset or in
several (``make demo`` keeps the sweep and the live campaign apart): :func:`load_live` reads
every dataset it is given as one.

A *scenario* of the live analysis is ``(campaign, fabric, collective, nodes, ranks)``: the
runs that share a communicator shape and were planned together.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ncclbot_sweep.errors import AnalysisError, did_you_mean
from ncclbot_sweep.names import AUTO
from ncclbot_sweep.names import STOCK as STOCK_POLICY

from ..inputs import read_dataset_table
from ..policies import STATIC_POLICY, live_policy_name

__all__ = ["STOCK_POLICY", "LIVE_KINDS", "SCENARIO_KEYS", "LiveIssue", "LiveData", "dataset_roots", "load_live",
           "read_stacked", "sync_every",
           "issues_frame"]

log = logging.getLogger(__name__)

#: Run kinds the live analysis reads (architecture section 4).
LIVE_KINDS = ("live", "stock", "overhead")
SCENARIO_KEYS = ["campaign", "fabric", "collective", "nodes", "ranks"]
_SYNC_RE = re.compile(r"sync[-_/]?(\d+)$", re.IGNORECASE)
_DEFAULT_VARIANT = "default"


@dataclasses.dataclass(frozen=True)
class LiveIssue:
    """Something an input lacks: which part it stops, for which run, and how to fix it."""

    part: str
    what: str
    hint: str = ""
    campaign: str | None = None
    run_id: str | None = None


def issues_frame(issues: list[LiveIssue]) -> pd.DataFrame:
    """The issues as a table (one row each; empty with the columns when there are none)."""
    cols = ["part", "campaign", "run_id", "what", "hint"]
    return pd.DataFrame([{c: getattr(i, c) for c in cols} for i in issues], columns=cols)


def sync_every(variant: str | None) -> int | None:
    """The synchronisation period of a ladder rung named ``sync-K`` (None: sync off)."""
    match = _SYNC_RE.search(str(variant or ""))
    return int(match.group(1)) if match else None


@dataclasses.dataclass
class LiveData:
    """Runs of live campaigns, their iterations and live events, plus stock candidates.

    ``runs`` has one row per run with ``label`` (policy and variant), ``is_stock`` (no
    plugin: policy ``stock``, kind ``stock`` or a forced campaign's baseline step),
    ``is_auto`` (policy AUTO through the plugin), ``is_learner`` (a plugin policy that learns:
    neither AUTO nor the static table) and ``sync_every`` (ladder rung). Runs of
    other campaigns that are stock candidates are kept with ``companion`` true.
    """

    #: The datasets read, in the order given.
    roots: tuple[Path, ...]
    runs: pd.DataFrame
    iterations: pd.DataFrame
    events: pd.DataFrame
    issues: list[LiveIssue]

    def scenarios(self):
        """``(key, runs)`` per scenario of the requested campaigns, in a stable order."""
        own = self.runs[~self.runs["companion"]]
        for key, group in own.groupby(SCENARIO_KEYS, sort=True):
            yield dict(zip(SCENARIO_KEYS, key)), group

    def stock_for(self, scenario: dict, runs: pd.DataFrame) -> pd.Series | None:
        """The stock reference of a scenario: its own stock run, else one on the same fabric
        and communicator (a stock campaign, or a forced sweep's baseline step)."""
        own = runs[runs["is_stock"]]
        if len(own):
            return own.sort_values("started_at", na_position="last").iloc[0]
        same = self.runs[self.runs["is_stock"] & (self.runs["campaign"] != scenario["campaign"])]
        for col in ("fabric", "collective", "nodes", "ranks"):
            same = same[same[col] == scenario[col]]
        return same.sort_values("started_at", na_position="last").iloc[0] if len(same) else None


def _label_runs(runs: pd.DataFrame) -> pd.DataFrame:
    runs = runs.copy()
    policy = runs["policy"].fillna(AUTO).astype(str)
    variant = runs["variant"].fillna(_DEFAULT_VARIANT).astype(str)
    runs["is_stock"] = (policy.str.lower() == STOCK_POLICY) | (runs["kind"] == "stock") | (
        (runs["kind"] == "forced") & runs["arm"].isna())
    runs["is_auto"] = ~runs["is_stock"] & (policy.str.upper() == AUTO)
    runs["is_learner"] = ~runs["is_stock"] & ~runs["is_auto"] & (policy.str.lower() != STATIC_POLICY)
    runs["sync_every"] = [sync_every(v) for v in variant]
    label = policy.map(live_policy_name).where(~runs["is_stock"], STOCK_POLICY)
    runs["label"] = label.where(variant == _DEFAULT_VARIANT, label + " [" + variant + "]")
    runs["variant"] = variant
    runs = runs.sort_values(["campaign", "started_at", "run_id"], na_position="last", kind="stable")
    # Repeats of one policy and variant stay apart: "UCB1", "UCB1 #2", ...
    dup = runs.groupby([*SCENARIO_KEYS, "label"], dropna=False).cumcount()
    runs["label"] = runs["label"].where(dup == 0, runs["label"] + " #" + (dup + 1).astype(str))
    return runs.reset_index(drop=True)


def dataset_roots(datasets: str | Path | Sequence[str | Path]) -> tuple[Path, ...]:
    """The dataset folders, each checked to exist (:class:`AnalysisError` naming the first that does not)."""
    given = (datasets,) if isinstance(datasets, (str, Path)) else datasets
    roots = tuple(dict.fromkeys(Path(d) for d in given))  # a dataset given twice is read once
    if not roots:
        raise AnalysisError("no dataset given", hint="pass the folder 'ncclbot-sweep ingest' wrote (--dataset DIR)")
    for root in roots:
        if not root.is_dir():
            raise AnalysisError("dataset folder does not exist", path=root,
                                hint="pass the folder 'ncclbot-sweep ingest' wrote (--dataset DIR)")
    return roots


def read_stacked(roots: tuple[Path, ...], name: str, *, filters=None) -> pd.DataFrame:
    """One table of every dataset, stacked (rows keep their own ``run_id``)."""
    frames = [read_dataset_table(root, name, filters=filters) for root in roots]
    frames = [f for f in frames if len(f)] or frames[:1]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def load_live(datasets: str | Path | Sequence[str | Path], *, campaign: str | None = None) -> LiveData:
    """Read the live, stock and overhead runs of one dataset or several (one campaign or all).

    Raises :class:`AnalysisError` naming the dataset(s) when none has such a run; lesser gaps
    (a failed run, a live run without traces) become :class:`LiveIssue` records.
    """
    roots = dataset_roots(datasets)
    where = roots[0] if len(roots) == 1 else Path(", ".join(map(str, roots)))
    runs = read_stacked(roots, "runs")
    live = runs[runs["kind"].isin(LIVE_KINDS)]
    if campaign is not None:
        if not (live["campaign"] == campaign).any():
            names = sorted(set(live["campaign"].dropna()))
            raise AnalysisError(f"dataset has no live, stock or overhead run of campaign {campaign!r}"
                                + did_you_mean(campaign, names), path=where,
                                hint=f"campaigns with live runs: {', '.join(names) or 'none'}")
        live = live[live["campaign"] == campaign]
    if live.empty:
        raise AnalysisError("dataset has no live, stock or overhead runs", path=where,
                            hint="ingest the campaign folder of a live campaign (kind: live or overhead)")
    issues = [LiveIssue("runs", f"run {r.run_id} ({r.policy}) ended {r.outcome!r}: left out", campaign=r.campaign,
                        run_id=r.run_id, hint="resume the campaign to rerun it")
              for r in live[live["outcome"] != "ok"].itertuples()]
    live = live[live["outcome"] == "ok"].assign(companion=False)
    unplaced = live[SCENARIO_KEYS].isna().any(axis=1)
    issues += [LiveIssue("runs", f"run {r.run_id} ({r.policy}) lacks "
                                 f"{', '.join(k for k in SCENARIO_KEYS if pd.isna(getattr(r, k)))}: left out",
                         campaign=r.campaign, run_id=r.run_id,
                         hint="ingest the step folder (its step.json names campaign, fabric, collective, nodes "
                              "and ranks)") for r in live[unplaced].itertuples()]
    live = live[~unplaced]
    stock_like = runs[(runs["outcome"] == "ok") & ~runs["run_id"].isin(live["run_id"])]
    stock_like = stock_like[(stock_like["policy"].fillna("").str.lower() == STOCK_POLICY)
                            | (stock_like["kind"] == "stock")
                            | ((stock_like["kind"] == "forced") & stock_like["arm"].isna())].assign(companion=True)
    frame = _label_runs(pd.concat([live, stock_like], ignore_index=True))
    ids = sorted(frame["run_id"])
    iterations = read_stacked(roots, "iterations", filters=[("run_id", "in", ids)]) if ids else pd.DataFrame()
    events = read_stacked(roots, "live_events", filters=[("run_id", "in", ids)]) if ids else pd.DataFrame()
    log.info("live analysis: %d runs, %d iterations, %d live events", len(frame), len(iterations), len(events))
    return LiveData(roots, frame, iterations, events, issues)
