"""``ncclbot-sweep analyze``: the NCCL-BOT analysis of an ingested dataset.

Thin commands over :mod:`ncclbot_sweep.analysis`; pandas, numpy and matplotlib are imported
inside the command bodies so ``--help`` stays light.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

__all__ = ["analyze"]

_DEFAULT_POLICIES = "AUTO,Random,UCB1,Softmax,KL-UCB,ETC"


def _dataset_option(f):
    f = click.option("--keep-warmup", is_flag=True, default=False,
                     help="Keep iteration 0 (the perf binary's warm-up) in the pools; the paper drops it.")(f)
    f = click.option("--fabric", default=None, help="Only this fabric (default: every fabric in the dataset).")(f)
    f = click.option("--rho-max", type=float, default=2.0, show_default=True,
                     help="Arm filter: drop arms predicted slower than rho_max x the best prediction.")(f)
    f = click.option("--window", type=(int, int), default=(11, 99), show_default=True,
                     help="Steady-state window (first and last iteration) that ranks arms.")(f)
    return click.option("--dataset", "dataset", required=True, type=click.Path(file_okay=False, path_type=Path),
                        help="Dataset root written by 'ncclbot-sweep ingest'.")(f)


def _problem(dataset, fabric, window, rho_max, keep_warmup=False):
    from ncclbot_sweep.analysis.inputs import load_problem

    return load_problem(dataset, fabric=fabric, window=tuple(window), rho_max=rho_max, keep_warmup=keep_warmup)


def _echo_table(frame, title: str) -> None:
    from ncclbot_sweep.analysis.report import to_markdown

    click.echo(f"\n{title}\n")
    click.echo(to_markdown(frame) if len(frame) else "(none)\n")


@click.group()
def analyze() -> None:
    """Audit NCCL's AUTO choice, replay bandit policies and write the report.

    Example, after ingesting a simulated sweep:

        ncclbot-sweep analyze report --dataset demo-out/dataset --out demo-out/report
    """


@analyze.command()
@_dataset_option
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps priced for realized TRLT.")
def pools(dataset, fabric, window, rho_max, keep_warmup, horizon):
    """Summarise the replay pools: contexts, arms, depth and the transient switch point per scenario."""
    from ncclbot_sweep.analysis.transient import detect_transients

    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    p = problem.pools
    click.echo(f"{len(p)} contexts, arms {', '.join(p.arms)}, pool depth {int(p.depth.max())}, "
               f"mean offered arms {problem.offered.sum(axis=1).mean():.2f}")
    click.echo(f"Pool convention: {p.convention}.")
    _echo_table(detect_transients(p), "Transient switch point per scenario (BIC, one vs two segments)")


@analyze.command()
@_dataset_option
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps priced for realized TRLT.")
@click.option("--threshold", type=float, default=0.10, show_default=True, help="Tail threshold (fraction).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the audit tables as CSV into this folder.")
def audit(dataset, fabric, window, rho_max, keep_warmup, horizon, threshold, out):
    """Audit AUTO: error rate, TRLT, runner-up margin gate (Figure 13) and tail anatomy (Table 29)."""
    from ncclbot_sweep.analysis.audit import run_audit

    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    click.echo(f"Pool convention: {problem.pools.convention}.")
    result = run_audit(problem, horizon=horizon, threshold=threshold)
    _echo_table(result.summary, "AUTO against the measured-best arm")
    _echo_table(result.gate, "Runner-up margin gate")
    _echo_table(result.tail, "Tail anatomy")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name in ("contexts", "summary", "gate", "tail"):
            getattr(result, name).to_csv(out / f"audit_{name}.csv", index=False)
        click.echo(f"Audit tables written to {out}")


@analyze.command()
@_dataset_option
@click.option("--policies", default=_DEFAULT_POLICIES, show_default=True,
              help="Comma-separated policies, or @FILE (e.g. @DIR/champions.yaml of 'analyze tune') (AUTO, Random, UCB1, KL-UCB, Softmax, GaussianTS, eps-greedy, "
                   "ETC, RR-ETC, UCB-V, UCB-tuned, EXP3, EXP3++, Tsallis-INF, FPL, Hierarchical), each optionally "
                   "with parameters: 'UCB1[estimator.kind=gain;estimator.gain=0.1;label=UCB1-gain]'.")
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")
@click.option("--seeds", type=int, default=20, show_default=True, help="Seeds for stochastic policies.")
@click.option("--split", default="scale", show_default=True,
              help="scale: test on all but the two smallest node counts; reverse: train on the two largest; "
                   "largest: test on the largest only; random: 50/50; loco: leave one collective out "
                   "(loco:AllGather holds out one).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("replay.parquet"),
              show_default=True, help="Parquet file of results, one row per policy x context x seed.")
def replay(dataset, fabric, window, rho_max, keep_warmup, policies, horizon, seeds, split, out):
    """Replay bandit policies on the forced-arm pools and print the Table-1 summary."""
    from ncclbot_sweep.analysis.policies import expand_policy_list, parse_policy
    from ncclbot_sweep.analysis.replay import run_replay
    from ncclbot_sweep.analysis.summary import summarize

    chosen = [parse_policy(spec) for spec in expand_policy_list(policies)]
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    click.echo(f"Pool convention: {problem.pools.convention}.")
    results = run_replay(problem, chosen, horizon=horizon, seeds=range(seeds), split=split)
    out.parent.mkdir(parents=True, exist_ok=True)
    results.to_parquet(out, index=False)
    _echo_table(summarize(results, order=[p.display_name for p in chosen]), "TRLT on the test contexts (%)")
    click.echo(f"Results written to {out}")


def _command_line() -> str:
    """The command line as typed (program name without its folder), for the report's provenance."""
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


