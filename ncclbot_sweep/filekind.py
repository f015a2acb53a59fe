"""What kind of file a path is, in words: only regular files are ever read.

A FIFO blocks the reader forever, ``/dev/zero`` never ends, a directory cannot be read as
text: ingest (an input named on the command line or found in a folder), the step outcome
rule (a step's ``exit`` marker) and the ``step.json`` reader all ask :func:`file_kind` first
and refuse anything but a regular file, naming what it is.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["REGULAR", "file_kind"]

#: What :func:`file_kind` says of a regular file (the only kind that is read).
REGULAR = "regular file"
_KINDS = ((stat.S_ISREG, REGULAR), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """``regular file``, ``directory``, ``FIFO``, ``character device``, ... (symlinks followed);
    ``broken link`` for a link that leads nowhere, ``circular link`` for one that leads back to
    itself; None when nothing is there."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if not Path(path).is_symlink():
            return None
        return "circular link" if exc.errno == errno.ELOOP else "broken link"
    return next((name for test, name in _KINDS if test(mode)), "special file")
