"""Workload A/B (``analyze workload-ab``): did the plugin speed up the user's training step?

A workload campaign (``ncclbot_sweep/sweep/workload.py``) runs one command in several
environments (stock NCCL, AUTO through the plugin, learners, a static table), every environment
once per repetition, interleaved. From the dataset's ``runs``, ``workload_steps`` (warm-up steps
left out) and the plugin traces (``live_events``), per scenario (campaign, fabric, nodes):

* ``workload_environments``: per environment the median step time over its measured steps and a
  95% interval that resamples whole repetitions (runs), never single steps: steps of one run
  share its placement and noise;
* ``workload_comparisons``: each environment against stock and against AUTO: the step time it
  saved (``saving``: 1 - its median over the reference's; negative: it cost), the speed-up
  (reference over it), a 95% interval resampling repetitions *paired* (both environments' runs of
  a drawn repetition together, as they ran side by side), and an exact sign-flip test over the
  repetitions' log ratios of run medians (the interleaving makes each repetition one pair);
* ``workload_repetitions``: each run's median step time (the figure: step time per repetition,
  one colour per environment);
* ``workload_contexts``: per environment the contexts (collective, size) where the plugin played
  another arm than AUTO's, the arm, how often, and the time each change saved or cost per step:
  (AUTO's arm's median latency there, over the scenario's plugin runs, minus the arm's), times its
  calls per run, over the run's steps (the plugin traces AUTO and the learners; a static table's
  runs have no trace and count by their step times alone);
* ``workload_issues``: failed runs (crash, timeout, no step line) with their reason; the others count.

The headline says in one sentence per scenario whether the plugin paid: the best learner (lowest
median step time) against stock, with its paired interval; it paid when the interval lies above 0.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError, did_you_mean
from ncclbot_sweep.names import AUTO

from ..figures import pyplot, save_figure
from ..inputs import is_synthetic
from ..policies import STATIC_POLICY, live_policy_name
from ..stats import bootstrap_ci, sign_flip_test
from ..tables import write_table
from .inputs import STOCK_POLICY, dataset_roots, read_stacked
from .pulls import merge_pulls

__all__ = ["WORKLOAD_KIND", "WorkloadAB", "analyze_workload_ab", "workload_sentence"]

log = logging.getLogger(__name__)

#: The run kind of a workload campaign's runs (``ncclbot_sweep.sweep.campaign``; a test checks they agree).
WORKLOAD_KIND = "workload"
SCENARIO = ["campaign", "fabric", "nodes"]
_LEVEL = 0.95


@dataclasses.dataclass
class WorkloadAB:
    """The tables (module docstring), the headline per scenario and the figures written."""

    tables: dict[str, pd.DataFrame]
    headline: dict
    figures: dict[str, Path]


# --------------------------------------------------------------------------- reading


def _environment(policy: str | None) -> tuple[str, str]:
    """(name as the analysis prints it, role: stock, AUTO, static or learner)."""
    text = str(policy or AUTO)
    if text.lower() == STOCK_POLICY:
        return STOCK_POLICY, "stock"
    name = live_policy_name(text)
    role = AUTO if name == AUTO else "static" if text.lower() == STATIC_POLICY else "learner"
    return name, role


def _load(roots: tuple[Path, ...], campaign: str | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs with ``steps``, every step a run printed, warm-up included; their measured steps; their
    plugin events) of the workload runs; AnalysisError when there is none."""
    runs = read_stacked(roots, "runs")
    runs = runs[runs["kind"] == WORKLOAD_KIND] if len(runs) else runs
    where = ", ".join(map(str, roots))
    if campaign is not None:
        names = sorted(set(runs["campaign"].dropna())) if len(runs) else []
        runs = runs[runs["campaign"] == campaign]
        if runs.empty:
            raise AnalysisError(f"dataset has no run of workload campaign {campaign!r}{did_you_mean(campaign, names)}",
                                path=where, hint=f"workload campaigns here: {', '.join(names) or 'none'}")
    if runs.empty:
        raise AnalysisError("dataset holds no workload run", path=where,
                            hint="ingest the folder of a campaign of kind workload (e.g. campaigns/"
                                 "workload-sim-h100.yaml) into it first")
    named = [_environment(p) for p in runs["policy"]]
    runs = runs.assign(environment=[n for n, _r in named], role=[r for _n, r in named])
    steps = read_stacked(roots, "workload_steps", filters=[("run_id", "in", list(runs["run_id"]))])
    runs = runs.assign(steps=runs["run_id"].map(steps.groupby("run_id").size()).fillna(0).astype(int))
    steps = steps[steps["run_id"].isin(runs.loc[runs["outcome"] == "ok", "run_id"]) & ~steps["warmup"].astype(bool)]
    steps = steps.merge(runs[["run_id", "environment", "role"]], on="run_id", suffixes=("_raw", ""))
    events = read_stacked(roots, "live_events", filters=[("run_id", "in", list(runs["run_id"]))])
    return runs, steps, events


