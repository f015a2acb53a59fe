"""The text and JSON that nccl-tests 2.19 prints, field for field.

Layouts follow the real outputs in ``tests/fixtures/real/A`` (2.18/2.19 text and the
2.19.7 ``-J`` file): the ``#`` header, device lines, a three-line column header (with the
``i_min i_max i_p99 i_cv%`` columns under ``-I``), ``%12li  %12li  %8s  %6s  %6s`` row
prefixes, numbers through nccl-tests' ``getFloatStr`` (2 decimals, fewer when they do not
fit), and the footer. The JSON writer reproduces nccl-tests' hand-rolled one: doubles as
``%lf``, booleans as the strings ``"true"``/``"false"``, ``/`` escaped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "IterStats",
    "JsonDouble",
    "column_header",
    "float_str",
    "footer_lines",
    "iter_stats",
    "json_dumps",
    "per_iter_str",
    "row_body",
    "row_prefix",
]


def float_str(value: float, width: int) -> str:
    """nccl-tests' ``getFloatStr``: ``%*.2f``, else ``.1f``, ``.0f``, then exponent form."""
    for text in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _g(value: float) -> str:
    """C's ``%g`` for the ``#wrong`` column."""
    return f"{value:g}"


def row_prefix(size: int, count: int, type_name: str, op_name: str, root: int) -> str:
    """``size count type redop root`` (``%12li  %12li  %8s  %6s  %6s``)."""
    return f"{size:12d}  {count:12d}  {type_name:>8s}  {op_name:>6s}  {root:6d}"


def row_body(time_us: float, algbw: float, busbw: float, wrong: int | None) -> str:
    """One out-of-place or in-place block: ``time algbw busbw #wrong``."""
    time_text, alg_text, bus_text = float_str(time_us, 7), float_str(algbw, 6), float_str(busbw, 6)
    if wrong is None:
        return f"  {time_text:>7s}  {alg_text:>6s}  {bus_text:>6s}    N/A"
    return f"  {time_text:>7s}  {alg_text:>6s}  {bus_text:>6s}  {_g(wrong):>6s}"


@dataclasses.dataclass(frozen=True)
class IterStats:
    """Per-iteration summary as nccl-tests computes it (``computeIterStats``), in us."""

    min: float
    max: float
    avg: float
    p50: float
    p95: float
    p99: float
    stdev: float

    @property
    def cv_pct(self) -> float:
        return self.stdev / self.avg * 100.0 if self.avg > 0 else 0.0


def _percentile_index(n: int, percentile: int) -> int:
    return min(n - 1, (n * percentile + 99) // 100 - 1)


def iter_stats(times_us: Sequence[float] | np.ndarray) -> IterStats:
    """Statistics of per-iteration times: sorted-order percentiles and population stdev."""
    ordered = np.sort(np.asarray(times_us, dtype=float))
    n = ordered.size
    avg = float(ordered.mean())
    return IterStats(
        min=float(ordered[0]),
        max=float(ordered[-1]),
        avg=avg,
        p50=float(ordered[n // 2]),
        p95=float(ordered[_percentile_index(n, 95)]),
        p99=float(ordered[_percentile_index(n, 99)]),
        stdev=float(math.sqrt(((ordered - avg) ** 2).sum() / n)),
    )


def per_iter_str(stats: IterStats) -> str:
    """The ``i_min i_max i_p99 i_cv%`` block after a body under ``-I``."""
    parts = (float_str(stats.min, 7), float_str(stats.max, 7), float_str(stats.p99, 7), float_str(stats.cv_pct, 7))
    return "".join(f"  {p:>7s}" for p in parts)


def column_header(*, per_iter: bool, cputime: bool = False, timestamps: bool = False) -> list[str]:
    """The ``#`` line and the three column-header lines before the rows.

    With ``timestamps`` (``-S 1``) the last column is ``timestamp`` (19 wide), as in 2.19.
    """
    t = "cputime" if cputime else "time"
    lead = f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}"
    if per_iter:
        names = ("size", "count", "type", "redop", "root")
        units = ("(B)", "(elements)", "", "", "")
        block_names = (t, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%")
        block_units = ("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)")
        widths = (7, 6, 6, 6, 7, 7, 7, 7)
        title = f"{lead}              out-of-place (+ per-iteration)                                in-place (+ per-iteration)"
    else:
        names = ("size", "count", "type", "redop", "root")
        units = ("(B)", "(elements)", "", "", "")
        block_names = (t, "algbw", "busbw", "#wrong")
        block_units = ("(us)", "(GB/s)", "(GB/s)", "")
        widths = (7, 6, 6, 6)
        title = f"{lead}           out-of-place                       in-place          "

    def line(first: Sequence[str], block: Sequence[str], last: str) -> str:
        text = f"# {first[0]:>10s}  {first[1]:>12s}  {first[2]:>8s}  {first[3]:>6s}  {first[4]:>6s}"
        for _ in range(2):
            text += "".join(f"  {value:>{width}s}" for value, width in zip(block, widths))
        return text + " " + (f"{last:>19s}" if timestamps else "")

    return ["#", title, line(names, block_names, "timestamp"), line(units, block_units, TIME_FORMAT)]


#: ``TIME_STRING_FORMAT`` of nccl-tests (strftime), also printed as the timestamp unit.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def footer_lines(*, errors: int, avg_busbw: float, program: str) -> list[str]:
    """Out-of-bounds count, average bus bandwidth and the closing lines."""
    return [
        f"# {'Out of bounds values':<20s} : {errors} {'FAILED' if errors else 'OK'}",
        f"# {'Avg bus bandwidth':<20s} : {avg_busbw:g} ",
        "#",
        f"# Collective test concluded: {program}",
        "#",
    ]


class JsonDouble(float):
    """A float written with C's ``%lf`` (6 decimals), as nccl-tests' ``jsonDouble`` does."""


def _json_str(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\/':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif 0x1F < ord(char) < 0x7F:
            out.append(char)
        else:
            break  # nccl-tests gives up on non-printable or non-ASCII text
    return '"' + "".join(out) + '"'


def json_dumps(value: object) -> str:
    """Serialise like nccl-tests' writer: one line, no spaces, ``%lf`` doubles."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return _json_str("true" if value else "false")
    if isinstance(value, float):
        if math.isnan(value):
            return '"nan"'
        return f"{value:f}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _json_str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_str(str(k))}:{json_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_dumps(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as nccl-tests JSON")
