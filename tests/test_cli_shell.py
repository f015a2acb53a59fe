"""The CLI shell: every command has help, is documented, and --help stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from ncclbot_sweep.cli import main

HEAVY = ("pyarrow", "pandas", "polars", "matplotlib", "paramiko", "scipy", "optuna", "sklearn", "duckdb")
README = Path(__file__).resolve().parents[1] / "README.md"


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        path = prefix + (name,)
        yield path, command
        if isinstance(command, click.Group):
            yield from _commands(command, path)


def test_help_imports_no_heavy_library():
    probe = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from ncclbot_sweep.cli import main\n"
        "result = CliRunner().invoke(main, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_command_has_help_and_answers_it():
    runner = CliRunner()
    for path, command in _commands(main):
        assert (command.help or "").strip(), f"'{' '.join(path)}' has no help text"
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, result.output


def test_every_top_level_command_is_in_the_readme():
    text = README.read_text()
    missing = [name for name in main.commands if f"ncclbot-sweep {name}" not in text]
    assert not missing, f"README.md does not mention: {missing}"


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2
