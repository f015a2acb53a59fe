"""Live figures (matplotlib, Agg backend, imported lazily): learning curves and arm timelines.

Each function takes the tables of :mod:`.curves` and writes one PNG with the rows it plots as
the CSV of the same stem beside it; figures of runs the simulator produced (``runs.synthetic``)
say "synthetic" in their title (drawn, and in the PNG's ``Title`` text). Every line has a
legend entry, and lines that may coincide (AUTO through the plugin and AUTO's reference; a
run's finish and AUTO's) differ in style and width, the thinner drawn on top, so neither
hides the other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..figures import arm_colour, pyplot

__all__ = ["plot_learning_curves", "plot_timeline"]


#: Line styles and markers cycled over runs, so runs differ by more than colour.
_STYLES = ("-", "--", "-.", (0, (1, 1)))
_MARKERS = "osD^vP*X"


def _title(text: str, synthetic: bool) -> str:
    return f"{text} (synthetic: simulated fabric)" if synthetic else text


def _save(plt, fig, path: str | Path, *, data: pd.DataFrame, title: str) -> Path:
    """Lay out, write the PNG (with its title as metadata) and ``data`` as the CSV beside it."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    out = Path(path)
    fig.savefig(out, metadata={"Title": title})
    plt.close(fig)
    data.to_csv(out.with_suffix(".csv"), index=False)
    return out


def plot_learning_curves(curves: pd.DataFrame, labels: dict[str, str], *, path: str | Path,
                         title: str, synthetic: bool) -> Path:
    """Figure 2 (right): lost bandwidth against the oracle per collective, SEM band across
    sizes, one line per run (its own colour, line style and markers); dotted black, on top:
    AUTO's loss on the same sizes, which AUTO through the plugin follows."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    for i, (run_id, g) in enumerate(curves.groupby("run_id", sort=False)):
        x = g["collective_index"].to_numpy()
        y = g["lost_bw_pct"].to_numpy(float)
        sem = np.nan_to_num(g["lost_bw_sem_pct"].to_numpy(float))
        (line,) = ax.plot(x, y, label=labels.get(run_id, run_id), linewidth=2.4, color=f"C{i % 10}",
                          linestyle=_STYLES[i % len(_STYLES)], marker=_MARKERS[i % len(_MARKERS)],
                          markevery=max(1, len(x) // 10), markersize=5, zorder=2 + i)
        ax.fill_between(x, y - sem, y + sem, color=line.get_color(), alpha=0.12, linewidth=0, zorder=1)
    if len(curves):
        auto = curves.groupby("collective_index")["auto_lost_bw_pct"].mean()
        ax.plot(auto.index, auto.to_numpy(), linestyle=":", linewidth=1.4, color="black",
                label="AUTO's loss (no learning)", zorder=50)
    ax.set_xlabel("collective index (per size)")
    ax.set_ylabel("lost bandwidth vs oracle (%)")
    ax.set_title(_title(title, synthetic), fontsize=9)
    ax.legend(fontsize=7)
    return _save(plt, fig, path, data=curves, title=_title(title, synthetic))


#: The finish lines of a timeline facet: (column, legend label, style); drawn widest first.
_FINISHES = (("finish_ms", "this run's finish", dict(color="#d62728", linewidth=3.0, alpha=0.6, zorder=1)),
             ("oracle_finish_ms", "oracle's finish", dict(color="grey", linestyle="--", linewidth=1.8, zorder=3)),
             ("auto_finish_ms", "AUTO's finish", dict(color="black", linestyle=":", linewidth=1.2, zorder=4)))


def plot_timeline(timeline: pd.DataFrame, path: str | Path, *, title: str, synthetic: bool) -> Path:
    """Figure 11: one facet per run (fastest first), each collective at accumulated time,
    colour (the report's arm palette) and marker by arm; the run's, the oracle's and AUTO's finish as vertical lines."""
    plt = pyplot()
    order = timeline.groupby("run_id", sort=False)["finish_ms"].first().sort_values().index
    fig, axes = plt.subplots(len(order), 1, figsize=(7.0, 1.7 + 1.1 * len(order)), dpi=120, sharex=True,
                             squeeze=False, layout="constrained")
    arms = sorted(timeline["arm"].dropna().unique())
    for ax, run_id in zip(axes[:, 0], order):
        g = timeline[timeline["run_id"] == run_id]
        for i, arm in enumerate(arms):
            sel = g[g["arm"] == arm]
            ax.scatter(sel["accumulated_ms"], sel["latency_us"] / 1e3, s=8, color=arm_colour(arm),
                       marker=_MARKERS[i % len(_MARKERS)], label=arm, zorder=2)
        for column, label, style in _FINISHES:
            ax.axvline(g[column].iloc[0], label=label, **style)
        ax.set_ylabel(g["policy"].iloc[0], fontsize=7)
    axes[0, 0].set_title(_title(title, synthetic), fontsize=9)
    axes[-1, 0].set_xlabel("accumulated collective time (ms)")
    fig.supylabel("served latency (ms)", fontsize=8)
    legend = {}
    for ax in axes[:, 0]:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(list(legend.values()), list(legend), fontsize=6, loc="outside lower center", ncol=min(len(legend), 5))
    return _save(plt, fig, path, data=timeline, title=_title(title, synthetic))