@analyze.command()
@_dataset_option
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Report folder.")
@click.option("--policies", default=_DEFAULT_POLICIES, show_default=True, help="Comma-separated policy names.")
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")
@click.option("--seeds", type=int, default=20, show_default=True, help="Seeds for stochastic policies.")
@click.option("--split", default="scale", show_default=True,
              help="How contexts are split into train and test (as for 'analyze replay').")
@click.option("--replay", "replay_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Reuse results of 'analyze replay' instead of replaying again.")
@click.option("--study", "studies", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A folder of 'analyze tune/splits/holdout/minisweep/replication/ablate/workload' whose tables "
                   "(and figures) to include (repeat).")
def report(dataset, fabric, window, rho_max, keep_warmup, out, policies, horizon, seeds, split, replay_file, studies):
    """Write the HTML report (index.html, PNG figures, CSV and Markdown tables) into --out."""
    from ncclbot_sweep.analysis.report import ReportOptions, build_report

    results = None
    if replay_file is not None:
        import pandas as pd

        results = pd.read_parquet(replay_file)
    from ncclbot_sweep.analysis.policies import expand_policy_list

    options = ReportOptions(policies=tuple(expand_policy_list(policies)), horizon=horizon,
                            seeds=seeds, split=split, fabric=fabric, window=tuple(window), rho_max=rho_max,
                            keep_warmup=keep_warmup, studies=studies, command=_command_line())
    path = build_report(dataset, out, options=options, replay=results)
    click.echo(f"Report: {path}")


