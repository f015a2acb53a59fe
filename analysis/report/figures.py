"""Report figures (matplotlib, Agg backend, imported lazily).

Survival of TRLT and the margin gate (the paper's Figures 1 and 13), and the views a cluster
engineer looks at first: bus bandwidth and latency against size per arm, where AUTO errs,
and the cost model against measurement. Each figure has a data function (plain pandas,
testable without matplotlib) and a plot function that writes the PNG with its data as a CSV
of the same stem beside it, stamped "synthetic" when the data say so (``..inputs.is_synthetic``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.names import bus_factor, human_size

from ..inputs import is_synthetic
from ..pools import CONTEXT_COLUMNS, SCENARIO_COLUMNS, Pools

__all__ = [
    "arm_curves",
    "cost_vs_measured",
    "error_map",
    "plot_arm_curves",
    "plot_cost_vs_measured",
    "plot_error_maps",
    "plot_gate",
    "plot_survival",
    "survival_curves",
]


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


def _save(plt, fig, path: str | Path, *, data: pd.DataFrame, synthetic: bool) -> Path:
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


def plot_survival(curves: pd.DataFrame, path: str | Path, *, title: str = "", synthetic: bool = False) -> Path:
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
    return _save(plt, fig, path, data=curves, synthetic=synthetic)


def plot_gate(gate: pd.DataFrame, path: str | Path, *, synthetic: bool = False) -> Path:
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
    return _save(plt, fig, path, data=gate, synthetic=synthetic)


def _scenario_stem(prefix: str, key: tuple) -> str:
    """File stem of one scenario's figure: ``arms_sim-h100_AllReduce_4n``."""
    fabric, collective, *rest = key
    return "_".join([prefix, str(fabric), str(collective), *(f"{n}n" for n in rest)])


def arm_curves(pools: Pools, audit: pd.DataFrame) -> pd.DataFrame:
    """Steady latency and bus bandwidth of every measured arm per audited context.

    One row per (context, arm): ``CONTEXT_COLUMNS``, ``arm``, ``steady_us``, ``busbw_gbs``
    (nccl-tests' definition: size / time times :func:`~ncclbot_sweep.names.bus_factor`), and
    the flags ``auto`` and ``best`` taken from the audit rows, so the figure marks exactly the
    arms the audit reports.
    """
    keys = list(CONTEXT_COLUMNS)
    c, k = np.nonzero(pools.measured)
    frame = pools.contexts.iloc[c][[*keys, "synthetic"]].reset_index(drop=True)
    frame["arm"] = np.asarray(pools.arms)[k]
    frame["steady_us"] = pools.steady[c, k]
    factor = np.array([bus_factor(col, int(r)) for col, r in zip(frame["collective"], frame["ranks"])])
    frame["busbw_gbs"] = frame["size_bytes"].to_numpy(float) / (frame["steady_us"].to_numpy(float) * 1e3) * factor
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
    plt = _pyplot()
    paths = []
    for key, g in curves.groupby(list(SCENARIO_COLUMNS), sort=True):
        fig, (bw, lat) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
        for arm, rows in g.groupby("arm", sort=True):
            bw.plot(rows["size_bytes"], rows["busbw_gbs"], marker=".", linewidth=1.2, label=arm)
            lat.plot(rows["size_bytes"], rows["steady_us"], marker=".", linewidth=1.2, label=arm)
        _mark(bw, g, "busbw_gbs")
        _mark(lat, g, "steady_us")
        for ax in (bw, lat):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes, nccl-tests size)")
            ax.grid(True, which="major", alpha=0.3)
        lat.set_yscale("log")
        bw.set_ylabel("bus bandwidth (GB/s), steady mean")
        lat.set_ylabel("latency (us), steady mean")
        fabric, collective, nodes = key
        fig.suptitle(f"{collective} on {fabric}, {nodes} nodes ({int(g['ranks'].iloc[0])} ranks)")
        lat.legend(fontsize=7, ncol=2)
        stem = _scenario_stem("arms", key)
        paths.append(_save(plt, fig, Path(folder) / f"{stem}.png", data=g, synthetic=is_synthetic(g)))
    return paths


def error_map(audit: pd.DataFrame) -> pd.DataFrame:
    """Where AUTO errs: per context AUTO's selection-priced loss (%) with its arm and the best arm."""
    cols = [*CONTEXT_COLUMNS, "synthetic", "auto_arm", "best_arm", "error"]
    frame = audit[cols].copy()
    frame["loss_pct"] = 100 * audit["trlt_selection"].to_numpy(float)
    return frame.sort_values(list(CONTEXT_COLUMNS), kind="stable").reset_index(drop=True)


def _cell_label(row) -> str:
    """A map cell's text: the arm when AUTO is right, ``auto>best`` and the loss when it errs."""
    if not row.error:
        return str(row.auto_arm).replace("/", "\n")
    return f"{row.auto_arm}\n>{row.best_arm}\n{row.loss_pct:.0f}%"


def plot_error_maps(emap: pd.DataFrame, folder: str | Path) -> list[Path]:
    """Per (fabric, collective), AUTO's loss over message size x node count; one PNG each.

    Cells are coloured by the loss against the measured best and name AUTO's arm, and on an
    error the best arm and the loss (``errmap_<fabric>_<collective>.png``).
    """
    plt = _pyplot()
    paths = []
    for (fabric, collective), g in emap.groupby(["fabric", "collective"], sort=True):
        sizes, nodes = sorted(g["size_bytes"].unique()), sorted(g["nodes"].unique())
        grid = g.pivot_table(index="nodes", columns="size_bytes", values="loss_pct", aggfunc="max")
        grid = grid.reindex(index=nodes, columns=sizes)
        fig, ax = plt.subplots(figsize=(max(6.0, 0.85 * len(sizes) + 2), max(2.6, 0.9 * len(nodes) + 1.6)), dpi=110)
        top = max(float(np.nanmax(grid.to_numpy(float))), 1.0)
        image = ax.imshow(grid.to_numpy(float), cmap="Reds", aspect="auto", vmin=0, vmax=top)
        pos_size, pos_node = {s: i for i, s in enumerate(sizes)}, {n: i for i, n in enumerate(nodes)}
        for row in g.itertuples(index=False):
            ink = "white" if row.loss_pct > 0.6 * top else "black"  # readable on the dark end of the map
            ax.text(pos_size[row.size_bytes], pos_node[row.nodes], _cell_label(row), ha="center", va="center",
                    fontsize=6.5, color=ink)
        ax.set_xticks(range(len(sizes)), [human_size(s).replace(" ", "") for s in sizes], rotation=60, fontsize=7)
        ax.set_yticks(range(len(nodes)), [str(n) for n in nodes])
        ax.set_xlabel("message size (nccl-tests size)")
        ax.set_ylabel("nodes")
        ax.set_title(f"{collective} on {fabric}: AUTO's loss against the measured best (selection-priced)")
        fig.colorbar(image, ax=ax, label="AUTO's loss (%)")
        stem = _scenario_stem("errmap", (fabric, collective))
        paths.append(_save(plt, fig, Path(folder) / f"{stem}.png", data=g, synthetic=is_synthetic(g)))
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
    plt = _pyplot()
    paths = []
    for fabric, g in frame.groupby("fabric", sort=True):
        fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
        for arm, rows in g.groupby("arm", sort=True):
            ax.scatter(rows["measured_us"], rows["predicted_us"], s=10, alpha=0.7, label=arm)
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
        paths.append(_save(plt, fig, Path(folder) / f"costmodel_{fabric}.png", data=g, synthetic=is_synthetic(g)))
    return paths
