"""Files written whole or not at all: a kill or a full disk never leaves half of one.

The content goes to ``<name>.ncclbot-part`` beside the file (:data:`~ncclbot_sweep.paths.PART_SUFFIX`,
the one spelling of "not finished yet") and is renamed over it; when anything fails the part
file is removed and the error raised. A campaign folder's YAML copies, job scripts and
``step.json`` files, the local executor's job records and a tuning job's script are written
this way, so a command that dies (or meets a full disk) between two files leaves each one
either old or new, and the next command simply writes it again.
"""

from __future__ import annotations

import os
from pathlib import Path

from ncclbot_sweep.paths import PART_SUFFIX

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` (text is UTF-8) in one rename; ``mode`` sets its permissions."""
    path = Path(path)
    part = path.with_name(path.name + PART_SUFFIX)
    try:
        with open(part, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(part, mode)
        os.replace(part, path)
    except OSError as exc:
        part.unlink(missing_ok=True)
        if exc.filename is None:  # a failed write() names no file; the error should
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        part.unlink(missing_ok=True)
        raise
