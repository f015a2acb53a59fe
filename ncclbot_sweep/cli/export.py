"""``ncclbot-sweep export``: a sweep's measured-best arms as files NCCL's tuners read.

Thin commands over :mod:`ncclbot_sweep.analysis.export`; pandas and the analysis are
imported inside the command so ``--help`` stays light.
"""

from __future__ import annotations

from pathlib import Path

import click

from ncclbot_sweep.cli.options import dataset_option, out_option

__all__ = ["export"]


def _common(f, *, margin: bool):
    if margin:
        f = click.option("--margin", type=float, default=None,
                         help="Only contexts where the measured best beats AUTO by at least this fraction "
                              "(0.05 = 5%); NCCL decides the rest.")(f)
    f = click.option("--rho-max", type=float, default=2.0, show_default=True,
                     help="Arm filter: drop arms predicted slower than rho_max x the best prediction.")(f)
    f = click.option("--window", type=(int, int), default=(11, 99), show_default=True,
                     help="Steady-state window (first and last iteration) that ranks arms.")(f)
    f = click.option("--fabric", default=None, help="The fabric to export (required when the dataset has several).")(f)
    return dataset_option(required=True, type=click.Path(file_okay=False, path_type=Path))(f)


def _common_margin(f):
    return _common(f, margin=True)


def _common_plain(f):
    return _common(f, margin=False)


def _run(kind, dataset, out, fabric, window, rho_max, margin=None):
    from ncclbot_sweep.analysis.export import write_export

    for path in write_export(kind, dataset, out, fabric=fabric, margin=margin, window=tuple(window),
                             rho_max=rho_max):
        click.echo(f"wrote {path}")


@click.group()
def export() -> None:
    """Export a sweep's measured-best arms for NCCL's example tuner or this project's plugin.

    \b
    Example, after ingesting a simulated sweep:
        ncclbot-sweep export nccl-tuner -d demo-out/dataset -o nccl_tuner.conf
    """


@export.command("nccl-tuner")
@_common_margin
@out_option("Config file to write (point NCCL_TUNER_CONFIG_FILE at it).", required=True,
            type=click.Path(dir_okay=False, path_type=Path))
def nccl_tuner(dataset, fabric, window, rho_max, margin, out):
    """NVIDIA's example tuner CSV: one line per run of sizes sharing the measured-best arm.

    \b
    Example:
        ncclbot-sweep export nccl-tuner -d demo-out/dataset -o nccl_tuner.conf --margin 0.05
    """
    _run("nccl-tuner", dataset, out, fabric, window, rho_max, margin)


@export.command("static")
@_common_margin
@out_option("Table file to write (point NCCLBOT_STATIC_TABLE at it, with NCCLBOT_POLICY=static).", required=True,
            type=click.Path(dir_okay=False, path_type=Path))
def static(dataset, fabric, window, rho_max, margin, out):
    """The plugin's static table: the measured-best arm per context (AUTO below --margin).

    \b
    Example:
        ncclbot-sweep export static -d demo-out/dataset -o static.csv
    """
    _run("static", dataset, out, fabric, window, rho_max, margin)


@export.command("state")
@_common_plain
@out_option("Folder to write (point NCCLBOT_STATE_DIR at it); one file per communicator shape.", required=True,
            type=click.Path(file_okay=False, path_type=Path))
def state(dataset, fabric, window, rho_max, out):
    """A warm start for the live bandit: the sweep's measured rewards in the plugin's saved-state format.

    \b
    Example:
        ncclbot-sweep export state -d demo-out/dataset -o state/
    """
    _run("state", dataset, out, fabric, window, rho_max)
