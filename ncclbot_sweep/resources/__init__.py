"""Locate the data folders shipped with the package (templates, inventories, campaigns).

The folders live at the top of the repository and are mapped into the package by
``pyproject.toml``; going through importlib keeps editable and wheel installs alike.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["resource_dir", "resource_path"]

_KINDS = ("templates", "inventories", "campaigns")


def resource_dir(kind: str) -> Path:
    """Return the folder of one resource kind ("templates", "inventories" or "campaigns")."""
    if kind not in _KINDS:
        raise ValueError(f"resource kind must be one of {', '.join(_KINDS)}, but got {kind!r}")
    return Path(str(resources.files(f"ncclbot_sweep.resources.{kind}")))


def resource_path(kind: str, name: str) -> Path:
    """Return the path of a shipped file, e.g. ``resource_path("inventories", "sim-h100.yaml")``."""
    return resource_dir(kind) / name
