"""Shared helpers for parser tests: where the real fixtures are, and a SourceInfo maker."""

from __future__ import annotations

from pathlib import Path

from ncclbot_sweep.parsers.common import SourceInfo

#: Real outputs from the field, copied into the repository (see its INDEX.md for sources).
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
#: Files written for the tests in the shapes real outputs take (see its README.md).
FIELD = Path(__file__).resolve().parents[1] / "fixtures" / "field"


def real(rel: str) -> Path:
    """Path of a real fixture (``A/name.txt``); a missing one fails, it never skips."""
    path = REAL / rel
    if not path.is_file():
        raise FileNotFoundError(f"{path}: real fixture missing; it must be in tests/fixtures/real (INDEX.md)")
    return path


def source(name: str = "x.txt", **meta) -> SourceInfo:
    return SourceInfo(path=name, sha256="0" * 64, run_id="run", meta=meta)
