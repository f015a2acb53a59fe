"""Nothing slow on the hot path, measured by plugin/bench: tracing keeps
getCollInfo within 1.5x of the untraced median and loses no row; a context's first sight
allocates nothing (the table is sized at init from NCCLBOT_MAX_CONTEXTS)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import nb_host as H

pytestmark = pytest.mark.skipif(bool(os.environ.get("NBTEST_LIB")),
                                reason="timings are not measured inside the sanitizer run")


def _bench(calls: int) -> str:
    return subprocess.run([str(H.PLUGIN_DIR / "build" / "ncclbot-bench"), str(calls), "local"],
                          check=True, capture_output=True, text=True, timeout=300).stdout


def test_tracing_is_off_the_hot_path_and_loses_nothing():
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "bench"], check=True, stdout=subprocess.DEVNULL)
    ratios = []
    for _ in range(5):  # a shared, loaded machine: the best of a few runs
        out = _bench(100000)
        rows, pulls = map(int, re.search(r"trace: (\d+) pull rows for (\d+) pulls", out).groups())
        assert rows == pulls == 101000, out  # every pull reaches the file, ring overruns included
        ratios.append(float(re.search(r"tracing costs ([\d.]+)x", out).group(1)))
        if ratios[-1] <= 1.5:
            break
    assert min(ratios) <= 1.5, f"traced/untraced getCollInfo medians: {ratios}"


def test_first_sight_of_a_context_allocates_nothing():
    out = _bench(20000)
    assert "allocations on first sight: 0 while 1000 new contexts were created" in out, out
    assert re.search(r"traced: .*; allocations 0;", out), out
