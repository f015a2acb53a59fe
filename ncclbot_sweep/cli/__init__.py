"""The ``ncclbot-sweep`` command: a thin shell over the library (architecture section 2.1).

The top of the package: it takes the command line and gives each stage (sweep, ingest,
analysis, report and export, the simulator, the plugin build) its options, and may import any
of them.

Each area keeps its commands in its own module here and is registered below. Library
errors (:class:`~ncclbot_sweep.errors.NcclbotError`) and OS faults (a full disk, a read-only
file system, missing permissions) become ``Error: ...`` with exit 1;
Ctrl-C exits 130. Heavy libraries are imported inside the commands that need them.
Every command, group or not, gets the global flags (``-v``, ``--version``) once all are
registered, so ``ncclbot-sweep analyze live -v`` works like ``ncclbot-sweep -v analyze live``.
"""

from __future__ import annotations

import logging
import sys

import click

from ncclbot_sweep import __version__
from ncclbot_sweep.errors import ExitCode, Interrupted, NcclbotError, from_os_error

__all__ = ["main"]


class _OncePerCommand(logging.Filter):
    """Say each warning once per command: loading one dataset several times (the two sides of a
    comparison, a study's steps) must not repeat the same note on every load."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_ONCE = _OncePerCommand()


class _Group(click.Group):
    """A click group that maps library errors to exit codes."""

    def invoke(self, ctx: click.Context):
        if ctx.parent is None:
            _ONCE.seen.clear()  # a new command (tests invoke several in one process)
        try:
            return super().invoke(ctx)
        except NcclbotError as exc:
            raise click.ClickException(str(exc)) from exc
        except OSError as exc:  # the boundary for OS faults (EACCES, EROFS, ENOSPC): one Error: line
            logging.getLogger(__name__).debug("OS error", exc_info=True)
            raise click.ClickException(str(from_os_error(exc))) from exc
        except KeyboardInterrupt as exc:  # Interrupted says what is left and how to finish it
            click.echo(f"Interrupted: {exc}" if isinstance(exc, Interrupted) else "Interrupted.", err=True)
            sys.exit(ExitCode.INTERRUPTED)


_VERBOSITY = "ncclbot_sweep.verbosity"


def _verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    """Add this level's -v count to the run's total and set the log level (-v info, -vv debug)."""
    root = ctx.find_root()
    total = root.meta.get(_VERBOSITY, 0) + value
    root.meta[_VERBOSITY] = total
    if not logging.getLogger().handlers:  # the command's own console handler (an embedding program keeps its own)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_ONCE)
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
    if total:
        logging.getLogger().setLevel(logging.WARNING - 10 * min(total, 2))


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"ncclbot-sweep, version {__version__}")
        ctx.exit()


def _global_options() -> list[click.Option]:
    """The flags every command takes, before or after its name (fresh objects per command)."""
    return [
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_verbose,
                     help="More log output (-v info, -vv debug); counts at every level of the command."),
        click.Option(["--version"], is_flag=True, expose_value=False, is_eager=True, callback=_version,
                     help="Show the version and exit."),
    ]


def _add_global_options(command: click.Command) -> None:
    """Give ``command`` and every command under it the global flags (once)."""
    names = {p.name for p in command.params}
    command.params.extend(o for o in _global_options() if o.name not in names)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_global_options(sub)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Sweep NCCL algorithms and protocols on Slurm, ingest the results, and analyse them.

    Example, on the embedded simulated fabric:

    \b
        ncclbot-sweep plan demo --inventory sim-h100
    """


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
    from ncclbot_sweep.cli import plugin as plugin_cli

    main.add_command(plugin_cli.plugin_group)
    from ncclbot_sweep.cli import analyze as analyze_cli

    main.add_command(analyze_cli.analyze)
    from ncclbot_sweep.cli import export as export_cli

    main.add_command(export_cli.export)
    from ncclbot_sweep.cli import remote as remote_cli

    main.add_command(remote_cli.collect_cmd)
    _add_global_options(main)


_register()
