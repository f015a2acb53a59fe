"""Launcher prefixes: what launchers and log collectors put before (or inside) an output line.

nccl-tests and NCCL print plain lines; what reaches a file has often passed through something
that labels them: OpenMPI ``--tag-output`` (``[1,0]<stdout>:``) and ``--timestamp-output``,
``srun -l`` (``0: ``, right-aligned as `` 3: `` in bigger jobs), torchrun (``[0] ``,
``[default0]:``), Ray workers, ``pdsh``/``clush`` (``host-3: ``), ``kubectl logs
--timestamps``/``--prefix`` (``2024-05-01T12:00:01.123Z ``,
``[pod/launcher/c] ``), ``ts`` and other timestampers (``May 01 12:00:01 ``, ``[12:00:01] ``).
Labels stack (a timestamp before a rank tag) and differ from line to line in one file, so a
prefix is any run of them, each stripped on its own line.

Two rules keep real content from being taken for a label. A bare word before ``: `` (a host
name) counts only when what follows starts like an nccl-tests line (``#``, a number, another
label, or a header): ``rccl-tests: Version ...`` and ``srun: error: ...`` stay whole. A date and
time joined by a space count only with a fraction of a second or a time zone: nccl-tests'
own ``-S`` column (``2025-10-14 12:00:00``) is a table column, not a label.

torchrun labels every chunk its child flushes, not every line, so a row printed in pieces
carries ``[0]`` inside it (``... -1[0]    1626.5 ...``): :func:`unglue` removes such markers.
"""

from __future__ import annotations

import re

__all__ = ["PREFIX_RE", "PREFIX_RE_B", "strip_prefix", "unglue"]

_TIME = r"\d\d:\d\d:\d\d(?:[.,]\d+)?"
_ZONE = r"(?:Z|[+-]\d\d:?\d\d)"
#: What may follow a host-like label: the start of an nccl-tests line, or another label.
_NCCLTESTS_START = r"(?=[ \t]*(?:[#\d\[(]|nThread\b))"
# The labels, grouped by their first character, so that a line (or the rest of one) that
# starts with none of them costs one test, not one per label: ingest strips every line of a
# labelled file.
_BRACKETED = (
    r"\[(?:\d+,\d+\]<std(?:out|err)>:"                                    # OpenMPI --tag-output
    r"|pod/[^\]\s]+\] "                                                   # kubectl logs --prefix
    r"|(?:\d{4}-\d\d-\d\d[T ])?" + _TIME + _ZONE + r"?\] ?"               # [12:00:01]
    r"|\d{1,5}\] (?=\S| +[-\d#])|default\d{1,5}\]:)"                      # torchrun
)
_NUMERIC = (
    r"\d(?:\d{3}-\d\d-\d\dT" + _TIME + _ZONE + r"?[ \t]"                   # ISO 8601 (kubectl, CI)
    r"|\d{3}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+" + _ZONE + r"?|" + _ZONE + r")[ \t]"
    r"|\d{0,4}: "                                                          # srun -l
    r"|[\w.-]{0,62}: " + _NCCLTESTS_START + r")"                           # pdsh, clush (10.0.0.3: )
)
_WORDY = (
    r"[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}<std(?:out|err)>:"  # --timestamp-output
    r"|[A-Z][a-z]{2} [ \d]\d " + _TIME + r" "                               # ts(1), syslog
    r"|[A-Za-z][\w.-]{0,63}: " + _NCCLTESTS_START                           # pdsh, clush
)
_ONE = (r"(?:(?=\[)" + _BRACKETED + r"|(?=\d)" + _NUMERIC + r"|(?=[A-Za-z])(?:" + _WORDY + r")"
        r"|\([A-Za-z_]\w* pid=\d+(?:, ip=[\d.]+)?\) )")                     # Ray workers
#: Blanks before a label (srun right-aligns, pastes indent) are taken whole, never backtracked into.
_PREFIX = r"(?:[ \t]*+" + _ONE + r")+"
PREFIX_RE = re.compile("^" + _PREFIX)
PREFIX_RE_B = re.compile(("^" + _PREFIX).encode(), re.M)
#: A torchrun or OpenMPI label glued to the value before it, inside a line.
_GLUED = re.compile(r"(?<=\S)(?:\[\d{1,5}\]|\[\d+,\d+\]<std(?:out|err)>:)(?=\s|$)")


def strip_prefix(line: str) -> str:
    """``line`` without the launcher labels it starts with (any number, any mix)."""
    match = PREFIX_RE.match(line)
    return line[match.end():] if match else line


def unglue(text: str) -> str:
    """``text`` with labels glued inside it (``-1[0]``) turned into blanks."""
    return _GLUED.sub(" ", text) if "[" in text else text
