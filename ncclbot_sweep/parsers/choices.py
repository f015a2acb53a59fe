"""Per-call choice lines of NCCL logs in all their forms, and where their missing facts come from.

Every form names an algorithm and a protocol; what else it says depends on the version:

* ``AllReduce: 1048576 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}`` (2.19+, rank 0,
  INFO with ``TUNING``; some builds add `` comm 0x..``): the collective, one rank's bytes;
* ``805306368 Bytes -> Algo 1 proto 2 time 3970.683594`` (2.12-2.18 INFO on rank 0, and the
  TRACE line of ``ncclGetAlgoInfo`` on every rank): no collective, and the bytes of the whole
  operation (all ranks' for AllGather and ReduceScatter);
* ``AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008`` (2.23-2.2x INFO on rank 0):
  the collective, the enum ids, and again the whole operation's bytes (the real log of INDEX
  row 84: its COLL lines say 2359808 floats per rank over 4 ranks);
* ``Collective AllReduce(Sum, float, RING, LL) count=262144 devFuncId=.. channel{Lo..Hi}={0..1}
  ...`` (2.19+ TRACE on rank 0): printed right after the INFO line of the same call;
* any other line with ``Algo X proto Y`` and an ``opCount`` (forks, patched builds).

What a line leaves out comes from the same log, never from a guess: the COLL line
(``AllReduce: opCount 1a sendbuff .. count N datatype 7 .. [nranks=2]``) that the same thread
printed for the call, found by its opCount, else by the operation's size, else as the
thread's latest; in nccl-tests output, the collective under test (the parser of the whole
output fills that in). A line no COLL line explains keeps a null collective.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

from ncclbot_sweep.names import FULL_BUFFER_COLLECTIVES, canonical_collective, canonical_dtype, dtype_bytes
from ncclbot_sweep.parsers.common import FLOAT_RE, to_float, to_int

__all__ = ["Choice", "parse_choice", "thread_of", "PendingColls"]

_ALGO = re.compile(r"\bAlgo (?P<algo>\w+) proto (?P<proto>\w+)")
_NAMED = re.compile(r"^(?P<coll>[A-Za-z]+): (?P<bytes>\d+) Bytes -> ")
_NUMERIC = re.compile(r"^(?P<bytes>\d+) Bytes -> ")
_TRACE = re.compile(r"^Collective (?P<coll>[A-Za-z]+)\((?P<op>[^,()]*), (?P<dtype>[^,()]*), (?P<algo>\w+), "
                    r"(?P<proto>\w+)\) count=(?P<count>\d+)")
_TIME = re.compile(r"\btime (" + FLOAT_RE + r")")
_CHANNELS = re.compile(r"channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")
_NCHANNELS = re.compile(r"\bnchannels (\d+)")
_OPCOUNT = re.compile(r"\bopCount ([0-9a-fA-F]+)\b")
_COMM = re.compile(r"\bcomm (0x[0-9a-fA-F]+)")
_NBYTES = re.compile(r"\b(\d+) Bytes\b|\bnbytes (\d+)")
#: ``host:pid:tid [dev]`` of an NCCL log line (a TRACE line puts a timestamp and the
#: function between it and ``NCCL TRACE``).
_THREAD = re.compile(r"(\S+:\d+:\d+) \[\d+\]")
#: COLL lines kept per thread while they wait for their choice line (only rank 0 prints those).
_PENDING = 64


@dataclasses.dataclass
class Choice:
    """What one choice line says; None where it says nothing."""

    algo: str
    proto: str
    collective: str | None = None
    #: The line's byte count, and whether it is the whole operation's (numeric form).
    nbytes: int | None = None
    whole: bool = False
    count: int | None = None
    datatype: str | None = None
    lo: int | None = None
    hi: int | None = None
    nchannels: int | None = None
    predicted_us: float | None = None
    op_count: int | None = None
    comm: str | None = None
    #: The 2.19+ TRACE form, which repeats the INFO line printed just before it.
    trace: bool = False


def _collective(name: str | None) -> str | None:
    try:
        return canonical_collective(name) if name else None
    except ValueError:
        return None


def parse_choice(msg: str) -> Choice | None:
    """The facts of a choice line's message (after ``NCCL INFO``/``TRACE``), or None."""
    if (t := _TRACE.match(msg)) is not None:
        found = Choice(t.group("algo"), t.group("proto"), collective=_collective(t.group("coll")),
                       count=to_int(t.group("count")), datatype=canonical_dtype(t.group("dtype")), trace=True)
    elif (a := _ALGO.search(msg)) is not None:
        found = Choice(a.group("algo"), a.group("proto"))
        if (n := _NAMED.match(msg)) is not None:
            found.collective, found.nbytes = _collective(n.group("coll")), to_int(n.group("bytes"))
            found.whole = found.algo.isdigit()  # the 2.23+ form: enum ids, the whole operation's bytes
        elif (n := _NUMERIC.match(msg)) is not None:
            found.nbytes, found.whole = to_int(n.group("bytes")), True
        elif (o := _OPCOUNT.search(msg)) is not None:
            found.op_count = int(o.group(1)[-16:], 16)
            if (b := _NBYTES.search(msg)) is not None:
                found.nbytes, found.whole = to_int(b.group(1) or b.group(2)), True
        else:
            return None
    else:
        return None
    if (c := _CHANNELS.search(msg)) is not None:
        found.lo, found.hi = to_int(c.group(1)), to_int(c.group(2))
    if (c := _NCHANNELS.search(msg)) is not None:
        found.nchannels = to_int(c.group(1))
    if (c := _TIME.search(msg)) is not None:
        found.predicted_us = to_float(c.group(1))
    if (c := _COMM.search(msg)) is not None:
        found.comm = c.group(1)
    return found


