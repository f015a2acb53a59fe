"""Locate the data folders shipped with the package (templates, inventories, campaigns, the plugin's C sources,
the simulator's workload specs).

The folders live at the top of the repository and are mapped into the package by
``pyproject.toml``; going through importlib keeps editable and wheel installs alike (an
editable install answers with the repository's folder, a wheel with the installed copy).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ncclbot_sweep.errors import NcclbotError, did_you_mean

__all__ = ["resource_dir", "resource_path", "shipped_names", "resolve_shipped"]

_KINDS = ("templates", "inventories", "campaigns", "plugin", "workloads")


def resource_dir(kind: str) -> Path:
    """Return the folder of one resource kind ("templates", "inventories", "campaigns", "plugin" or "workloads")."""
    if kind not in _KINDS:
        raise ValueError(f"resource kind must be one of {', '.join(_KINDS)}, but got {kind!r}")
    return Path(str(resources.files(f"ncclbot_sweep.resources.{kind}")))


def resource_path(kind: str, name: str) -> Path:
    """Return the path of a shipped file, e.g. ``resource_path("inventories", "sim-h100.yaml")``."""
    return resource_dir(kind) / name


def shipped_names(kind: str) -> list[str]:
    """The names of the shipped YAML files of one kind, sorted (``sim-h100``): what ``-i NAME`` takes."""
    return sorted(p.stem for p in resource_dir(kind).glob("*.yaml"))


def resolve_shipped(kind: str, path: Path, error_cls: type[NcclbotError]) -> Path:
    """A path as given if it exists, else the shipped file of that name (``sim-h100``, ``demo``).

    Raises ``error_cls`` with a did-you-mean when neither exists: against the shipped names
    for a bare name, against the names of the YAML files in its folder for a path.
    """
    if path.exists():
        return path
    what = kind.rstrip("s").replace("inventorie", "inventory")
    if path.is_absolute() or len(path.parts) > 1:
        siblings = [p.name for p in path.parent.glob("*.y*ml")] if path.parent.is_dir() else []
        raise error_cls(f"file not found{did_you_mean(path.name, siblings)}", path=path, hint="check the path")
    stem = path.name[: -len(path.suffix)] if path.suffix in (".yaml", ".yml") else path.name
    shipped = resource_path(kind, f"{stem}.yaml")
    if shipped.exists():
        return shipped
    raise error_cls(f"no such file, and no shipped {what} of that name{did_you_mean(stem, shipped_names(kind))}",
                    path=path, hint=f"'ncclbot-sweep {what} list' shows the shipped {kind}; or give the path "
                                    "of a YAML file")
