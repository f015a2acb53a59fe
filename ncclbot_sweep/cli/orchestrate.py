"""CLI commands of the orchestration area: inventory check, plan, render, submit, status, resume,
cancel and demo. Each command parses options, calls one library function and prints."""

from __future__ import annotations

from pathlib import Path

import click

from ncclbot_sweep.cli.jsonout import echo_json
from ncclbot_sweep.cli.options import (
    command_line, folder_argument, inventory_option, json_option, out_option, workdir_option,
)

__all__ = ["COMMANDS"]

_INVENTORY = inventory_option(required=True)
_SUMMARY_KEYS = ("root, campaign, campaign_key, fabric, jobs and steps (counts by state), total_steps, complete, "
                 "failed (one object per failed step) and job_rows (one per job).")
_JSON = json_option(_SUMMARY_KEYS)
_WORKDIR = folder_argument("workdir", ("-w", "--workdir"), what="campaign folder", help="The campaign folder",
                           type=click.Path(file_okay=False))
_BUDGET = click.option("--ignore-budget", is_flag=True, help="Plan even when the estimate exceeds the budget.")
_FROM_DATASET = click.option("--from-dataset", "from_dataset", metavar="DIR", type=click.Path(file_okay=False, exists=True),
                             help="Price the calls with the times an earlier campaign on this fabric measured (an "
                                  "ingested dataset) where it has them, NCCL's cost model elsewhere.")


def _measured(from_dataset: str | None, inventory_path: str):
    """The measured times of ``--from-dataset`` on the inventory's fabric, or None."""
    if from_dataset is None:
        return None
    from ncclbot_sweep.ingest.measured import measured_times
    from ncclbot_sweep.sweep.inventory import load_inventory

    return measured_times(from_dataset, load_inventory(inventory_path).name)


@click.group("inventory")
def inventory_group() -> None:
    """Inspect fabric inventories: the shipped ones, or check your own.

    \b
    Example:
        ncclbot-sweep inventory list
    """


@inventory_group.command("check")
@click.argument("path")
@json_option("every field of the inventory, defaults filled in.")
def inventory_check(path: str, as_json: bool) -> None:
    """Validate an inventory YAML (a path, or a shipped name) and print a summary.

    \b
    Example:
        ncclbot-sweep inventory check h100-spectrumx
    """
    from ncclbot_sweep.sweep.inventory import describe_inventory, load_inventory

    inventory = load_inventory(path)
    if as_json:
        echo_json(inventory.model_dump(mode="json"))
    else:
        click.echo(describe_inventory(inventory, path))


@inventory_group.command("list")
@json_option("a list of {name, fabric, synthetic, scheduler, gpus_per_node, description}.")
def inventory_list(as_json: bool) -> None:
    """List the inventories shipped with ncclbot-sweep (what -i NAME accepts).

    \b
    Example:
        ncclbot-sweep inventory list
    """
    from ncclbot_sweep.sweep.inventory import shipped_inventories

    rows = [{"name": name, "fabric": inv.name, "synthetic": inv.synthetic, "scheduler": inv.scheduler.kind,
             "gpus_per_node": inv.gpus_per_node, "description": inv.description}
            for name, inv in shipped_inventories()]
    _echo_list(rows, as_json, [("scheduler", "scheduler", 9), ("gpus", "gpus_per_node", -4)])


def _echo_list(rows: list[dict], as_json: bool, columns: list[tuple[str, str, int]]) -> None:
    """The shipped-file lists: JSON, or a table of name, ``columns`` (header, key, width; a negative
    width right-aligns) and description."""
    if as_json:
        echo_json(rows)
        return
    width = max(len(r["name"]) for r in rows)

    def line(values: dict) -> str:
        cells = [f"{values[key]!s:{'>' if w < 0 else '<'}{abs(w)}}" for _, key, w in columns]
        return "  ".join([f"{values['name']:<{width}}", *cells, str(values["description"])])

    click.echo(line({"name": "name", "description": "description", **{key: head for head, key, _ in columns}}))
    for r in rows:
        click.echo(line(r))


@click.group("campaign")
def campaign_group() -> None:
    """Inspect campaign specs: the shipped ones (plan checks your own).

    \b
    Example:
        ncclbot-sweep campaign list --json
    """


@campaign_group.command("list")
@json_option("a list of {name, kind, description}.")
def campaign_list(as_json: bool) -> None:
    """List the campaigns shipped with ncclbot-sweep (what plan and submit accept by name).

    \b
    Example:
        ncclbot-sweep campaign list
    """
    from ncclbot_sweep.sweep.campaign import shipped_campaigns

    rows = [{"name": name, "kind": c.kind, "description": c.description} for name, c in shipped_campaigns()]
    _echo_list(rows, as_json, [("kind", "kind", 8)])


@click.command("plan")
@click.argument("campaign_path")
@_INVENTORY
@json_option("campaign, campaign_key, fabric, kind, steps, priced_by, jobs (each with estimate_s of its calls, "
             "setup_s, time_limit_min and its steps, each with estimate_s and timeout_s), estimate_s (every job's "
             "calls), pruned, excluded_steps, node_hours, budget_node_hours, warnings.")
