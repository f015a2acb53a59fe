"""Strict JSON for every ``--json``: what any JSON parser reads, with null for a missing number.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which strict parsers (and
``jq``) refuse; frames and numpy values are not JSON at all. :func:`echo_json` turns them
into plain lists, dicts, numbers and nulls and refuses anything else.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import PurePath
from typing import Any

import click

__all__ = ["echo_json", "jsonable"]


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types: a frame becomes a list of row objects, NaN/inf/NA become None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if hasattr(value, "columns") and hasattr(value, "to_dict"):  # a pandas DataFrame
        return [jsonable(row) for row in value.to_dict(orient="records")]
    if type(value).__module__.startswith("pandas"):  # NA, NaT, Timestamp
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
        if isinstance(value, pd.Timestamp):
            return value.isoformat()
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return jsonable(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} as JSON: {value!r}")


def echo_json(value: Any) -> None:
    """Print ``value`` as indented strict JSON (``allow_nan=False`` guards the rule)."""
    click.echo(json.dumps(jsonable(value), indent=2, allow_nan=False))
