"""What the report says first: the headline box, and the claims of its Table-1 section.

A reader opening ``index.html`` should learn before any table how often NCCL's AUTO picks a
wrong arm and what that costs (mean, p99, the worst contexts), what the learning policies
change, and what the live campaign showed. Every number comes from a table the page also
shows (the audit, the Table-1 summary, the live headline), never typed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd

from ncclbot_sweep.names import human_size

from ..policies import Auto, RandomPolicy

__all__ = ["Headline", "NOT_LEARNERS", "build_headline", "learners", "summary_claims"]

#: Replayed policies that are baselines, not learners: NCCL's choice and the uniform draw.
NOT_LEARNERS = (Auto.name, RandomPolicy.name)


def learners(policies: Sequence[str]) -> list[str]:
    """The learning policies among ``policies`` (display names), in their order."""
    return [p for p in policies if p not in NOT_LEARNERS]


@dataclasses.dataclass(frozen=True)
class Headline:
    """The box's sentences: AUTO's errors, its worst contexts, the learners, the live campaign."""

    auto: list[str]
    worst: list[str]
    learners: list[str]
    live: list[str]


def _auto_lines(audit, *, threshold: float) -> list[str]:
    contexts = audit.contexts
    wrong = int(contexts["error"].sum())
    row = audit.summary.set_index("pricing").loc["selection"]
    above = int(row[f"above_{threshold:g}"])
    return [f"AUTO picks a wrong arm in {wrong} of {len(contexts)} contexts ({row['error_rate_pct']:.1f}%).",
            f"Its loss against the measured-best arm (selection-priced, all contexts): mean {row['mean_pct']:.1f}%, "
            f"p99 {row['p99_pct']:.1f}%; {above} contexts lose more than {100 * threshold:g}%."]


def _worst_lines(audit, *, top: int) -> list[str]:
    worst = audit.contexts[audit.contexts["error"]].nlargest(top, "trlt_selection")
    return [f"{r.collective} on {r.nodes} nodes at {human_size(r.size_bytes)} ({r.fabric}): AUTO plays {r.auto_arm}, "
            f"{r.best_arm} is best; AUTO is {100 * r.trlt_selection:.0f}% slower." for r in worst.itertuples()]


def _learner_lines(summary: pd.DataFrame, *, threshold: float) -> list[str]:
    rows = summary.set_index("policy")
    names = [p for p in learners(list(rows.index)) if pd.notna(rows.loc[p, "realized_mean_pct"])]
    if "AUTO" not in rows.index or not names:
        return []
    best = min(names, key=lambda p: rows.loc[p, "realized_mean_pct"])
    b, a = rows.loc[best], rows.loc["AUTO"]
    verdict = "beats" if b["realized_mean_pct"] < a["realized_mean_pct"] else "does not beat"
    return [f"{best}, the best of {len(names)} learners on the {int(b['contexts'])} test contexts, {verdict} AUTO: "
            f"realized TRLT mean {b['realized_mean_pct']:.2f}% against AUTO's {a['realized_mean_pct']:.2f}%, "
            f"p99 {b['realized_p99_pct']:.1f}% against {a['realized_p99_pct']:.1f}%, contexts above "
            f"{100 * threshold:g}%: {int(b['realized_above'])} against {int(a['realized_above'])}."]


def build_headline(audit, summary: pd.DataFrame, *, live: dict, threshold: float, top: int = 3) -> Headline:
    """The headline box from the audit (:func:`..audit.run_audit`), the Table-1 ``summary`` and
    the report's live section (the short verdict of each scenario, :class:`..live.ScenarioVerdict`)."""
    live_lines = [f"{v.title}: {' '.join(v.short)}" for v in live["verdicts"]] if live["present"] else []
    return Headline(_auto_lines(audit, threshold=threshold), _worst_lines(audit, top=top),
                    _learner_lines(summary, threshold=threshold), live_lines)


def _p(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.3g}"


def summary_claims(summary: pd.DataFrame, tests: pd.DataFrame | None, *, threshold: float,
                   alpha: float = 0.05) -> list[str]:
    """One sentence per learning policy against AUTO, from the Table-1 summary, each claim
    with its scenario-level test: the exact sign-flip p-value and the Holm-adjusted one over
    the family of policies compared with AUTO (:func:`~..summary.confirmatory`)."""
    rows = summary.set_index("policy")
    if "AUTO" not in rows.index:
        return []
    tested = tests.set_index("b") if tests is not None and len(tests) else pd.DataFrame()
    auto = rows.loc["AUTO"]
    pct = f"{100 * threshold:g}%"
    lines = []
    for name in learners(list(rows.index)):
        r = rows.loc[name]
        better = (r["realized_mean_pct"] < auto["realized_mean_pct"] and r["realized_p99_pct"] < auto["realized_p99_pct"]
                  and r["realized_above"] < auto["realized_above"])
        line = (f"{name}: realized mean {r['realized_mean_pct']:.2f}% vs AUTO {auto['realized_mean_pct']:.2f}%")
        above = f"contexts above {pct} {int(r['realized_above'])} vs {int(auto['realized_above'])}"
        if name in tested.index:
            t = tested.loc[name]
            scenarios = int(t["scenarios"])
            line += (f" ({name} better in {int(t['scen_b_better'])} of {scenarios} scenarios; sign-flip over scenarios "
                     f"p = {_p(t['p_signflip_mean'])}, Holm p = {_p(t['p_holm_mean'])})")
            above += f" (sign-flip p = {_p(t['p_signflip_above'])}, Holm p = {_p(t['p_holm_above'])})"
            significant = [claim for claim, p in (("mean", t["p_holm_mean"]), ("above", t["p_holm_above"]))
                           if pd.notna(p) and p < alpha]
            verdict = (f"significant at {alpha:g} after Holm for: {', '.join(significant)}" if significant else
                       f"not significant at {alpha:g} after Holm (with {scenarios} scenarios the smallest attainable "
                       f"sign-flip p is {_p(2 / 2 ** scenarios) if scenarios else 'n/a'})")
        else:
            verdict = "no scenario-level test (AUTO not compared)"
        lines.append(f"{line}; p99 {r['realized_p99_pct']:.1f}% vs {auto['realized_p99_pct']:.1f}% (descriptive); "
                     f"{above}" + ("; better on all three" if better else "") + f"; {verdict}.")
    return lines
