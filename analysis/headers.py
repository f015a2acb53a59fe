"""Readable column headers, with units, for the tables of the HTML report.

The one place that names columns for people. CSV, Parquet and Markdown copies keep the
snake_case names, which scripts and the CLI's printed tables use. :data:`HEADERS` names the columns of the report's own tables;
:func:`readable` falls back to rules for the rest (live and study tables, per-policy columns
such as ``UCB1_mean_pct``): known words spelled out (``trlt`` -> TRLT), the unit suffix turned
into a unit in brackets (``_pct`` -> ``(%)``, ``_us`` -> ``(us)``, ``_gbs`` -> ``(GB/s)``).
"""

from __future__ import annotations

import re

__all__ = ["HEADERS", "readable", "readable_columns"]

#: Column name -> header, for the columns of the report's own tables.
HEADERS: dict[str, str] = {
    # contexts and scenarios
    "fabric": "Fabric", "collective": "Collective", "nodes": "Nodes", "ranks": "Ranks",
    "size_bytes": "Size (bytes)", "size": "Size", "sizes": "Sizes", "contexts": "Contexts",
    "scenarios": "Scenarios", "policy": "Policy", "pricing": "Pricing", "part": "Split part", "fold": "Fold",
    "n_arms": "Measured arms", "n_offered": "Offered arms", "arm": "Arm",
    "auto_arm": "AUTO's arm", "best_arm": "Best arm (measured)", "error": "AUTO errs",
    # Table 1
    "realized_mean_pct": "Realized TRLT mean (%)", "realized_sem_pct": "Realized TRLT SEM (%)",
    "realized_p99_pct": "Realized TRLT p99 (%)", "realized_p99_lo": "p99 95% CI low (%)",
    "realized_p99_hi": "p99 95% CI high (%)", "realized_above": "Contexts above threshold (realized)",
    "realized_max_pct": "Realized TRLT max (%)",
    "selection_mean_pct": "Selection TRLT mean (%)", "selection_sem_pct": "Selection TRLT SEM (%)",
    "selection_p99_pct": "Selection TRLT p99 (%)", "selection_above": "Contexts above threshold (selection)",
    "auto_share_pct": "Steps on AUTO's arm (%)", "leaves_auto_pct": "Contexts leaving AUTO's arm (%)",
    "distinct_arms": "Distinct arms played", "best_last20_pct": "Last 20 steps on best arm (%)",
    # audit
    "error_rate_pct": "AUTO error rate (%)", "mean_pct": "Mean TRLT (%)", "p99_pct": "p99 TRLT (%)",
    "margin_min": "Minimum margin m", "kept_pct": "Contexts kept (%)", "margin": "Runner-up margin m",
    "n": "Contexts", "collectives": "Collectives", "auto_max_pct": "AUTO max TRLT (%)",
    "trlt_selection": "AUTO loss (selection, fraction)", "trlt_realized": "AUTO loss (realized, fraction)",
    "auto_us": "AUTO's arm steady (us)", "best_us": "Best arm steady (us)",
    "best_excess": "Best arm's predicted excess (fraction)",
    # transients
    "tau": "Switch point (iteration)", "mean_before": "Mean ratio before switch", "mean_after": "Mean ratio after switch",
    "delta_bic": "BIC gain of two segments", "two_segments": "Two segments",
    # tests
    "a": "Policy A", "b": "Policy B", "pooled_diff_pp": "Pooled mean difference A-B (pp)",
    "pooled_ci_lo_pp": "Pooled difference 95% CI low (pp)", "pooled_ci_hi_pp": "Pooled difference 95% CI high (pp)",
    "scenario_mean_diff_pp": "Mean of scenario differences (pp)", "scen_a_better": "Scenarios A better",
    "scen_b_better": "Scenarios B better", "p_signflip_mean": "p sign-flip, mean",
    "p_holm_mean": "p Holm, mean", "above_a": "Contexts above threshold, A", "above_b": "Contexts above threshold, B",
    "p_signflip_above": "p sign-flip, above threshold", "p_holm_above": "p Holm, above threshold",
    "p_wild_cluster": "p wild-cluster bootstrap-t", "p_wilcoxon": "p Wilcoxon (descriptive)",
    "p_mcnemar": "p McNemar (descriptive)",
    # degenerate contexts
    "flag": "Flag", "status": "Status", "note": "Note", "meaning": "Meaning", "examples": "Examples",
    "flags": "Flags",
}

#: Words spelled out or capitalised inside a fallback header.
_WORDS = {"trlt": "TRLT", "auto": "AUTO", "bw": "bandwidth", "busbw": "bus bandwidth", "sem": "SEM", "ci": "CI",
          "bic": "BIC", "nvls": "NVLS", "p99": "p99", "id": "ID", "nccl": "NCCL", "gpu": "GPU", "lo": "low",
          "hi": "high", "1pct": "1%", "avg": "average", "n": "number of"}
#: Unit suffixes -> the unit in brackets.
_UNITS = {"pct": "%", "pp": "pp", "us": "us", "ms": "ms", "s": "s", "ns": "ns", "gbs": "GB/s", "bytes": "bytes"}


def readable(column: str) -> str:
    """The header of ``column``: :data:`HEADERS`, or the fallback rules (module docstring)."""
    if column in HEADERS:
        return HEADERS[column]
    above = re.fullmatch(r"(?:(.+)_)?above_([0-9.]+)", column)
    if above:
        who, share = above.groups()
        return f"{who}: contexts above {100 * float(share):g}%" if who else f"Contexts above {100 * float(share):g}%"
    if "_" not in column:
        return column[:1].upper() + column[1:] if column.islower() else column
    words = column.split("_")
    unit = _UNITS.get(words[-1]) if len(words) > 1 else None
    if unit:
        words = words[:-1]
    if words[-1] == "above":
        words[-1] = "contexts above threshold"
    if not words[0].islower() and words[1:] in (["mean"], ["max"]):  # a policy's column: UCB1_mean_pct
        words.append("TRLT")
    text = " ".join(_WORDS.get(w, w) for w in words)
    text = text[:1].upper() + text[1:] if words[0].islower() else text
    return f"{text} ({unit})" if unit else text


def readable_columns(frame):
    """``frame`` with its columns renamed by :func:`readable` (for the HTML page);
    a column whose header another already took keeps its own name."""
    names, taken = {}, set()
    for column in frame.columns:
        header = readable(str(column))
        names[column] = header if header not in taken else str(column)
        taken.add(names[column])
    return frame.rename(columns=names)
