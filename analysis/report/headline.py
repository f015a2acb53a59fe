"""What the report says first: the headline box, and the claims of its Table-1 section.

A reader opening ``index.html`` learns before any table what to set: per collective and node
count the size ranges where a measured arm beats NCCL's choice, by how much, and the files and
environment lines that deploy it (:mod:`.action`); then how often AUTO errs over every
context; then whether live learning is worth running (the replay's best learner on the
held-out test contexts, and the live campaign against stock first, AUTO second).

Every number is one of :func:`headline_numbers` (plain JSON, kept in ``results.json`` under
``headline``), and every sentence is built from that dict by :func:`headline_sentences`: the
page and the demo's final summary say the same sentences from the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd

from ..policies import Auto, RandomPolicy
from ..tables import p_value
from .action import WhatToSet

__all__ = ["Headline", "NOT_LEARNERS", "headline_numbers", "headline_sentences", "learners", "summary_claims"]

#: Replayed policies that are baselines, not learners: NCCL's choice and the uniform draw.
NOT_LEARNERS = (Auto.name, RandomPolicy.name)


def learners(policies: Sequence[str]) -> list[str]:
    """The learning policies among ``policies`` (display names), in their order."""
    return [p for p in policies if p not in NOT_LEARNERS]


@dataclasses.dataclass(frozen=True)
class Headline:
    """The box's sentences, in its order: what to set (``action``, its ``ranges`` as table rows,
    the ``files`` written and the ``deployments`` that load them), AUTO over every context
    (``auto``), and whether live learning is worth running (``learning``, then its ``evidence``)."""

    action: str
    ranges: list[dict]
    files: list[str]
    deployments: list[dict]
    auto: str
    learning: str
    evidence: list[str]


def _auto_numbers(audit, *, threshold: float) -> dict:
    row = audit.summary.set_index("pricing").loc["selection"]
    return {"contexts": len(audit.contexts), "wrong": int(audit.contexts["error"].sum()),
            "error_rate_pct": float(row["error_rate_pct"]), "mean_pct": float(row["mean_pct"]),
            "p99_pct": float(row["p99_pct"]), "above": int(row[f"above_{threshold:g}"])}


def _action_numbers(what: WhatToSet) -> dict:
    ranges = what.ranges
    shapes = ranges[["fabric", "collective", "nodes", "ranks"]].drop_duplicates()
    return {"margin": what.margin, "scenarios": what.scenarios, "scenarios_set": len(shapes),
            "loss_max_pct": float(ranges["loss_max_pct"].max()) if len(ranges) else None,
            "ranges": [{**{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()},
                        "slower_by": _span(row["loss_min_pct"], row["loss_max_pct"])}
                       for row in ranges.to_dict("records")],
            "deployments": [{**dataclasses.asdict(d), "nccl_tuner": str(d.nccl_tuner), "static": str(d.static)}
                            for d in what.deployments]}


def _learner_numbers(summary: pd.DataFrame, *, split: dict) -> dict | None:
    """The best learner against AUTO on the replay's test contexts (realized TRLT), or None."""
    rows = summary.set_index("policy")
    names = [p for p in learners(list(rows.index)) if pd.notna(rows.loc[p, "realized_mean_pct"])]
    if "AUTO" not in rows.index or not names:
        return None
    best = min(names, key=lambda p: rows.loc[p, "realized_mean_pct"])
    b, a = rows.loc[best], rows.loc["AUTO"]
    return {"name": best, "learners": len(names), "contexts": int(b["contexts"]), "split": split["name"],
            "test_nodes": split["test_nodes"], "mean_pct": float(b["realized_mean_pct"]),
            "auto_mean_pct": float(a["realized_mean_pct"]), "p99_pct": float(b["realized_p99_pct"]),
            "auto_p99_pct": float(a["realized_p99_pct"]), "above": int(b["realized_above"]),
            "auto_above": int(a["realized_above"]),
            "beats": bool(b["realized_mean_pct"] < a["realized_mean_pct"]
                          and b["realized_above"] <= a["realized_above"])}


def _live_numbers(live: dict) -> list[dict]:
    """Per live scenario: its title, the headline's short verdict (stock first), the best learner
    and the size bands where that learner was slower or faster than stock."""
    from ..live.verdict import stock_standing

    if not live["present"]:
        return []
    out = []
    for verdict, s in zip(live["verdicts"], live["headline"]["scenarios"]):
        learner = s["best_learner"]
        standing = stock_standing(s["speed_vs_stock_bands"].get(learner, [])) if learner else {}
        out.append({"title": verdict.title, "short": verdict.short, "learner": learner,
                    "slower": standing.get("slower", []), "faster": standing.get("faster", []),
                    "compared": bool(learner) and learner in s["speed_vs_stock_bands"]})
    return out


def headline_numbers(audit, summary: pd.DataFrame, what: WhatToSet, *, live: dict, threshold: float,
                     split: dict) -> dict:
    """Every number the headline says, as plain JSON: the audit (:func:`..audit.run_audit`, all
    contexts, selection-priced), what to set (:func:`.action.what_to_set`), the best learner on
    the Table-1 ``summary`` (test contexts of ``split``, realized), and the report's ``live``
    section (its verdicts and the live headline)."""
    return {"threshold": threshold, "auto": _auto_numbers(audit, threshold=threshold),
            "action": _action_numbers(what), "learner": _learner_numbers(summary, split=split),
            "live": _live_numbers(live)}


