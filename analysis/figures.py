"""Figures of the report and the studies (matplotlib, Agg backend, imported lazily).

Beside the core rather than in ``report/``: the studies, the live analysis and ``compare`` draw
with them too, and they sit below the report (architecture section 2.2).

Survival of TRLT and the margin gate (the paper's Figures 1 and 13), cumulative lost time
curves (Figures 8 and 12, for the ablation and workload studies), and the views a cluster
engineer looks at first: bus bandwidth and latency against size per arm, where AUTO errs,
and the cost model against measurement. Each figure has a data function (plain pandas,
testable without matplotlib) and a plot function that writes the PNG with its data as a CSV
of the same stem beside it, stamped "synthetic" when the data say so (``.inputs.is_synthetic``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.names import ALGORITHMS, PROTOCOLS, bus_bandwidth_gbs, human_size

from .inputs import is_synthetic
from .pools import CONTEXT_COLUMNS, SCENARIO_COLUMNS, Pools

__all__ = [
    "ARM_COLOURS",
    "arm_colour",
    "arm_curves",
    "cost_vs_measured",
    "error_map",
    "plot_arm_curves",
    "plot_cost_vs_measured",
    "plot_crlt",
    "plot_error_maps",
    "plot_gate",
    "plot_survival",
    "pyplot",
    "save_figure",
    "size_axis",
    "size_label",
    "survival_curves",
    "ZERO_TRLT",
]


#: Per algorithm, the shades of its protocols in ``PROTOCOLS`` order (LL light, LL128 middle, Simple dark).
_SHADES = {"Tree": ("#a1d99b", "#41ab5d", "#006d2c"), "Ring": ("#9ecae1", "#4292c6", "#08519c"),
           "CollNetDirect": ("#d9d9d9", "#969696", "#525252"), "CollNetChain": ("#fbb4b9", "#f768a1", "#ae017e"),
           "NVLS": ("#cbc9e2", "#9e9ac8", "#6a51a3"), "NVLSTree": ("#fdbe85", "#fd8d3c", "#d94701"),
           "PAT": ("#dfc27d", "#bf812d", "#8c510a")}
#: The one palette of arms, for every figure that draws them (arm curves, cost model, transients,
#: live timelines): the algorithm gives the hue, the protocol the shade, so Ring/Simple is the
#: same dark blue wherever it appears.
ARM_COLOURS: dict[str, str] = {f"{a}/{p}": _SHADES[a][i] for a in ALGORITHMS for i, p in enumerate(PROTOCOLS)}
#: The colour of a label that is not an arm.
_OTHER = "#7f7f7f"


def arm_colour(arm) -> str:
    """``arm``'s colour in :data:`ARM_COLOURS` (grey for anything that is not an arm)."""
    return ARM_COLOURS.get(str(arm), _OTHER)


#: TRLT (a fraction) whose magnitude is below this counts as zero: a policy served exactly the
#: best arm's samples, summed in another order (float rounding, about 1e-16).
ZERO_TRLT = 1e-9


