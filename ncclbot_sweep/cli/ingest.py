"""Commands ``ingest PATH... --dataset DIR`` and ``datasets info DIR`` (thin: parse, call, print)."""

from __future__ import annotations

import os

import click

from ncclbot_sweep.cli.jsonout import echo_json
from ncclbot_sweep.cli.options import dataset_option, folder_argument, json_option

__all__ = ["ingest_command", "datasets_group"]


class _InputPath(click.Path):
    """A path that exists, or a link even if it leads nowhere or to itself: ingest quarantines
    such a link like any unreadable input and ingests the rest; a path that is not there at all
    is a typo, refused before anything is written."""

    def convert(self, value, param, ctx):
        if os.path.islink(value):
            return value
        return super().convert(value, param, ctx)


@click.command("ingest")
@folder_argument("paths", ("-w", "--workdir"), what="paths to ingest", multiple=True, type=_InputPath(exists=True),
                 help="A campaign folder, other folder or file to ingest; repeat for several")
@dataset_option("Dataset folder to write (created if missing).", required=True, type=click.Path(file_okay=False))
@click.option("--fabric", default=None, help="Fabric name for loose files without step.json (default: unknown).")
@click.option("--include-unfinished", is_flag=True,
              help="Also ingest step folders without an exit marker (as failed runs).")
@click.option("--strict", is_flag=True,
              help="Exit 1 when anything was quarantined, even part of a file (for CI and scripts).")
def ingest_command(paths: tuple[str, ...], dataset: str, fabric: str | None, include_unfinished: bool,
                   strict: bool) -> None:
    """Parse nccl-tests output, NCCL logs and traces into Parquet tables.

    Each path may be a file, a folder or a campaign folder. Ingesting the same file twice adds
    nothing; files that cannot be parsed are listed in the dataset's quarantine table.
    A second ingest into the same dataset waits for the first one.

    \b
    Example:
        ncclbot-sweep ingest runs/demo logs/all_reduce.txt -d data/ --strict
        ncclbot-sweep ingest -w runs/demo -d data/
    """
    from rich.console import Console

    from ncclbot_sweep.ingest.walk import ingest

    console = Console(stderr=True)
    options = dict(fabric=fabric, include_unfinished=include_unfinished,
                   on_wait=lambda: click.echo(f"waiting for another ingest into {dataset} to finish", err=True))
    if console.is_terminal:
        from rich.progress import Progress

        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("ingest", total=None)
            summary = ingest(paths, dataset, **options,
                             on_progress=lambda p, done, total: progress.update(task, completed=done, total=total))
    else:
        summary = ingest(paths, dataset, **options)
    _echo_ingest(summary)
    if summary.nothing_found:
        raise click.ClickException(summary.nothing_found)
    if strict and not summary.clean:
        raise click.ClickException(
            f"--strict: {len(summary.quarantined)} input(s) quarantined and {summary.partial} partly; the reasons "
            f"are in the quarantine table (ncclbot-sweep datasets info {dataset})")


def _echo_ingest(summary) -> None:
    """What an ingest did: the counts, rows per table, each quarantined input (nothing when it found nothing)."""
    if summary.files or summary.unfinished:
        replaced = f"  replaced: {summary.replaced}" if summary.replaced else ""
        click.echo(f"files: {summary.files}  ingested: {summary.ingested} (partly: {summary.partial})  "
                   f"already in dataset: {summary.skipped}  quarantined: {len(summary.quarantined)}{replaced}")
    for name, count in sorted(summary.rows.items()):
        click.echo(f"  {name:14s} {count:>10d} rows")
    for path, reason in summary.quarantined:
        click.echo(f"quarantined: {path}: {reason}")
    if summary.unfinished:
        click.echo(f"{len(summary.unfinished)} step folder(s) have no exit marker yet and were left for a later "
                   "ingest (--include-unfinished takes them now)")


@click.group("datasets")
def datasets_group() -> None:
    """Inspect ingested datasets.

    \b
    Example:
        ncclbot-sweep datasets info data/
    """


@datasets_group.command("info")
@folder_argument("dataset", ("-d", "--dataset"), what="dataset folder", type=click.Path(),
                 help="The dataset folder")
@json_option("root; tables (per table: rows, files); sources (count per status); quarantine_reasons (count per "
             "reason, the 20 most common); runs_by_fabric (per fabric: count per outcome).")
def info_command(dataset: str, as_json: bool) -> None:
    """Rows per table, sources by status and the main quarantine reasons.

    \b
    Example:
        ncclbot-sweep datasets info data/
        ncclbot-sweep datasets info -d data/ --json
    """
    from ncclbot_sweep.ingest.walk import dataset_info

    info = dataset_info(dataset)
    if as_json:
        echo_json(info)
        return
    click.echo(f"dataset {info['root']}")
    for name, stats in info["tables"].items():
        click.echo(f"  {name:14s} {stats['rows']:>10d} rows in {stats['files']} files")
    click.echo("sources: " + (", ".join(f"{k} {v}" for k, v in sorted(info["sources"].items())) or "none"))
    for fabric, outcomes in sorted(info["runs_by_fabric"].items()):
        click.echo(f"runs on {fabric}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    for reason, count in info["quarantine_reasons"].items():
        click.echo(f"  {count:>5d} x {reason}")
