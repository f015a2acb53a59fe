"""The headline numbers of a live analysis (``headline.json``, ``analyze live --json``).

Per scenario: every run's selection TRLT, the best learner (chosen from those numbers),
the overhead ladder, the setup toll, the speed against stock per size band and how late each
run's rewards came; over the
campaign, the forced-against-stock and AUTO-against-audit comparisons. Everything a sentence
of :mod:`.verdict` or of the report says about a live campaign is read from here, so the
words and ``headline.json`` cannot disagree. Values are plain JSON (None for a missing number).
"""

from __future__ import annotations

import math

import pandas as pd

from ..inputs import is_synthetic
from .inputs import LiveData
from .sizes import STOCK_BANDS, size_range

__all__ = ["best_learner", "live_headline"]


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _clean(value.item())
    return None if value is pd.NA else value


def _rows(frame: pd.DataFrame, key: dict) -> pd.DataFrame:
    for k, v in key.items():
        frame = frame[frame[k] == v]
    return frame


def _pick(frame: pd.DataFrame, key: dict, index: str, column: str) -> dict:
    sel = _rows(frame, key)
    return {str(i): _clean(v) for i, v in zip(sel[index], sel[column])}


def best_learner(selection: dict[str, float | None], runs: pd.DataFrame) -> str | None:
    """The learner with the lowest selection TRLT: among ``selection`` (label -> mean %), the
    runs that learn (``runs.is_learner``: not stock, not AUTO, not a static table); None
    when no learner was scored. Ties go to the label that sorts first."""
    learning = set(runs.loc[runs["is_learner"], "label"])
    scored = {label: value for label, value in selection.items() if label in learning and value is not None}
    return min(sorted(scored), key=scored.__getitem__) if scored else None


def _auto_label(selection: dict, runs: pd.DataFrame) -> str | None:
    """The AUTO-through-the-plugin run the verdicts compare with: its default variant if scored."""
    autos = [label for label in runs.loc[runs["is_auto"] & (runs["variant"] == "default"), "label"] if label in selection]
    autos += [label for label in runs.loc[runs["is_auto"], "label"] if label in selection]
    return autos[0] if autos else None


def _bands(per_size: pd.DataFrame, bands: pd.DataFrame, key: dict) -> dict[str, list[dict]]:
    """Per run label, the median speed against stock of every band it has sizes in, each band
    named by the sizes it holds (``16-32 MiB``, not the table's ``>=16 MiB``)."""
    out: dict[str, list[dict]] = {}
    sizes = _rows(per_size, key)
    for row in _rows(bands, key).to_dict("records"):
        mine = sizes[sizes["run_id"] == row["run_id"]]
        entries = []
        for name, _lo, _hi in STOCK_BANDS:
            held = mine.loc[mine["band"] == name, "size_bytes"]
            if len(held):
                entries.append({"band": name, "sizes": size_range(held.min(), held.max()), "n": len(held),
                                "median": _clean(row[f"{name} median"])})
        out[str(row["policy"])] = entries
    return out


def _scenario(key: dict, runs: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> dict:
    key = {k: _clean(v) for k, v in key.items()}
    sel = _pick(tables["selection_summary"], key, "policy", "selection_trlt_mean_pct")
    stalls = [v for v in _pick(tables["setup_toll"], key, "run_id", "stall_median_s").values() if v is not None]
    ladder = tables["overhead_ladder"]
    oracle = _rows(tables["oracle"], key)["size_bytes"]
    return {
        **key,
        "selection_trlt_mean_pct": sel,
        "selection_sizes": _pick(tables["selection_summary"], key, "policy", "sizes"),
        "best_learner": best_learner(sel, runs),
        "auto": _auto_label(sel, runs),
        "sizes": size_range(oracle.min(), oracle.max()) if len(oracle) else None,
        "overhead_pct": _pick(ladder, key, "rung", "overhead_pct"),
        "selection_fixed": _pick(ladder, key, "rung", "selection_fixed"),
        "ladder_monotone": _pick(ladder, key, "rung", "monotone"),
        "setup_stall_s": {"runs": len(stalls), "median": float(pd.Series(stalls).median()) if stalls else None,
                          "min": min(stalls, default=None), "max": max(stalls, default=None)},
        "avg_busbw_ratio_vs_stock": _pick(tables["stock_bands"], key, "policy", "avg_busbw_ratio"),
        "synthetic": bool(is_synthetic(runs)),
        "speed_vs_stock_bands": _bands(tables["stock_per_size"], tables["stock_bands"], key),
        "reward_lag": {str(row.pop("policy")): {k: _clean(v) for k, v in row.items()}
                       for row in _rows(tables["reward_lag"], key).drop(columns=[*key, "run_id"]).to_dict("records")},
    }


def _spread(values: pd.Series) -> dict:
    values = values.dropna().astype(float)
    if values.empty:
        return {"contexts": 0, "median": None, "min": None, "max": None}
    return {"contexts": len(values), "median": float(values.median()), "min": float(values.min()),
            "max": float(values.max())}


def live_headline(data: LiveData, tables: dict[str, pd.DataFrame]) -> dict:
    """Every scenario's numbers, then the campaign-wide comparisons with the forced sweep."""
    audit = tables["auto_vs_audit"]
    return {"datasets": [str(root) for root in data.roots],
            "scenarios": [_scenario(key, runs, tables) for key, runs in data.scenarios()],
            "forced_vs_stock_contexts": len(tables["forced_vs_stock"]),
            "forced_auto_over_stock": _spread(tables["forced_vs_stock"]["forced_auto_over_stock"]),
            "auto_vs_audit_difference_pp": _spread(audit["difference_pp"].abs()),
            "issues": tables["issues"]["what"].tolist()}
