"""The ``--help`` examples work from an installed wheel: they name shipped campaigns and inventories, never a
path inside the repository, and the ones that need nothing but the package run as written from an empty folder."""

from __future__ import annotations

import re
import shlex

import click
import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main

#: Top-level folders of the repository a wheel does not have (their files ship inside the package).
_REPOSITORY = re.compile(r"(^|[\s=])(campaigns|inventories|templates|plugin|analysis|tests|benchmarks)/")
#: Examples that need nothing but the package (no campaign folder, no dataset), run as written.
_SELF_CONTAINED = ("inventory", "campaign", "plan", "render", "sim cost-table", "sim tuning-table")


def _examples() -> list[tuple[str, str]]:
    """(command, example line) of every command's help, ``ncclbot-sweep ...`` lines only."""
    found = []

    def walk(command: click.Command, path: str) -> None:
        text = command.help or ""
        if "Example" in text:
            for line in text[text.index("Example"):].splitlines()[1:]:
                if line.strip().startswith("ncclbot-sweep "):
                    found.append((path, line.strip()))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(main, "")
    return found


EXAMPLES = _examples()


def test_every_example_names_shipped_files_not_repository_paths():
    assert len(EXAMPLES) > 30
    inside = [line for _command, line in EXAMPLES if _REPOSITORY.search(line)]
    assert not inside, inside


@pytest.mark.parametrize("line", sorted({line for _c, line in EXAMPLES
                                        if line.split()[1:3] and " ".join(line.split()[1:3]).startswith(_SELF_CONTAINED)}))
def test_self_contained_examples_run_from_an_empty_folder(line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no repository around: shipped names must resolve from the package
    result = CliRunner().invoke(main, shlex.split(line)[1:])
    assert result.exit_code == 0, f"{line}\n{result.output}"

