"""The user's cache folder: where ncclbot-sweep puts what it makes on first use.

One definition for everything built or installed outside the package (the simulator's
nccl-tests stand-ins, the plugin build): ``$XDG_CACHE_HOME/ncclbot-sweep``, else
``~/.cache/ncclbot-sweep``, unless the caller's own override variable names a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root(override: str) -> Path:
    """``$override`` if set, else ``$XDG_CACHE_HOME/ncclbot-sweep``, else ``~/.cache/ncclbot-sweep``."""
    explicit = os.environ.get(override)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "ncclbot-sweep"