@analyze.command()
@click.option("--dataset", "dataset", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Dataset root written by 'ncclbot-sweep ingest'.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the tables (Parquet and CSV), figures (PNG) and headline.json.")
@click.option("--campaign", default=None, help="Only this campaign (default: every live campaign in the dataset).")
@click.option("--min-pulls", type=int, default=5, show_default=True,
              help="Samples an arm needs at a size to be the reconstructed oracle there.")
@click.option("--json", "as_json", is_flag=True, help="Print the headline numbers as JSON instead of tables.")
def live(dataset, out, campaign, min_pulls, as_json):
    """Live campaigns: selection TRLT, learning curves, overhead ladder, setup toll and stock comparison.

    Example, after ingesting a live campaign folder:

        ncclbot-sweep analyze live --dataset ds --out live-out --campaign live-h100
    """
    import json

    from ncclbot_sweep.analysis.live import analyze_live

    result = analyze_live(dataset, campaign=campaign, out=out, min_pulls=min_pulls)
    if as_json:
        click.echo(json.dumps(result.headline, indent=2, sort_keys=True))
        return
    for name, title in (("selection_summary", "Selection-priced TRLT over sizes (%)"),
                        ("overhead_ladder", "Overhead ladder against stock"),
                        ("setup_toll", "Setup toll (first-use stall)"), ("stock_bands", "Against stock, per band")):
        frame = result.tables[name]
        _echo_table(frame.drop(columns=[c for c in ("fabric", "ranks", "run_id") if c in frame.columns]), title)
    for what in result.issues["what"]:
        click.echo(f"Warning: {what}", err=True)
    click.echo(f"Live analysis written to {out}")


def _tune_progress():
    """A rich progress bar per study; returns (context manager, callback)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bars = Progress(TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    tasks: dict = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = bars.add_task(name, total=total)
        bars.update(tasks[name], completed=done)

    return bars, update


@analyze.command()
@_dataset_option
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Campaign folder: studies.journal, champions.yaml, tables, search_progress.png.")
@click.option("--families", default=None, help="Comma-separated learning families (default: the 14 of Table 16).")
@click.option("--trials", type=int, default=151, show_default=True, help="Complete trials per study.")
@click.option("--startup-trials", type=int, default=50, show_default=True, help="Random trials after trial 0.")
@click.option("--seed", type=int, default=42, show_default=True, help="Sampler seed (and replay base seed).")
@click.option("--objective", type=click.Choice(["selection", "realized"]), default="selection", show_default=True,
              help="Mean train TRLT priced on steady means (the paper's) or on the latencies served (Table 53).")
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")
@click.option("--seeds", type=int, default=1, show_default=True, help="Replay seeds per trial (stochastic policies).")
@click.option("--split", default="scale", show_default=True,
              help="Whose train partition the studies see: scale, reverse, largest, random, loco:<Collective>.")
@click.option("--split-seed", type=int, default=42, show_default=True, help="Seed of the random split.")
@click.option("--storage", default=None, help="Optuna storage URL (an RDB; default: the journal file in --out).")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes on this machine.")
@click.option("--cold", is_flag=True, default=False,
              help="Pin the warm start off in every study (Table 42's cold-tuned champions, for 'analyze ablate "
                   "--cold-study'); tune into its own --out.")
def tune(dataset, fabric, window, rho_max, keep_warmup, out, families, trials, startup_trials, seed, objective,
         horizon, seeds, split, split_seed, storage, workers, cold):
    """Tune every learning family with Optuna TPE (resumable) and write champions.yaml and Table 16."""
    from ncclbot_sweep.analysis.study import FAMILIES, TuneOptions
    from ncclbot_sweep.analysis.study import tune as run_tune

    names = tuple(n.strip() for n in families.split(",") if n.strip()) if families else tuple(FAMILIES)
    options = TuneOptions(families=names, trials=trials, startup=startup_trials, seed=seed, objective=objective,
                          horizon=horizon, seeds=seeds, split=split, split_seed=split_seed, storage=storage,
                          workers=workers, cold=cold)
    dataset_args = {"dataset": dataset, "fabric": fabric, "window": tuple(window), "rho_max": rho_max,
                    "keep_warmup": keep_warmup}
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    bars, update = _tune_progress()
    with bars:
        path = run_tune(problem, out, options=options, dataset_args=dataset_args, progress=update)
    _echo_table(_read_table16(out), "Search summary (Table 16), train TRLT %")
    click.echo(f"Champions: {path} (replay with --policies @{path})")


def _read_table16(out: Path):
    import pandas as pd

    return pd.read_csv(out / "tables" / "table16.csv")


def _replay_options(f):
    f = click.option("--threshold", type=float, default=0.10, show_default=True, help="Tail threshold (fraction).")(f)
    f = click.option("--seeds", type=int, default=20, show_default=True, help="Seeds for stochastic policies.")(f)
    f = click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")(f)
    return click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
                        help="Folder for the study's tables (tables/*.csv, *.md).")(f)


def _write_study(out, name, long, table, title):
    from ncclbot_sweep.analysis.study.robustness import write_study

    path = write_study(out, name, long, table)
    _echo_table(table, title)
    click.echo(f"Table written to {path}")


@analyze.command()
@_dataset_option
@_replay_options
@click.option("--splits", default=None, help="Comma-separated splits (default: Table 36's: scale, reverse, "
              "random-42, random-43, random-44, loco:AllGather, loco:AllReduce, loco:ReduceScatter).")
@click.option("--families", default="UCB1,Softmax,KL-UCB,ETC,GBM+cost", show_default=True,
              help="Families re-tuned on every split (learners and supervised selectors).")
@click.option("--fixed", default="AUTO,GBM+cost", show_default=True, help="Policies replayed with fixed settings.")
@click.option("--trials", type=int, default=151, show_default=True, help="Complete trials per study.")
@click.option("--startup-trials", type=int, default=50, show_default=True, help="Random trials after trial 0.")
def splits(dataset, fabric, window, rho_max, keep_warmup, out, horizon, seeds, threshold, splits, families, fixed,
           trials, startup_trials):
    """Re-tune on every split and score on its test part (Tables 36 and 41)."""
    from ncclbot_sweep.analysis.study import TuneOptions
    from ncclbot_sweep.analysis.study.robustness import DEFAULT_SPLITS, ReplayOptions, split_study

    names = tuple(s.strip() for s in splits.split(",")) if splits else DEFAULT_SPLITS
    tune_options = TuneOptions(families=tuple(f.strip() for f in families.split(",")), trials=trials,
                               startup=startup_trials, horizon=horizon)
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    bars, update = _tune_progress()
    with bars:
        long, t36, t41 = split_study(problem, out, splits=names, tune_options=tune_options, fixed=fixed.split(","),
                                     options=ReplayOptions(horizon, seeds, threshold), progress=update)
    _write_study(out, "table36", long, t36, "Realized test TRLT mean / p99 (%) per split (Table 36)")
    _write_study(out, "table41", long, t41, "Supervised against UCB1: mean / p99 / n>10 per split (Table 41)")


@analyze.command()
@_dataset_option
@_replay_options
@click.option("--policies", required=True, help="Policies to score, e.g. 'AUTO,@DIR/champions.yaml,GBM+cost'.")
def holdout(dataset, fabric, window, rho_max, keep_warmup, out, horizon, seeds, threshold, policies):
    """Largest-scale holdout: supervised fits on all but the largest node count, everyone scored there (Table 46)."""
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.robustness import ReplayOptions, holdout_study

    specs = expand_policy_list(policies)
    long, table = holdout_study(_problem(dataset, fabric, window, rho_max, keep_warmup), specs,
                                options=ReplayOptions(horizon, seeds, threshold))
    _write_study(out, "table46", long, table, "Largest-scale holdout, realized TRLT (%) (Table 46)")


@analyze.command()
@_dataset_option
@_replay_options
@click.option("--policies", required=True, help="Policies to score, e.g. 'GBM+cost,@DIR/champions.yaml'.")
@click.option("--every", type=int, default=4, show_default=True, help="Label every j-th target size.")
@click.option("--samples", type=int, default=1, show_default=True, help="Post-warm-up samples per labelled cell.")
def minisweep(dataset, fabric, window, rho_max, keep_warmup, out, horizon, seeds, threshold, policies, every, samples):
    """Supervised fits given a labelled target-scale mini-sweep, scored on the unlabelled targets (Table 51)."""
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.robustness import ReplayOptions, minisweep_study

    long, table = minisweep_study(_problem(dataset, fabric, window, rho_max, keep_warmup), expand_policy_list(policies),
                                  every=every, samples=samples, options=ReplayOptions(horizon, seeds, threshold))
    _write_study(out, "table51", long, table, f"Mini-sweep 1/{every}, k={samples}: realized TRLT (%) (Table 51)")


@analyze.command()
@click.option("--dataset", "datasets", required=True, multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="A dataset per fabric (repeat: GB200 MNNVL off and on).")
@_replay_options
@click.option("--policies", required=True, help="Frozen policies, e.g. 'AUTO,@H100/champions.yaml,GBM+cost'.")
@click.option("--keep-warmup", is_flag=True, default=False, help="Keep iteration 0 in the pools.")
def replication(datasets, out, horizon, seeds, threshold, policies, keep_warmup):
    """Replay frozen champions on other fabrics' sweeps in Table 3's layout (scale split, scenario tests)."""
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.robustness import ReplayOptions, replication_study

    specs = expand_policy_list(policies)
    problems = {}
    for path in datasets:
        problem = _problem(path, None, (11, 99), 2.0, keep_warmup)
        problems["+".join(sorted(problem.contexts["fabric"].unique()))] = problem
    long, table = replication_study(problems, specs, options=ReplayOptions(horizon, seeds, threshold))
    _write_study(out, "table3", long, table, "Frozen champions on other fabrics (Table 3)")


def _learner_options(f):
    """The options of the studies that ablate or replay the tuned learners (ablate, workload)."""
    f = click.option("--split", default="scale", show_default=True, help="Train/test split (as for 'analyze replay').")(f)
    f = click.option("--seeds", type=int, default=20, show_default=True, help="Seeds for stochastic policies.")(f)
    f = click.option("--policies", default=None, help="Learners instead of the study's UCB1, Softmax and KL-UCB "
                     "champions, e.g. 'UCB1[estimator.kind=gain;estimator.gain=0.1],Softmax'.")(f)
    return click.option("--study", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
                        help="Folder of 'analyze tune' whose champions.yaml sets the learners (default: the "
                             "families' default settings, said so in the tables).")(f)


def _echo_section(section) -> None:
    """Print a study section's tables and notes (ablate, workload)."""
    for name, table in section.tables.items():
        _echo_table(table, f"{section.title}: {name}")
    for note in section.notes:
        click.echo(f"Note: {note}")


_ABLATION_NAMES = ("warm-cold, nvls-toll, nvls-excluded, size-gate, hybrid, filter, horizon, mis-ranked, drift, "
                   "dilution")


@analyze.command()
@_dataset_option
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the tables (tables/*.csv, *.md), figures and sections.json ('analyze report --study').")
@click.option("--only", default=None, help=f"Comma-separated ablations (default: all): {_ABLATION_NAMES}.")
@_learner_options
@click.option("--cold-study", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Folder of 'analyze tune --cold': the cold-tuned column of warm-cold (Table 42).")
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")
@click.option("--threshold", type=float, default=0.10, show_default=True, help="Tail threshold (fraction).")
def ablate(dataset, fabric, window, rho_max, keep_warmup, out, only, study, policies, seeds, split, cold_study, horizon,
           threshold):
    """Run the paper's ablations, one table each (and a figure where the paper has one).

    Example, with champions tuned by 'analyze tune --out tuned':

        ncclbot-sweep analyze ablate --dataset ds --out ablate --study tuned --only size-gate,hybrid
    """
    from ncclbot_sweep.analysis.inputs import load_first_calls
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.ablate import run_ablations, select_ablations
    from ncclbot_sweep.analysis.study.harness import AblateOptions, resolve_policies

    select_ablations(only)
    chosen = resolve_policies(study=study, cold_study=cold_study,
                              specs=expand_policy_list(policies) if policies else None)
    options = AblateOptions(horizon=horizon, seeds=seeds, split=split, threshold=threshold)
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)

    run_ablations(problem, out, only=only, options=options, policies=chosen,
                  first_calls=load_first_calls(dataset, fabric=fabric), progress=_echo_section)
    click.echo(f"Ablations written to {out} (include them with 'analyze report --study {out}')")


@analyze.command()
@_dataset_option
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the tables, Figure 12 and sections.json ('analyze report --study').")
@click.option("--trace", "trace_id", default=None,
              help="trace_id of a Kineto trace in the workload table (default: only the balanced uniform workload).")
@click.option("--workload", "workload_dataset", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Dataset holding the trace's workload table (default: --dataset).")
@click.option("--cycles", type=int, default=2, show_default=True, help="Times the trace is replayed, state carried.")
@click.option("--ranks", type=int, default=None,
              help="Map every call onto the sweep's communicator with this many ranks (default: the group size's "
                   "rank count, else its node count).")
@click.option("--max-ratio", type=float, default=2.0, show_default=True,
              help="Largest ratio between a call's size and the swept size it is rounded to.")
@_learner_options
@click.option("--horizon", type=int, default=100, show_default=True,
              help="Visits to each test context in the balanced uniform workload.")
def workload(dataset, fabric, window, rho_max, keep_warmup, out, trace_id, workload_dataset, cycles, ranks, max_ratio,
             study, policies, seeds, split, horizon):
    """Replay a Kineto trace's ordered calls over the sweep (Table 25, Figure 12) and the balanced workload (Table 24).

    Example, after ingesting a training job's trace into the sweep's dataset:

        ncclbot-sweep analyze workload --dataset ds --out wl --trace 3f2a9c0d1e5b7a64:rank0
    """
    from ncclbot_sweep.analysis.inputs import load_workload
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.harness import AblateOptions, Harness, resolve_policies
    from ncclbot_sweep.analysis.study.workload import run_workload

    rows = None if trace_id is None else load_workload(workload_dataset or dataset, trace_id)
    chosen = resolve_policies(study=study, specs=expand_policy_list(policies) if policies else None)
    harness = Harness(_problem(dataset, fabric, window, rho_max, keep_warmup),
                      AblateOptions(horizon=horizon, seeds=seeds, split=split), chosen, figures=out / "figures")
    for section in run_workload(harness, out, rows=rows, trace_id=trace_id, cycles=cycles, ranks=ranks,
                                max_ratio=max_ratio):
        _echo_section(section)
    click.echo(f"Workload replays written to {out} (include them with 'analyze report --study {out}')")
