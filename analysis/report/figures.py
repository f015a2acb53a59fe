"""Report figures (matplotlib, Agg backend, imported lazily): survival of TRLT, margin gate.

Each function computes its data with numpy (testable without matplotlib) and, given a path,
writes one PNG.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["survival_curves", "plot_survival", "plot_gate"]


def _grid(values: np.ndarray, points: int = 200) -> np.ndarray:
    positive = values[values > 0]
    top = max(float(positive.max()) if positive.size else 1.0, 1e-3) * 1.5
    return np.logspace(-2, np.log10(top), points)


def survival_curves(per_context: pd.DataFrame, *, column: str = "trlt_realized", n_boot: int = 200,
                    seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Share of contexts whose TRLT (%) exceeds ``x``, per policy, with a bootstrap band.

    Returns long rows ``policy, x_pct, survival, lo, hi``; contexts are resampled with
    replacement (``n_boot`` times) for the pointwise percentile band.
    """
    rng = np.random.default_rng(seed)
    values_all = 100 * per_context[column].to_numpy(float)
    grid = _grid(values_all)
    rows = []
    for name, g in per_context.groupby("policy", sort=False):
        v = 100 * g[column].to_numpy(float)
        surv = (v[None, :] > grid[:, None]).mean(axis=1)
        idx = rng.integers(0, v.size, size=(n_boot, v.size))
        boot = (v[idx][:, None, :] > grid[None, :, None]).mean(axis=2)
        alpha = (1 - level) / 2
        lo, hi = np.quantile(boot, alpha, axis=0), np.quantile(boot, 1 - alpha, axis=0)
        rows.append(pd.DataFrame({"policy": name, "x_pct": grid, "survival": surv, "lo": lo, "hi": hi}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["policy", "x_pct", "survival"])


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str | Path) -> Path:
    """Lay out, write the PNG and free the figure; returns the path."""
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_survival(curves: pd.DataFrame, path: str | Path, *, title: str = "") -> Path:
    """Paper Figure 1: survival of realized TRLT over contexts, log axes, bootstrap band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for name, g in curves.groupby("policy", sort=False):
        floor = 1.0 / 1000
        (line,) = ax.step(g["x_pct"], np.maximum(g["survival"], floor), where="post", label=name)
        ax.fill_between(g["x_pct"], np.maximum(g["lo"], floor), np.maximum(g["hi"], floor), step="post",
                        alpha=0.15, color=line.get_color(), linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(10, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("realized TRLT (%)")
    ax.set_ylabel("share of contexts above")
    ax.set_title(title or "Realized TRLT survival over contexts")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_gate(gate: pd.DataFrame, path: str | Path) -> Path:
    """Paper Figure 13: AUTO's error rate, mean and p99 TRLT on contexts kept by a margin gate."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ax.plot(gate["margin_min"], gate["kept_pct"], label="contexts kept (%)")
    ax.plot(gate["margin_min"], gate["error_rate_pct"], label="error rate (%)")
    ax.plot(gate["margin_min"], gate["mean_pct"], label="mean TRLT (%)")
    ax.plot(gate["margin_min"], gate["p99_pct"], label="p99 TRLT (%)")
    ax.set_xlabel("minimum predicted runner-up margin m")
    ax.set_ylabel("%")
    ax.set_title("AUTO audit: runner-up margin as a gate")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)
