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
AllReduce): then nothing is guessed. Callers mark what this returns as inferred.
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
                     ranks: int | None = None) -> tuple[str, int | None] | None:
    """``(collective, ranks)`` of a table's rows, or None when the numbers do not decide.

    ``ranks`` is the rank count when known (Rank lines); the one returned is that, or the one
    the per-rank ``count`` proves, or None.
    """
    width = dtype_bytes(str(dtype)) if dtype else None
    if width is None:
        return None
    size, count = np.asarray(size, dtype=float), np.asarray(count, dtype=float)
    algbw, busbw = np.asarray(algbw, dtype=float), np.asarray(busbw, dtype=float)
    usable = (size > 0) & (count > 0) & np.isfinite(algbw) & np.isfinite(busbw) & (algbw >= _MIN_ALGBW)
    if not usable.any():
        return None
    shares = size[usable] / (width * count[usable])
    share = float(np.median(shares))
    ratio = float(np.median(busbw[usable] / algbw[usable]))
    if not np.allclose(shares, round(share)) or round(share) < 1:
        return None
    share_n = int(round(share))
    op = (redop or "").lower() or None
    if share_n > 1:  # per-rank counts: AllGather, ReduceScatter or AlltoAll over share_n ranks
        if (ranks and ranks != share_n) or not _close(ratio, (share_n - 1) / share_n):
            return None
        return ("ReduceScatter", share_n) if op in _REDUCTIONS else None
    if _close(ratio, 1.0):
        if root is not None and root >= 0:
            return ("Reduce", ranks) if op in _REDUCTIONS else ("Broadcast", ranks)
        if ranks and ranks > 2:
            return "SendRecv", ranks
        return None  # SendRecv, or AllReduce over 2 ranks: the same numbers
    if op not in _REDUCTIONS and op is not None:
        return None
    n = 2.0 / (2.0 - ratio) if ratio < 2.0 else None
    if n is None or (ranks and not _close(ratio, 2.0 * (ranks - 1) / ranks)):
        return None
    return "AllReduce", ranks
