"""``ncclbot-sweep analyze``: the NCCL-BOT analysis of an ingested dataset.

Thin commands over :mod:`ncclbot_sweep.analysis`; pandas, numpy and matplotlib are imported
inside the command bodies so ``--help`` stays light.
"""

from __future__ import annotations

from pathlib import Path

import click

from ncclbot_sweep.cli.jsonout import echo_json
from ncclbot_sweep.cli.options import command_line, dataset_option, inventory_option, json_option, out_option

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
    return dataset_option(required=True, type=click.Path(file_okay=False, path_type=Path))(f)


#: ``--split-seed``: the seed of ``--split random`` (every command that replays on a split takes it).
_SPLIT_SEED = click.option("--split-seed", type=int, default=42, show_default=True,
                           help="Seed of the random split (--split random).")


def _problem(dataset, fabric, window, rho_max, keep_warmup=False):
    from ncclbot_sweep.analysis.inputs import load_problem

    return load_problem(dataset, fabric=fabric, window=tuple(window), rho_max=rho_max, keep_warmup=keep_warmup)


def _echo_table(frame, title: str) -> None:
    from ncclbot_sweep.analysis.tables import to_markdown

    click.echo(f"\n{title}\n")
    click.echo(to_markdown(frame) if len(frame) else "(none)\n")


@click.group()
def analyze() -> None:
    """Audit NCCL's AUTO choice, replay bandit policies and write the report.

    \b
    Example, after ingesting a simulated sweep:
        ncclbot-sweep analyze report -d demo-out/dataset -o demo-out/report
    """


@analyze.command()
@_dataset_option
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps priced for realized TRLT.")
@json_option("convention, contexts, arms, pool_depth, mean_offered_arms, transients (one object per scenario, "
             "the columns of the text table).")
def pools(dataset, fabric, window, rho_max, keep_warmup, horizon, as_json):
    """Summarise the replay pools: contexts, arms, depth and the transient switch point per scenario.

    \b
    Example:
        ncclbot-sweep analyze pools -d demo-out/dataset --json
    """
    from ncclbot_sweep.analysis.transient import detect_transients

    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    p = problem.pools
    if as_json:
        echo_json({"convention": p.convention, "contexts": len(p), "arms": list(p.arms),
                   "pool_depth": int(p.depth.max()), "mean_offered_arms": float(problem.offered.sum(axis=1).mean()),
                   "transients": detect_transients(p)})
        return
    click.echo(f"{len(p)} contexts, arms {', '.join(p.arms)}, pool depth {int(p.depth.max())}, "
               f"mean offered arms {problem.offered.sum(axis=1).mean():.2f}")
    click.echo(f"Pool convention: {p.convention}.")
    _echo_table(detect_transients(p), "Transient switch point per scenario (BIC, one vs two segments)")


@analyze.command()
@_dataset_option
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps priced for realized TRLT.")
@click.option("--threshold", type=float, default=0.10, show_default=True, help="Tail threshold (fraction).")
@out_option("Also write the audit tables as CSV into this folder.", type=click.Path(file_okay=False, path_type=Path),
            default=None)
@json_option("convention; summary, gate, tail and contexts, each a list of row objects with the columns of "
             "audit_<name>.csv.")
def audit(dataset, fabric, window, rho_max, keep_warmup, horizon, threshold, out, as_json):
    """Audit AUTO: error rate, TRLT, runner-up margin gate (Figure 13) and tail anatomy (Table 29).

    \b
    Example:
        ncclbot-sweep analyze audit -d demo-out/dataset -o audit/
    """
    from ncclbot_sweep.analysis.audit import run_audit

    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    result = run_audit(problem, horizon=horizon, threshold=threshold)
    tables = ("summary", "gate", "tail", "contexts")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name in tables:
            getattr(result, name).to_csv(out / f"audit_{name}.csv", index=False)
    if as_json:
        echo_json({"convention": problem.pools.convention, **{name: getattr(result, name) for name in tables}})
        return
    click.echo(f"Pool convention: {problem.pools.convention}.")
    _echo_table(result.summary, "AUTO against the measured-best arm")
    _echo_table(result.gate, "Runner-up margin gate")
    _echo_table(result.tail, "Tail anatomy")
    if out is not None:
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
@_SPLIT_SEED
@out_option("Parquet file of results, one row per policy x context x seed.",
            type=click.Path(dir_okay=False, path_type=Path), default=Path("replay.parquet"), show_default=True)
