"""What kind of file a path is, in words: only regular files are ever read.

A FIFO blocks the reader forever, ``/dev/zero`` never ends, a directory cannot be read as
text: ingest (an input named on the command line or found in a folder), the step outcome
rule (a step's ``exit`` marker) and the ``step.json`` reader all ask :func:`file_kind` first
and refuse anything but a regular file, naming what it is. A file parsed whole in memory
(JSON, traces, a step's output) is refused unread past :data:`WHOLE_READ_LIMIT`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["REGULAR", "WHOLE_READ_LIMIT", "file_kind", "read_whole", "too_big_to_read"]

#: What :func:`file_kind` says of a regular file (the only kind that is read).
REGULAR = "regular file"
_KINDS = ((stat.S_ISREG, REGULAR), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


#: The most bytes of a file that is parsed whole in memory (a JSON document, a trace, a step's
#: output): parsing takes up to about seven times its size, so one input stays well under 1 GB.
WHOLE_READ_LIMIT = 64 << 20


def too_big_to_read(size: int) -> str:
    """The quarantine reason of a file of ``size`` bytes (decompressed: at least) over :data:`WHOLE_READ_LIMIT`."""
    return (f"{size} bytes, over the {WHOLE_READ_LIMIT >> 20} MiB that a file parsed whole in memory may hold: "
            "not read (split it, or keep the part to ingest)")


def read_whole(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file of at most :data:`WHOLE_READ_LIMIT` (a file that grows while it
    is read is cut there too). Raises :class:`~ncclbot_sweep.errors.ParseError` naming the path
    for a bigger one, :class:`OSError` when it cannot be read."""
    from ncclbot_sweep.errors import ParseError

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > WHOLE_READ_LIMIT:
            raise ParseError(too_big_to_read(size), path=path)
        return fh.read(WHOLE_READ_LIMIT)


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