def _survival_at(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Share of ``values`` strictly above each ``x`` (``values`` sorted ascending)."""
    return (values.size - np.searchsorted(values, x, side="right")) / max(values.size, 1)


def survival_curves(per_context: pd.DataFrame, *, column: str = "trlt_realized", n_boot: int = 200,
                    seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Share of contexts whose TRLT (%) exceeds ``x``, per policy: the exact step function, with a bootstrap band.

    Long rows ``policy, x_pct, survival, lo, hi, contexts, zero_share, negative_share``. Each
    curve starts at one left edge shared by all policies (below every positive TRLT) and has a
    point at each distinct positive TRLT; its last point sits at the policy's largest TRLT and
    repeats the share just before it, so the curve ends at its last non-zero value instead of
    running along a floor. Contexts at exactly zero (the policy served what the best arm
    serves; within :data:`ZERO_TRLT`, float rounding) and below zero (realized pricing: its
    samples happened to be faster than the best arm's own pool) never exceed an ``x > 0``;
    their shares are ``zero_share`` and ``negative_share``. A policy with no positive TRLT has one row with ``x_pct`` missing.
    The band resamples contexts with replacement (``n_boot`` times), pointwise percentiles.
    """
    rng = np.random.default_rng(seed)
    raw = per_context[column].to_numpy(float)
    values_all = 100 * np.where(np.abs(raw) < ZERO_TRLT, 0.0, raw)
    positive_all = values_all[values_all > 0]
    left = min(1e-2, float(positive_all.min()) / 2) if positive_all.size else 1e-2
    alpha = (1 - level) / 2
    rows = []
    for name, idx in per_context.groupby("policy", sort=False).indices.items():
        v = np.sort(values_all[idx])
        shares = {"contexts": v.size, "zero_share": float((v == 0).mean()), "negative_share": float((v < 0).mean())}
        positive = np.unique(v[v > 0])
        if not positive.size:
            rows.append(pd.DataFrame([{"policy": name, "x_pct": np.nan, "survival": 0.0, "lo": 0.0, "hi": 0.0,
                                       **shares}]))
            continue
        x = np.concatenate([[left], positive])
        surv = _survival_at(v, x)
        boot = np.sort(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
        boot_surv = np.stack([_survival_at(row, x) for row in boot])
        lo, hi = np.quantile(boot_surv, alpha, axis=0), np.quantile(boot_surv, 1 - alpha, axis=0)
        for series in (surv, lo, hi):  # the last point holds the share just before the largest TRLT
            series[-1] = series[-2]
        rows.append(pd.DataFrame({"policy": name, "x_pct": x, "survival": surv, "lo": lo, "hi": hi, **shares}))
    columns = ["policy", "x_pct", "survival", "lo", "hi", "contexts", "zero_share", "negative_share"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


def pyplot():
    """matplotlib's pyplot on the Agg backend (imported on first use: ``--help`` stays light)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def size_label(size_bytes: float) -> str:
    """A message size as every figure prints it: ``512 B``, ``4 KiB``, ``16 MiB``, ``2 GiB``."""
    return human_size(int(round(size_bytes))) if size_bytes >= 1 else ""


def size_axis(ax, axis: str = "x", *, ticks: int = 8) -> None:
    """Make ``axis`` of ``ax`` a message-size axis: log base 2, at most about ``ticks`` labels at
    powers of two, each printed by :func:`size_label`. Every figure with a size axis calls this,
    so the report has one size-axis style."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_major_locator(LogLocator(base=2, subs=(1.0,), numticks=ticks))
    target.set_major_formatter(FuncFormatter(lambda value, _pos: size_label(value)))
    target.set_minor_locator(NullLocator())


def save_figure(plt, fig, path: str | Path, *, data: pd.DataFrame, synthetic: bool) -> Path:
    """Lay out, stamp, write the PNG and ``data`` as the CSV beside it, free the figure; returns the PNG."""
    fig.tight_layout()
    if synthetic:
        fig.text(0.995, 0.005, "synthetic (simulated fabric)", ha="right", va="bottom", fontsize=8,
                 color="#b45309", alpha=0.9)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    data.to_csv(out.with_suffix(".csv"), index=False)
    return out


def plot_survival(curves: pd.DataFrame, path: str | Path, *, title: str = "", synthetic: bool = False,
                  threshold_pct: float = 10.0) -> Path:
    """Paper Figure 1: survival of realized TRLT over contexts, log axes, bootstrap band.

    Curves end at their last non-zero value (no floor); the legend states each policy's share
    of contexts at exactly zero TRLT, which a log axis cannot show.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    drawn = curves.dropna(subset=["x_pct"])
    for name, g in curves.groupby("policy", sort=False):
        label = f"{name} ({100 * g['zero_share'].iloc[0]:.0f}% at 0)"
        g = g.dropna(subset=["x_pct"])
        if not len(g):
            ax.plot([], [], label=label + ", none above 0")
            continue
        (line,) = ax.step(g["x_pct"], g["survival"], where="post", label=label)
        ax.fill_between(g["x_pct"], g["lo"], g["hi"], step="post", alpha=0.15, color=line.get_color(), linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    positive = drawn["survival"][drawn["survival"] > 0]
    if len(positive):
        ax.set_ylim(float(positive.min()) / 2, 1.05)
    ax.axvline(threshold_pct, color="grey", linestyle=":", linewidth=1, label=f"{threshold_pct:g}% threshold")
    ax.set_xlabel("realized TRLT (%)")
    ax.set_ylabel("share of contexts above")
    ax.set_title(title or "Realized TRLT survival over contexts")
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path, data=curves, synthetic=synthetic)


def plot_gate(gate: pd.DataFrame, path: str | Path, *, synthetic: bool = False) -> Path:
    """Paper Figure 13: AUTO's error rate, mean and p99 TRLT on contexts kept by a margin gate."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ax.plot(gate["margin_min"], gate["kept_pct"], label="contexts kept (%)")
    ax.plot(gate["margin_min"], gate["error_rate_pct"], label="error rate (%)")
    ax.plot(gate["margin_min"], gate["mean_pct"], label="mean TRLT (%)")
    ax.plot(gate["margin_min"], gate["p99_pct"], label="p99 TRLT (%)")
    ax.set_xlabel("minimum predicted runner-up margin m")
    ax.set_ylabel("%")
    ax.set_title("AUTO audit: runner-up margin as a gate")
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path, data=gate, synthetic=synthetic)


def plot_crlt(curves: pd.DataFrame, path: str | Path, *, title: str, ylabel: str, marks=(), marks_label: str = "mark",
              symlog: bool = False, synthetic: bool = False) -> Path:
    """Paper Figures 8 and 12: cumulative relative lost time (%) against the step, one line per
    ``policy`` and one panel per ``panel`` value (when the column exists); ``marks`` are steps
    drawn as dashed lines (a change point, cycle boundaries), named ``marks_label`` in the
    legend; ``symlog`` for curves spanning decades."""
    plt = pyplot()
    panels = list(dict.fromkeys(curves["panel"])) if "panel" in curves.columns else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(1.2 + 4.2 * len(panels), 4.0), dpi=120, squeeze=False,
                             sharey=True)
    names = list(dict.fromkeys(curves["policy"]))
    colours = plt.get_cmap("tab20" if len(names) > 10 else "tab10")
    styles = ("-", "--", "-.", ":")
    for ax, panel in zip(axes[0], panels):
        shown = curves if panel is None else curves[curves["panel"] == panel]
        for name, g in shown.groupby("policy", sort=False):
            i = names.index(name)
            ax.plot(g["step"], g["value_pct"], label=name, linewidth=1.2, color=colours(i % colours.N),
                    linestyle=styles[(i // colours.N) % len(styles)])
        for i, step in enumerate(marks):
            ax.axvline(step, color="#888", linestyle="--", linewidth=0.8, label=marks_label if i == 0 else None)
        if symlog:
            ax.set_yscale("symlog", linthresh=1.0)
        ax.set_xlabel("step")
        ax.set_title(title if panel is None else str(panel), fontsize=10)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if len(panels) > 1:
        fig.suptitle(title, fontsize=11)
    return save_figure(plt, fig, path, data=curves, synthetic=synthetic)


def _scenario_stem(prefix: str, key: tuple) -> str:
    """File stem of one scenario's figure: ``arms_sim-h100_AllReduce_4n``."""
    fabric, collective, *rest = key
    return "_".join([prefix, str(fabric), str(collective), *(f"{n}n" for n in rest)])


def arm_curves(pools: Pools, audit: pd.DataFrame) -> pd.DataFrame:
    """Steady latency and bus bandwidth of every measured arm per audited context.

    One row per (context, arm): ``CONTEXT_COLUMNS``, ``arm``, ``steady_us``, ``busbw_gbs``
    (nccl-tests' definition, :func:`~ncclbot_sweep.names.bus_bandwidth_gbs`), and
    the flags ``auto`` and ``best`` taken from the audit rows, so the figure marks exactly the
    arms the audit reports.
    """
    keys = list(CONTEXT_COLUMNS)
    c, k = np.nonzero(pools.measured)
    frame = pools.contexts.iloc[c][[*keys, "synthetic"]].reset_index(drop=True)
    frame["arm"] = np.asarray(pools.arms)[k]
    frame["steady_us"] = pools.steady[c, k]
    frame["busbw_gbs"] = [bus_bandwidth_gbs(col, r, size, us) for col, r, size, us in
                          zip(frame["collective"], frame["ranks"], frame["size_bytes"], frame["steady_us"])]
    frame = frame.merge(audit[[*keys, "auto_arm", "best_arm"]], on=keys, how="inner")
    frame["auto"] = frame["arm"] == frame["auto_arm"]
    frame["best"] = frame["arm"] == frame["best_arm"]
    return frame.drop(columns=["auto_arm", "best_arm"]).sort_values([*keys, "arm"], kind="stable").reset_index(drop=True)


def _mark(ax, rows: pd.DataFrame, column: str) -> None:
    """AUTO's pick (black x) and the measured best (open red circle) at every size."""
    auto, best = rows[rows["auto"]], rows[rows["best"]]
    ax.scatter(auto["size_bytes"], auto[column], marker="x", color="black", s=36, zorder=4, label="AUTO's pick")
    ax.scatter(best["size_bytes"], best[column], marker="o", facecolors="none", edgecolors="red", s=70,
               zorder=5, label="measured best")


def plot_arm_curves(curves: pd.DataFrame, folder: str | Path) -> list[Path]:
    """Per scenario, bus bandwidth and latency against message size for every arm; one PNG each.

    Returns the written PNGs in scenario order (``arms_<fabric>_<collective>_<nodes>n.png``).
    """
    plt = pyplot()
    paths = []
    for key, g in curves.groupby(list(SCENARIO_COLUMNS), sort=True):
        fig, (bw, lat) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
        for arm, rows in g.groupby("arm", sort=True):
            bw.plot(rows["size_bytes"], rows["busbw_gbs"], marker=".", linewidth=1.2, label=arm, color=arm_colour(arm))
            lat.plot(rows["size_bytes"], rows["steady_us"], marker=".", linewidth=1.2, label=arm, color=arm_colour(arm))
        _mark(bw, g, "busbw_gbs")
        _mark(lat, g, "steady_us")
        for ax in (bw, lat):
            size_axis(ax)
            ax.set_xlabel("message size (nccl-tests size)")
            ax.grid(True, which="major", alpha=0.3)
        lat.set_yscale("log")
        bw.set_ylabel("bus bandwidth (GB/s), steady mean")
        lat.set_ylabel("latency (us), steady mean")
        fabric, collective, nodes = key
        fig.suptitle(f"{collective} on {fabric}, {nodes} nodes ({int(g['ranks'].iloc[0])} ranks)")
        lat.legend(fontsize=7, ncol=2)
        stem = _scenario_stem("arms", key)
        paths.append(save_figure(plt, fig, Path(folder) / f"{stem}.png", data=g, synthetic=is_synthetic(g)))
    return paths


def error_map(audit: pd.DataFrame) -> pd.DataFrame:
    """Where AUTO errs: per context AUTO's selection-priced loss (%) with its arm and the best arm."""
    cols = [*CONTEXT_COLUMNS, "synthetic", "auto_arm", "best_arm", "error"]
    frame = audit[cols].copy()
    frame["loss_pct"] = 100 * audit["trlt_selection"].to_numpy(float)
    return frame.sort_values(list(CONTEXT_COLUMNS), kind="stable").reset_index(drop=True)


def _cell_label(row) -> str:
    """A map cell's text: the arm when AUTO is right; when it errs, the best arm first and how much
    slower AUTO's arm is (``Tree/LL128 is best;`` / ``NVLSTree/Simple is 33% slower``)."""
    if not row.error:
        return str(row.auto_arm)
    return f"{row.best_arm} is best;\n{row.auto_arm} is {row.loss_pct:.{0 if row.loss_pct >= 1 else 1}f}% slower"


def plot_error_maps(emap: pd.DataFrame, folder: str | Path) -> list[Path]:
    """Per (fabric, collective), AUTO's loss over message size (rows) x node count (columns); one PNG each.

    Cells are coloured by the loss against the measured best and name AUTO's arm, and on an
    error the best arm and the loss (``errmap_<fabric>_<collective>.png``). Sizes run down the
    page, so a cell is wide enough for its text at the page's width.
    """
    plt = pyplot()
    paths = []
    for (fabric, collective), g in emap.groupby(["fabric", "collective"], sort=True):
        sizes, nodes = sorted(g["size_bytes"].unique()), sorted(g["nodes"].unique())
        grid = g.pivot_table(index="size_bytes", columns="nodes", values="loss_pct", aggfunc="max")
        grid = grid.reindex(index=sizes, columns=nodes)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.9 * len(nodes) + 2.8), 0.36 * len(sizes) + 1.6), dpi=100)
        top = max(float(np.nanmax(grid.to_numpy(float))), 1.0)
        image = ax.imshow(grid.to_numpy(float), cmap="Reds", aspect="auto", vmin=0, vmax=top)
        pos_size, pos_node = {s: i for i, s in enumerate(sizes)}, {n: i for i, n in enumerate(nodes)}
        for row in g.itertuples(index=False):
            ink = "white" if row.loss_pct > 0.6 * top else "black" if row.error else "#555"
            ax.text(pos_node[row.nodes], pos_size[row.size_bytes], _cell_label(row), ha="center", va="center",
                    fontsize=7, color=ink, linespacing=1.0)
        ax.set_yticks(range(len(sizes)), [size_label(s) for s in sizes], fontsize=8)
        ax.set_xticks(range(len(nodes)), [f"{n} nodes" for n in nodes])
        ax.xaxis.tick_top()
        ax.set_ylabel("message size (nccl-tests size)")
        ax.set_title(f"{collective} on {fabric}: AUTO's loss against the measured best (selection-priced)",
                     fontsize=10)
        fig.colorbar(image, ax=ax, label="AUTO's loss (%)", fraction=0.04, pad=0.02)
        stem = _scenario_stem("errmap", (fabric, collective))
        paths.append(save_figure(plt, fig, Path(folder) / f"{stem}.png", data=g, synthetic=is_synthetic(g)))
    return paths


def cost_vs_measured(pools: Pools, predicted: np.ndarray) -> pd.DataFrame:
    """Cost-model prediction against measured steady mean, per (context, measured arm with a prediction)."""
    keys = list(CONTEXT_COLUMNS)
    c, k = np.nonzero(pools.measured & np.isfinite(predicted))
    frame = pools.contexts.iloc[c][[*keys, "synthetic"]].reset_index(drop=True)
    frame["arm"] = np.asarray(pools.arms)[k]
    frame["predicted_us"] = predicted[c, k]
    frame["measured_us"] = pools.steady[c, k]
    return frame


def plot_cost_vs_measured(frame: pd.DataFrame, folder: str | Path) -> list[Path]:
    """Per fabric, predicted against measured steady latency, one colour per arm, with the diagonal."""
    plt = pyplot()
    paths = []
    for fabric, g in frame.groupby("fabric", sort=True):
        fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
        for arm, rows in g.groupby("arm", sort=True):
            ax.scatter(rows["measured_us"], rows["predicted_us"], s=10, alpha=0.7, label=arm, color=arm_colour(arm))
        values = g[["measured_us", "predicted_us"]].to_numpy(float)
        lo, hi = float(np.nanmin(values)) / 1.5, float(np.nanmax(values)) * 1.5
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", linewidth=1, label="predicted = measured")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured steady latency (us)")
        ax.set_ylabel("cost-model prediction (us)")
        ax.set_title(f"Cost model against measurement on {fabric}")
        ax.legend(fontsize=7, ncol=2)
        paths.append(save_figure(plt, fig, Path(folder) / f"costmodel_{fabric}.png", data=g, synthetic=is_synthetic(g)))
    return paths
