"""What a tuning campaign leaves in its folder: champions, the Table-16 summary, Figure 9.

* ``champions.yaml``: one spec per family in the ``--policies`` grammar (``policies:``), so
  ``analyze replay --policies @DIR/champions.yaml`` replays the frozen winners, and per
  family the study's record (best trial, train TRLT default and best, trials);
* ``table16.csv`` / ``table16.md``: best trial, train TRLT default -> best (with the
  speed-up factor), knobs changed from trial 0;
* ``trials.csv``: every complete trial (family, number, objective, both prices, spec, the node
  that ran it);
* ``search_progress.png``: best-so-far per family for the five strongest, and the global
  best-so-far staircase across families (Figure 9).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from .spaces import changed_knobs

__all__ = ["CHAMPIONS", "trials_frame", "table16", "write_outputs", "read_champions", "plot_progress"]

log = logging.getLogger(__name__)

CHAMPIONS = "champions.yaml"


def trials_frame(storage, options) -> pd.DataFrame:
    """Every complete trial of every study in the campaign's storage (Table 16 order), in trial order.

    All studies, not only this run's ``--families``: tuning one more family into a folder
    adds its champion beside the others.
    """
    import optuna
    from optuna.trial import TrialState

    from .spaces import FAMILIES, SUPERVISED_FAMILIES

    existing = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    rows = []
    for name in (*FAMILIES, *SUPERVISED_FAMILIES):
        if options.study_prefix + name not in existing:
            continue
        study = optuna.load_study(study_name=options.study_prefix + name, storage=storage)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            rows.append({"family": name, "number": t.number, "value": t.value,
                         "selection": t.user_attrs.get("selection"), "realized": t.user_attrs.get("realized"),
                         "spec": t.user_attrs.get("spec"), "host": t.user_attrs.get("host"),
                         "params": t.user_attrs.get("params")})
    return pd.DataFrame(rows, columns=["family", "number", "value", "selection", "realized", "spec", "host", "params"])


def table16(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per family: Table 16's best trial, default -> best train TRLT (%) and changes.

    ``best trial`` is the rank of the champion among the complete trials (0 = the educated
    guess); ties keep the earliest trial.
    """
    rows = []
    for name, g in trials.groupby("family", sort=False):
        g = g.sort_values("number").reset_index(drop=True)
        best = int(g["value"].to_numpy().argmin())
        default, value = 100 * g["value"].iloc[0], 100 * g["value"].iloc[best]
        rows.append({"policy": name, "trials": len(g), "best_trial": best,
                     "train_default_pct": default, "train_best_pct": value,
                     "speedup": default / value if value > 0 else float("inf"),
                     "best_selection_pct": 100 * g["selection"].iloc[best],
                     "best_realized_pct": 100 * g["realized"].iloc[best],
                     "changes": changed_knobs(name, g["params"].iloc[best]), "spec": g["spec"].iloc[best]})
    out = pd.DataFrame(rows)
    return out.sort_values("train_best_pct", kind="stable").reset_index(drop=True) if len(out) else out


def _champions_doc(summary: pd.DataFrame, options) -> dict:
    return {
        "objective": f"mean train TRLT ({options.objective}-priced), split {options.split}"
                     + (", warm start pinned off (cold)" if options.cold else ""),
        "policies": list(summary["spec"]),
        "studies": {r.policy: {"best_trial": int(r.best_trial), "trials": int(r.trials),
                               "train_trlt_default": float(r.train_default_pct) / 100,
                               "train_trlt_best": float(r.train_best_pct) / 100}
                    for r in summary.itertuples()},
    }


def write_outputs(storage, out: Path, options) -> Path:
    """Write champions, tables and the progress figure of every study in ``options.families``."""
    import yaml

    from ..tables import write_table

    trials = trials_frame(storage, options)
    trials.drop(columns="params").to_csv(out / "trials.csv", index=False)
    summary = table16(trials)
    shown = summary.drop(columns="spec")
    write_table(shown, out, name="table16")
    path = out / CHAMPIONS
    header = "# Champions of 'ncclbot-sweep analyze tune'; replay: analyze replay --policies @champions.yaml\n"
    path.write_text(header + yaml.safe_dump(_champions_doc(summary, options), sort_keys=False, width=1000))
    if len(trials):
        plot_progress(trials, out / "search_progress.png")
    log.info("champions of %d studies written to %s", len(summary), path)
    return path


def read_champions(path: str | Path) -> dict:
    """The parsed ``champions.yaml`` (``policies`` and ``studies``)."""
    import yaml

    return yaml.safe_load(Path(path).read_text())


def plot_progress(trials: pd.DataFrame, path: Path, *, top: int = 5) -> Path:
    """Figure 9: best-so-far train TRLT per family (the ``top`` strongest) and the global staircase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    best = trials.groupby("family")["value"].min().sort_values()
    styles = ["-", "--", "-.", ":", (0, (5, 1))]
    plotted = []
    for i, name in enumerate(best.index[:top]):
        g = trials[trials["family"] == name].sort_values("number")
        curve = 100 * g["value"].cummin().to_numpy()
        ax.plot(range(len(g)), curve, linestyle=styles[i % len(styles)], label=name)
        plotted.append(pd.DataFrame({"line": name, "trial": range(len(g)), "best_so_far_pct": curve}))
    rank = trials.assign(rank=trials.groupby("family").cumcount())
    staircase = rank.groupby("rank")["value"].min().cummin()
    ax.step(staircase.index, 100 * staircase.to_numpy(), where="post", color="#111", linestyle=":", linewidth=2,
            label="global best so far")
    plotted.append(pd.DataFrame({"line": "global best so far", "trial": staircase.index,
                                 "best_so_far_pct": 100 * staircase.to_numpy()}))
    ax.set_yscale("log")
    ax.set_xlabel("trial")
    ax.set_ylabel("best-so-far train TRLT (%)")
    ax.set_title("Hyperparameter search progress")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    pd.concat(plotted, ignore_index=True).to_csv(Path(path).with_suffix(".csv"), index=False)
    return path
