"""Gates that leave some contexts to AUTO and learn on the rest (paper section 7, I.11, I.14):
the size gate (Table 50) and the runner-up margin hybrid (Table 54, with Figure 13's audit).

Bandits are independent per context, so a gated policy's result on a context is exactly
AUTO's or the learner's there: both are replayed once and combined post hoc. The threshold
is chosen on the train contexts by mean selection-priced TRLT (the tuning objective) and the
test contexts are scored on realized TRLT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from ncclbot_sweep.names import human_size

from ..audit import audit_auto, auto_margin, gate_curve
from ..figures import plot_gate
from ..policies import make_policy
from .harness import Harness, Section, by_context

__all__ = ["gated", "size_gate", "hybrid", "size_mask", "margin_mask"]


def gated(auto: np.ndarray, learner: np.ndarray, use_auto: np.ndarray) -> np.ndarray:
    """Per-context values of the gated policy: AUTO's where ``use_auto``, the learner's elsewhere."""
    return np.where(use_auto, auto, learner)


def size_mask(sizes: np.ndarray, threshold: float) -> np.ndarray:
    """Contexts the size gate leaves to AUTO: messages below ``threshold`` bytes (0: none, inf: all)."""
    return np.asarray(sizes, dtype=float) < threshold


def margin_mask(margins: np.ndarray, tau: float) -> np.ndarray:
    """Contexts the hybrid leaves to AUTO: runner-up margin at least ``tau`` (0: all; inf: none)."""
    return np.asarray(margins, dtype=float) >= tau if math.isfinite(tau) else np.zeros(len(margins), dtype=bool)


def _grid(h: Harness, mask_of: Callable[[float], np.ndarray], grid: Sequence[float], label_of: Callable[[float], str]):
    """Replay AUTO and the featured learner; score the gated policy at every grid value."""
    learner = h.featured()
    frame = h.replay([make_policy("AUTO"), learner])
    n = len(h.problem)
    auto, mine = by_context(frame, "AUTO", n), by_context(frame, learner.display_name, n)
    test = h.test()
    rows = []
    for value in grid:
        use_auto = mask_of(value)
        sel = gated(auto["trlt_selection"].to_numpy(), mine["trlt_selection"].to_numpy(), use_auto)
        real = gated(auto["trlt_realized"].to_numpy(), mine["trlt_realized"].to_numpy(), use_auto)
        stats = h.stats(real[test])
        rows.append({"gate": label_of(value), "value": value, "to_bandit_pct": 100 * float((~use_auto[test]).mean()),
                     "train_selection_pct": 100 * float(sel[~test].mean()) if (~test).any() else np.nan,
                     "test_mean_pct": stats["mean_pct"], "test_p99_pct": stats["p99_pct"],
                     "test_max_pct": 100 * float(real[test].max()), "test_above": stats["above"]})
    table = pd.DataFrame(rows)
    table["chosen"] = ""
    if table["train_selection_pct"].notna().any():
        table.loc[table["train_selection_pct"].idxmin(), "chosen"] = "*"
    long = auto.rename(columns=lambda c: f"auto_{c}" if c.startswith("trlt") else c)
    long = long.assign(**{f"learner_{c}": mine[c] for c in ("trlt_realized", "trlt_selection")},
                       part=h.labels()["part"].to_numpy())
    return table, long, learner.display_name


def size_gate(h: Harness) -> Section:
    """Table 50: AUTO below a size threshold chosen on train, the featured learner at or above it."""
    sizes = h.problem.contexts["size_bytes"].to_numpy()

    def label(value: float) -> str:
        if value == 0:
            return "none (learner everywhere)"
        return "AUTO everywhere" if math.isinf(value) else human_size(value)

    table, long, name = _grid(h, lambda v: size_mask(sizes, v), h.options.gates, label)
    table = table.rename(columns={"value": "threshold_bytes"})
    return Section("size-gate", "Size gate: AUTO below a threshold (Table 50)",
                   f"AUTO below the threshold, {name} at or above it; '*' marks the threshold chosen by mean "
                   "selection-priced train TRLT (%); test columns are realized TRLT (%).", {"size-gate": table}, long)


def hybrid(h: Harness) -> Section:
    """Table 54: AUTO when its runner-up margin is at least tau, the featured learner otherwise,
    with the margin gate audit of Figure 13."""
    margins = auto_margin(h.problem)
    table, long, name = _grid(h, lambda v: margin_mask(margins, v), h.options.margins, lambda v: f"tau={v:g}")
    table = table.rename(columns={"value": "tau"})
    curve = gate_curve(audit_auto(h.problem, horizon=h.options.horizon))
    figures = []
    if h.figures is not None:
        figures.append(plot_gate(curve, h.figures / "hybrid-gate.png", synthetic=h.synthetic))
    return Section("hybrid", "Margin hybrid: trust AUTO when it is sure (Table 54, Figure 13)",
                   f"AUTO when its predicted runner-up margin m is at least tau, {name} otherwise; 'to bandit' is "
                   "the share of test contexts handed to the learner; '*' marks the tau chosen on train. The gate "
                   "audit below is Figure 13 over every context (selection-priced).",
                   {"hybrid": table, "hybrid-gate": curve}, long.assign(margin=margins), figures=figures)
