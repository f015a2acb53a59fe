"""The options every area shares, spelled once: ``-d/--dataset``, ``-o/--out``, ``-w/--workdir``,
``-i/--inventory``, ``--json``.

A folder that older releases took as a positional argument (``status DIR``, ``datasets info
DIR``) goes through :func:`folder_argument`: the positional form keeps working and the
option is accepted too, exactly one of them.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = ["dataset_option", "out_option", "workdir_option", "inventory_option", "json_option", "folder_argument",
           "command_line"]

DATASET_HELP = "Dataset root written by 'ncclbot-sweep ingest'."


def dataset_option(help: str = DATASET_HELP, *, dest: str = "dataset", **kwargs: Any) -> Callable:
    """``-d/--dataset``: a dataset folder read (or, for ``ingest``, written)."""
    return click.option("-d", "--dataset", dest, help=help, **kwargs)


def out_option(help: str, **kwargs: Any) -> Callable:
    """``-o/--out``: where a command writes its output (a folder, or a file where the help says so).

    A command that fails leaves nothing behind: folders it created for ``--out`` and left
    without a file (an analysis of an empty dataset) are removed again; files are never touched.
    """
    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            created = _first_missing(kwargs.get("out"))
            try:
                return f(*args, **kwargs)
            except BaseException:
                if created is not None and created.is_dir() and not any(
                        not p.is_dir() or p.is_symlink() for p in created.rglob("*")):
                    shutil.rmtree(created, ignore_errors=True)
                raise

        return click.option("-o", "--out", "out", help=help, **kwargs)(command)

    return decorate


def _first_missing(path: Any) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what the command would create)."""
    if path is None or os.path.lexists(path):
        return None
    path = Path(path).absolute()
    while not os.path.lexists(path.parent):
        path = path.parent
    return path


def workdir_option(help: str, **kwargs: Any) -> Callable:
    """``-w/--workdir``: a campaign folder."""
    return click.option("-w", "--workdir", "workdir", help=help, **kwargs)


INVENTORY_HELP = "Inventory YAML of the fabric (a path, or a shipped name such as sim-h100)."


def inventory_option(help: str = INVENTORY_HELP, **kwargs: Any) -> Callable:
    """``-i/--inventory``: a fabric inventory (the command receives it as ``inventory_path``)."""
    return click.option("-i", "--inventory", "inventory_path", help=help, **kwargs)


def json_option(keys: str) -> Callable:
    """``--json``: strict JSON on stdout (null for a missing number); ``keys`` documents what it holds."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print JSON instead of text: {keys}")


def folder_argument(name: str, flags: tuple[str, str], *, what: str, help: str, multiple: bool = False,
                    type: click.ParamType | None = None) -> Callable:
    """A folder given as the positional NAME (as before) or with ``flags``; exactly one of the two.

    The command receives it as the keyword ``name`` (a tuple when ``multiple``). Giving both,
    or neither, is a usage error that names both spellings.
    """
    metavar = name.upper() + ("..." if multiple else "")
    spelled = f"{metavar} or {'/'.join(flags)}"

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            positional, option = kwargs.pop(f"{name}_positional"), kwargs.pop(name)
            if positional and option:
                raise click.UsageError(f"give the {what} once: as {spelled}, not both")
            if not (positional or option):
                raise click.UsageError(f"missing the {what}: give it as {spelled}")
            kwargs[name] = positional or option
            return f(*args, **kwargs)

        command = click.option(*flags, name, type=type, multiple=multiple,
                               help=f"{help} (or give {'them' if multiple else 'it'} as {metavar}).")(command)
        return click.argument(f"{name}_positional", metavar=f"[{metavar}]", nargs=-1 if multiple else 1,
                              required=False, type=type)(command)

    return decorate


def command_line() -> str:
    """The command line that is running, as typed (program name without its folder): what a
    report records as the command that made it."""
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
