"""Building the shipped plugin sources on first use (ncclbot_sweep.pluginbuild) and the ``plugin`` commands.

The installed package's cache, concurrent first uses and a missing compiler outside the
repository are tests/test_wheel_install.py's; here the checkout's side: the recipe equals the
Makefile's, a compile error keeps the previous build, and the one-line errors.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import PluginBuildError

ROOT = Path(__file__).resolve().parents[1]


def _make_commands(out: Path) -> list[list[str]]:
    """The compiler commands ``make -n`` prints for plugin/Makefile's ``all``, one word list each."""
    done = subprocess.run(["make", "-n", "-B", "--no-print-directory", "-C", str(ROOT / "plugin"), f"BUILD={out}",
                           "CC=cc", "CFLAGS=", "all"], capture_output=True, text=True, check=True)
    text = done.stdout.replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines() if line.startswith("cc ")]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_recipe_is_the_makefiles_all(tmp_path):
    ours = pluginbuild.compile_commands(tmp_path, cc=["cc"], sources=pluginbuild.source_dir())
    assert [command for _name, command in ours] == _make_commands(tmp_path)
    assert [name for name, _command in ours] == list(pluginbuild.FILES.values())


def test_a_checkout_builds_into_plugin_build():
    assert pluginbuild.source_dir() == ROOT / "plugin"
    assert pluginbuild.build_dir() == ROOT / "plugin" / "build"


@pytest.fixture
def sources(tmp_path, monkeypatch) -> Path:
    """A copy of the plugin sources outside the package, standing in for a checkout's plugin/."""
    copy = tmp_path / "plugin"
    for pattern in pluginbuild.SOURCES:
        for path in (ROOT / "plugin").glob(pattern):
            (copy / path.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy / path.parent.name / path.name)
    monkeypatch.setattr(pluginbuild, "source_dir", lambda: copy)
    return copy


def test_a_compile_error_names_the_line_and_keeps_the_previous_build(sources):
    folder = pluginbuild.build()
    assert folder == sources / "build" and all((folder / n).is_file() for n in pluginbuild.FILES.values())
    before = {name: (folder / name).read_bytes() for name in pluginbuild.FILES.values()}
    with (sources / "src" / "log.c").open("a") as handle:
        handle.write("\nint broken(void) { return undeclared; }\n")
    with pytest.raises(PluginBuildError) as info:
        pluginbuild.build(force=True)
    message = str(info.value)
    assert "\n" not in message and "the plugin did not compile: src/log.c:" in message and "undeclared" in message
    assert str(folder / "build.log") in message and "undeclared" in (folder / "build.log").read_text()
    assert {name: (folder / name).read_bytes() for name in pluginbuild.FILES.values()} == before
    assert not list(folder.glob(".build-*"))  # no temporary folder left behind


@pytest.mark.parametrize(("env", "named"), [({"CC": "/nonexistent/cc"}, "CC='/nonexistent/cc' not found"),
                                             ({"CC": "", "PATH": "/nonexistent"}, "'cc' not on PATH")])
def test_no_compiler_is_one_error_line_saying_what_to_install(sources, monkeypatch, env, named):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, ["plugin", "build"])
    assert result.exit_code == 1
    assert result.output == (f"Error: no C compiler to build the plugin ({named}); install a C compiler "
                             "(Debian/Ubuntu: apt-get install gcc; Fedora/RHEL: dnf install gcc) or set CC to one\n")
    assert not (sources / "build" / pluginbuild.LIBRARY).exists()


def test_plugin_path_prints_the_library_and_json_every_file(sources):
    runner = CliRunner()
    result = runner.invoke(main, ["plugin", "path"])
    assert result.exit_code == 0 and result.output == f"{sources / 'build' / pluginbuild.LIBRARY}\n"
    data = json.loads(runner.invoke(main, ["plugin", "path", "--json"]).output)
    assert data == {"dir": str(sources / "build"), "plugin": str(sources / "build" / "libnccl-ncclbot.so"),
                    "coordinator": str(sources / "build" / "ncclbot-coordinator"),
                    "settings": str(sources / "build" / "ncclbot-settings"),
                    "simhost": str(sources / "build" / "libncclbot-simhost.so")}
    built = runner.invoke(main, ["plugin", "build"])
    assert built.exit_code == 0 and built.output == f"{sources / 'build'}\n"
    settings = subprocess.run([data["settings"]], capture_output=True, text=True, check=True)
    assert "NCCLBOT_POLICY" in settings.stdout


def test_step_keys_do_not_depend_on_where_the_bundled_build_lives(tmp_path, monkeypatch):
    from ncclbot_sweep.sweep.campaign import load_campaign, plan_campaign
    from ncclbot_sweep.sweep.inventory import load_inventory

    plans = []
    for cache in ("a", "b"):
        folder = tmp_path / cache
        folder.mkdir()
        for name in pluginbuild.FILES.values():
            (folder / name).touch()
        monkeypatch.setattr(pluginbuild, "build_dir", lambda folder=folder: folder)
        plans.append(plan_campaign(load_campaign("demo-live"), load_inventory("sim-h100")))
    first, second = ([s for s in plan.steps if s.plugin] for plan in plans)
    assert first and [s.key for s in first] == [s.key for s in second]
    assert {s.env["NCCL_TUNER_PLUGIN"] for s in first} == {str(tmp_path / "a" / pluginbuild.LIBRARY)}
    assert [j.key for j in plans[0].jobs] == [j.key for j in plans[1].jobs]
