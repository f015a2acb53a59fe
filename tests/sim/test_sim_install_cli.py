"""``bin_dir`` installs runnable stand-ins off PATH; the ``sim`` CLI commands."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from click.testing import CliRunner

from ncclbot_sweep.cli import main as cli
from ncclbot_sweep.sim import BINARIES, bin_dir


def test_bin_dir_installs_every_binary_idempotently_and_off_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NCCLBOT_SIM_BIN_CACHE", raising=False)
    folder = bin_dir()
    assert folder.is_relative_to(tmp_path / "cache" / "ncclbot-sweep")
    assert sorted(p.name for p in folder.iterdir()) == sorted(BINARIES)
    assert all(os.access(folder / name, os.X_OK) for name in BINARIES)
    assert str(folder) not in os.environ.get("PATH", "").split(os.pathsep)
    stamp = (folder / "all_reduce_perf").stat().st_mtime_ns
    assert bin_dir() == folder and (folder / "all_reduce_perf").stat().st_mtime_ns == stamp
    (folder / "sendrecv_perf").write_text("broken")
    assert bin_dir() == folder and "ncclbot_sweep.sim.nccltests" in (folder / "sendrecv_perf").read_text()


def test_bin_dir_is_safe_when_callers_race(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCLBOT_SIM_BIN_CACHE", str(tmp_path / "race"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        folders = set(pool.map(lambda _i: bin_dir(), range(8)))
    [folder] = folders
    assert sorted(p.name for p in folder.iterdir()) == sorted(BINARIES)  # no temporary files left


def test_installed_binary_runs_a_demo_step_quickly(tmp_path):
    folder = bin_dir()
    env = dict(os.environ, SLURM_NNODES="32", SLURM_NTASKS="256", SLURM_PROCID="0", NCCL_ALGO="Ring",
               NCCL_PROTO="LL128", NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="TUNING",
               NCCL_DEBUG_FILE=str(tmp_path / "nccl.log"))
    start = time.monotonic()
    done = subprocess.run([str(folder / "all_gather_perf"), "-b", "512", "-e", "16G", "-f", "2", "-w", "5",
                           "-n", "100", "-d", "int8", "-I", "1", "-J", str(tmp_path / "out.json")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") > 26 and (tmp_path / "out.json").stat().st_size > 10_000
    assert "AllGather:" in (tmp_path / "nccl.log").read_text()
    assert elapsed < 5.0  # ~0.3 s on an idle core; generous for a loaded CI machine


def test_sim_cli_commands():
    runner = CliRunner()
    result = runner.invoke(cli, ["sim", "bin-dir"])
    assert result.exit_code == 0 and (result.output.strip().endswith(bin_dir().name))
    result = runner.invoke(cli, ["sim", "cost-table", "--collective", "AllGather", "--nodes", "16", "--size", "512MiB"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["arm", "predicted_us", "true_us", "mark"]
    assert [line.split()[0] for line in lines[1:4]] == ["Ring/LL", "Ring/LL128", "Ring/Simple"]
    assert lines[-1].startswith("AUTO loss vs best: ")
    result = runner.invoke(cli, ["sim", "tuning-table", "--nodes", "2"])
    assert result.exit_code == 0 and result.output.count("AllReduce |") == 3


def test_sim_cli_rejects_bad_values_with_usage_errors():
    runner = CliRunner()
    result = runner.invoke(cli, ["sim", "cost-table", "--collective", "AllReduce", "--nodes", "4", "--size", "12XB"])
    assert result.exit_code == 2
    assert "Error: Invalid value for '--size': size must be bytes or a string like '512B', '1M', '16GiB', but got '12XB'" in result.output
    result = runner.invoke(cli, ["sim", "cost-table", "--fabric", "sim-a100", "--collective", "AllReduce",
                                 "--nodes", "4", "--size", "1M"])
    assert result.exit_code == 2 and "sim-h100" in result.output


def test_module_entry_point_without_arguments_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "ncclbot_sweep.sim.nccltests"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr


def test_bin_dir_falls_back_to_the_temp_folder_when_the_cache_is_read_only(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("NCCLBOT_SIM_BIN_CACHE", str(blocker / "sub"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = bin_dir()
    assert folder.is_relative_to(tmp_path / "tmp") and (folder / "all_reduce_perf").exists()