def _pct(value: float) -> str:
    return f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def _span(low: float, high: float) -> str:
    """How much slower NCCL's choice is over a range: ``12-58%``, or ``23%`` when one number."""
    low_text, high_text = _pct(low), _pct(high)
    return high_text if low_text == high_text else f"{low_text[:-1]}-{high_text}"


def _action_sentence(action: dict) -> str:
    margin = f"{100 * action['margin']:g}%"
    if not action["ranges"]:
        return (f"Nothing to set: on no swept context does an arm beat NCCL's choice by {margin} or more; "
                "NCCL's own choice stands.")
    return (f"Set the measured-best arm where it beats NCCL's choice by {margin} or more: {len(action['ranges'])} "
            f"size ranges in {action['scenarios_set']} of {action['scenarios']} scenarios (collective x node count); "
            f"NCCL's choice is up to {_pct(action['loss_max_pct'])} slower there.")


def _files_sentence(deployment: dict) -> str:
    return (f"{deployment['fabric']}: {deployment['nccl_tuner']} ({deployment['rules']} rules, "
            f"NCCL_TUNER_CONFIG_FILE) and {deployment['static']} (NCCLBOT_STATIC_TABLE).")


def _auto_sentence(auto: dict, *, threshold: float) -> str:
    return (f"AUTO picks a wrong arm in {auto['wrong']} of {auto['contexts']} contexts "
            f"({auto['error_rate_pct']:.1f}%); "
            f"its loss against the measured-best arm (selection-priced, all contexts): mean {auto['mean_pct']:.1f}%, "
            f"p99 {auto['p99_pct']:.1f}%; {auto['above']} contexts lose more than {100 * threshold:g}%.")


def _offline(learner: dict, *, threshold: float) -> str:
    which = "the one learner replayed" if learner["learners"] == 1 else f"the best of {learner['learners']} learners"
    return (f"in the replay {learner['name']} ({which}) loses "
            f"{learner['mean_pct']:.2f}% against AUTO's {learner['auto_mean_pct']:.2f}% on the {learner['contexts']} "
            f"test contexts (split {learner['split']}: node counts {learner['test_nodes']}; realized TRLT), "
            f"{learner['above']} against {learner['auto_above']} of them above {100 * threshold:g}%")


def _learning_sentence(numbers: dict) -> str:
    """Whether live learning is worth running: the live campaign against stock first (a loss there
    outweighs any win over AUTO), then the replay on contexts the learners were not tuned on."""
    learner, threshold = numbers["learner"], numbers["threshold"]
    live = [s for s in numbers["live"] if s["compared"]]
    slower = [f"{s['learner']} at {' and '.join(s['slower'])}" for s in live if s["slower"]]
    offline = _offline(learner, threshold=threshold) if learner else "no learner was replayed beside AUTO"
    measured = "where the sweep measured, the exported files already play the measured-best arm"
    if learner is None and not live:
        return ("No evidence either way: no learner was replayed beside AUTO and no live learner was compared "
                "with stock.")
    if learner is not None and not learner["beats"]:
        return f"No: {offline}; {measured}."
    if slower:
        return (f"Not yet: live, a learner was slower than stock ({'; '.join(slower)}), although {offline}. "
                f"Deploy the files above ({measured}) and learn live only for what the sweep did not measure, once "
                "the loss against stock is understood.")
    if not live:
        return (f"Worth a live trial: {offline}, but no live learner was compared with stock here; run a live "
                f"campaign against stock before production ({measured}).")
    return (f"Yes, for what the sweep did not measure: live, no learner was slower than stock at any size, and "
            f"{offline} ({measured}).")


def headline_sentences(numbers: dict) -> Headline:
    """The box's sentences from :func:`headline_numbers` (or the ``headline`` of ``results.json``)."""
    action = numbers["action"]
    evidence = [f"{s['title']}: {' '.join(s['short'])}" for s in numbers["live"]]
    if action["deployments"] and (numbers["learner"] or numbers["live"]):
        evidence.append("A live learner can start from this sweep's measurements: "
                        + "; ".join(d["state_command"] for d in action["deployments"])
                        + ", then NCCLBOT_STATE_DIR=<that folder>.")
    return Headline(action=_action_sentence(action), ranges=action["ranges"],
                    files=[_files_sentence(d) for d in action["deployments"]], deployments=action["deployments"],
                    auto=_auto_sentence(numbers["auto"], threshold=numbers["threshold"]),
                    learning=_learning_sentence(numbers), evidence=evidence)


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
                     f"p = {p_value(t['p_signflip_mean'])}, Holm p = {p_value(t['p_holm_mean'])})")
            above += f" (sign-flip p = {p_value(t['p_signflip_above'])}, Holm p = {p_value(t['p_holm_above'])})"
            significant = [claim for claim, p in (("mean", t["p_holm_mean"]), ("above", t["p_holm_above"]))
                           if pd.notna(p) and p < alpha]
            verdict = (f"significant at {alpha:g} after Holm for: {', '.join(significant)}" if significant else
                       f"not significant at {alpha:g} after Holm (with {scenarios} scenarios the smallest attainable "
                       f"sign-flip p is {p_value(2 / 2 ** scenarios) if scenarios else 'n/a'})")
        else:
            verdict = "no scenario-level test (AUTO not compared)"
        lines.append(f"{line}; p99 {r['realized_p99_pct']:.1f}% vs {auto['realized_p99_pct']:.1f}% (descriptive); "
                     f"{above}" + ("; better on all three" if better else "") + f"; {verdict}.")
    return lines
