"""Compare two runs of the same sweep: what changed per context between dataset A and B.

Two NCCL versions, two fabrics, before and after a driver update: both datasets are
analysed alike (:func:`~.inputs.load_problem`, :func:`~.audit.audit_auto`, the rows of
:func:`~.contexts.contexts_frame`) and their contexts matched on ``(collective, nodes,
ranks, size_bytes)``; the fabric may differ, so each dataset must hold one fabric. Per
matched context: the change of the measured-best arm's steady latency and bus bandwidth
(percent, B against A), whether the best arm and AUTO's arm changed, and the change of
AUTO's loss against the best (percentage points). A context is flagged when the best
latency or bandwidth moves by more than ``threshold`` (a fraction, default 5%) or AUTO's
loss moves by more than ``100 x threshold`` percentage points. Arm changes are reported,
not flagged: a different arm at the same speed is not a regression.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from .audit import audit_auto
from .contexts import contexts_frame
from .inputs import is_synthetic, load_problem, load_provenance

__all__ = ["MATCH_COLUMNS", "CompareResult", "compare_datasets", "compare_contexts", "plot_compare", "write_compare"]

#: What a context of A is matched on in B (the fabric may differ).
MATCH_COLUMNS: tuple[str, ...] = ("collective", "nodes", "ranks", "size_bytes")
#: File stem of the table (Parquet, CSV) and the figure in ``--out``.
STEM = "compare"


@dataclasses.dataclass
class CompareResult:
    """The per-context table, and the document ``--json`` prints (summary, sides, contexts)."""

    table: pd.DataFrame
    document: dict


def _side(dataset: str | Path, *, label: str, window, rho_max: float, keep_warmup: bool, horizon: int) -> pd.DataFrame:
    problem = load_problem(dataset, window=window, rho_max=rho_max, keep_warmup=keep_warmup)
    fabrics = sorted(problem.contexts["fabric"].unique())
    if len(fabrics) != 1:
        raise AnalysisError(f"dataset {label} holds {len(fabrics)} fabrics ({', '.join(fabrics)}); compare matches "
                            "contexts without the fabric, so each dataset must hold one", path=Path(dataset),
                            hint="ingest each fabric's sweep into its own dataset (ingest --dataset DIR)")
    return contexts_frame(problem, audit_auto(problem, horizon=horizon))


def compare_contexts(a: pd.DataFrame, b: pd.DataFrame, *, threshold: float = 0.05) -> pd.DataFrame:
    """Per matched context, A against B (``a`` and ``b`` are :func:`~.contexts.contexts_frame` rows).

    Columns: ``MATCH_COLUMNS``, ``fabric_a``/``_b``, ``best_arm_a``/``_b``, ``best_arm_changed``,
    ``best_us_a``/``_b``, ``best_latency_change_pct``, ``best_busbw_gbs_a``/``_b``,
    ``best_busbw_change_pct``, ``auto_arm_a``/``_b``, ``auto_arm_changed``,
    ``auto_loss_a_pct``/``_b_pct``, ``auto_loss_change_pp``, ``flagged`` and ``why`` (the
    changes above the threshold).
    """
    keys = list(MATCH_COLUMNS)
    cols = ["fabric", "best_arm", "best_us", "best_busbw_gbs", "auto_arm", "auto_loss", "synthetic"]
    a, b = (side if "synthetic" in side.columns else side.assign(synthetic=False) for side in (a, b))
    m = a[[*keys, *cols]].merge(b[[*keys, *cols]], on=keys, suffixes=("_a", "_b"), how="inner")
    out = m[keys + ["fabric_a", "fabric_b", "best_arm_a", "best_arm_b"]].copy()
    out["best_arm_changed"] = m["best_arm_a"] != m["best_arm_b"]
    out["best_us_a"], out["best_us_b"] = m["best_us_a"], m["best_us_b"]
    out["best_latency_change_pct"] = 100 * (m["best_us_b"] / m["best_us_a"] - 1)
    out["best_busbw_gbs_a"], out["best_busbw_gbs_b"] = m["best_busbw_gbs_a"], m["best_busbw_gbs_b"]
    out["best_busbw_change_pct"] = 100 * (m["best_busbw_gbs_b"] / m["best_busbw_gbs_a"] - 1)
    out["auto_arm_a"], out["auto_arm_b"] = m["auto_arm_a"], m["auto_arm_b"]
    out["auto_arm_changed"] = m["auto_arm_a"] != m["auto_arm_b"]
    out["auto_loss_a_pct"], out["auto_loss_b_pct"] = 100 * m["auto_loss_a"], 100 * m["auto_loss_b"]
    out["auto_loss_change_pp"] = out["auto_loss_b_pct"] - out["auto_loss_a_pct"]
    out["synthetic"] = m["synthetic_a"] | m["synthetic_b"]
    limit = 100 * threshold
    checks = {"best latency": (out["best_latency_change_pct"], "%"), "best bandwidth": (out["best_busbw_change_pct"], "%"),
              "AUTO's loss": (out["auto_loss_change_pp"], " pp")}
    above = {name: values.abs() > limit for name, (values, _) in checks.items()}
    out["flagged"] = pd.concat(above, axis=1).any(axis=1) if len(out) else pd.Series(dtype=bool)
    out["why"] = [", ".join(f"{name} {values.iloc[i]:+.1f}{unit}" for name, (values, unit) in checks.items()
                            if above[name].iloc[i]) for i in range(len(out))]
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def _summary(table: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame, threshold: float) -> dict:
    keys = list(MATCH_COLUMNS)
    matched = set(map(tuple, table[keys].to_numpy().tolist()))
    only = {side: int(sum(tuple(r) not in matched for r in frame[keys].to_numpy().tolist()))
            for side, frame in (("a", a), ("b", b))}
    change = table["best_latency_change_pct"]
    return {"threshold": threshold, "matched": len(table), "only_a": only["a"], "only_b": only["b"],
            "flagged": int(table["flagged"].sum()), "best_arm_changed": int(table["best_arm_changed"].sum()),
            "auto_arm_changed": int(table["auto_arm_changed"].sum()),
            "best_faster": int((change < -100 * threshold).sum()), "best_slower": int((change > 100 * threshold).sum()),
            "best_latency_change_median_pct": float(change.median()) if len(table) else None}


def _json_rows(frame: pd.DataFrame) -> list[dict]:
    """Rows as strict-JSON values (NaN as null)."""
    return json.loads(frame.to_json(orient="records"))


def compare_datasets(dataset_a: str | Path, dataset_b: str | Path, *, threshold: float = 0.05,
                     window: tuple[int, int] = (11, 99), rho_max: float = 2.0, keep_warmup: bool = False,
                     horizon: int = 100) -> CompareResult:
    """Analyse both datasets alike and compare them context by context (module docstring)."""
    if threshold < 0:
        raise AnalysisError(f"threshold must be a non-negative fraction, but got {threshold}",
                            hint="pass e.g. --threshold 0.05 for 5%")
    settings = dict(window=tuple(window), rho_max=rho_max, keep_warmup=keep_warmup, horizon=horizon)
    a = _side(dataset_a, label="A", **settings)
    b = _side(dataset_b, label="B", **settings)
    table = compare_contexts(a, b, threshold=threshold)
    if not len(table):
        raise AnalysisError("the two datasets share no context (collective, nodes, ranks, size)",
                            hint="compare sweeps of the same collectives, node counts and sizes")

    def side(path, frame):
        prov = load_provenance(path)
        return {"dataset": str(Path(path).resolve()), "fabric": str(frame["fabric"].iloc[0]), "contexts": len(frame),
                "nccl_versions": prov["nccl_versions"], "campaigns": prov["campaigns"]}

    document = {"a": side(dataset_a, a), "b": side(dataset_b, b), "summary": _summary(table, a, b, threshold),
                "settings": {"window": list(window), "rho_max": rho_max, "keep_warmup": keep_warmup},
                "contexts": _json_rows(table)}
    return CompareResult(table, document)


def plot_compare(table: pd.DataFrame, path: str | Path, *, threshold: float) -> Path:
    """Per collective: the best arm's latency change (%) and AUTO's loss change (pp) against size,
    one line per node count; shaded: within the threshold; x: AUTO's arm changed."""
    from .figures import pyplot, save_figure, size_axis

    plt = pyplot()
    collectives = sorted(table["collective"].unique())
    fig, axes = plt.subplots(len(collectives), 2, figsize=(11, 3.2 * len(collectives) + 0.6), dpi=110, squeeze=False)
    limit = 100 * threshold
    for (lat, loss), collective in zip(axes, collectives):
        g = table[table["collective"] == collective]
        for nodes, rows in g.groupby("nodes", sort=True):
            (line,) = lat.plot(rows["size_bytes"], rows["best_latency_change_pct"], marker=".", label=f"{nodes} nodes")
            loss.plot(rows["size_bytes"], rows["auto_loss_change_pp"], marker=".", color=line.get_color())
            moved = rows[rows["auto_arm_changed"]]
            loss.scatter(moved["size_bytes"], moved["auto_loss_change_pp"], marker="x", color="black", zorder=4)
        for ax in (lat, loss):
            ax.axhspan(-limit, limit, color="grey", alpha=0.12, linewidth=0)
            ax.axhline(0, color="grey", linewidth=1, label="no change")
            size_axis(ax)
            ax.set_xlabel("message size (nccl-tests size)")
            ax.grid(True, alpha=0.3)
        lat.set_ylabel("best arm latency, B vs A (%)")
        loss.set_ylabel("AUTO's loss, B - A (pp)")
        lat.set_title(f"{collective}: measured-best arm, positive = B slower", fontsize=9)
        loss.set_title(f"{collective}: AUTO's loss against the best (x: AUTO's arm changed)", fontsize=9)
        lat.legend(fontsize=7)
    fabrics = f"{table['fabric_a'].iloc[0]} (A) vs {table['fabric_b'].iloc[0]} (B)"
    fig.suptitle(f"Compare {fabrics}: shaded = within {limit:g}%")
    return save_figure(plt, fig, path, data=table, synthetic=is_synthetic(table))


def write_compare(result: CompareResult, out: str | Path) -> dict[str, Path]:
    """``compare.parquet``, ``compare.csv`` (the table, also the figure's data), ``compare.png`` and
    ``compare.json`` (the document) into ``out``; returns them by kind."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"parquet": folder / f"{STEM}.parquet", "json": folder / f"{STEM}.json"}
    result.table.to_parquet(paths["parquet"], index=False)
    paths["png"] = plot_compare(result.table, folder / f"{STEM}.png", threshold=result.document["summary"]["threshold"])
    paths["csv"] = paths["png"].with_suffix(".csv")
    paths["json"].write_text(json.dumps(result.document, indent=1, allow_nan=False) + "\n")
    return paths
