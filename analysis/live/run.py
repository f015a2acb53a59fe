"""``analyze live``: the live decomposition of one or more datasets as a list of named steps.

:func:`analyze_live` reads the datasets once, as one (:func:`.inputs.load_live`), runs the
offline audit where one of them holds a forced sweep, then per scenario (campaign, fabric,
collective, nodes, ranks): merge the traces over ranks, find the setup stalls, reconstruct
the oracle, price the selections, draw the learning curves, and, given a stock run, the
overhead ladder and the stock comparison, and how late each run's rewards came. A part that lacks its input records a
:class:`.inputs.LiveIssue` and the others still run. ``write_live`` puts every table out as
Parquet and CSV (with its columns and types when empty, :mod:`.schema`) and the figures as PNG.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from ..audit import audit_auto
from ..inputs import is_synthetic, load_problem
from ..pools import CONTEXT_COLUMNS
from .curves import curve_windows, learning_curves, timeline
from .forced import auto_against_audit, forced_vs_stock
from .headline import live_headline
from .inputs import SCENARIO_KEYS, LiveData, LiveIssue, issues_frame, load_live
from .lag import reward_lag
from .oracle import MIN_PULLS, pooled_means, reconstruct_oracle
from .overhead import ladder, ladder_bins
from .pulls import check_traces, merge_pulls
from .schema import conform
from .selection import price_pulls, selection_per_size, selection_summary
from .setup import find_stalls, mark_stalls, setup_toll
from .sizes import stalled_sizes
from .stock import stock_bands, stock_per_size

__all__ = ["LiveResult", "TABLES", "analyze_live", "write_live"]

log = logging.getLogger(__name__)

#: Every table ``analyze live`` writes, in report order, with what it holds.
TABLES: dict[str, str] = {
    "selection_summary": "selection-priced TRLT per run over sizes (Tables 20-21)",
    "selection_per_size": "selection-priced TRLT per run and size",
    "oracle": "reconstructed oracle and AUTO's arm per size (pooled profiler latency, stall excluded)",
    "learning_windows": "lost bandwidth against the oracle per window of collectives (Figure 2)",
    "learning_curves": "lost bandwidth against the oracle per collective index (Figure 2)",
    "timeline": "arm choices at the size of AUTO's largest gap, at accumulated time (Figure 11)",
    "overhead_ladder": "nccl-tests average bus bandwidth and overhead per rung (Table 18)",
    "overhead_bins": "per size bin time overhead and share of the bandwidth drop (Table 19)",
    "setup_toll": "first-use NVLS stall per run (Table 20)",
    "reward_lag": "how late each run's rewards came (collectives launched meanwhile) and the samples used and dropped",
    "setup_processes": "largest inter-collective gap per process (rank)",
    "stock_bands": "speed against stock per size band (Table 17)",
    "stock_per_size": "speed against stock per size",
    "forced_vs_stock": "forced price of AUTO's arm against the stock run's time per context",
    "auto_vs_audit": "AUTO through the plugin against the offline audit, per context",
    "issues": "inputs that are missing, and the parts they stop",
}


@dataclasses.dataclass
class LiveResult:
    """The tables (name -> frame), figure paths, issues and headline numbers of one analysis."""

    tables: dict[str, pd.DataFrame]
    figures: dict[str, Path]
    headline: dict
    #: Fabrics some of whose runs the simulator produced (``runs.synthetic``): their figures say so.
    synthetic_fabrics: frozenset[str]

    @property
    def synthetic(self) -> bool:
        """True when some run of the analysis is synthetic."""
        return bool(self.synthetic_fabrics)

    @property
    def issues(self) -> pd.DataFrame:
        return self.tables["issues"]


def _with_scenario(frame: pd.DataFrame, scenario: dict) -> pd.DataFrame:
    if frame is None or frame.empty:
        return pd.DataFrame()
    frame = frame.copy()
    for pos, key in enumerate(SCENARIO_KEYS):
        if key not in frame.columns:
            frame.insert(pos, key, scenario[key])
    return frame


def _audit(data: LiveData, issues: list[LiveIssue]) -> pd.DataFrame:
    """The offline audit's contexts of every fabric the live runs used, from whichever of the
    datasets holds a forced sweep of it (empty without one; a context two sweeps share is
    taken from the first dataset given)."""
    frames = []
    for fabric in sorted(set(data.runs["fabric"].dropna())):
        reasons = []
        for root in data.roots:
            try:
                frames.append(audit_auto(load_problem(root, fabric=fabric)))
            except AnalysisError as exc:
                reasons.append(exc.reason)
        if len(reasons) == len(data.roots):
            issues.append(LiveIssue("forced", f"fabric {fabric}: no offline audit ({'; '.join(dict.fromkeys(reasons))})",
                                    hint="ingest a forced-arm sweep of the same fabric (with cost tables), or pass its "
                                         "dataset too, to compare forced prices and the audit with the live runs"))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).drop_duplicates(list(CONTEXT_COLUMNS), keep="first")


@dataclasses.dataclass
class _Scenario:
    """The per-scenario intermediate frames (one campaign, fabric and communicator)."""

    key: dict
    runs: pd.DataFrame
    pulls: pd.DataFrame
    stalls: pd.DataFrame
    pooled: pd.DataFrame
    oracle: pd.DataFrame
    priced: pd.DataFrame
    per_size: pd.DataFrame


def _trace_steps(data: LiveData, key: dict, runs: pd.DataFrame, issues: list, min_pulls: int) -> _Scenario:
    events = data.events[data.events["run_id"].isin(runs["run_id"])] if len(data.events) else data.events
    pulls = merge_pulls(events)
    issues.extend(check_traces(runs, events, pulls=pulls))
    stalls = find_stalls(events)
    pulls["stall"] = mark_stalls(pulls, stalls)
    pooled = pooled_means(pulls)
    oracle = reconstruct_oracle(pulls, pooled, min_pulls=min_pulls)
    priced = price_pulls(pulls, pooled, oracle=oracle) if len(oracle) else pd.DataFrame()
    per_size = selection_per_size(priced, runs) if len(priced) else pd.DataFrame()
    return _Scenario(key, runs, pulls, stalls, pooled, oracle, priced, per_size)


def _stock_steps(data: LiveData, sc: _Scenario, stock, issues: list, out: dict) -> None:
    """Overhead ladder and stock comparison of one scenario (needs its stock reference)."""
    key, runs = sc.key, sc.runs
    where = f"{key['collective']} at {key['nodes']} nodes ({key['ranks']} ranks) on {key['fabric']}"
    if stock is None:
        issues.append(LiveIssue("stock", f"campaign {key['campaign']!r} has no stock run for {where}: overhead "
                                         "ladder and stock comparison not computed", campaign=key["campaign"],
                                hint="add policy 'stock' to the campaign, or ingest a stock campaign or a forced "
                                     "sweep with 'baseline: true' on the same fabric and node count"))
        return
    plugin = runs[~runs["is_stock"]]
    if plugin.empty:
        issues.append(LiveIssue("stock", f"campaign {key['campaign']!r} has only stock runs for {where}: nothing "
                                         "to compare with stock", campaign=key["campaign"],
                                hint="add plugin policies (AUTO, ucb1, ...) to the campaign"))
        return
    if not plugin["is_auto"].any():
        issues.append(LiveIssue("overhead", f"campaign {key['campaign']!r}: no plugin run with AUTO's selection "
                                            f"fixed for {where}; the ladder's overhead mixes in selection",
                                campaign=key["campaign"], hint="add policy AUTO (sync off and sync-K variants)"))
    out["overhead_ladder"] = ladder(plugin, stock, iterations=data.iterations, events=data.events)
    out["overhead_bins"] = ladder_bins(plugin, stock, iterations=data.iterations)
    stalled = stalled_sizes(data.iterations)
    for run_id, g in (sc.stalls.groupby("run_id") if len(sc.stalls) else []):
        stalled.setdefault(run_id, set()).update(g.loc[g["stall_found"], "size_bytes"].astype("int64"))
    rows = stock_per_size(plugin, stock, iterations=data.iterations, stalled=stalled)
    out["stock_per_size"] = rows
    out["stock_bands"] = stock_bands(rows) if len(rows) else pd.DataFrame()


def _scenario_tables(data: LiveData, key: dict, runs: pd.DataFrame, audit: pd.DataFrame, issues: list,
                     min_pulls: int) -> dict[str, pd.DataFrame]:
    sc = _trace_steps(data, key, runs, issues, min_pulls)
    out: dict[str, pd.DataFrame] = {"oracle": sc.oracle, "selection_per_size": sc.per_size}
    if len(sc.per_size):
        out["selection_summary"] = selection_summary(sc.per_size)
        out["learning_curves"] = learning_curves(sc.priced).merge(
            runs[["run_id", "label"]].rename(columns={"label": "policy"}), on="run_id")
        out["learning_windows"] = curve_windows(sc.priced, runs)
        out["timeline"] = timeline(sc.priced, sc.oracle, runs=runs)
        out["auto_vs_audit"] = auto_against_audit(sc.per_size, runs, audit=audit)
    if len(sc.stalls):
        out["setup_toll"] = setup_toll(runs, sc.stalls, pulls=sc.pulls, pooled=sc.pooled)
        out["setup_processes"] = sc.stalls
    out["reward_lag"] = reward_lag(runs, data.events[data.events["run_id"].isin(runs["run_id"])]
                                   if len(data.events) else data.events)
    _stock_steps(data, sc, data.stock_for(key, runs), issues, out)
    return {name: _with_scenario(frame, key) for name, frame in out.items()}


def _figures(tables: dict[str, pd.DataFrame], out: Path, synthetic_of) -> dict[str, Path]:
    from .figures import plot_learning_curves, plot_timeline

    figures = {}
    curves, line = tables.get("learning_curves", pd.DataFrame()), tables.get("timeline", pd.DataFrame())
    for key, g in (curves.groupby(SCENARIO_KEYS, sort=True) if len(curves) else []):
        slug = "{}-{}-{}n".format(key[0], key[2], key[3])
        labels = dict(zip(g["run_id"], g["policy"]))
        title = f"{key[0]}: {key[2]}, {key[3]} nodes, sizes where AUTO errs"
        figures[f"learning_curves-{slug}"] = plot_learning_curves(
            g, labels, path=out / f"learning_curves-{slug}.png", title=title, synthetic=synthetic_of(key[1]))
    for key, g in (line.groupby(SCENARIO_KEYS, sort=True) if len(line) else []):
        slug = "{}-{}-{}n".format(key[0], key[2], key[3])
        title = f"{key[0]}: {key[2]}, {key[3]} nodes, {g['size'].iloc[0]} (AUTO's largest gap)"
        figures[f"timeline-{slug}"] = plot_timeline(g, out / f"timeline-{slug}.png", title=title,
                                                    synthetic=synthetic_of(key[1]))
    return figures


def analyze_live(datasets: str | Path | Sequence[str | Path], *, campaign: str | None = None,
                 out: str | Path | None = None, min_pulls: int = MIN_PULLS) -> LiveResult:
    """Run the live analysis of one dataset or several read as one (the live campaign's and the
    forced sweep's, when they were ingested apart); with ``out``, write tables and figures there.

    Raises :class:`AnalysisError` when no dataset has a live, stock or overhead run (of
    ``campaign``); every lesser gap is a row of the ``issues`` table.
    """
    data = load_live(datasets, campaign=campaign)
    issues = list(data.issues)
    audit = _audit(data, issues)
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for key, runs in data.scenarios():
        tables = _scenario_tables(data, key, runs, audit, issues, min_pulls)
        for name, frame in tables.items():
            if len(frame):
                parts[name].append(frame)
    stock_runs = data.runs[data.runs["is_stock"]]
    parts["forced_vs_stock"].append(forced_vs_stock(audit, stock_runs, iterations=data.iterations))
    tables = {name: conform(name, pd.concat([f for f in frames if len(f)], ignore_index=True)
                            if any(len(f) for f in frames) else pd.DataFrame())
              for name, frames in parts.items() if name != "issues"}
    tables["issues"] = conform("issues", issues_frame(issues))
    synthetic = frozenset(str(fabric) for fabric, runs in data.runs.groupby("fabric") if is_synthetic(runs))
    result = LiveResult(tables, {}, live_headline(data, tables), synthetic)
    if out is not None:
        write_live(result, Path(out))
    return result


def write_live(result: LiveResult, out: Path) -> None:
    """Write every table as ``<name>.parquet`` and ``<name>.csv``, the figures as PNG and
    ``headline.json`` into ``out`` (created; files are overwritten)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in result.tables.items():
        frame.to_parquet(out / f"{name}.parquet", index=False)
        frame.to_csv(out / f"{name}.csv", index=False)
    result.figures.update(_figures(result.tables, out, result.synthetic_fabrics.__contains__))
    (out / "headline.json").write_text(json.dumps(result.headline, indent=2, sort_keys=True) + "\n")
    log.info("live analysis written to %s", out)
