"""Shared helpers for parser tests: where the real fixtures are, and a SourceInfo maker."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclbot_sweep.parsers.common import SourceInfo

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real"


def real(rel: str) -> Path:
    """Path of a real fixture; skips the test when the shared fixtures are absent."""
    path = REAL / rel
    if not path.exists():
        pytest.skip(f"shared fixture {rel} not present")
    return path


def source(name: str = "x.txt", **meta) -> SourceInfo:
    return SourceInfo(path=name, sha256="0" * 64, run_id="run", meta=meta)
