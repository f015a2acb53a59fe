"""The benchmark scripts work in the project's virtualenv, and with any other Python say so in
one line instead of a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["ingest.py", "replay.py", "tune.py"])
def test_a_benchmark_started_without_its_libraries_says_to_use_the_virtualenv(script):
    # -S: no site-packages, as with a bare system Python
    done = subprocess.run([sys.executable, "-S", f"benchmarks/{script}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        f"benchmarks/{script} needs {done.stderr.split(' needs ')[1].split(', which')[0]}, which {sys.executable} "
        f"cannot import: run it with the project's virtualenv, '.venv/bin/python benchmarks/{script}' "
        "('make venv' creates it)"]


@pytest.mark.parametrize("script", ["ingest.py", "replay.py", "tune.py", "plugin.py"])
def test_a_benchmark_runs_in_the_virtualenv(script):
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr
