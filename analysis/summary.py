"""Tables from replay results: the Table-1 summary, per-scenario results, comparisons.

Input is the frame of :func:`~.replay.run_replay` (one row per policy x context x seed).
Stochastic policies are first averaged over seeds per context; the unit of replication is
the context (paper section 5). TRLT values in the tables are percentages.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .pools import CONTEXT_COLUMNS, SCENARIO_COLUMNS
from .stats import bootstrap_ci, holm, mcnemar_exact, sign_flip_test, wild_cluster_bootstrap_t, wilcoxon_signed_rank

__all__ = ["per_context", "describe", "summarize", "per_scenario", "scenario_pivot", "compare", "confirmatory"]


def per_context(results: pd.DataFrame, *, part: str | None = "test") -> pd.DataFrame:
    """Seed-averaged TRLT per policy and context (optionally one split part)."""
    df = results if part is None else results[results["part"] == part]
    keys = ["policy", *CONTEXT_COLUMNS]
    cols = ["trlt_realized", "trlt_selection", "auto_share", "distinct_arms", "best_last20"]
    out = df.groupby(keys, sort=False)[cols].mean().reset_index()
    first = df.groupby(keys, sort=False)[["auto_arm", "best_arm", "fold"]].first().reset_index(drop=True)
    return pd.concat([out, first], axis=1)


def describe(v: np.ndarray, threshold: float, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """Mean, SEM, p99 (with a bootstrap interval over contexts) in % and the count above ``threshold``."""
    n = v.size
    lo = hi = np.nan
    if n > 1 and n_boot:
        idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
        lo, hi = np.quantile(np.percentile(v[idx], 99, axis=1), [0.025, 0.975])
    return {
        "mean": 100 * v.mean() if n else np.nan,
        "sem": 100 * v.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan,
        "p99": 100 * np.percentile(v, 99) if n else np.nan,
        "p99_lo": 100 * lo, "p99_hi": 100 * hi,
        "above": int((v > threshold).sum()),
    }


def summarize(results: pd.DataFrame, *, part: str | None = "test", threshold: float = 0.10,
              order=None) -> pd.DataFrame:
    """Table 1: realized and selection TRLT mean, SEM, p99 and contexts above ``threshold``.

    Also: a 95% bootstrap interval of the realized p99 (contexts resampled), and the
    behaviour columns of section 6.1: share of steps on AUTO's arm, share of contexts where
    the policy ever leaves it, distinct arms played, and share of the last 20 steps on the
    measured-best arm.
    """
    ctx = per_context(results, part=part)
    rows = []
    for name, g in ctx.groupby("policy", sort=False):
        real = describe(g["trlt_realized"].to_numpy(float), threshold)
        sel = describe(g["trlt_selection"].to_numpy(float), threshold)
        rows.append({"policy": name, "contexts": len(g),
                     "realized_mean_pct": real["mean"], "realized_sem_pct": real["sem"],
                     "realized_p99_pct": real["p99"], "realized_p99_lo": real["p99_lo"],
                     "realized_p99_hi": real["p99_hi"], "realized_above": real["above"],
                     "selection_mean_pct": sel["mean"], "selection_sem_pct": sel["sem"],
                     "selection_p99_pct": sel["p99"], "selection_above": sel["above"],
                     "auto_share_pct": 100 * g["auto_share"].mean(),
                     "leaves_auto_pct": 100 * (g["auto_share"] < 1).mean(),
                     "distinct_arms": g["distinct_arms"].mean(),
                     "best_last20_pct": 100 * g["best_last20"].mean()})
    out = pd.DataFrame(rows)
    if order is not None and len(out):
        out["_o"] = out["policy"].map({p: i for i, p in enumerate(order)}).fillna(len(order))
        out = out.sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)
    return out


def per_scenario(results: pd.DataFrame, *, part: str | None = "test", threshold: float = 0.10) -> pd.DataFrame:
    """Mean realized TRLT and contexts above ``threshold`` per policy and scenario."""
    ctx = per_context(results, part=part)
    grouped = ctx.groupby(["policy", *SCENARIO_COLUMNS], sort=True)
    out = grouped.agg(contexts=("trlt_realized", "size"),
                      realized_mean_pct=("trlt_realized", lambda v: 100 * v.mean()),
                      realized_max_pct=("trlt_realized", lambda v: 100 * v.max()),
                      realized_above=("trlt_realized", lambda v: int((v > threshold).sum())),
                      selection_mean_pct=("trlt_selection", lambda v: 100 * v.mean()))
    return out.reset_index()


def scenario_pivot(results: pd.DataFrame, *, part: str | None = "test", threshold: float = 0.10,
                   order=None) -> pd.DataFrame:
    """Scenarios x policies: per scenario its contexts, then every policy's mean realized TRLT (%)
    (``<policy>_mean_pct``), then every policy's contexts above ``threshold``
    (``<policy>_above_<threshold>``, e.g. ``UCB1_above_0.1``).

    The long form with maxima and selection pricing is :func:`per_scenario`; policies come in
    ``order`` (default: as they appear in ``results``).
    """
    long = per_scenario(results, part=part, threshold=threshold)
    keys = list(SCENARIO_COLUMNS)
    policies = list(order) if order is not None else list(dict.fromkeys(long["policy"]))
    policies = [p for p in policies if p in set(long["policy"])]
    if not len(long):
        return pd.DataFrame(columns=[*keys, "contexts"])
    wide = long.pivot_table(index=keys, columns="policy", values=["realized_mean_pct", "realized_above"],
                            aggfunc="first", observed=True)
    frame = long.groupby(keys, sort=True)["contexts"].max().to_frame()
    for p in policies:
        frame[f"{p}_mean_pct"] = wide[("realized_mean_pct", p)]
    for p in policies:
        frame[f"{p}_above_{threshold:g}"] = wide[("realized_above", p)].astype("Int64")
    return frame.reset_index()


def _paired(results: pd.DataFrame, a: str, b: str, part: str | None, pricing: str) -> pd.DataFrame:
    ctx = per_context(results, part=part)
    col = f"trlt_{pricing}"
    left = ctx[ctx["policy"] == a].set_index(list(CONTEXT_COLUMNS))[col]
    right = ctx[ctx["policy"] == b].set_index(list(CONTEXT_COLUMNS))[col]
    joined = pd.concat({"a": left, "b": right}, axis=1, join="inner").reset_index()
    joined["scenario"] = joined[list(SCENARIO_COLUMNS)].astype(str).agg("/".join, axis=1)
    return joined


def compare(results: pd.DataFrame, pair: tuple[str, str], *, part: str | None = "test", pricing: str = "realized",
            threshold: float = 0.10, seed: int = 0) -> dict:
    """Paired comparison of policy ``a`` against ``b``, ``pair = (a, b)`` (positive differences favour ``b``).

    Scenario-level (primary): exact sign-flip on per-scenario mean differences and on
    per-scenario differences of contexts above ``threshold``; the wild-cluster bootstrap-t
    on the context-pooled mean; a scenario-clustered bootstrap CI of the pooled difference.
    Context-level (descriptive): Wilcoxon signed-rank and exact McNemar on exceedances.
    """
    a, b = pair
    j = _paired(results, a, b, part, pricing)
    d = (j["a"] - j["b"]).to_numpy(float)
    by_scen = j.assign(d=d, ea=j["a"] > threshold, eb=j["b"] > threshold).groupby("scenario")
    scen_mean = by_scen["d"].mean().to_numpy()
    scen_exceed = (by_scen["ea"].sum() - by_scen["eb"].sum()).to_numpy(float)
    ea, eb = (j["a"] > threshold).to_numpy(), (j["b"] > threshold).to_numpy()
    ci = bootstrap_ci(d, clusters=j["scenario"], seed=seed) if len(d) else (np.nan, np.nan)
    return {
        "a": a, "b": b, "contexts": len(d), "scenarios": len(scen_mean),
        "pooled_diff_pp": 100 * d.mean() if len(d) else np.nan,
        "pooled_ci_lo_pp": 100 * ci[0], "pooled_ci_hi_pp": 100 * ci[1],
        "scenario_mean_diff_pp": 100 * scen_mean.mean() if len(scen_mean) else np.nan,
        "scen_a_better": int((scen_mean < 0).sum()), "scen_b_better": int((scen_mean > 0).sum()),
        "p_signflip_mean": sign_flip_test(scen_mean, seed=seed).p_value,
        "above_a": int(ea.sum()), "above_b": int(eb.sum()),
        "p_signflip_above": sign_flip_test(scen_exceed, seed=seed).p_value,
        "p_wild_cluster": wild_cluster_bootstrap_t(d, j["scenario"], seed=seed).p_value if len(d) else np.nan,
        "p_wilcoxon": wilcoxon_signed_rank(j["a"], j["b"]).p_value if len(d) else np.nan,
        "p_mcnemar": mcnemar_exact(int((ea & ~eb).sum()), int((~ea & eb).sum())).p_value,
    }


def confirmatory(results: pd.DataFrame, pairs, **kwargs) -> pd.DataFrame:
    """Compare several (a, b) pairs and Holm-adjust the sign-flip p-values over the family."""
    rows = pd.DataFrame([compare(results, pair, **kwargs) for pair in pairs])
    if len(rows):
        rows["p_holm_mean"] = holm(rows["p_signflip_mean"].fillna(1.0))
        rows["p_holm_above"] = holm(rows["p_signflip_above"].fillna(1.0))
    return rows