@_BUDGET
@_FROM_DATASET
def plan_cmd(campaign_path: str, inventory_path: str, as_json: bool, ignore_budget: bool,
             from_dataset: str | None) -> None:
    """Print the job matrix, the pruned arms and why, each job's estimate and limit, and node-hours.

    CAMPAIGN_PATH is a campaign YAML, or the name of a shipped one (ncclbot-sweep campaign list).
    Every call a step makes is priced by NCCL's cost model of the fabric model the inventory
    names (estimate.model), or by --from-dataset's measured times; step timeouts and job
    limits allow the inventory's estimate.margin over that, plus set-up.

    \b
    Example:
        ncclbot-sweep plan forced-arm-h100 -i h100-spectrumx
    """
    from ncclbot_sweep.sweep.campaign import describe_plan, load_campaign, plan_campaign
    from ncclbot_sweep.sweep.inventory import load_inventory

    plan = plan_campaign(load_campaign(campaign_path), load_inventory(inventory_path),
                         enforce_budget=not ignore_budget, measured=_measured(from_dataset, inventory_path))
    if as_json:
        echo_json(plan.summary())
    else:
        click.echo(describe_plan(plan))


@click.command("render")
@click.argument("campaign_path")
@_INVENTORY
@out_option("Campaign folder to write job scripts into (created if needed).", required=True,
            type=click.Path(file_okay=False))
@_BUDGET
@_FROM_DATASET
def render_cmd(campaign_path: str, inventory_path: str, out: str, ignore_budget: bool, from_dataset: str | None) -> None:
    """Render the job scripts (job.sh) and step descriptions (step.json) without running them.

    CAMPAIGN_PATH is a campaign YAML, or the name of a shipped one (ncclbot-sweep campaign list).

    \b
    Example:
        ncclbot-sweep render demo -i sim-h100 -o demo-render
    """
    from ncclbot_sweep.sweep.campaign import load_campaign, plan_campaign
    from ncclbot_sweep.sweep.campaign_folder import run_root_for
    from ncclbot_sweep.sweep.inventory import load_inventory
    from ncclbot_sweep.sweep.render import render_campaign

    plan = plan_campaign(load_campaign(campaign_path), load_inventory(inventory_path),
                         enforce_budget=not ignore_budget, measured=_measured(from_dataset, inventory_path))
    scripts = render_campaign(plan, Path(out), run_root=run_root_for(plan, Path(out)))
    click.echo(f"rendered {len(scripts)} job scripts ({len(plan.steps)} steps) into {out}")


def _echo_summary(summary, as_json: bool, *, job_table: bool = False) -> None:
    if as_json:
        echo_json(summary.as_dict())
        return
    steps = ", ".join(f"{v} {k}" for k, v in sorted(summary.steps.items()))
    jobs = ", ".join(f"{v} {k}" for k, v in sorted(summary.jobs.items()))
    click.echo(f"campaign {summary.campaign} on {summary.fabric} in {summary.root}")
    click.echo(f"  jobs:  {jobs}")
    click.echo(f"  steps: {summary.steps_ok}/{summary.total_steps} ok ({steps})")
    for bad in summary.failed[:20]:
        code = "" if bad["exit_code"] is None else f" exit {bad['exit_code']}"
        click.echo(f"  {bad['outcome']:<11} {bad['label']}{code}  (jobs/{bad['job_key']}/steps/{bad['step_key']})")
        if bad.get("last_error"):
            click.echo(f"              {bad['last_error']}")
    if len(summary.failed) > 20:
        click.echo(f"  ... and {len(summary.failed) - 20} more")
    if job_table:
        click.echo(f"  {'job':<16} {'nodes':>5}  {'phase':<9} {'scheduler':<10} {'id':<10} {'tries':>5}  steps ok")
        for row in summary.job_rows:
            click.echo(f"  {row['job_key']:<16} {row['nodes']:>5}  {row['phase']:<9} {row['scheduler_state'] or '-':<10} "
                       f"{row['executor_job_id'] or '-':<10} {row['attempts']:>5}  {row['steps_ok']}/{row['steps']}")


def _finish(summary, as_json: bool, waited: bool) -> None:
    from ncclbot_sweep.errors import ExitCode

    _echo_summary(summary, as_json)
    if waited and summary.failed:
        raise SystemExit(ExitCode.USER_ERROR)


_WAIT = click.option("--wait/--no-wait", default=True, show_default=True,
                     help="Stay until every job has ended (else return after submitting).")
_WAIT_LOCK = click.option("--wait-lock", "lock_wait_s", type=click.FloatRange(min=0), default=0, show_default=True,
                          metavar="SECONDS", help="How long to wait for another submit/resume of this campaign "
                          "to end before refusing.")


@click.command("submit")
@click.argument("campaign_path")
@_INVENTORY
@workdir_option("The campaign folder (created, or continued if it exists).", required=True,
                type=click.Path(file_okay=False))