# --------------------------------------------------------------------------- numbers


def _environments(steps: pd.DataFrame, runs: pd.DataFrame, *, n_boot: int, seed: int) -> pd.DataFrame:
    rows = []
    order = {"stock": 0, AUTO: 1, "static": 2, "learner": 3}
    for (env, role), group in sorted(steps.groupby(["environment", "role"], sort=False), key=lambda g: order[g[0][1]]):
        values = group["step_time_s"].to_numpy(float) * 1e3
        lo, hi = bootstrap_ci(values, statistic=np.median, clusters=group["run_id"].to_numpy(), n_boot=n_boot,
                              seed=seed)
        failed = int(((runs["environment"] == env) & (runs["outcome"] != "ok")).sum())
        rows.append({"environment": env, "role": role, "runs": group["run_id"].nunique(), "failed_runs": failed,
                     "steps": len(values), "median_ms": float(np.median(values)), "ci_low_ms": lo, "ci_high_ms": hi})
    return pd.DataFrame(rows, columns=["environment", "role", "runs", "failed_runs", "steps", "median_ms",
                                       "ci_low_ms", "ci_high_ms"])


def _paired(steps: pd.DataFrame, env: str, ref: str, *, n_boot: int, seed: int) -> dict | None:
    """``env`` against ``ref`` over the repetitions both ran (see the module docstring)."""
    pair = steps[steps["environment"].isin([env, ref])]
    both = pair.groupby("repetition")["environment"].nunique()
    reps = both[both == 2].index
    pair = pair[pair["repetition"].isin(reps)]
    if pair.empty:
        return None
    times = pair["step_time_s"].to_numpy(float)
    mine = (pair["environment"] == env).to_numpy()

    def saving(index: np.ndarray) -> float:
        chosen = index.astype(int)
        return 1.0 - float(np.median(times[chosen][mine[chosen]])) / float(np.median(times[chosen][~mine[chosen]]))

    everything = np.arange(len(times), dtype=float)
    lo, hi = bootstrap_ci(everything, statistic=saving, clusters=pair["repetition"].to_numpy(), n_boot=n_boot,
                          seed=seed)
    medians = pair.groupby(["repetition", "environment"])["step_time_s"].median().unstack()
    test = sign_flip_test(np.log(medians[env] / medians[ref]).to_numpy())
    point = saving(everything)
    return {"environment": env, "reference": ref, "repetitions": len(reps), "saving": point, "saving_ci_low": lo,
            "saving_ci_high": hi, "speedup": 1.0 / (1.0 - point), "p_value": test.p_value}


