"""Report figures over time: learning curves of the replay and the first-iterations transient.

Same shape as :mod:`.figures`: a data function (plain pandas/numpy) and a plot function that
writes the PNG with its data as the CSV of the same stem, stamped "synthetic" on ``sim-*``
data.

* Learning curves: per policy, the cumulative relative lost time ``CRLT(t)`` (the realized
  TRLT of the first ``t`` steps, :func:`~..replay.trajectory_frame`) against the step ``t``,
  averaged over seeds per context, then mean over contexts with a 95% band for that mean
  (1.96 standard errors). Its value at ``T`` is the Table-1 mean.
* Transient: per arm, the ratio of each pool sample to the arm's steady mean against the
  iteration, median over contexts with the interquartile band: how slow an arm's first calls
  are (lazy connection set-up) and when it reaches its steady state.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd


from ..figures import arm_colour, pyplot, save_figure
from ..inputs import is_synthetic
from ..pools import CONTEXT_COLUMNS, Pools

__all__ = ["learning_curves", "plot_learning_curves", "plot_transients", "transient_curves"]


def _log_y(ax) -> None:
    """A logarithmic y axis labelled in plain numbers (2, 5, 10, 20), not powers of ten."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def learning_curves(trajectories: pd.DataFrame, *, part: str | None = "test", column: str = "crlt_realized",
                    z: float = 1.96) -> pd.DataFrame:
    """Per policy and step, CRLT (%) averaged over seeds per context, then over contexts.

    Rows ``policy, step, mean_pct, sem_pct, lo_pct, hi_pct, contexts``; ``lo``/``hi`` are
    ``mean -/+ z`` standard errors over contexts. ``part`` keeps one split part (the report
    scores the test part, as Table 1 does); None keeps every context.
    """
    rows = trajectories if part is None else trajectories[trajectories["part"] == part]
    per_context = rows.groupby(["policy", *CONTEXT_COLUMNS, "step"], observed=True, sort=False)[column].mean()
    grouped = (100 * per_context).groupby(level=["policy", "step"], observed=True, sort=False)
    out = pd.DataFrame({"mean_pct": grouped.mean(), "sem_pct": grouped.sem(), "contexts": grouped.size()}).reset_index()
    out["policy"] = out["policy"].astype(str)
    half = z * out["sem_pct"].fillna(0.0)
    out.insert(4, "lo_pct", out["mean_pct"] - half)
    out.insert(5, "hi_pct", out["mean_pct"] + half)
    order = {p: i for i, p in enumerate(dict.fromkeys(rows["policy"].astype(str)))}
    return out.sort_values(["policy", "step"], key=lambda c: c.map(order) if c.name == "policy" else c,
                           kind="stable").reset_index(drop=True)


def plot_learning_curves(curves: pd.DataFrame, path: str | Path, *, synthetic: bool = False) -> Path:
    """Mean CRLT (%) against the step per policy, with its 95% band.

    The y axis is logarithmic when every mean is positive (policies differ by decades, Random
    against a learner), linear otherwise.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for name, g in curves.groupby("policy", sort=False):
        (line,) = ax.plot(g["step"], g["mean_pct"], linewidth=1.4, label=name)
        ax.fill_between(g["step"], g["lo_pct"], g["hi_pct"], alpha=0.15, color=line.get_color(), linewidth=0)
    if len(curves) and (curves["mean_pct"] > 0).all():
        _log_y(ax)
    ax.set_xlabel("step t (calls of the context)")
    ax.set_ylabel("relative lost time CRLT(t) (%), realized")
    n = int(curves["contexts"].max()) if len(curves) else 0
    ax.set_title(f"Learning curves: mean over {n} test contexts, 95% band")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return save_figure(plt, fig, path, data=curves, synthetic=synthetic)


def transient_curves(pools: Pools, *, first: int = 30) -> pd.DataFrame:
    """Per (fabric, arm) and iteration, each pool sample over its arm's steady mean, across contexts.

    Rows ``fabric, arm, iteration, median, q25, q75, mean, contexts`` for the first ``first``
    pool positions. ``iteration`` is the pool position plus one when iteration 0 (the warm-up)
    was dropped from the pools, so it is the measured iteration of a context swept in one run.
    """
    offset = 0 if pools.keep_warmup else 1
    first = min(first, pools.samples.shape[2])
    ratio = pools.samples[:, :, :first] / pools.steady[:, :, None]  # NaN where not measured
    rows = []
    for fabric, idx in pools.contexts.groupby("fabric", sort=True).groups.items():
        block = ratio[np.asarray(idx)]
        synthetic = bool(pools.contexts.loc[idx, "synthetic"].fillna(False).astype(bool).any())
        for k, arm in enumerate(pools.arms):
            values = block[:, k, :]
            counts = np.isfinite(values).sum(axis=0)
            if not counts.any():
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # positions no context of this arm reaches
                q25, median, q75 = np.nanpercentile(values, [25, 50, 75], axis=0)
                mean = np.nanmean(values, axis=0)
            rows.append(pd.DataFrame({"fabric": fabric, "arm": arm, "iteration": np.arange(first) + offset,
                                      "median": median, "q25": q25, "q75": q75, "mean": mean, "contexts": counts,
                                      "synthetic": synthetic}))
    columns = ["fabric", "arm", "iteration", "median", "q25", "q75", "mean", "contexts", "synthetic"]
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)
    return frame[frame["contexts"] > 0].reset_index(drop=True)


def plot_transients(frame: pd.DataFrame, folder: str | Path, *, window_start: int | None = None) -> list[Path]:
    """Per fabric, every arm's ratio to steady against the iteration (``transient_<fabric>.png``)."""
    plt = pyplot()
    paths = []
    for fabric, g in frame.groupby("fabric", sort=True):
        fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
        for arm, rows in g.groupby("arm", sort=False):
            (line,) = ax.plot(rows["iteration"], rows["median"], marker=".", linewidth=1.2, label=arm,
                              color=arm_colour(arm))
            ax.fill_between(rows["iteration"], rows["q25"], rows["q75"], alpha=0.12, color=line.get_color(),
                            linewidth=0)
        ax.axhline(1.0, color="grey", linewidth=1, label="steady mean")
        if window_start is not None:
            ax.axvline(window_start, color="grey", linestyle=":", linewidth=1, label="steady window starts")
        if float(g["q75"].max()) > 3:  # a first-use stall: decades above steady
            _log_y(ax)
        ax.set_xlabel("iteration (measured order)")
        ax.set_ylabel("latency / steady mean (ratio)")
        ax.set_title(f"First-iterations transient per arm on {fabric} (median over contexts, IQR band)", fontsize=10)
        ax.legend(fontsize=7, ncol=2)
        paths.append(save_figure(plt, fig, Path(folder) / f"transient_{fabric}.png", data=g,
                           synthetic=is_synthetic(g)))
    return paths
