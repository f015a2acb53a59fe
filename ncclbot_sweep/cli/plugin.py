"""Commands ``plugin build`` and ``plugin path`` (thin: call :mod:`ncclbot_sweep.pluginbuild`, print)."""

from __future__ import annotations

import click

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.cli.jsonout import echo_json
from ncclbot_sweep.cli.options import json_option

__all__ = ["plugin_group"]


@click.group("plugin")
def plugin_group() -> None:
    """The NCCL tuner+profiler plugin, compiled from the C sources ncclbot-sweep ships.

    A C compiler is all it needs ($CC, else cc). Inside a source checkout the files are in
    plugin/build (as 'make -C plugin' leaves them); an installed package builds them on first
    use into $NCCLBOT_PLUGIN_CACHE, else $XDG_CACHE_HOME/ncclbot-sweep, else
    ~/.cache/ncclbot-sweep, one folder per version and source digest. On a cluster, point
    NCCLBOT_PLUGIN_CACHE at a file system the compute nodes see.

    \b
    Example:
        ncclbot-sweep plugin path
    """


@plugin_group.command("build")
def build_command() -> None:
    """Compile the plugin, its coordinator, the settings printer and the simulator's host; print their folder.

    Other commands build on first use; this one always compiles (after editing the sources
    of a checkout, say).

    \b
    Example:
        ncclbot-sweep plugin build
    """
    click.echo(str(pluginbuild.build(force=True)))


@plugin_group.command("path")
@json_option("dir (the build folder) and the absolute path of every built file: plugin (the library "
             "NCCL_TUNER_PLUGIN and NCCL_PROFILER_PLUGIN name), coordinator, settings, simhost.")
def path_command(as_json: bool) -> None:
    """Print the plugin library's absolute path, for NCCL_TUNER_PLUGIN and NCCL_PROFILER_PLUGIN (builds on first use).

    \b
    Example:
        export NCCL_TUNER_PLUGIN="$(ncclbot-sweep plugin path)" NCCL_PROFILER_PLUGIN="$(ncclbot-sweep plugin path)"
        ncclbot-sweep plugin path --json
    """
    folder = pluginbuild.build()
    if as_json:
        echo_json({"dir": str(folder), **{key: str(folder / name) for key, name in pluginbuild.FILES.items()}})
    else:
        click.echo(str(folder / pluginbuild.LIBRARY))
