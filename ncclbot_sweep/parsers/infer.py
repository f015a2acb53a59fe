"""The collective of an nccl-tests table that names no binary, read from its own numbers.

Field outputs often lose the command line and the ``Collective test starting`` line (a
table pasted into an issue, a log cut by ``srun -l``). nccl-tests still leaves two exact
fingerprints in every row (``src/*.cu``, ``GetBw`` and ``GetCollByteCount``):

* ``count`` is the full element count for AllReduce, Broadcast, Reduce and SendRecv, and
  one rank's share for AllGather, ReduceScatter and AlltoAll: ``size / (width x count)``
  is 1 or the rank count ``n``;
* ``busbw / algbw`` is ``2(n-1)/n`` for AllReduce, ``(n-1)/n`` for AllGather,
  ReduceScatter and AlltoAll, and 1 for Broadcast, Reduce and SendRecv.

With the ``redop`` and ``root`` columns this names the collective, except where two
collectives print the same numbers (AllGather and AlltoAll; SendRecv and a 2-rank
AllReduce). Two more marks tell those apart:

* the columns a header has: before 2.13 each binary printed its own (``redop`` for AllReduce,
  ReduceScatter and AlltoAll, ``root`` for Broadcast, Gather and Scatter, both for Reduce,
  neither for AllGather and SendRecv); since 2.13 every table has both;
* the in-place check: SendRecv and AlltoAll do not check their in-place results
  (``reportErrors``), so their in-place ``#wrong`` reads ``N/A`` beside a number.

When nothing decides, nothing is guessed. Callers mark what this returns as inferred.
"""

from __future__ import annotations

import numpy as np

from ncclbot_sweep.names import dtype_bytes

__all__ = ["infer_collective"]

_REDUCTIONS = frozenset({"sum", "prod", "max", "min", "avg", "mulsum"})
#: Rows whose algbw is printed with enough digits for the ratio (2 decimals: >= 1 GB/s is 1%).
_MIN_ALGBW = 1.0
_TOLERANCE = 0.02


def _close(ratio: float, expected: float) -> bool:
    return abs(ratio - expected) <= _TOLERANCE * expected


def infer_collective(size: np.ndarray, count: np.ndarray, dtype: str | None, redop: str | None,
                     root: int | None, algbw: np.ndarray, busbw: np.ndarray,
                     ranks: int | None = None, *, columns: frozenset[str] | None = None,
                     in_place_checked: bool | None = None) -> tuple[str, int | None] | None:
    """``(collective, ranks)`` of a table's rows, or None when the numbers do not decide.

    ``ranks`` is the rank count when known (Rank lines); the one returned is that, or the one
    the per-rank ``count`` proves, or None. ``columns`` are the table's leading columns (a
    header without ``redop`` or ``root`` is a pre-2.13 one); ``in_place_checked`` says whether
    the in-place ``#wrong`` holds numbers (False: ``N/A`` beside out-of-place numbers).
    """
    width = dtype_bytes(str(dtype)) if dtype else None
    if width is None:
        return None
    size, count = np.asarray(size, dtype=float), np.asarray(count, dtype=float)
    algbw, busbw = np.asarray(algbw, dtype=float), np.asarray(busbw, dtype=float)
    counted = (size > 0) & (count > 0)
    shares = size[counted] / (width * count[counted])
    share = float(np.median(shares)) if counted.any() else 0.0
    if round(share) < 1 or not np.allclose(shares, round(share)):
        return None
    share_n = int(round(share))
    if in_place_checked is False:  # in-place not checked: the counts say which, but over one rank
        if share_n > 1:          # an AlltoAll's per-rank count is its full count too
            return "AlltoAll", share_n
        return ("SendRecv", ranks) if ranks and ranks > 1 else None
    usable = counted & np.isfinite(algbw) & np.isfinite(busbw) & (algbw >= _MIN_ALGBW)
    if not usable.any():
        return None
    ratio = float(np.median(busbw[usable] / algbw[usable]))
    op = (redop or "").lower() or None
    # A header without a redop column is a pre-2.13 one of a binary that reduces nothing.
    no_redop_column = columns is not None and "redop" not in columns
    if share_n > 1:  # per-rank counts: AllGather, ReduceScatter or AlltoAll over share_n ranks
        if (ranks and ranks != share_n) or not _close(ratio, (share_n - 1) / share_n):
            return None
        if op in _REDUCTIONS:
            return "ReduceScatter", share_n
        return ("AllGather", share_n) if no_redop_column or in_place_checked else None
    if _close(ratio, 1.0):
        if root is not None and root >= 0:
            return ("Reduce", ranks) if op in _REDUCTIONS else ("Broadcast", ranks)
        if (ranks and ranks > 2) or (no_redop_column and "root" not in columns):
            return "SendRecv", ranks
        if in_place_checked and op in _REDUCTIONS and ranks in (None, 2):
            return "AllReduce", 2  # busbw = algbw: 2(n-1)/n is 1 at two ranks only
        return None  # SendRecv, or AllReduce over 2 ranks: the same numbers
    if op not in _REDUCTIONS and op is not None:
        return None
    n = 2.0 / (2.0 - ratio) if ratio < 2.0 else None
    if n is None or (ranks and not _close(ratio, 2.0 * (ranks - 1) / ranks)):
        return None
    return "AllReduce", ranks
