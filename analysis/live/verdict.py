"""A live analysis in words: did the plugin beat stock and AUTO, per size band, at what overhead.

Sentences built from :func:`.headline.live_headline` only, so each number a reader sees is
one of ``headline.json``; ``analyze live`` prints them and the report opens its live section
with them. A band counts as faster or slower than stock past :data:`.stock.MARGIN`, as the
stock tables' verdicts do.
"""

from __future__ import annotations

import dataclasses

from .lag import lag_sentence, noteworthy
from .stock import MARGIN

__all__ = ["ScenarioVerdict", "campaign_lines", "scenario_verdicts", "stock_standing"]


@dataclasses.dataclass(frozen=True)
class ScenarioVerdict:
    """The sentences about one scenario (campaign, fabric, collective, nodes, ranks); ``short``
    is what a headline keeps of them: against stock in one clause, then against AUTO (stock
    first: beating AUTO is no win where the run is slower than NCCL without the plugin)."""

    title: str
    lines: list[str]
    short: list[str]


def _bands(entries: list[dict]) -> str:
    return ", ".join(f"{e['sizes']} {e['median']:.2f}x" for e in entries if e["median"] is not None) or "no sizes"


def stock_standing(entries: list[dict]) -> dict[str, list[str]]:
    """The bands of ``entries`` (speed against stock, median per band) by standing: ``slower``,
    ``faster`` and ``on par with`` stock (past :data:`.stock.MARGIN`), each as ``4-8 MiB (0.91x)``."""
    words: dict[str, list[str]] = {"slower": [], "faster": [], "on par with": []}
    for e in entries:
        if e["median"] is None:
            continue
        kind = "faster" if e["median"] > MARGIN else "slower" if e["median"] < 1 / MARGIN else "on par with"
        words[kind].append(f"{e['sizes']} ({e['median']:.2f}x)")
    return words


def _against_stock(label: str, standing: dict[str, list[str]]) -> str:
    """``UCB1 was slower than stock at 4-8 MiB (0.80x); faster than stock at 16-32 MiB (1.31x)``: a
    loss first, where there is one."""
    parts = [f"{kind}{'' if kind == 'on par with' else ' than'} stock at {' and '.join(sizes)}"
             for kind, sizes in standing.items() if sizes]
    return f"{label} was " + "; ".join(parts) if parts else f"{label} has no size compared with stock"


def _selection(s: dict, learner: str | None, auto: str | None) -> str:
    sel = s["selection_trlt_mean_pct"]
    if learner is None:
        return "No learning policy was scored (only AUTO, static or stock runs)."
    where = f"mean over {s['selection_sizes'].get(learner)} sizes, {s['sizes']}"
    if auto is None:
        return (f"{learner} (the best learner): selection loss {sel[learner]:.1f}% against the pooled oracle "
                f"({where}); no AUTO run through the plugin to compare with.")
    beat = "beat" if sel[learner] < sel[auto] else "did not beat"
    return (f"{learner} (the best learner): selection loss {sel[learner]:.1f}% against AUTO's {sel[auto]:.1f}% "
            f"(selection-priced TRLT against the pooled oracle, {where}): {learner} {beat} AUTO.")


def _stock(s: dict, learner: str | None, auto: str | None) -> tuple[str, str]:
    """The stock sentence, and its verdict clause alone."""
    bands = s["speed_vs_stock_bands"]
    shown = [label for label in (learner, auto) if label in bands]
    if not shown:
        text = "No comparison with stock (no stock run of this communicator)."
        return text, text
    listed = "; ".join(f"{label} {_bands(bands[label])}" for label in shown)
    verdict = _against_stock(shown[0], stock_standing(bands[shown[0]]))
    return (f"{verdict}. Per band (stock time / run time per size, median; above 1 is faster, stalled sizes left "
            f"out): {listed}.", f"{verdict}; x = stock time / run time, median per band.")


def _overhead(s: dict, learner: str | None, auto: str | None) -> str | None:
    overhead = s["overhead_pct"]
    if auto not in overhead or overhead[auto] is None:
        return None
    text = (f"Overhead of the plugin (AUTO through the plugin, selection fixed): {overhead[auto]:.1f}% below stock's "
            f"nccl-tests average bus bandwidth")
    if learner in overhead and overhead[learner] is not None:
        text += f"; {learner}: {overhead[learner]:.1f}% (selection included)"
    if s.get("synthetic"):
        text += (" (simulated: launches are asynchronous; each plugin call costs the host its thread's CPU time, "
                 "which shows only where the stream waits for the host)")
    return text + "."


def _lag(s: dict, learner: str | None) -> list[str]:
    """The best learner's reward lag, then every other run that lost samples or that a fixed
    deadline would have starved."""
    lags = s.get("reward_lag") or {}
    shown = [learner] if learner in lags else []
    shown += [label for label, row in sorted(lags.items()) if label != learner and noteworthy(row)]
    return [lag_sentence(label, lags[label]) for label in shown]


def scenario_verdicts(headline: dict) -> list[ScenarioVerdict]:
    """Per scenario of ``headline``: speed against stock, selection against AUTO, overhead, setup stall."""
    out = []
    for s in headline["scenarios"]:
        learner, auto = s["best_learner"], s["auto"]
        stock, stock_verdict = _stock(s, learner, auto)
        selection = _selection(s, learner, auto)
        lines = [stock, selection]
        overhead = _overhead(s, learner, auto)
        if overhead:
            lines.append(overhead)
        lines.extend(_lag(s, learner))
        stall = s["setup_stall_s"]
        if stall["runs"]:
            lines.append(f"First-use stall (setup): median {stall['median']:.1f} s over {stall['runs']} runs, "
                         "a one-time toll left out of the comparisons above.")
        title = f"{s['campaign']}: {s['collective']} on {s['nodes']} nodes ({s['ranks']} ranks), {s['fabric']}"
        out.append(ScenarioVerdict(title, lines, [stock_verdict, selection]))
    return out


def campaign_lines(headline: dict) -> list[str]:
    """What the forced sweep says beside the live runs: forcing AUTO's arm against stock, and
    AUTO through the plugin against the offline audit (empty without a forced sweep)."""
    lines = []
    forced = headline["forced_auto_over_stock"]
    if forced["contexts"]:
        lines.append(f"Forcing AUTO's arm (NCCL_ALGO/NCCL_PROTO) takes {forced['median']:.2f}x the stock run's time "
                     f"(median over {forced['contexts']} contexts, {forced['min']:.2f}-{forced['max']:.2f}x): the "
                     "forced sweep prices what stock NCCL plays.")
    audit = headline["auto_vs_audit_difference_pp"]
    if audit["contexts"]:
        lines.append(f"AUTO through the plugin against the offline audit: selection loss differs by {audit['median']:.1f} "
                     f"pp (median over {audit['contexts']} contexts; largest {audit['max']:.1f} pp).")
    return lines
