"""The whole plugin suite again against the ASan+UBSan build (`make -C plugin
sanitize`), in a subprocess with gcc's libasan preloaded into Python. The 8-rank
jobs run at a quarter of their calls to keep the sanitised run short. LeakSanitizer
checks the bench and a host that dlcloses the library as NCCL does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import nb_host as H


def test_plugin_suite_is_clean_under_asan_and_ubsan():
    if os.environ.get("NBTEST_LIB"):
        pytest.skip("already inside the sanitizer run")
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "sanitize"], check=True, stdout=subprocess.DEVNULL)
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                             check=True).stdout.strip()
    if not Path(libasan).exists():
        pytest.skip(f"gcc's libasan.so not found ({libasan})")
    asan = H.PLUGIN_DIR / "build" / "asan"
    ldd = subprocess.run(["ldd", str(asan / "libnccl-ncclbot.so")], capture_output=True, text=True).stdout
    assert "libasan" in ldd and "libubsan" in ldd, ldd
    env = dict(os.environ, LD_PRELOAD=libasan, NBTEST_LIB=str(asan / "libnccl-ncclbot.so"),
               NBTEST_COORD=str(asan / "ncclbot-coordinator"), NBTEST_SCALE="0.25",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    here = Path(__file__).parent
    r = subprocess.run([sys.executable, "-m", "pytest", str(here), "-q", "-x", "-p", "no:cacheprovider",
                        "--ignore", str(here / "test_plugin_sanitizer.py"), "--ignore", str(here / "test_plugin_build.py")],
                       env=env, capture_output=True, text=True, timeout=600, cwd=str(H.ROOT))
    report = r.stdout[-4000:] + r.stderr[-4000:]
    assert r.returncode == 0, report
    assert "ERROR: AddressSanitizer" not in r.stderr and "runtime error:" not in r.stderr, report
    assert " passed" in r.stdout, report


def test_bench_has_no_leaks_under_asan():
    """The C bench runs init, thousands of calls and finalize for 1 and 8 ranks: LeakSanitizer on."""
    if os.environ.get("NBTEST_LIB"):
        pytest.skip("already inside the sanitizer run")
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "sanitize"], check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([str(H.PLUGIN_DIR / "build" / "asan" / "ncclbot-bench"), "20000"], capture_output=True,
                       text=True, timeout=300,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1"))
    assert r.returncode == 0 and "Sanitizer" not in r.stderr, r.stderr[-3000:]
    assert "allocations on the hot path" in r.stdout


def test_dlclose_leaves_nothing_for_leak_sanitizer(tmp_path):
    """ncclbot-dlhost (ASan) dlopens the library, runs a traced learning communicator and
    one the coordinator refuses (bad token), then dlcloses it, as NCCL does: no leak."""
    if os.environ.get("NBTEST_LIB"):
        pytest.skip("already inside the sanitizer run")
    from nb_coord import Coordinator

    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "sanitize"], check=True, stdout=subprocess.DEVNULL)
    asan = H.PLUGIN_DIR / "build" / "asan"
    coord = Coordinator(token="right")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCLBOT_") and k != "LD_PRELOAD"}
        r = subprocess.run([str(asan / "ncclbot-dlhost"), str(asan / "libnccl-ncclbot.so"), str(tmp_path),
                            coord.addr], capture_output=True, text=True, timeout=300,
                           env=dict(env, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1"))
    finally:
        err = coord.stop()
    assert r.returncode == 0 and "Sanitizer" not in r.stderr, r.stderr[-3000:]
    assert "dlhost: done" in r.stdout and "refused" in err
    assert len(list(tmp_path.glob("ncclbot-*-r0.csv"))) == 1
