"""The distribution lists every subpackage and the plugin sources, so a wheel (``pip install .``) is complete."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), config["package-dir"]


def test_every_package_folder_is_declared():
    packages, dirs = _declared()
    found = set()
    for name, top in [("ncclbot_sweep", ROOT / "ncclbot_sweep"), *((k, ROOT / v) for k, v in dirs.items())]:
        for init in top.rglob("__init__.py"):
            rel = init.parent.relative_to(top).parts
            found.add(".".join((name, *rel)))
    missing = sorted(found - packages)
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}"


def test_the_wheel_ships_the_plugin_sources_the_build_reads():
    """pyproject's package data for the plugin is pluginbuild.SOURCES, and covers every file a command compiles."""
    from ncclbot_sweep import pluginbuild

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-data"]["ncclbot_sweep.resources.plugin"] == list(pluginbuild.SOURCES)
    shipped = {p.relative_to(ROOT / "plugin").as_posix()
               for pattern in pluginbuild.SOURCES for p in (ROOT / "plugin").glob(pattern)}
    inputs = {word for _name, command in pluginbuild.compile_commands(ROOT, cc=["cc"], sources=ROOT / "plugin")
              for word in command if word.endswith(".c")}
    assert inputs and inputs <= shipped