def thread_of(head: str) -> str:
    """The printing thread (``host:pid:tid``) of an NCCL log line's head, or ``""``."""
    m = _THREAD.search(head)
    return m.group(1) if m else ""


class PendingColls:
    """Per thread, the COLL rows whose choice line has not come yet (oldest first)."""

    def __init__(self) -> None:
        self._by_thread: dict[str, collections.deque] = {}

    def add(self, thread: str, row: dict[str, Any]) -> None:
        self._by_thread.setdefault(thread, collections.deque(maxlen=_PENDING)).append(row)

    def waiting(self, thread: str) -> bool:
        """True when COLL rows of ``thread`` wait for their choice line."""
        return bool(self._by_thread.get(thread))

    def match(self, thread: str, choice: Choice) -> dict[str, Any] | None:
        """The COLL row that explains ``choice`` (removed with the older ones it passes), or None."""
        pending = self._by_thread.get(thread)
        if not pending:
            return None
        rows = [row for row in pending if choice.collective in (None, row["collective"])]
        if choice.op_count is not None:
            hit = next((row for row in rows if row["op_count"] == choice.op_count
                        and choice.comm in (None, row["comm"])), None)
        elif choice.nbytes is not None or choice.count is not None:
            hit = next((row for row in rows if _fits(choice, row)), None)
        else:
            hit = rows[-1] if rows else None
        if hit is None:
            return None
        while pending and pending[0] is not hit:
            pending.popleft()
        return pending.popleft()


def _fits(choice: Choice, row: dict[str, Any]) -> bool:
    """Whether a COLL row's call prints ``choice``'s size: its count, one rank's bytes, or for
    AllGather/ReduceScatter all ranks' bytes (the numeric form's whole operation)."""
    if choice.count is not None:
        return row.get("count") == choice.count
    width = dtype_bytes(row["datatype"]) if row.get("datatype") else None
    if width is None or row.get("count") is None:
        return False
    one = row["count"] * width
    ranks = row.get("ranks")
    return choice.nbytes == one or bool(ranks and row["collective"] in FULL_BUFFER_COLLECTIVES
                                        and choice.nbytes == one * ranks)