def _comparisons(steps: pd.DataFrame, *, n_boot: int, seed: int) -> pd.DataFrame:
    cols = ["environment", "reference", "repetitions", "saving", "saving_ci_low", "saving_ci_high", "speedup",
            "p_value"]
    roles = dict(zip(steps["environment"], steps["role"]))
    rows = []
    for ref in [e for e, r in roles.items() if r in ("stock", AUTO)]:
        for env in [e for e in roles if e != ref and roles[e] != "stock"]:
            row = _paired(steps, env, ref, n_boot=n_boot, seed=seed)
            if row is not None:
                rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def _contexts(events: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    cols = ["environment", "collective", "size_bytes", "auto_arm", "arm", "calls_per_run", "share", "auto_us",
            "arm_us", "saved_ms_per_step"]
    pulls = merge_pulls(events) if len(events) else pd.DataFrame()
    if pulls.empty:
        return pd.DataFrame(columns=cols)
    pulls = pulls.merge(runs[["run_id", "environment"]], on="run_id")
    context = ["collective", "size_bytes"]
    on_auto = pulls[pulls["arm"] == pulls["auto_arm"]].groupby(context)["latency_us"].median().rename("auto_us")
    runs_of = pulls.groupby("environment")["run_id"].nunique()
    steps_of = runs[runs["run_id"].isin(pulls["run_id"])].groupby("environment")["steps"].mean()
    totals = pulls.groupby(["environment", *context]).size().rename("total")
    changed = pulls[pulls["arm"] != pulls["auto_arm"]]
    table = changed.groupby(["environment", *context, "auto_arm", "arm"]).agg(
        calls=("latency_us", "size"), arm_us=("latency_us", "median")).reset_index()
    table = table.join(on_auto, on=context).join(totals, on=["environment", *context])
    table["calls_per_run"] = table["calls"] / table["environment"].map(runs_of)
    table["share"] = table["calls"] / table["total"]
    per_step = table["calls_per_run"] / table["environment"].map(steps_of)
    table["saved_ms_per_step"] = (table["auto_us"] - table["arm_us"]) * per_step / 1e3
    return table.sort_values(["environment", "saved_ms_per_step"], ascending=[True, False])[cols].reset_index(drop=True)


# --------------------------------------------------------------------------- words


def _signed(pct: float) -> str:
    """``+0.4%``, ``-1.2%``; a value that rounds to zero is ``+0.0%``, never ``-0.0%``."""
    return f"{round(pct, 1) + 0.0:+.1f}%"


def workload_sentence(scenario: dict) -> str:
    """One sentence: did the plugin pay on this workload (the best learner against stock)?"""
    where = f"{scenario['campaign']} ({scenario['fabric']}, {scenario['nodes']} nodes)"
    best = scenario.get("best_learner")
    against = scenario.get("best_vs_stock")
    if best is None or against is None:
        return f"On {where} no learner's run finished beside a stock run, so whether the plugin paid cannot be said."
    if against["repetitions"] < 2:
        return (f"On {where} {best}, the best learner, ran beside stock in one repetition only: whether the plugin "
                "paid needs two or more (the campaign's repeats).")
    low, high = 100 * against["saving_ci_low"], 100 * against["saving_ci_high"]
    pct = 100 * against["saving"]
    test = f"paired sign-flip p = {against['p_value']:.3g} over {against['repetitions']} repetitions"
    if low > 0:
        verdict = f"the plugin paid: {best} cut the median step time by {pct:.1f}% against stock"
        ci = f"95% CI {low:.1f}% to {high:.1f}%"
    else:  # in the step time's own terms: + is slower
        change = f"made the median step {-pct:.1f}% slower than stock" if high < 0 else \
            f"changed the median step time by {_signed(-pct)} against stock"
        verdict = f"the plugin did not {'pay' if high < 0 else 'measurably pay'}: {best}, the best learner, {change}"
        ci = f"95% CI {_signed(-high)} to {_signed(-low)}"
    return f"On {where} {verdict} ({ci}, {test})."


def _headline(key: dict, envs: pd.DataFrame, comparisons: pd.DataFrame) -> dict:
    learners = envs[envs["role"] == "learner"].sort_values("median_ms")
    best = learners["environment"].iloc[0] if len(learners) else None
    against = comparisons[(comparisons["environment"] == best) & (comparisons["reference"] == STOCK_POLICY)]
    scenario = {**key, "best_learner": best,
                "median_ms": {env: _plain(ms) for env, ms in zip(envs["environment"], envs["median_ms"].round(4))},
                "best_vs_stock": {k: _plain(v) for k, v in against.iloc[0].items()} if len(against) else None}
    scenario["sentence"] = workload_sentence(scenario)
    return scenario


# --------------------------------------------------------------------------- the command


def _figure(repetitions: pd.DataFrame, key: dict, out: Path, synthetic: bool) -> Path:
    """Step time per repetition, one colour (and marker) per environment."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, (env, group) in enumerate(repetitions.groupby("environment", sort=False)):
        group = group.sort_values("repetition")
        ax.plot(group["repetition"], group["median_ms"], marker="os^Dv<>ph"[i % 9], label=env, color=f"C{i % 10}")
    ax.set_xlabel("repetition (every environment once per repetition, interleaved)")
    ax.set_ylabel("median step time of the run (ms)")
    ax.set_title(f"{key['campaign']}: {key['fabric']}, {key['nodes']} nodes")
    ax.legend(title="environment")
    path = out / "figures" / f"workload_ab-{key['campaign']}-{key['nodes']}n.png"
    return save_figure(plt, fig, path, data=repetitions, synthetic=synthetic)


def analyze_workload_ab(datasets: str | Path | Sequence[str | Path], *, campaign: str | None = None,
                        out: Path | None = None, n_boot: int = 2000, seed: int = 0) -> WorkloadAB:
    """The workload A/B of every workload campaign in ``datasets`` (or one), written into ``out``
    (tables as CSV and Markdown, figures as PNG, ``headline.json``) when given.

    Raises :class:`AnalysisError` naming the dataset when it holds no workload run; a failed run
    becomes a ``workload_issues`` row and the other runs still count.
    """
    runs, steps, events = _load(dataset_roots(datasets), campaign)
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in ("workload_environments", "workload_comparisons",
                                                                   "workload_repetitions", "workload_contexts")}
    headline: dict = {"scenarios": []}
    figures: dict[str, Path] = {}
    for values, scenario_runs in runs.groupby(SCENARIO, sort=True):
        key = {k: (int(v) if k == "nodes" else v) for k, v in zip(SCENARIO, values)}
        mine = steps[steps["run_id"].isin(scenario_runs["run_id"])]
        envs = _environments(mine, scenario_runs, n_boot=n_boot, seed=seed)
        comparisons = _comparisons(mine, n_boot=n_boot, seed=seed)
        reps = mine.groupby(["environment", "repetition"], sort=False)["step_time_s"].median().mul(1e3)
        reps = reps.rename("median_ms").reset_index()
        contexts = _contexts(events[events["run_id"].isin(scenario_runs["run_id"])], scenario_runs)
        for name, frame in zip(tables, (envs, comparisons, reps, contexts)):
            tables[name].append(frame.assign(**key)[[*SCENARIO, *frame.columns]])
        headline["scenarios"].append(_headline(key, envs, comparisons))
        if out is not None and len(reps):
            figures[f"{key['campaign']}-{key['nodes']}n"] = _figure(reps, key, out, is_synthetic(scenario_runs))
    failed = runs[runs["outcome"] != "ok"]
    issues = failed.assign(what=failed["outcome"] + ": " + failed["failure"].fillna("no reason recorded"))
    result = WorkloadAB({name: pd.concat(frames, ignore_index=True) for name, frames in tables.items()}, headline,
                        figures)
    result.tables["workload_issues"] = issues.reindex(columns=[*SCENARIO, "run_id", "environment", "what"])
    if out is not None:
        _write(result, out)
    return result


def _write(result: WorkloadAB, out: Path) -> None:
    import json

    out.mkdir(parents=True, exist_ok=True)
    for name, frame in result.tables.items():
        write_table(frame, out, name=name)
    (out / "headline.json").write_text(json.dumps(result.headline, indent=2, sort_keys=True, allow_nan=False) + "\n")


def _plain(value):
    """A numpy or pandas scalar as the JSON value it is (NaN as null)."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and not np.isfinite(value) else value
