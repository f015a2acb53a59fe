"""Plugin test fixtures: build the plugin (and, for the sanitizer test, its
ASan+UBSan variant) once per session with the plugin's own Makefile, and give
each test a clean NCCLBOT_* environment."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nb_host  # noqa: E402

_IDS = itertools.count(1)


def _make(*args: str) -> None:
    subprocess.run(["make", "-s", "-C", str(nb_host.PLUGIN_DIR), *args], check=True,
                   stdout=subprocess.DEVNULL)


def _build_logshim() -> Path:
    out = nb_host.PLUGIN_DIR / "build" / "test-logshim.so"
    src = Path(__file__).with_name("logshim.c")
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(out), str(src)],
                       check=True)
    return out


def _build_policy_probe() -> Path:
    """plugin/src/policy.c with the shared generator exported (the plugin's build flags
    that matter for float64 results: -O2 -fno-math-errno -ffp-contract=off)."""
    out = nb_host.PLUGIN_DIR / "build" / "test-policy-probe.so"
    src = nb_host.PLUGIN_DIR / "src"
    inputs = [Path(__file__).with_name("policy_probe.c"), src / "policy.c", src / "policy.h", src / "rng.h"]
    if not out.exists() or out.stat().st_mtime < max(p.stat().st_mtime for p in inputs):
        subprocess.run(["gcc", "-std=gnu11", "-O2", "-fno-math-errno", "-ffp-contract=off", "-shared", "-fPIC",
                        "-I", str(src), "-o", str(out), str(inputs[0]), str(inputs[1]), "-lm"], check=True)
    return out


@pytest.fixture(scope="session", autouse=True)
def plugin_build() -> Path:
    """`make -C plugin` (skipped inside the sanitizer subprocess, which is handed a built lib)."""
    if not os.environ.get("NBTEST_LIB"):
        _make()
    _build_logshim()
    return nb_host.lib_path()


@pytest.fixture(scope="session")
def policy_probe(plugin_build):
    """ctypes handle on plugin/src/policy.c and rng.h (see policy_probe.c)."""
    return nb_host.policy_probe(_build_policy_probe())


@pytest.fixture(scope="session")
def plugin(plugin_build) -> nb_host.Plugin:
    return nb_host.Plugin(plugin_build)


@pytest.fixture()
def nb_env(monkeypatch):
    """Clear NCCLBOT_* and Slurm variables and the stand-in's NCCL version (unreadable, as
    before NCCL 2.31 mattered); returns a setter for this test's settings."""
    for k in list(os.environ):
        if k.startswith("NCCLBOT_"):
            monkeypatch.delenv(k)
        if k in ("SLURM_LAUNCH_NODE_IPADDR", "SLURM_JOB_ID"):
            monkeypatch.delenv(k)
    nb_host.take_log()
    nb_host.set_nccl_version(None)

    def set_env(**kw):
        for k, v in kw.items():
            monkeypatch.setenv(f"NCCLBOT_{k.upper()}", str(v))

    return set_env


@pytest.fixture()
def comm_id() -> int:
    """A fresh communicator id per test (the registry is process-wide)."""
    return 0x1000 + next(_IDS) + (os.getpid() << 20)
