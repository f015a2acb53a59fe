"""Installs anywhere: the built wheel, installed into a fresh virtual environment, runs the whole
product from outside the source tree (no PYTHONPATH, another working folder, its own user cache).

It runs a small simulated forced campaign, ingest and analysis, and the live demo campaign,
whose plugin, coordinator and simulator host are built from the sources in the wheel on
first use; it checks that concurrent first uses build once and that a missing compiler is
one ``Error:`` line. One wheel and one environment serve every test of the module.

Slow (a wheel build and a ``pip install`` with dependencies from PyPI or pip's cache):
marked ``slow``; CI runs it with the rest (``make test``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ncclbot_sweep import __version__, pluginbuild

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # pip may download; a loaded machine is slow

ROOT = Path(__file__).resolve().parents[1]
#: Variables of the calling shell that would point the installed package elsewhere.
_CLEARED = ("PYTHONPATH", "VIRTUAL_ENV", "CC", pluginbuild.CACHE_VARIABLE, "NCCLBOT_SIM_BIN_CACHE",
            "NCCLBOT_SIM_HOST_LIB")

CAMPAIGN = """\
name: wheel-check
kind: forced
collectives: [AllReduce, AllGather]
nodes: [2]
sizes: {min: 1MiB, max: 4MiB, factor: 2}
arms: [Ring/LL, Ring/Simple]
warmup: 0
iterations: 20
timeout_s: 120
packing: {steps_per_job: 4}
"""

READ = """\
import json, sys
from ncclbot_sweep.ingest import datasets
runs = datasets.read_table(sys.argv[1], "runs")
it = datasets.read_table(sys.argv[1], "iterations")
print(json.dumps([len(runs), bool(runs["synthetic"].all()), sorted(set(runs["outcome"])), len(it),
                  datasets.__file__]))
"""


class Installed:
    """The fresh environment: run its ``ncclbot-sweep`` in ``work`` with a user cache of the test's own."""

    def __init__(self, env_dir: Path, work: Path, cache: Path) -> None:
        self.env_dir, self.work, self.cache = env_dir, work, cache
        self.python, self.cli = env_dir / "bin" / "python", env_dir / "bin" / "ncclbot-sweep"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        return env | {"XDG_CACHE_HOME": str(self.cache)} | extra

    def run(self, *args: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.cli), *args], cwd=self.work, env=self.env(**extra), capture_output=True,
                              text=True, timeout=900)
        assert not check or done.returncode == 0, f"ncclbot-sweep {' '.join(args)}\n{done.stdout}\n{done.stderr}"
        return done


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once; its build prints no setuptools warning."""
    dist = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT)], dist)
    assert "BuildBackendWarning" not in built.stderr + built.stdout, built.stderr
    return next(dist.glob("ncclbot_sweep-*.whl"))


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Installed:
    """The wheel installed into a fresh virtual environment (pip compiles nothing)."""
    top = tmp_path_factory.mktemp("fresh")
    env_dir = top / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    _run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)], top)
    (top / "work").mkdir()  # outside the source tree: only the installed wheel is importable
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    assert not list((site / "ncclbot_sweep").rglob("*.so")), "pip install must not compile the plugin"
    return Installed(env_dir, top / "work", top / "cache")


def test_the_wheel_ships_the_plugin_sources_and_nothing_built(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    plugin = "ncclbot_sweep/resources/plugin/"
    expected = {plugin + p.relative_to(ROOT / "plugin").as_posix()
                for pattern in pluginbuild.SOURCES for p in (ROOT / "plugin").glob(pattern)}
    assert {plugin + "src/plugin.c", plugin + "src/nccl_abi.h", plugin + "host/simhost.c"} <= expected
    assert expected <= names
    assert not [n for n in names if n.endswith((".so", ".o")) or "/build/" in n or "/bench/" in n]


def test_the_wheel_runs_a_sim_campaign_ingest_and_analysis_in_a_fresh_venv(installed, tmp_path):
    work, cache = installed.work, str(tmp_path / "cache")
    (work / "campaign.yaml").write_text(CAMPAIGN)
    installed.run("submit", "campaign.yaml", "-i", "sim-h100", "--workdir", "camp", XDG_CACHE_HOME=cache)
    installed.run("ingest", "camp", "--dataset", "ds", "--strict", XDG_CACHE_HOME=cache)
    done = subprocess.run([str(installed.python), "-c", READ, "ds"], cwd=work, env=installed.env(),
                          capture_output=True, text=True, check=True)
    runs, synthetic, outcomes, rows, where = json.loads(done.stdout.splitlines()[-1])
    assert (runs, synthetic, outcomes) == (4, True, ["ok"]) and rows == 4 * 3 * 2 * 20
    assert str(installed.env_dir) in where and str(ROOT) not in where
    audit = installed.run("analyze", "audit", "--dataset", "ds", "--out", "audit", XDG_CACHE_HOME=cache).stdout
    assert "AUTO" in audit and any((work / "audit").glob("*.csv"))
    assert any((work / "ds" / "workload").rglob("_schema.parquet"))  # an empty table keeps its schema file
    assert not list((tmp_path / "cache" / "ncclbot-sweep").glob("plugin-*"))  # a forced sweep needs no compiler


def test_the_wheel_runs_the_live_demo_building_the_plugin_on_first_use(installed):
    run_dir = installed.work / "r"
    installed.run("submit", "demo-live", "-i", "sim-h100", "-w", str(run_dir))
    installed.run("status", str(run_dir), "--check")
    status = json.loads(installed.run("status", str(run_dir), "--json").stdout)
    assert status["steps"] == {"ok": 3} and status["total_steps"] == 3 and status["failed"] == []
    library = Path(installed.run("plugin", "path").stdout.strip())
    [folder] = (installed.cache / "ncclbot-sweep").glob(f"plugin-{__version__}-*")
    assert library == folder / pluginbuild.LIBRARY and library.is_file() and str(ROOT) not in str(library)
    files = json.loads(installed.run("plugin", "path", "--json").stdout)
    assert files["dir"] == str(folder) and all(Path(files[key]).is_file() for key in pluginbuild.FILES)
    [script] = run_dir.glob("jobs/*/job.sh")
    text = script.read_text()
    assert f"export NCCL_TUNER_PLUGIN={library}" in text and f"{folder / pluginbuild.COORDINATOR} --listen" in text


def test_concurrent_first_uses_build_once(installed, tmp_path):
    cache = tmp_path / "race"

    def first_use(_i: int) -> subprocess.CompletedProcess:
        return installed.run("plugin", "path", "-v", XDG_CACHE_HOME=str(cache))

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(first_use, range(3)))
    assert len({r.stdout for r in results}) == 1 and Path(results[0].stdout.strip()).is_file()
    assert sum(r.stderr.count("building the plugin from") for r in results) == 1
    assert not list(Path(results[0].stdout.strip()).parent.glob(".build-*"))


@pytest.mark.parametrize("no_compiler", [{"CC": "/nonexistent/cc"}, {"PATH": "/nonexistent"}])
def test_a_missing_compiler_is_one_error_line(installed, tmp_path, no_compiler):
    done = installed.run("plugin", "build", check=False, XDG_CACHE_HOME=str(tmp_path / "cache"), **no_compiler)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("Error: no C compiler to build the plugin (") and "apt-get install gcc" in line