@json_option("convention, out (the Parquet file written), summary (one object per policy: the columns of the "
             "text table, TRLT in %).")
@click.option("--trajectories", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write per-step trajectories (arm, latency served, cumulative relative lost time) "
                   "to this Parquet file: one row per policy x seed x context x step.")
def replay(dataset, fabric, window, rho_max, keep_warmup, policies, horizon, seeds, split, split_seed, out, as_json,
           trajectories):
    """Replay bandit policies on the forced-arm pools and print the Table-1 summary.

    \b
    Example:
        ncclbot-sweep analyze replay -d demo-out/dataset --policies AUTO,UCB1 -o replay.parquet
    """
    import ncclbot_sweep.analysis.study  # noqa: F401  (registers the supervised selectors: --policies GBM+cost)
    from ncclbot_sweep.analysis.policies import expand_policy_list, parse_policy
    from ncclbot_sweep.analysis.replay import replay_with_trajectories, run_replay
    from ncclbot_sweep.analysis.summary import summarize

    chosen = [parse_policy(spec) for spec in expand_policy_list(policies)]
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    if not as_json:
        click.echo(f"Pool convention: {problem.pools.convention}.")
    if trajectories is None:
        results = run_replay(problem, chosen, horizon=horizon, seeds=range(seeds), split=split, split_seed=split_seed)
    else:
        results, steps = replay_with_trajectories(problem, chosen, horizon=horizon, seeds=range(seeds), split=split,
                                                  split_seed=split_seed)
        trajectories.parent.mkdir(parents=True, exist_ok=True)
        steps.to_parquet(trajectories, index=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    results.to_parquet(out, index=False)
    summary = summarize(results, order=[p.display_name for p in chosen])
    if as_json:
        echo_json({"convention": problem.pools.convention, "out": out, "summary": summary})
        return
    _echo_table(summary, "TRLT on the test contexts (%)")
    click.echo(f"Results written to {out}")
    if trajectories is not None:
        click.echo(f"Trajectories written to {trajectories}")


@analyze.command()
@_dataset_option
@out_option("Report folder.", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--policies", default=_DEFAULT_POLICIES, show_default=True, help="Comma-separated policy names.")
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")
@click.option("--seeds", type=int, default=20, show_default=True, help="Seeds for stochastic policies.")
@click.option("--split", default="scale", show_default=True,
              help="How contexts are split into train and test (as for 'analyze replay').")
@click.option("--replay", "replay_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Reuse results of 'analyze replay' instead of replaying again.")
@click.option("--trajectories", "trajectories_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="With --replay: the per-step file its 'analyze replay --trajectories' wrote "
                                 "(the learning curves).")
@click.option("--study", "studies", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A folder of 'analyze tune/splits/holdout/minisweep/replication/ablate/workload' whose tables "
                   "(and figures) to include (repeat).")
@click.option("--live-dataset", "live_datasets", multiple=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A dataset holding a live campaign ingested apart from the sweep (repeat): its live section, "
                   "compared with the sweep of --dataset.")
@click.option("--workload-dataset", "workload_datasets", multiple=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A dataset holding workload campaigns (repeat): their A/B gets a section (analyze workload-ab).")
def report(dataset, fabric, window, rho_max, keep_warmup, out, policies, horizon, seeds, split, replay_file,
           trajectories_file, studies, live_datasets, workload_datasets):
    """Write the HTML report (index.html, PNG figures, CSV and Markdown tables) into --out.

    \b
    Example:
        ncclbot-sweep analyze report -d demo-out/dataset -o report/ --study tune/
        ncclbot-sweep analyze report -d demo-out/dataset --live-dataset demo-out/live-dataset -o report/
        ncclbot-sweep analyze report -d demo-out/dataset --workload-dataset demo-out/workload-dataset -o report/
    """
    from ncclbot_sweep.analysis.report import ReportOptions, build_report

    import pandas as pd

    if trajectories_file is not None and replay_file is None:
        raise click.UsageError("--trajectories goes with --replay (without it the report replays and records them)")
    results = pd.read_parquet(replay_file) if replay_file is not None else None
    steps = pd.read_parquet(trajectories_file) if trajectories_file is not None else None
    from ncclbot_sweep.analysis.policies import expand_policy_list

    options = ReportOptions(policies=tuple(expand_policy_list(policies)), horizon=horizon,
                            seeds=seeds, split=split, fabric=fabric, window=tuple(window), rho_max=rho_max,
                            keep_warmup=keep_warmup, studies=studies, live_datasets=live_datasets,
                            workload_datasets=workload_datasets, command=command_line())
    path = build_report(dataset, out, options=options, replay=results, trajectories=steps)
    click.echo(f"Report: {path}")


@analyze.command()
@dataset_option("A dataset holding the live campaign, or the forced sweep to compare it with (repeat: every "
                "dataset is read as one).", dest="datasets", required=True, multiple=True,
                type=click.Path(file_okay=False, path_type=Path))
@out_option("Folder for the tables (Parquet and CSV), figures (PNG) and headline.json.", required=True,
            type=click.Path(file_okay=False, path_type=Path))
@click.option("--campaign", default=None, help="Only this campaign (default: every live campaign in the dataset).")
@click.option("--min-pulls", type=int, default=5, show_default=True,
              help="Samples an arm needs at a size to be the reconstructed oracle there.")
@json_option("the headline numbers, as in OUT/headline.json.")
def live(datasets, out, campaign, min_pulls, as_json):
    """Live campaigns: selection TRLT, learning curves, overhead ladder, setup toll and stock comparison.

    The forced-arm sweep of the same fabric (for the forced-against-stock and AUTO-against-audit
    tables) may be in the same dataset or in another one given with a second -d.

    \b
    Example, after ingesting a live campaign folder (and, apart, a forced sweep):
        ncclbot-sweep analyze live -d live-ds -d sweep-ds -o live-out --campaign live-h100
    """
    from ncclbot_sweep.analysis.live import analyze_live, campaign_lines, scenario_verdicts

    result = analyze_live(datasets, campaign=campaign, out=out, min_pulls=min_pulls)
    if as_json:
        echo_json(result.headline)
        return
    for name, title in (("selection_summary", "Selection-priced TRLT over sizes (%)"),
                        ("overhead_ladder", "Overhead ladder against stock"),
                        ("setup_toll", "Setup toll (first-use stall)"), ("stock_bands", "Against stock, per band"),
                        ("reward_lag", "Reward lag (collectives launched before the sample came) and samples")):
        frame = result.tables[name]
        _echo_table(frame.drop(columns=[c for c in ("fabric", "ranks", "run_id") if c in frame.columns]), title)
    for verdict in scenario_verdicts(result.headline):
        click.echo(f"\n{verdict.title}")
        for line in verdict.lines:
            click.echo(f"  {line}")
    for line in campaign_lines(result.headline):
        click.echo(line)
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
@out_option("Study folder: studies.journal, champions.yaml, tables, search_progress.png.", required=True,
            type=click.Path(file_okay=False, path_type=Path))
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
@_SPLIT_SEED
@click.option("--storage", default=None,
              help="Optuna storage URL (an RDB; default: the journal file in --out). With -i every node uses it.")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Processes on this machine (with -i: on each node).")
@click.option("--cold", is_flag=True, default=False,
              help="Pin the warm start off in every study (Table 42's cold-tuned champions, for 'analyze ablate "
                   "--cold-study'); tune into its own --out.")
@inventory_option("Submit the tuning as one Slurm job on this inventory's cluster: one 'analyze tune' per node "
                  "(the nodes run the inventory's ncclbot_sweep.command).")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="With -i: nodes of the tuning job (default 1).")
@click.option("--wait/--no-wait", default=False, show_default=True,
              help="With -i: stay until the job has ended, fetch the folder and report each study's trials.")
@click.option("--cancel", is_flag=True, default=False,
              help="With -i: cancel this folder's tuning job instead of submitting one (the studies keep their "
                   "trials).")
@click.pass_context
def tune(ctx, dataset, fabric, window, rho_max, keep_warmup, out, families, trials, startup_trials, seed, objective,
         horizon, seeds, split, split_seed, storage, workers, cold, inventory_path, nodes, wait, cancel):
    """Tune every learning family with Optuna TPE (resumable) and write champions.yaml and Table 16.

    With -i INVENTORY the tuning runs as one Slurm job of --nodes nodes instead, each node
    running 'analyze tune' with --workers processes on the same --out and --storage.

    \b
    Example:
        ncclbot-sweep analyze tune -d demo-out/dataset -o tune/ --families UCB1,GBM+cost --trials 40
        ncclbot-sweep analyze tune -d ds -o /shared/tune -i h100-spectrumx --nodes 4 --workers 8 --wait
    """
    from ncclbot_sweep.analysis.study import FAMILIES, TuneOptions
    from ncclbot_sweep.analysis.study import tune as run_tune

    names = tuple(n.strip() for n in families.split(",") if n.strip()) if families else tuple(FAMILIES)
    options = TuneOptions(families=names, trials=trials, startup=startup_trials, seed=seed, objective=objective,
                          horizon=horizon, seeds=seeds, split=split, split_seed=split_seed, storage=storage,
                          workers=workers, cold=cold)
    if inventory_path is not None:
        _tune_on_slurm(ctx, options, inventory_path, nodes=nodes or 1, wait=wait, cancel=cancel)
        return
    given = [flag for flag, value in (("--nodes", nodes), ("--wait", wait), ("--cancel", cancel)) if value]
    if given:
        raise click.UsageError(f"{', '.join(given)} only apply to a Slurm job: add -i INVENTORY")
    dataset_args = {"dataset": dataset, "fabric": fabric, "window": tuple(window), "rho_max": rho_max,
                    "keep_warmup": keep_warmup}
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    bars, update = _tune_progress()
    with bars:
        path = run_tune(problem, out, options=options, dataset_args=dataset_args, progress=update)
    _echo_table(_read_table16(out), "Search summary (Table 16), train TRLT %")
    click.echo(f"Champions: {path} (replay with --policies @{path})")


#: Options of 'analyze tune' that say where and how the Slurm job runs, not what it tunes.
_SLURM_ONLY = ("dataset", "out", "inventory_path", "nodes", "wait", "cancel")


def _tune_args(ctx: click.Context) -> list[str]:
    """This command's tuning options, spelled for the job's own 'analyze tune' (every one, explicitly)."""
    words: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or not param.expose_value or param.name in _SLURM_ONLY:
            continue
        value, flag = ctx.params[param.name], next(o for o in param.opts if o.startswith("--"))
        if param.is_flag:
            words += [flag] if value else []
        elif isinstance(value, tuple):
            words += [flag, *map(str, value)]
        elif value is not None:
            words += [flag, str(value)]
    return words


def _tune_on_slurm(ctx: click.Context, options, inventory_path: str, *, nodes: int, wait: bool, cancel: bool) -> None:
    """Submit (or adopt, or cancel) the tuning job; with ``wait``, report the studies once it has ended."""
    from ncclbot_sweep.analysis.study import train_partition
    from ncclbot_sweep.sweep.inventory import load_inventory
    from ncclbot_sweep.sweep.tunejob import (cancel_tune_jobs, plan_tune_job, submit_tune_job, tune_executor,
                                             wait_tune_job)

    params = ctx.params
    inventory = load_inventory(inventory_path)
    job = plan_tune_job(inventory, params["out"], params["dataset"], _tune_args(ctx), nodes=nodes,
                        workers=options.workers)
    executor = tune_executor(job)
    try:
        if cancel:
            ids = cancel_tune_jobs(job, executor)
            click.echo(f"Cancelled tuning job(s) {', '.join(ids)}" if ids
                       else f"No tuning job of {job.run_dir} is open.")
            return
        problem = _problem(params["dataset"], params["fabric"], params["window"], params["rho_max"],
                           params["keep_warmup"])
        train_partition(problem, options.split, seed=options.split_seed)  # refuse here what every node would refuse
        job_id, adopted = submit_tune_job(job, executor)
        where = f"{job.run_dir} on {executor.transport.where}"
        click.echo(f"{'Already queued or running' if adopted else 'Submitted'}: tuning job {job_id} ({nodes} node(s) x "
                   f"{options.workers} worker(s)), folder {where}")
        if not wait:
            click.echo("Run the same command with --wait to follow it and fetch the results, or --cancel to stop it.")
            return
        try:
            status = wait_tune_job(job, executor, job_id,
                                   on_state=lambda st: click.echo(f"  job {job_id}: {st.state.value}"
                                                                  + (f" ({st.reason})" if st.reason else "")))
        except KeyboardInterrupt:
            click.echo(f"Job {job_id} keeps running; the same command with --wait follows it again.", err=True)
            raise
    finally:
        executor.close()
    _report_tune_job(job, job_id, status, options)


def _report_tune_job(job, job_id: str, status, options) -> None:
    """Each study's complete trials as the workers left them (champions.yaml), and Table 16."""
    import pandas as pd

    from ncclbot_sweep.analysis.study import CHAMPIONS, read_champions
    from ncclbot_sweep.errors import SchedulerError
    from ncclbot_sweep.outcomes import JobState

    out = Path(job.spec.local_dir)
    studies = read_champions(out / CHAMPIONS).get("studies", {}) if (out / CHAMPIONS).is_file() else {}
    counts = pd.DataFrame([{"study": name, "complete trials": studies.get(name, {}).get("trials", 0),
                            "requested": options.trials} for name in options.families])
    _echo_table(counts, f"Tuning job {job_id} ended {status.state.value}: complete trials per study")
    short = counts[counts["complete trials"] < options.trials]
    if (out / "tables" / "table16.csv").is_file():
        _echo_table(_read_table16(out), "Search summary (Table 16), train TRLT %")
    if status.state is not JobState.COMPLETED or len(short):
        raise SchedulerError(f"tuning job {job_id} ended {status.state.value}"
                             + (f" ({status.reason})" if status.reason else "")
                             + f" with {len(short)} of {len(counts)} studies short of {options.trials} trials",
                             path=job.files.job_log,
                             hint=f"see the job log and {job.files.workers_dir}/; the same command resumes the "
                                  "unfinished studies")
    click.echo(f"Champions: {out / CHAMPIONS} (replay with --policies @{out / CHAMPIONS})")


def _read_table16(out: Path):
    import pandas as pd

    return pd.read_csv(out / "tables" / "table16.csv")


def _replay_options(f):
    f = click.option("--threshold", type=float, default=0.10, show_default=True, help="Tail threshold (fraction).")(f)
    f = click.option("--seeds", type=int, default=20, show_default=True, help="Seeds for stochastic policies.")(f)
    f = click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")(f)
    return out_option("Folder for the study's tables (tables/*.csv, *.md).", required=True,
                      type=click.Path(file_okay=False, path_type=Path))(f)


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
@click.option("--families", default=None,
              help="Comma-separated families re-tuned on every split (learners and supervised selectors; "
                   "default: the 14 learning families and GBM+cost, as Tables 36 and 41).")
@click.option("--fixed", default="AUTO,GBM+cost", show_default=True, help="Policies replayed with fixed settings.")
@click.option("--trials", type=int, default=151, show_default=True, help="Complete trials per study.")
@click.option("--startup-trials", type=int, default=50, show_default=True, help="Random trials after trial 0.")
def splits(dataset, fabric, window, rho_max, keep_warmup, out, horizon, seeds, threshold, splits, families, fixed,
           trials, startup_trials):
    """Re-tune on every split and score on its test part (Tables 36 and 41).

    \b
    Example:
        ncclbot-sweep analyze splits -d demo-out/dataset -o splits/ --trials 40
    """
    from ncclbot_sweep.analysis.study import TuneOptions
    from ncclbot_sweep.analysis.study.robustness import DEFAULT_SPLITS, ReplayOptions, split_study

    names = tuple(s.strip() for s in splits.split(",")) if splits else DEFAULT_SPLITS
    from ncclbot_sweep.analysis.study.robustness import SPLIT_FAMILIES

    chosen = tuple(f.strip() for f in families.split(",")) if families else SPLIT_FAMILIES
    tune_options = TuneOptions(families=chosen, trials=trials,
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
    """Largest-scale holdout: supervised fits on all but the largest node count, everyone scored there (Table 46).

    \b
    Example:
        ncclbot-sweep analyze holdout -d demo-out/dataset -o holdout/ --policies "AUTO,@tune/champions.yaml"
    """
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
    """Supervised fits given a labelled target-scale mini-sweep, scored on the unlabelled targets (Table 51).

    \b
    Example:
        ncclbot-sweep analyze minisweep -d demo-out/dataset -o mini/ --policies GBM+cost --every 4
    """
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.robustness import ReplayOptions, minisweep_study

    long, table = minisweep_study(_problem(dataset, fabric, window, rho_max, keep_warmup), expand_policy_list(policies),
                                  every=every, samples=samples, options=ReplayOptions(horizon, seeds, threshold))
    _write_study(out, "table51", long, table, f"Mini-sweep 1/{every}, k={samples}: realized TRLT (%) (Table 51)")


@analyze.command()
@dataset_option("A dataset per fabric (repeat: GB200 MNNVL off and on).", dest="datasets", required=True,
                multiple=True, type=click.Path(file_okay=False, path_type=Path))
@_replay_options
@click.option("--policies", required=True, help="Frozen policies, e.g. 'AUTO,@H100/champions.yaml,GBM+cost'.")
@click.option("--keep-warmup", is_flag=True, default=False, help="Keep iteration 0 in the pools.")
def replication(datasets, out, horizon, seeds, threshold, policies, keep_warmup):
    """Replay frozen champions on other fabrics' sweeps in Table 3's layout (scale split, scenario tests).

    \b
    Example:
        ncclbot-sweep analyze replication -d gb-off -d gb-on -o gb200/ --policies "AUTO,@tune/champions.yaml"
    """
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.robustness import ReplayOptions, replication_study

    specs = expand_policy_list(policies)
    problems = {}
    for path in datasets:
        problem = _problem(path, None, (11, 99), 2.0, keep_warmup)
        problems["+".join(sorted(problem.contexts["fabric"].unique()))] = problem
    long, table = replication_study(problems, specs, options=ReplayOptions(horizon, seeds, threshold))
    _write_study(out, "table3", long, table, "Frozen champions on other fabrics (Table 3)")


@analyze.command()
@_dataset_option
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps priced for AUTO's realized TRLT.")
def contexts(dataset, fabric, window, rho_max, keep_warmup, horizon):
    """Write the dataset's contexts table: per context each arm's steady mean, the best arm, AUTO's arm.

    Re-running replaces the table (so do 'analyze report' and the demo).

    \b
    Example:
        ncclbot-sweep analyze contexts -d demo-out/dataset
        duckdb -c "select best_arm, auto_arm, auto_loss
                   from read_parquet('DS/contexts/**/*.parquet', hive_partitioning=true)
                   where collective='AllReduce' and nodes=16 and size_bytes=64*1024*1024"
    """
    from ncclbot_sweep.analysis.audit import audit_auto
    from ncclbot_sweep.analysis.contexts import write_contexts

    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)
    audit = audit_auto(problem, horizon=horizon)
    new = write_contexts(dataset, problem, audit)
    state = f"{new} rows written" if new else "unchanged"
    click.echo(f"contexts table of {dataset}: {len(audit)} contexts ({state}), "
               f"{int(audit['error'].sum())} where AUTO's arm is not the measured best")


@analyze.command()
@click.argument("dataset_a", type=click.Path(file_okay=False, path_type=Path))
@click.argument("dataset_b", type=click.Path(file_okay=False, path_type=Path))
@click.option("--threshold", type=float, default=0.05, show_default=True,
              help="Flag a context when the best arm's latency or bus bandwidth changes by more than this fraction, "
                   "or AUTO's loss by more than 100x this in percentage points.")
@out_option("Folder for compare.parquet, compare.csv, compare.png and compare.json.",
            type=click.Path(file_okay=False, path_type=Path), default=None)
@json_option("a and b (fabric and dataset of each side), summary (counts of matched, flagged and changed "
             "contexts), contexts (one object per matched context: the table's columns).")
def compare(dataset_a, dataset_b, threshold, out, as_json):
    """Compare two datasets context by context (two NCCL versions, two fabrics, before and after an update).

    Contexts match on collective, nodes, ranks and size (the fabric may differ). Per context:
    the change of the measured-best arm's latency and bus bandwidth, of AUTO's arm and of
    AUTO's loss, flagged above --threshold.

    \b
    Example:
        ncclbot-sweep analyze compare ds-nccl-2.26 ds-nccl-2.27 -o cmp/
    """
    from ncclbot_sweep.analysis.compare import compare_datasets, write_compare

    result = compare_datasets(dataset_a, dataset_b, threshold=threshold)
    paths = write_compare(result, out) if out is not None else {}
    if as_json:
        echo_json(result.document)
        return
    s = result.document["summary"]
    click.echo(f"A {result.document['a']['fabric']} ({dataset_a}) vs B {result.document['b']['fabric']} ({dataset_b}): "
               f"{s['matched']} contexts matched ({s['only_a']} only in A, {s['only_b']} only in B); "
               f"{s['flagged']} flagged above {100 * threshold:g}%; best arm changed in {s['best_arm_changed']}, "
               f"AUTO's arm in {s['auto_arm_changed']}; best arm slower in B in {s['best_slower']}, faster in "
               f"{s['best_faster']}")
    shown = ["collective", "nodes", "size_bytes", "best_arm_a", "best_arm_b", "best_latency_change_pct",
             "auto_arm_a", "auto_arm_b", "auto_loss_change_pp", "why"]
    _echo_table(result.table.loc[result.table["flagged"], shown], "Flagged contexts")
    if paths:
        click.echo(f"Table, figure and JSON written to {out}")


def _learner_options(f):
    """The options of the studies that ablate or replay the tuned learners (ablate, workload)."""
    f = _SPLIT_SEED(f)
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
                   "dilution, live-rules")


@analyze.command()
@_dataset_option
@out_option("Folder for the tables (tables/*.csv, *.md), figures and sections.json ('analyze report --study').",
            required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--only", default=None, help=f"Comma-separated ablations (default: all): {_ABLATION_NAMES}.")
@_learner_options
@click.option("--cold-study", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Folder of 'analyze tune --cold': the cold-tuned column of warm-cold (Table 42).")
@click.option("--horizon", type=int, default=100, show_default=True, help="Steps per context (T).")
@click.option("--threshold", type=float, default=0.10, show_default=True, help="Tail threshold (fraction).")
def ablate(dataset, fabric, window, rho_max, keep_warmup, out, only, study, policies, seeds, split, split_seed,
           cold_study, horizon, threshold):
    """Run the paper's ablations, one table each (and a figure where the paper has one).

    \b
    Example, with champions tuned by 'analyze tune -o tuned':
        ncclbot-sweep analyze ablate -d ds -o ablate --study tuned --only size-gate,hybrid
    """
    from ncclbot_sweep.analysis.inputs import load_first_calls
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.ablate import run_ablations, select_ablations
    from ncclbot_sweep.analysis.study.harness import AblateOptions, resolve_policies

    select_ablations(only)
    chosen = resolve_policies(study=study, cold_study=cold_study,
                              specs=expand_policy_list(policies) if policies else None)
    options = AblateOptions(horizon=horizon, seeds=seeds, split=split, split_seed=split_seed, threshold=threshold)
    problem = _problem(dataset, fabric, window, rho_max, keep_warmup)

    run_ablations(problem, out, only=only, options=options, policies=chosen,
                  first_calls=load_first_calls(dataset, fabric=fabric), progress=_echo_section)
    click.echo(f"Ablations written to {out} (include them with 'analyze report --study {out}')")


@analyze.command()
@_dataset_option
@out_option("Folder for the tables, Figure 12 and sections.json ('analyze report --study').",
            required=True, type=click.Path(file_okay=False, path_type=Path))
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
             study, policies, seeds, split, split_seed, horizon):
    """Replay a Kineto trace's ordered calls over the sweep (Table 25, Figure 12) and the balanced workload (Table 24).

    \b
    Example, after ingesting a training job's trace into the sweep's dataset:
        ncclbot-sweep analyze workload -d ds -o wl --trace 3f2a9c0d1e5b7a64:rank0
    """
    from ncclbot_sweep.analysis.inputs import load_workload
    from ncclbot_sweep.analysis.policies import expand_policy_list
    from ncclbot_sweep.analysis.study.harness import AblateOptions, Harness, resolve_policies
    from ncclbot_sweep.analysis.study.workload import run_workload

    rows = None if trace_id is None else load_workload(workload_dataset or dataset, trace_id)
    chosen = resolve_policies(study=study, specs=expand_policy_list(policies) if policies else None)
    harness = Harness(_problem(dataset, fabric, window, rho_max, keep_warmup),
                      AblateOptions(horizon=horizon, seeds=seeds, split=split, split_seed=split_seed), chosen,
                      figures=out / "figures")
    for section in run_workload(harness, out, rows=rows, trace_id=trace_id, cycles=cycles, ranks=ranks,
                                max_ratio=max_ratio):
        _echo_section(section)
    click.echo(f"Workload replays written to {out} (include them with 'analyze report --study {out}')")


@analyze.command("workload-ab")
@dataset_option("A dataset holding a workload campaign (repeat: every dataset is read as one).", dest="datasets",
                required=True, multiple=True, type=click.Path(file_okay=False, path_type=Path))
@out_option("Folder for the tables (CSV, Markdown), the figure (PNG) and headline.json.", required=True,
            type=click.Path(file_okay=False, path_type=Path))
@click.option("--campaign", default=None, help="Only this campaign (default: every workload campaign in the dataset).")
@click.option("--boot", "n_boot", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Bootstrap draws of repetitions for the 95% intervals.")
@json_option("the headline: per scenario (campaign, fabric, nodes) the best learner, each environment's median step "
             "time (ms), the best learner against stock (saving, saving_ci_low/high, speedup, p_value, repetitions) "
             "and the sentence.")
def workload_ab(datasets, out, campaign, n_boot, as_json):
    """Workload campaigns: did the plugin speed up the training step, by how much, and where?

    Per environment the median step time with a 95% interval over repetitions, the saving against
    stock and AUTO (paired by repetition, with a sign-flip test), the contexts the plugin played
    differently from AUTO and what each change saved or cost per step, a figure of step time per
    repetition, and one sentence per campaign saying whether the plugin paid.

    \b
    Example, after ingesting a workload campaign folder:
        ncclbot-sweep analyze workload-ab -d wl-ds -o wl-ab
    """
    from ncclbot_sweep.analysis.live.workload_ab import analyze_workload_ab

    result = analyze_workload_ab(datasets, campaign=campaign, out=out, n_boot=n_boot)
    if as_json:
        echo_json(result.headline)
        return
    for name, title in (("workload_environments", "Median step time per environment (ms, 95% CI over repetitions)"),
                        ("workload_comparisons", "Against stock and AUTO (saving: fraction of the step time)"),
                        ("workload_contexts", "Contexts played differently from AUTO")):
        _echo_table(result.tables[name].drop(columns=["fabric"]), title)
    for what in result.tables["workload_issues"]["what"]:
        click.echo(f"Warning: a run failed: {what}", err=True)
    for scenario in result.headline["scenarios"]:
        click.echo(scenario["sentence"])
    click.echo(f"Workload A/B written to {out}")
