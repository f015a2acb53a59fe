"""The project's exception types and exit codes.

Library code raises these and never prints; the CLI turns them into ``Error: ...`` and the
exit code of :class:`ExitCode`. Every message says what is wrong, where (file and line, or
the job/step key) and how to fix it.
"""

from __future__ import annotations

import difflib
import enum
import errno
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "ExitCode",
    "NcclbotError",
    "InventoryError",
    "CampaignError",
    "WorkloadError",
    "PlanError",
    "RenderError",
    "ExecutorError",
    "SchedulerError",
    "TransportError",
    "ManifestError",
    "CampaignBusyError",
    "ParseError",
    "DatasetError",
    "AnalysisError",
    "PluginBuildError",
    "OutOfSpaceError",
    "Interrupted",
    "NEARLY_FULL_BYTES",
    "file_system_full",
    "is_out_of_space",
    "from_os_error",
    "did_you_mean",
]


class ExitCode(enum.IntEnum):
    """Process exit codes of ``ncclbot-sweep``."""

    OK = 0
    USER_ERROR = 1  # a fixable problem: bad file, bad option value, failed steps to inspect
    USAGE = 2  # click's usage errors
    INTERRUPTED = 130  # Ctrl-C


class NcclbotError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None,
                 hint: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.hint = hint
        self.reason = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        text = f"{where}{self.reason}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class InventoryError(NcclbotError):
    """An inventory YAML is missing, malformed or invalid."""


class CampaignError(NcclbotError):
    """A campaign spec is missing, malformed or invalid."""


class WorkloadError(NcclbotError):
    """A workload spec or trace for the simulator's workload player is missing, malformed or invalid."""


class PlanError(NcclbotError):
    """A campaign cannot be planned on an inventory (no valid arm, over budget, ...)."""


class RenderError(NcclbotError):
    """A job script cannot be rendered from its template."""


class ExecutorError(NcclbotError):
    """An executor could not submit, poll, cancel or fetch a job."""


class SchedulerError(ExecutorError):
    """The scheduler (Slurm) refused or failed a command."""


class TransportError(ExecutorError):
    """The local shell or SSH transport failed (connection, authentication, transfer).

    ``retryable`` marks failures worth another attempt (a refused or dropped connection);
    authentication and host-key problems never are.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None,
                 hint: str | None = None, retryable: bool = False) -> None:
        super().__init__(message, path=path, line=line, hint=hint)
        self.retryable = retryable


class ManifestError(NcclbotError):
    """The campaign manifest is missing, of another schema version, or inconsistent."""


class CampaignBusyError(ManifestError):
    """Another ``submit``/``resume`` holds the campaign folder's runner lock."""


class ParseError(NcclbotError):
    """An input file could not be parsed (the ingest records it in quarantine)."""


class DatasetError(NcclbotError):
    """A dataset folder is missing, or a table in it does not match its schema."""


class AnalysisError(NcclbotError):
    """The analysis cannot run on the given dataset (missing tables, no contexts, ...)."""


class PluginBuildError(NcclbotError):
    """The plugin could not be built from the shipped sources (no C compiler, a compile error, no writable folder)."""


class OutOfSpaceError(NcclbotError):
    """A write failed because its file system is full (or the disk quota is used up).

    Whoever raises it has left nothing half-written; the hint says how to continue once
    space is freed (``resume`` for a campaign, the same ``ingest`` for a dataset).
    """


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what the interrupted command leaves behind and how to finish it.

    The CLI prints the message instead of a bare "Interrupted." and exits 130.
    """


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'sim-h100'?)`` for the choices closest to a mistyped name, else ``""``.

    The one spelling hint of the project: inventory, campaign and fabric names all go through it.
    """
    close = difflib.get_close_matches(str(name), sorted({str(c) for c in choices}), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


_WRITABLE = "check the permissions of that path, or choose a folder you can write to"
_SPACE = "free space on that file system (or choose another folder), then run the command again: it continues"
_OS_FIXES = {
    errno.EACCES: _WRITABLE,
    errno.EPERM: _WRITABLE,
    errno.EROFS: "that file system is mounted read-only: choose a folder on a writable one",
    errno.ENOSPC: _SPACE,
    errno.EDQUOT: "your disk quota is used up; " + _SPACE,
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another path",
    errno.EISDIR: "that path is a folder: give a file",
    errno.EEXIST: "that path exists already and is in the way: remove it or choose another",
}


#: Free space below which a failed write is taken for a full file system: SQLite reports some
#: such writes only as "disk I/O error", and a job's step cannot even write why it failed.
NEARLY_FULL_BYTES = 1 << 20


def file_system_full(path: str | Path) -> bool:
    """True when the file system holding ``path`` (or its nearest existing parent) has less than
    :data:`NEARLY_FULL_BYTES` left for this user."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < NEARLY_FULL_BYTES


def is_out_of_space(exc: BaseException) -> bool:
    """True for an error that says a file system is full or a disk quota used up."""
    return isinstance(exc, OutOfSpaceError) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT))


def from_os_error(exc: OSError) -> NcclbotError:
    """An operating-system fault (permissions, read-only or full disk) as an error naming the path and the fix.

    Called at the CLI boundary, so that such faults print one ``Error:`` line, never a traceback.
    """
    path = exc.filename if exc.filename is not None else None
    what = exc.strerror or str(exc)
    if exc.filename2 is not None:
        what += f" (and {exc.filename2})"
    return NcclbotError(what, path=path, hint=_OS_FIXES.get(exc.errno, "check the path and the file system"))
