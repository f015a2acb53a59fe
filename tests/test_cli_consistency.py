"""One CLI: the same option names for the same things, global flags at every level, help examples intact,
and a did-you-mean for mistyped inventory, campaign and fabric names."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

import click
import pytest
from click.testing import CliRunner

from ncclbot_sweep import __version__
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import did_you_mean

#: What a long option means wherever it appears, spelled with its short flag.
SHORT_FOR = {"--dataset": "-d", "--out": "-o", "--workdir": "-w", "--inventory": "-i", "--verbose": "-v",
             "--help": "-h"}
#: Commands that took their folder as a positional argument, and the option that now also takes it.
POSITIONAL_FOLDERS = {("status",): "-w", ("resume",): "-w", ("cancel",): "-w", ("collect",): "-w",
                      ("ingest",): "-w", ("datasets", "info"): "-d"}


def _walk(command: click.Command, path: tuple[str, ...] = (), parent: click.Context | None = None):
    """(path, command, context) for every command; contexts chain as in a real run (inherited settings)."""
    ctx = click.Context(command, parent=parent, info_name=path[-1] if path else "ncclbot-sweep",
                        **(command.context_settings if parent is None else {}))
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _walk(sub, (*path, name), ctx)


def _options(command: click.Command, ctx: click.Context) -> list[click.Option]:
    return [p for p in command.get_params(ctx) if isinstance(p, click.Option)]


def test_option_spellings_are_the_same_everywhere():
    meaning: dict[str, set[str]] = defaultdict(set)  # short flag -> long names it stands for
    checked = 0
    for path, command, ctx in _walk(main):
        for option in _options(command, ctx):
            flags = option.opts + option.secondary_opts
            shorts = [f for f in flags if re.fullmatch(r"-[A-Za-z]", f)]
            longs = [f for f in flags if f.startswith("--")]
            for long in longs:
                if long in SHORT_FOR:
                    assert SHORT_FOR[long] in flags, f"'{' '.join(path)}': {long} lacks {SHORT_FOR[long]}"
                    checked += 1
            for short in shorts:
                meaning[short].update(longs or ["(no long name)"])
    clashes = {short: sorted(longs) for short, longs in meaning.items() if len(longs) > 1}
    assert not clashes, f"a short flag means two things: {clashes}"
    assert {"-d", "-o", "-w", "-i", "-v", "-h"} <= set(meaning)
    assert checked > 40  # every command was looked at, not a few


def test_every_dataset_out_and_workdir_option_uses_the_shared_spelling():
    # The options are found by what they hold, not by name: a dataset folder, an output, a campaign folder.
    for path, command, ctx in _walk(main):
        for option in _options(command, ctx):
            if option.name in ("dataset", "datasets"):
                assert "-d" in option.opts, path
            if option.name == "out":
                assert "-o" in option.opts, path
            if option.name == "workdir" or (option.name == "paths" and path == ("ingest",)):
                assert "-w" in option.opts, path


@pytest.mark.parametrize("path", sorted(POSITIONAL_FOLDERS))
def test_positional_folder_or_option_exactly_one(path, tmp_path):
    runner = CliRunner()
    flag = POSITIONAL_FOLDERS[path]
    extra = ["-d", str(tmp_path / "ds")] if path == ("ingest",) else []
    neither = runner.invoke(main, [*path, *extra])
    assert neither.exit_code == 2 and "missing the" in neither.output and flag in neither.output, neither.output
    both = runner.invoke(main, [*path, str(tmp_path), flag, str(tmp_path), *extra])
    assert both.exit_code == 2 and "not both" in both.output, both.output


def test_positional_and_option_forms_give_the_same_answer(tmp_path):
    runner = CliRunner()
    missing = tmp_path / "no-campaign"
    missing.mkdir()
    for command in ("status", "resume", "cancel"):
        positional = runner.invoke(main, [command, str(missing)])
        option = runner.invoke(main, [command, "-w", str(missing)])
        assert positional.exit_code == option.exit_code == 1
        assert positional.output == option.output and "no manifest.sqlite" in option.output


def test_global_flags_work_after_every_command():
    runner = CliRunner()
    for path, _command, _ctx in _walk(main):
        result = runner.invoke(main, [*path, "--version"])
        assert result.exit_code == 0 and __version__ in result.output, (path, result.output)
        result = runner.invoke(main, [*path, "-vv", "--help"])
        assert result.exit_code == 0, (path, result.output)


def _run(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from ncclbot_sweep.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_verbose_counts_at_every_level():
    # -vv after the subcommand, or -v before and after, both give debug logs; none gives none.
    debug = "DEBUG ncclbot_sweep.sweep.inventory: loaded inventory sim-h100"
    for args in (["inventory", "check", "sim-h100", "-vv"], ["-v", "inventory", "-v", "check", "sim-h100"],
                 ["-v", "inventory", "check", "sim-h100", "--verbose"]):
        out = _run(*args)
        assert out.returncode == 0 and debug in out.stderr, (args, out.stderr)
    for args in (["inventory", "check", "sim-h100"], ["inventory", "check", "sim-h100", "-v"]):
        out = _run(*args)
        assert out.returncode == 0 and "DEBUG" not in out.stderr, (args, out.stderr)


def _example_lines(help_text: str) -> list[str]:
    """Command lines the help shows as examples (after the \\b marker, one per line)."""
    return [line.strip() for line in help_text.splitlines()
            if line.strip().startswith(("ncclbot-sweep ", "$(ncclbot-sweep"))]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_help_examples_are_never_rewrapped(width):
    runner = CliRunner()
    seen = 0
    for path, command, _ctx in _walk(main):
        examples = _example_lines(command.help or "")
        assert examples, f"'{' '.join(('ncclbot-sweep', *path))}' has no example in its help"
        result = runner.invoke(main, [*path, "--help"], terminal_width=width)
        assert result.exit_code == 0, result.output
        shown = {line.strip() for line in result.output.splitlines()}
        for example in examples:
            assert example in shown, f"example broken across lines in '{' '.join(path)} --help':\n{result.output}"
            seen += 1
    assert seen >= 35


def test_did_you_mean_suggests_only_close_names():
    assert did_you_mean("sim-h10", ["sim-h100", "sim-gb200-mnnvl-on"]) == " (did you mean 'sim-h100'?)"
    assert did_you_mean("zzz", ["sim-h100", "demo"]) == ""


@pytest.mark.parametrize(("args", "expected"), [
    (["plan", "demo", "-i", "sim-h10"], "no shipped inventory of that name (did you mean 'sim-h100'?)"),
    (["plan", "demo", "-i", "h100-spectrumz"], "(did you mean 'h100-spectrumx'?)"),
    (["plan", "dmeo", "-i", "sim-h100"], "no shipped campaign of that name (did you mean 'demo'?)"),
    (["submit", "live-sim-h10", "-i", "sim-h100", "-w", "{tmp}/w"], "(did you mean 'live-sim-h100' or"),
    (["inventory", "check", "sim-gb200-mnvl-on"], "(did you mean 'sim-gb200-mnnvl-on'"),
    (["plan", "{tmp}/demo.yml", "-i", "sim-h100"], "file not found (did you mean 'demo.yaml'?)"),
])
def test_mistyped_names_get_a_did_you_mean(args, expected, tmp_path):
    (tmp_path / "demo.yaml").write_text("name: demo\n")
    result = CliRunner().invoke(main, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 1, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("command", [["sim", "tuning-table", "--nodes", "2"],
                                     ["sim", "cost-table", "--collective", "AllReduce", "--nodes", "2",
                                      "--size", "1MiB"]])
def test_mistyped_sim_fabric_gets_a_did_you_mean(command):
    result = CliRunner().invoke(main, [*command, "--fabric", "sim-gb200-mnnvl-of"])
    assert result.exit_code == 2
    assert "did you mean 'sim-gb200-mnnvl-off'" in result.output
