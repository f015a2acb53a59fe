"""Progress display for long campaign commands: a bar on a terminal, plain lines otherwise.

The runner calls a :data:`ncclbot_sweep.sweep.runner.Progress` callback after every poll; this
module turns that into a rich progress bar when the stream is a terminal, or into a plain
line whenever the message changes (logs, CI, pipes).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Callable

__all__ = ["progress_reporter"]


@contextmanager
def progress_reporter(stream: IO[str] | None = None, *, label: str = "steps",
                      force_plain: bool = False) -> Iterator[Callable[[int, int, str], None]]:
    """Yield a callback ``(done, total, message)`` that displays progress on ``stream`` (stderr).

    The count is shown once, as ``done/total label`` (the bar's count on a terminal,
    ``[done/total label]`` otherwise); ``message`` adds what the count does not say.
    """
    stream = stream or sys.stderr
    if not force_plain and hasattr(stream, "isatty") and stream.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[message]}"), console=Console(file=stream),
                      transient=False) as bar:
            task = bar.add_task(label, total=None, message="")

            def update(done: int, total: int, message: str) -> None:
                bar.update(task, completed=done, total=total, message=message)

            yield update
        return
    last: list[str] = []

    def plain(done: int, total: int, message: str) -> None:
        line = f"[{done}/{total} {label}] {message}"
        if not last or last[-1] != line:
            print(line, file=stream, flush=True)
            last[:] = [line]

    yield plain
