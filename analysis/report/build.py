"""The HTML report of one dataset: audit, replay, statistics, figures and table copies.

``build_report`` runs the whole analysis as a list of named steps and writes into ``out``:
``index.html`` (from ``templates/report.html.j2``), PNG figures (each with its CSV),
a CSV and a Markdown copy of every table shown, and ``results.json`` (:mod:`.results`); it
replaces the dataset's ``contexts`` table (:mod:`..contexts`). Replay results can be passed
in (``analyze replay`` output, with its trajectories for the learning curves) to avoid
replaying again. When the dataset, or a live dataset given beside it
(``ReportOptions.live_datasets``), holds live runs, the live analysis (:mod:`..live`) adds
its section (its own files under ``out/live/``), read with the sweep so that its
forced-against-stock and AUTO-against-audit tables are filled; otherwise the section says
that there are none. The page opens with the headline box of :mod:`.headline`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ncclbot_sweep.errors import AnalysisError, DatasetError

from .. import study  # noqa: F401  (registers the supervised selectors: --policies GBM+cost)
from ..audit import run_audit
from ..contexts import write_contexts
from ..degenerate import context_flags, flag_summary, flag_table
from ..figures import (
    arm_curves,
    cost_vs_measured,
    error_map,
    plot_arm_curves,
    plot_cost_vs_measured,
    plot_error_maps,
    plot_gate,
    plot_survival,
    survival_curves,
)
from ..inputs import is_synthetic, load_problem, load_provenance, natural_key
from ..policies import parse_policy
from ..pools import CONTEXT_COLUMNS
from ..replay import replay_with_trajectories
from ..summary import confirmatory, per_context, per_scenario, scenario_pivot, summarize
from ..tables import write_table
from ..transient import detect_transients
from .action import DEFAULT_MARGIN, what_to_set
from .dynamics import learning_curves, plot_learning_curves, plot_transients, transient_curves
from .headline import headline_numbers, headline_sentences, learners, summary_claims
from .page import render_page
from .results import RESULTS_FILE, results_document, write_results

__all__ = ["DEFAULT_POLICIES", "ReportOptions", "build_report"]

log = logging.getLogger(__name__)

#: The policies ``make demo`` replays.
DEFAULT_POLICIES: tuple[str, ...] = ("AUTO", "Random", "UCB1", "Softmax", "KL-UCB", "ETC")


@dataclasses.dataclass(frozen=True)
class ReportOptions:
    """What to replay and how to score it."""

    policies: Sequence[str] = DEFAULT_POLICIES
    horizon: int = 100
    seeds: int = 20
    split: str = "scale"
    threshold: float = 0.10
    fabric: str | None = None
    window: tuple[int, int] = (11, 99)
    rho_max: float = 2.0
    n_boot: int = 200
    keep_warmup: bool = False
    studies: Sequence[str | Path] = ()
    #: Datasets holding live campaigns (ingested apart from the sweep): read with the sweep for the live section.
    live_datasets: Sequence[str | Path] = ()
    #: Datasets of workload campaigns (``analyze workload-ab``): their A/B gets a section of its own.
    workload_datasets: Sequence[str | Path] = ()
    #: The command line that asked for the report, recorded in its provenance (None: called from Python).
    command: str | None = None
    #: The exports in ``out/export`` keep contexts where the measured best beats AUTO by at least this fraction.
    export_margin: float = DEFAULT_MARGIN


def build_report(dataset: str | Path, out: str | Path, *, options: ReportOptions = ReportOptions(),
                 replay: pd.DataFrame | None = None, trajectories: pd.DataFrame | None = None) -> Path:
    """Run audit, replay and statistics on ``dataset`` and write the report into ``out``.

    ``replay`` reuses results of ``analyze replay``; ``trajectories`` (its ``--trajectories``
    file) then gives the learning curves, which are otherwise recorded while replaying here.
    Also replaces the dataset's ``contexts`` table (:mod:`..contexts`) when the dataset is
    writable. Returns the path of ``index.html``. Idempotent: rerunning overwrites the same files.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    problem = load_problem(dataset, fabric=options.fabric, window=options.window, rho_max=options.rho_max,
                           keep_warmup=options.keep_warmup)
    if replay is None:
        replay, trajectories = replay_with_trajectories(problem, [parse_policy(p) for p in options.policies],
                                                        horizon=options.horizon, seeds=range(options.seeds),
                                                        split=options.split)
    order = list(dict.fromkeys(replay["policy"]))
    audit = run_audit(problem, horizon=options.horizon, threshold=options.threshold, replay=replay)
    summary = summarize(replay, threshold=options.threshold, order=order)
    tests = (confirmatory(replay, [("AUTO", p) for p in learners(order)], threshold=options.threshold)
             if "AUTO" in order else None)
    synthetic = is_synthetic(problem.contexts)
    flags = flag_table(problem)
    audit_rows = audit.contexts.merge(context_flags(problem), on=list(CONTEXT_COLUMNS), how="left")
    figures = _figures(problem, audit, replay, trajectories, out, options=options, synthetic=synthetic)
    split = _split_description(replay)
    tables = {
        "summary": write_table(summary, out, name="summary"),
        "scenarios": write_table(scenario_pivot(replay, threshold=options.threshold, order=order), out, name="scenarios"),
        "audit": write_table(audit.summary, out, name="audit_summary"),
        "gate": write_table(audit.gate, out, name="audit_gate"),
        "tail": write_table(audit.tail, out, name="tail_anatomy"),
        "transients": write_table(detect_transients(problem.pools), out, name="transients"),
        "degenerate": write_table(flag_summary(flags), out, name="degenerate"),
    }
    per_scenario(replay, threshold=options.threshold).to_csv(out / "tables" / "scenarios_long.csv", index=False)
    flags.to_csv(out / "tables" / "degenerate_contexts.csv", index=False)
    if tests is not None and len(tests):
        tables["tests"] = write_table(tests, out, name="tests")
    audit_rows.to_csv(out / "tables" / "audit_contexts.csv", index=False)
    provenance = _provenance(dataset, problem, options)
    live = _live_section([dataset, *options.live_datasets], out)
    workload = _workload_section(options.workload_datasets, out)
    what = what_to_set(problem, dataset, out, margin=options.export_margin, fabric=options.fabric,
                       window=options.window, rho_max=options.rho_max)
    tables["what_to_set"] = write_table(what.ranges, out, name="what_to_set")
    numbers = headline_numbers(audit, summary, what, live=live, threshold=options.threshold, split=split)
    write_results(out / RESULTS_FILE, results_document(problem=problem, audit=audit, replay=replay, summary=summary,
                                                       tests=tests, provenance=provenance, headline=numbers,
                                                       options=_plain_options(options)))
    studies = _study_tables(options.studies, out)
    sections = _study_sections(options.studies, out)
    parts = replay["part"].value_counts().to_dict()
    context = {
        "title": _title(dataset, provenance),
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "dataset": str(dataset), "fabrics": sorted(problem.contexts["fabric"].unique()),
        "synthetic": synthetic,
        "n_contexts": len(problem), "n_test": int(len(per_context(replay)) // max(len(order), 1)), "parts": parts,
        "options": options, "figures": figures, "tables": tables, "policies": order, "split": split,
        "claims": summary_claims(summary, tests, threshold=options.threshold), "live": live, "workload": workload,
        "headline": headline_sentences(numbers),
        "convention": problem.pools.convention, "excluded": problem.pools.excluded, "studies": studies,
        "sections": sections, "provenance": provenance, "results_file": RESULTS_FILE, "contexts_table": _write_contexts(dataset, problem, audit),
    }
    path = render_page(out / "index.html", "report.html.j2", context)
    log.info("report written to %s", path)
    return path


def _figures(problem, audit, replay: pd.DataFrame, trajectories: pd.DataFrame | None, out: Path, *,
             options: ReportOptions, synthetic: bool) -> dict:
    """Every figure of the page (PNG paths relative to ``out``, each with its CSV beside it).

    ``learning`` is None when replay results came without trajectories; ``learning_missing``
    then says why.
    """
    curves = survival_curves(per_context(replay), n_boot=options.n_boot)
    zero = curves.groupby("policy", sort=False)["zero_share"].first()
    figures = {"survival": plot_survival(curves, out / "survival.png", synthetic=synthetic,
                                         threshold_pct=100 * options.threshold).name,
               "survival_zero": {name: f"{100 * share:.0f}%" for name, share in zero.items()},
               "gate": plot_gate(audit.gate, out / "gate.png", synthetic=synthetic).name,
               "learning": None, "learning_missing": None,
               **_scenario_figures(problem, audit.contexts, out)}
    if trajectories is not None and len(trajectories):
        figures["learning"] = plot_learning_curves(learning_curves(trajectories), out / "learning_curves.png",
                                                   synthetic=synthetic).name
    else:
        figures["learning_missing"] = ("replay results were passed in without per-step trajectories; write them "
                                       "with 'analyze replay --trajectories FILE' and pass them to build_report, "
                                       "or let the report replay")
    transients = plot_transients(transient_curves(problem.pools), out / FIGURE_FOLDER, window_start=options.window[0])
    figures["transients"] = [f"{FIGURE_FOLDER}/{p.name}" for p in transients]
    return figures


def _split_description(replay: pd.DataFrame) -> dict:
    """Which split the per-context tables score, and which node counts and collectives its test part holds."""
    def listed(part: str, column: str) -> str:
        values = sorted(replay.loc[replay["part"] == part, column].unique())
        return ", ".join(str(v) for v in values) if values else "none"

    test = replay[replay["part"] == "test"]
    return {"name": str(replay["split"].iloc[0]) if "split" in replay and len(replay) else "unknown",
            "test_nodes": listed("test", "nodes"), "train_nodes": listed("train", "nodes"),
            "test_collectives": listed("test", "collective"),
            "test_contexts": int(test[list(CONTEXT_COLUMNS)].drop_duplicates().shape[0])}


def _write_contexts(dataset: str | Path, problem, audit) -> dict:
    """Replace the dataset's ``contexts`` table; a dataset the user cannot write is a note, not a failure."""
    try:
        written = write_contexts(dataset, problem, audit.contexts)
    except DatasetError as exc:
        log.warning("contexts table not written: %s", exc)
        return {"written": False, "message": str(exc)}
    return {"written": True, "rows": len(audit.contexts), "new": written}


def _provenance(dataset: str | Path, problem, options: ReportOptions) -> dict:
    """Tool, versions, hardware, campaigns and command behind the report (page block and results.json).

    Runs of the live datasets count too: their campaigns, hosts and versions are listed with the sweep's.
    """
    from ncclbot_sweep import __version__

    found = load_provenance(dataset, fabric=options.fabric)
    for live in options.live_datasets:
        more = load_provenance(live, fabric=options.fabric)
        for key, values in more.items():
            if key == "runs":
                found[key] += values
            else:
                found[key] = sorted(set(found[key]) | set(values), key=natural_key if key == "hosts" else None)
    return {"tool": "ncclbot-sweep", "tool_version": __version__, "dataset": str(Path(dataset).resolve()),
            "live_datasets": [str(Path(d).resolve()) for d in options.live_datasets],
            "fabrics": sorted(str(f) for f in problem.contexts["fabric"].unique()),
            **found, "command": options.command}


def _title(dataset: str | Path, provenance: dict) -> str:
    """The page title: the campaign(s) (or the dataset folder when no runs name one) and the fabric(s)."""
    campaigns = ", ".join(provenance["campaigns"]) or Path(dataset).name
    return f"NCCL-BOT analysis of {campaigns} on {', '.join(provenance['fabrics'])}"


def _plain_options(options: ReportOptions) -> dict:
    """The options as JSON values (tuples as lists, paths as strings)."""
    def plain(value):
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return str(value) if isinstance(value, Path) else value

    return {field.name: plain(getattr(options, field.name)) for field in dataclasses.fields(options)}


#: The folder (under ``out``) of the per-scenario figures and their CSVs.
FIGURE_FOLDER = "figures"


def _scenario_figures(problem, audit_contexts: pd.DataFrame, out: Path) -> dict[str, list[str]]:
    """Arm curves per scenario, AUTO-error maps per collective, cost model against measurement.

    Returns, per kind, the PNG paths relative to ``out`` (each has its CSV beside it).
    """
    folder = out / FIGURE_FOLDER

    def rel(paths):
        return [f"{FIGURE_FOLDER}/{p.name}" for p in paths]

    return {
        "arms": rel(plot_arm_curves(arm_curves(problem.pools, audit_contexts), folder)),
        "errmaps": rel(plot_error_maps(error_map(audit_contexts), folder)),
        "costmodel": rel(plot_cost_vs_measured(cost_vs_measured(problem.pools, problem.predicted), folder)),
    }


#: The live tables the report shows, with their captions (all are written under ``live/``).
_LIVE_SHOWN = {
    "selection_summary": "Selection-priced TRLT over sizes against the reconstructed oracle (Tables 20-21).",
    "learning_windows": "Lost bandwidth against the oracle per window of collectives, on the sizes where AUTO "
                        "errs (Figure 2).",
    "overhead_ladder": "nccl-tests average bus bandwidth and overhead against stock per rung (Table 18).",
    "overhead_bins": "Per size bin: median time overhead, share of the bandwidth drop, 1 ms flush rule (Table 19).",
    "setup_toll": "First-use stall per run: the largest gap between collectives above 1 s (Table 20).",
    "reward_lag": "How late each run's rewards came (collectives this rank launched between a call and its "
                  "sample), and the pulls applied with a reward and without, by reason.",
    "stock_bands": "Speed against stock (stock time over run time) per size band, stalled sizes removed (Table 17).",
    "forced_vs_stock": "Forced price of AUTO's arm and of the best arm over the stock run's time, per context.",
    "auto_vs_audit": "AUTO through the plugin (live selection TRLT) against the offline audit, per context.",
    "issues": "Missing inputs and the parts they stop.",
}


def _live_section(datasets: Sequence[str | Path], out: Path) -> dict:
    """Run the live analysis of ``datasets`` (read as one) into ``out/live`` and copy the shown
    tables, with the verdicts in words (:mod:`..live.verdict`); or say why not."""
    from ..live import analyze_live, campaign_lines, scenario_verdicts

    try:
        result = analyze_live(datasets, out=out / "live")
    except AnalysisError as exc:
        return {"present": False, "message": exc.reason}
    tables = {name: dict(write_table(result.tables[name], out, name=f"live_{name}"), caption=caption)
              for name, caption in _LIVE_SHOWN.items() if len(result.tables[name])}
    figures = {name: f"live/{path.name}" for name, path in sorted(result.figures.items())}
    return {"present": True, "tables": tables, "figures": figures, "synthetic": result.synthetic,
            "headline": result.headline, "verdicts": scenario_verdicts(result.headline),
            "campaign_lines": campaign_lines(result.headline),
            "issues": result.issues["what"].tolist()}


#: The workload tables the report shows, with their captions (all are written under ``workload/``).
_WORKLOAD_SHOWN = {
    "workload_environments": "Median step time per environment, with its 95% interval over repetitions.",
    "workload_comparisons": "Saving against stock and against AUTO, paired by repetition (sign-flip test).",
    "workload_contexts": "The contexts a learner played differently from AUTO, and the time per step each change "
                         "saved or cost (from the plugin's traces).",
    "workload_issues": "Runs that failed, and why.",
}


def _workload_section(datasets: Sequence[str | Path], out: Path) -> dict:
    """The workload A/B of ``datasets`` into ``out/workload``, its shown tables, figures and one
    sentence per scenario; ``present`` false when no dataset was given."""
    if not datasets:
        return {"present": False, "message": None}
    from ..live.workload_ab import analyze_workload_ab

    try:
        result = analyze_workload_ab(datasets, out=out / "workload")
    except AnalysisError as exc:
        return {"present": False, "message": exc.reason}
    tables = {name: dict(write_table(result.tables[name], out, name=name), caption=caption)
              for name, caption in _WORKLOAD_SHOWN.items() if len(result.tables[name])}
    return {"present": True, "tables": tables,
            "figures": {name: f"workload/{Path(path).relative_to(out / 'workload')}"
                        for name, path in sorted(result.figures.items())},
            "sentences": [scenario["sentence"] for scenario in result.headline["scenarios"]]}


#: Tables the study commands write (``analyze tune``, ``splits``, ``holdout``, ``minisweep``,
#: ``replication``), in the order the report shows them, with their captions.
STUDY_TABLES = {
    "table16": "Hyperparameter search per family (Table 16): best trial, train TRLT default -> best (%), knobs changed.",
    "table36": "Realized test TRLT mean / p99 (%) per split, every family re-tuned on the split's train part (Table 36).",
    "table41": "Supervised selectors, fixed and tuned, against UCB1: realized mean / p99 / contexts above 10% (Table 41).",
    "table46": "Largest-scale holdout: supervised fits on all but the largest node count, scored there (Table 46).",
    "table51": "Labelled target-scale mini-sweep for the supervised fits, scored on the unlabelled targets (Table 51).",
    "table3": "Champions frozen from this tuning, replayed on other fabrics (Table 3 layout).",
}


def _study_tables(folders: Sequence[str | Path], out: Path) -> list[dict]:
    """Copy the study tables found in ``folders/tables`` into the report; one entry per table."""
    found = []
    for folder in folders:
        for name, caption in STUDY_TABLES.items():
            path = Path(folder) / "tables" / f"{name}.csv"
            if path.is_file():
                table = write_table(pd.read_csv(path), out, name=f"{Path(folder).name}-{name}")
                found.append({"caption": f"{caption} Source: {Path(folder).name}/.", "table": table})
    return found


#: The report's folder for the figures of study sections (ablations, workload replays).
STUDY_FIGURES = "studies"


def _study_sections(folders: Sequence[str | Path], out: Path) -> list[dict]:
    """The sections of ``analyze ablate`` and ``analyze workload`` folders (their ``sections.json``):
    tables copied into the report, figures (with their CSV) into ``out/studies``."""
    import shutil

    from ..study.sections import read_sections

    found = []
    for folder in map(Path, folders):
        doc = read_sections(folder)
        for entry in doc["sections"]:
            tables = [write_table(pd.read_csv(folder / "tables" / f"{name}.csv"), out, name=f"{folder.name}-{name}")
                      for name in entry["tables"] if (folder / "tables" / f"{name}.csv").is_file()]
            figures = []
            for rel in entry["figures"]:
                source = folder / rel
                if source.is_file():
                    target = out / STUDY_FIGURES / f"{folder.name}-{source.name}"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target)
                    if source.with_suffix(".csv").is_file():
                        shutil.copyfile(source.with_suffix(".csv"), target.with_suffix(".csv"))
                    figures.append(f"{STUDY_FIGURES}/{target.name}")
            found.append({"title": entry["title"], "caption": f"{entry['caption']} Source: {folder.name}/.",
                          "notes": [doc["about"], *entry["notes"]] if doc["about"] else entry["notes"],
                          "tables": tables, "figures": figures})
    return found
