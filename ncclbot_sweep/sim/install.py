"""Install the nccl-tests stand-ins into a private folder (never onto PATH).

The folder lives under the user's cache (:mod:`ncclbot_sweep.usercache`;
``$NCCLBOT_SIM_BIN_CACHE`` moves it), keyed by package version and interpreter, so two virtual
environments never share scripts. Each script is a two-line shell wrapper that execs this
interpreter on :mod:`ncclbot_sweep.sim.nccltests`. Installing is idempotent and safe when
processes race: each file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import sys
import tempfile
from pathlib import Path

from ncclbot_sweep import __version__
from ncclbot_sweep.names import COLLECTIVE_BINARY, COLLECTIVES
from ncclbot_sweep.usercache import cache_root

__all__ = ["BINARIES", "bin_dir"]

log = logging.getLogger(__name__)

#: The binaries the stand-ins provide, named exactly like nccl-tests' (:data:`names.COLLECTIVE_BINARY`):
#: the collectives with arms, and AlltoAll and SendRecv.
BINARIES: tuple[str, ...] = tuple(COLLECTIVE_BINARY[c] for c in (*COLLECTIVES, "AlltoAll", "SendRecv"))


def _script(python: str) -> str:
    return f'#!/bin/sh\nexec {shlex.quote(python)} -P -m ncclbot_sweep.sim.nccltests "$0" "$@"\n'


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def bin_dir() -> Path:
    """The folder holding ``all_reduce_perf`` & co. for this interpreter; installs if needed.

    Called by the local executor and inventories (``nccl_tests: {bin_dir: sim}``) and by
    ``ncclbot-sweep sim bin-dir``. Idempotent; concurrent callers end with the same files.
    """
    python = sys.executable
    key = hashlib.sha256(f"{__version__}\0{python}".encode()).hexdigest()[:12]
    folder = cache_root("NCCLBOT_SIM_BIN_CACHE") / f"sim-bin-{__version__}-{key}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # read-only home (some CI runners): fall back to the temp folder
        fallback = Path(tempfile.gettempdir()) / f"ncclbot-sweep-{os.getuid()}" / folder.name
        log.warning("cannot create %s (%s); installing the simulated nccl-tests into %s", folder, exc, fallback)
        folder = fallback
        folder.mkdir(parents=True, exist_ok=True)
    text = _script(python)
    for name in BINARIES:
        path = folder / name
        try:
            if path.read_text(encoding="utf-8") == text and os.access(path, os.X_OK):
                continue
        except OSError:
            pass
        _write_atomic(path, text)
        log.debug("installed %s", path)
    return folder
