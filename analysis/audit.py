"""Audit of NCCL's AUTO choice against the measured-best arm (paper section 3, B.3, I.1).

Per context (at least two measured arms and a prediction): AUTO's arm (argmin predicted
over the offered arms), the measured-best arm on the steady window, the error flag,
AUTO's selection-priced TRLT (a fixed arm's TRLT is its steady-mean excess) and realized
TRLT over the horizon, and the predicted runner-up margin ``m = mu_hat(2)/mu_hat(1) - 1``
over measured arms with a prediction, the decision-time confidence signal of Figure 13.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ncclbot_sweep.names import human_size

from .pools import CONTEXT_COLUMNS, pool_position
from .replay import ReplayProblem, oracle_sums

__all__ = ["AuditResult", "run_audit", "audit_auto", "audit_summary", "gate_curve", "tail_anatomy", "auto_margin"]


@dataclasses.dataclass
class AuditResult:
    """Per-context audit rows plus the summary, gate curve and tail anatomy tables."""

    contexts: pd.DataFrame
    summary: pd.DataFrame
    gate: pd.DataFrame
    tail: pd.DataFrame


def auto_margin(problem: ReplayProblem) -> np.ndarray:
    """``[C]`` predicted runner-up margin ``m = mu_hat(2)/mu_hat(1) - 1`` over measured arms with a
    prediction (inf when only one arm has one): AUTO's confidence before anything ran."""
    values = np.sort(np.where(problem.pools.measured & np.isfinite(problem.predicted), problem.predicted, np.inf),
                     axis=1)
    with np.errstate(invalid="ignore"):
        m = values[:, 1] / values[:, 0] - 1.0
    return np.where(np.isfinite(values[:, 1]), m, np.inf)


def audit_auto(problem: ReplayProblem, *, horizon: int = 100) -> pd.DataFrame:
    """One row per context with two or more measured arms: AUTO against the measured best."""
    pools = problem.pools
    c = np.arange(len(pools))
    arms = np.array(pools.arms)
    auto, best = problem.auto, pools.best
    oracle, _ = oracle_sums(problem, horizon)
    idx = pool_position(np.arange(horizon)[None, :], pools.depth[c, auto][:, None], pools.wrap[c, auto][:, None])
    served = pools.samples[c[:, None], auto[:, None], idx].sum(axis=1)
    frame = pools.contexts[[*CONTEXT_COLUMNS, "synthetic"]].copy()
    frame["n_arms"] = pools.measured.sum(axis=1)
    frame["n_offered"] = problem.offered.sum(axis=1)
    frame["auto_arm"] = arms[auto]
    frame["best_arm"] = arms[best]
    frame["error"] = auto != best
    frame["trlt_selection"] = pools.steady[c, auto] / pools.steady[c, best] - 1.0
    frame["trlt_realized"] = served / oracle - 1.0
    frame["margin"] = auto_margin(problem)
    frame["best_excess"] = problem.predicted[c, best] / problem.mu_min - 1.0
    frame["auto_us"] = pools.steady[c, auto]
    frame["best_us"] = pools.steady[c, best]
    return frame[frame["n_arms"] >= 2].reset_index(drop=True)


def _stats(values: pd.Series, threshold: float) -> dict:
    v = values.to_numpy(float)
    if v.size == 0:
        return {"mean_pct": np.nan, "p99_pct": np.nan, "above": 0}
    return {"mean_pct": 100 * v.mean(), "p99_pct": 100 * np.percentile(v, 99), "above": int((v > threshold).sum())}


def audit_summary(audit: pd.DataFrame, *, threshold: float = 0.10) -> pd.DataFrame:
    """Error rate, mean, p99 and count above ``threshold`` for both pricings (all contexts)."""
    rows = []
    for pricing in ("selection", "realized"):
        s = _stats(audit[f"trlt_{pricing}"], threshold)
        rows.append({"pricing": pricing, "contexts": len(audit), "error_rate_pct": 100 * audit["error"].mean(),
                     "mean_pct": s["mean_pct"], "p99_pct": s["p99_pct"], f"above_{threshold:g}": s["above"]})
    return pd.DataFrame(rows)


def gate_curve(audit: pd.DataFrame, thresholds=None, *, pricing: str = "selection") -> pd.DataFrame:
    """Figure 13: keep contexts whose runner-up margin is at least ``theta``; score what is kept."""
    if thresholds is None:
        thresholds = np.round(np.arange(0.0, 1.01, 0.05), 2)
    rows = []
    col = f"trlt_{pricing}"
    for theta in thresholds:
        kept = audit[audit["margin"] >= theta]
        s = _stats(kept[col], 0.10)
        rows.append({"margin_min": float(theta), "kept_pct": 100 * len(kept) / max(len(audit), 1),
                     "error_rate_pct": 100 * kept["error"].mean() if len(kept) else np.nan,
                     "mean_pct": s["mean_pct"], "p99_pct": s["p99_pct"], "above_0.1": s["above"]})
    return pd.DataFrame(rows)


def _short(collective: str) -> str:
    """Table 29's abbreviation: the capitals of the NCCL name (AllGather -> AG)."""
    return "".join(ch for ch in collective if ch.isupper()) or collective


def tail_anatomy(audit: pd.DataFrame, *, threshold: float = 0.10, pricing: str = "realized",
                 replay: pd.DataFrame | None = None, policies=("UCB1",)) -> pd.DataFrame:
    """Table 29: contexts where AUTO loses more than ``threshold``, grouped by (AUTO arm, best arm).

    With ``replay`` results, adds the largest realized TRLT in the group for ``policies``
    (seed-averaged per context).
    """
    tail = audit[audit[f"trlt_{pricing}"] > threshold]
    per_policy = {}
    if replay is not None and len(tail):
        keys = list(CONTEXT_COLUMNS)
        for name in policies:
            sub = replay[replay["policy"] == name]
            if len(sub):
                per_policy[name] = sub.groupby(keys)["trlt_realized"].mean()
    rows = []
    for (auto_arm, best_arm), g in tail.groupby(["auto_arm", "best_arm"], sort=False):
        row = {"auto_arm": auto_arm, "best_arm": best_arm, "n": len(g),
               "collectives": "/".join(sorted({_short(c) for c in g["collective"]})),
               "sizes": f"{human_size(g['size_bytes'].min())}-{human_size(g['size_bytes'].max())}",
               "nodes": ",".join(str(n) for n in sorted(g["nodes"].unique())),
               "margin": f"{g['margin'].min():.2f}-{g['margin'].max():.2f}",
               "auto_max_pct": 100 * g[f"trlt_{pricing}"].max()}
        for name, series in per_policy.items():
            keys = pd.MultiIndex.from_frame(g[list(CONTEXT_COLUMNS)])
            row[f"{name}_max_pct"] = 100 * series.reindex(keys).max()
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.sort_values("n", ascending=False, kind="stable").reset_index(drop=True) if len(out) else out


def run_audit(problem: ReplayProblem, *, horizon: int = 100, threshold: float = 0.10,
              replay: pd.DataFrame | None = None) -> AuditResult:
    """Everything ``analyze audit`` prints and the report shows."""
    frame = audit_auto(problem, horizon=horizon)
    return AuditResult(frame, audit_summary(frame, threshold=threshold), gate_curve(frame),
                       tail_anatomy(frame, threshold=threshold, replay=replay))



