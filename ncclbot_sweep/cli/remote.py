"""``ncclbot-sweep collect``: bring finished steps back from the cluster (thin shell)."""

from __future__ import annotations

import click

from ncclbot_sweep.cli.jsonout import echo_json
from ncclbot_sweep.cli.options import folder_argument, json_option

__all__ = ["collect_cmd"]


@click.command("collect")
@folder_argument("workdir", ("-w", "--workdir"), what="campaign folder", help="The campaign folder",
                 type=click.Path(file_okay=False, exists=True))
@json_option("jobs, files_fetched, bytes_fetched, files_resumed, files_unchanged, steps_collected, "
             "steps_unfinished.")
def collect_cmd(workdir: str, as_json: bool) -> None:
    """Copy each finished step's folder from the cluster into the campaign folder WORKDIR.

    Sizes and SHA-256 checksums are verified; files already here are skipped and an
    interrupted transfer resumes, so it is safe to run again. Campaigns that ran through
    the local shell need no collect.

    \b
    Example:
        ncclbot-sweep collect runs/h100-sweep
    """
    from ncclbot_sweep.sweep.collect import collect

    report = collect(workdir)
    if as_json:
        echo_json(report.as_dict())
        return
    click.echo(f"{report.jobs} jobs: {report.files_fetched} files fetched ({report.bytes_fetched} bytes, "
               f"{report.files_resumed} resumed), {report.files_unchanged} unchanged; "
               f"{report.steps_collected} finished steps, {report.steps_unfinished} not finished yet")