@_WAIT
@_WAIT_LOCK
@_JSON
@_BUDGET
@_FROM_DATASET
def submit_cmd(campaign_path: str, inventory_path: str, workdir: str, wait: bool, lock_wait_s: float,
               as_json: bool, ignore_budget: bool, from_dataset: str | None) -> None:
    """Plan, render and run a campaign; jobs already submitted are never submitted again.

    CAMPAIGN_PATH is a campaign YAML, or the name of a shipped one (ncclbot-sweep campaign list).
    On the local executor (the sim-* inventories) the jobs still queued go on after the command
    ends or is interrupted, as on Slurm; 'status' follows them.

    \b
    Example:
        ncclbot-sweep submit demo -i sim-h100 -w runs/demo
    """
    from ncclbot_sweep.progress import progress_reporter
    from ncclbot_sweep.sweep.runner import submit

    with progress_reporter() as progress:
        summary = submit(campaign_path, inventory_path, workdir=workdir, wait=wait, progress=progress,
                         enforce_budget=not ignore_budget, lock_wait_s=lock_wait_s,
                         measured=_measured(from_dataset, inventory_path))
    _finish(summary, as_json, wait)


@click.command("status")
@_WORKDIR
@click.option("--jobs", "job_table", is_flag=True, help="Also print one line per job.")
@click.option("--check", is_flag=True, help="Exit 1 unless every step is ok (a step failed, or some have not run).")
@_JSON
def status_cmd(workdir: str, job_table: bool, check: bool, as_json: bool) -> None:
    """Print job and step states as the scheduler sees them now; writes nothing.

    Failed steps are listed with their exit code and last error line. 'resume' records
    what status shows and re-runs what failed. With --check it exits 1 unless every
    step is ok, for scripts.

    \b
    Example:
        ncclbot-sweep status runs/demo --jobs
        ncclbot-sweep status -w runs/demo --check
    """
    from ncclbot_sweep.errors import ExitCode
    from ncclbot_sweep.sweep.runner import status

    summary = status(workdir)
    _echo_summary(summary, as_json, job_table=job_table)
    if check and not summary.complete:
        raise SystemExit(ExitCode.USER_ERROR)


@click.command("resume")
@_WORKDIR
@_WAIT
@_WAIT_LOCK
@_JSON
def resume_cmd(workdir: str, wait: bool, lock_wait_s: float, as_json: bool) -> None:
    """Finish a campaign: adopt running jobs, re-run only steps that are missing or failed.

    \b
    Example:
        ncclbot-sweep resume runs/demo
    """
    from ncclbot_sweep.progress import progress_reporter
    from ncclbot_sweep.sweep.runner import resume

    with progress_reporter() as progress:
        summary = resume(workdir, wait=wait, progress=progress, lock_wait_s=lock_wait_s)
    _finish(summary, as_json, wait)


@click.command("cancel")
@_WORKDIR
@_JSON
def cancel_cmd(workdir: str, as_json: bool) -> None:
    """Cancel the campaign's open and unsubmitted jobs ('resume' continues later).

    \b
    Example:
        ncclbot-sweep cancel runs/demo
    """
    from ncclbot_sweep.sweep.runner import cancel

    _echo_summary(cancel(workdir), as_json)


@click.command("demo")
@out_option("Folder for the demo's outputs: OUT/campaign, OUT/dataset and OUT/report.", default="demo-out",
            show_default=True, type=click.Path(file_okay=False))
def demo_cmd(out: str) -> None:
    """Run the paper's method on the simulated H100 fabric: sweep, ingest, audit, replay, report.

    \b
    Example:
        ncclbot-sweep demo -o demo-out
    """
    from ncclbot_sweep.demo import DEMO_CAMPAIGN, DEMO_INVENTORY, DEMO_LIVE_CAMPAIGN, DEMO_WORKLOAD_CAMPAIGN, run_demo
    from ncclbot_sweep.progress import progress_reporter
    from ncclbot_sweep.sweep.runner import status

    shipped = ", ".join(Path(name).stem for name in (DEMO_CAMPAIGN, DEMO_LIVE_CAMPAIGN, DEMO_WORKLOAD_CAMPAIGN))
    click.echo(f"demo: the shipped campaigns {shipped} on inventory {Path(DEMO_INVENTORY).stem} "
               f"('ncclbot-sweep campaign list'), into {Path(out).resolve()}")
    with progress_reporter() as progress:
        result = run_demo(Path(out), command=command_line(), progress=progress,
                          on_stage=lambda name: click.echo(f"demo: {name}"))
    _echo_summary(status(result.campaign), False)
    _echo_summary(status(result.live_campaign), False)
    _echo_summary(status(result.workload_campaign), False)
    for line in result.summary():
        click.echo(line)


COMMANDS = [inventory_group, campaign_group, plan_cmd, render_cmd, submit_cmd, status_cmd, resume_cmd, cancel_cmd, demo_cmd]
