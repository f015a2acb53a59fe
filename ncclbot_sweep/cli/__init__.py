"""The ``ncclbot-sweep`` command: a thin shell over the library (architecture section 2.1).

Each area keeps its commands in its own module here and is registered below. Library
errors (:class:`~ncclbot_sweep.errors.NcclbotError`) and OS faults (a full disk, a read-only
file system, missing permissions) become ``Error: ...`` with exit 1;
Ctrl-C exits 130. Heavy libraries are imported inside the commands that need them.
"""

from __future__ import annotations

import logging
import sys

import click

from ncclbot_sweep import __version__
from ncclbot_sweep.errors import ExitCode, NcclbotError, from_os_error

__all__ = ["main"]


class _Group(click.Group):
    """A click group that maps library errors to exit codes."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except NcclbotError as exc:
            raise click.ClickException(str(exc)) from exc
        except OSError as exc:  # the boundary for OS faults (EACCES, EROFS, ENOSPC): one Error: line
            logging.getLogger(__name__).debug("OS error", exc_info=True)
            raise click.ClickException(str(from_os_error(exc))) from exc
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(ExitCode.INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ncclbot-sweep")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Sweep NCCL algorithms and protocols on Slurm, ingest the results, and analyse them.

    Example, on the embedded simulated fabric:

        ncclbot-sweep plan campaigns/demo.yaml --inventory inventories/sim-h100.yaml
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    """Attach every area's commands to ``main`` (one line per area)."""
    from ncclbot_sweep.cli import orchestrate

    for command in orchestrate.COMMANDS:
        main.add_command(command)
    from ncclbot_sweep.cli import ingest as ingest_cli

    main.add_command(ingest_cli.ingest_command)
    main.add_command(ingest_cli.datasets_group)
    from ncclbot_sweep.cli import sim as sim_cli

    main.add_command(sim_cli.sim_group)
    from ncclbot_sweep.cli import analyze as analyze_cli

    main.add_command(analyze_cli.analyze)
    from ncclbot_sweep.cli import export as export_cli

    main.add_command(export_cli.export)
    from ncclbot_sweep.cli import remote as remote_cli

    main.add_command(remote_cli.collect_cmd)


_register()
