"""``ncclbot-sweep collect``: bring finished steps back from the cluster (thin shell)."""

from __future__ import annotations

import json

import click

__all__ = ["collect_cmd"]


@click.command("collect")
@click.argument("workdir", type=click.Path(file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a sentence.")
def collect_cmd(workdir: str, as_json: bool) -> None:
    """Copy each finished step's folder from the cluster into the campaign folder WORKDIR.

    Sizes and SHA-256 checksums are verified; files already here are skipped and an
    interrupted transfer resumes, so it is safe to run again. Campaigns that ran through
    the local shell need no collect.

    Example: ncclbot-sweep collect runs/h100-sweep
    """
    from ncclbot_sweep.collect import collect

    report = collect(workdir)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    click.echo(f"{report.jobs} jobs: {report.files_fetched} files fetched ({report.bytes_fetched} bytes, "
               f"{report.files_resumed} resumed), {report.files_unchanged} unchanged; "
               f"{report.steps_collected} finished steps, {report.steps_unfinished} not finished yet")
