"""The benchmarks run in the project's virtualenv (``make venv``).

Started with another Python, a script first checks that it can import what it needs and, if
not, says which library is missing and how to run it instead, rather than failing with a
traceback (in ``ingest.py``, a child process's).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["require"]


def require(*modules: str) -> None:
    """Exit with a one-line message unless every module in ``modules`` can be imported."""
    missing = [name for name in modules if not _importable(name)]
    if missing:
        script = f"benchmarks/{Path(sys.argv[0]).name}"
        sys.exit(f"{script} needs {', '.join(missing)}, which {sys.executable} cannot import: run it with the "
                 f"project's virtualenv, '.venv/bin/python {script}' ('make venv' creates it)")


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
