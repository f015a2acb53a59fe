"""Fixtures for the orchestration tests: a fake nccl-tests binary folder and a local inventory.

The fake binaries are small bash scripts standing in for nccl-tests (the issue allows any
binary until the simulated fabric is used): they log each start and end with the step key
into ``$NCCLSWEEP_FAKE_LOG``, write stdout (one result row, so a step that exits 0 is ``ok``),
the NCCL log and the ``-J`` JSON file, and can be told to sleep (``NCCLSWEEP_FAKE_SLEEP``),
fail (``NCCLSWEEP_FAKE_FAIL_ALGO``), exit 0 with no result (``NCCLSWEEP_FAKE_GARBAGE_ALGO``) or refuse an arm the way NCCL does
(``NCCLSWEEP_FAKE_INVALID_ALGO``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ncclbot_sweep.names import COLLECTIVE_BINARY
from orch_support import FAKE


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    folder = tmp_path / "fake bin"
    folder.mkdir()
    for binary in COLLECTIVE_BINARY.values():
        path = folder / binary
        path.write_text(FAKE)
        path.chmod(0o755)
    return folder


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Route the fake binaries' start/end log into a file; returns its path."""
    log = tmp_path / "fake.log"
    monkeypatch.setenv("NCCLSWEEP_FAKE_LOG", str(log))
    for var in ("NCCLSWEEP_FAKE_SLEEP", "NCCLSWEEP_FAKE_FAIL_ALGO", "NCCLSWEEP_FAKE_INVALID_ALGO"):
        monkeypatch.delenv(var, raising=False)
    return log


@pytest.fixture
def env_copy() -> dict[str, str]:
    return dict(os.environ)
