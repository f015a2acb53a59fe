"""Reading JSON that real tools write imperfectly: truncated files and near-JSON traces.

``load_truncated`` recovers the complete prefix of a JSON document cut short by a failed
run (nccl-tests ``-J`` output, the PR-318 fork's structured output). ``load_lenient``
reads NCCL's example-profiler traces, which are JSON-like but carry unquoted tokens
(``ncclFloat32``), hex numbers (``0x5020000567d0``), curly quotes and a
``[ trace truncated for brevity ]`` marker line.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ncclbot_sweep.parsers.common import Issue, ParseResult

__all__ = ["load_document", "load_truncated", "load_lenient"]

_CLOSE = {"{": "}", "[": "]"}
_START = re.compile(r'^\s*(\{\s*["}]|\[\s*[\[{"\d\]-])', re.M)


def load_document(text: str, result: ParseResult) -> tuple[Any, bool]:
    """:func:`load_truncated` for a parser: ``(None, False)`` when not even a prefix is JSON,
    with ``result`` marked unusable and an issue on line 1 quoting the text's start."""
    try:
        return load_truncated(text)
    except (ValueError, json.JSONDecodeError) as exc:
        result.unusable = True
        result.issues.append(Issue(1, f"not JSON: {exc}", text[:200]))
        return None, False


def load_truncated(text: str) -> tuple[Any, bool]:
    """Parse ``text`` as JSON; if it is cut short, parse its longest complete prefix.

    Returns ``(value, truncated)``. Raises ``ValueError`` when not even a prefix is JSON.
    """
    # The document starts at the first line opening an object or array (shell prompts such
    # as "[root@host ~]#" come before it in captured terminals).
    match = _START.search(text)
    start = match.start(1) if match else text.find("{")
    if start < 0:
        raise ValueError("no JSON object or array in the text")
    body = text[start:]
    try:
        return json.loads(body), False
    except json.JSONDecodeError:
        pass
    stack: list[str] = []
    in_str = esc = False
    best: tuple[int, list[str]] | None = None
    for i, ch in enumerate(body):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack or _CLOSE[stack[-1]] != ch:
                break
            stack.pop()
            if not stack:
                return json.loads(body[: i + 1]), True
            best = (i + 1, list(stack))
    if best is None:
        raise ValueError("the JSON text ends before its first complete value")
    end, open_ = best
    candidate = body[:end] + "".join(_CLOSE[c] for c in reversed(open_))
    return json.loads(candidate), True


_UNQUOTED = re.compile(r'(?<=[:\[,])\s*(0x[0-9a-fA-F]+|[A-Za-z_][A-Za-z0-9_]*)\s*(?=[,}\]])')


def _quote_token(match: re.Match) -> str:
    tok = match.group(1)
    if tok in ("true", "false", "null"):
        return tok
    if tok.startswith("0x"):
        return str(int(tok, 16))
    return json.dumps(tok)


def load_lenient(text: str) -> tuple[list[Any], list[tuple[int, str]]]:
    """Parse a JSON-like array of objects line by line; return (objects, skipped lines).

    Each line holding one object (the profiler example's layout) is repaired (quotes,
    hex, bare tokens) and parsed on its own, so one bad line costs one event, not the file.
    Skipped lines are returned as ``(line_number, reason)``.
    """
    objs: list[Any] = []
    skipped: list[tuple[int, str]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().rstrip(",").strip()
        if line in ("", "[", "]", "{}]", "{}", "[{}]"):
            continue
        if ("[" in line and line.endswith("]") and "{" not in line) or "truncated" in line.lower():
            skipped.append((lineno, f"marker line {line[:60]!r}"))
            continue
        line = line.lstrip("[").strip()
        if not line.startswith("{"):
            skipped.append((lineno, "not an event object"))
            continue
        fixed = line.replace("\u201c", '"').replace("\u201d", '"')
        for _ in range(3):  # nested objects may need several passes
            fixed = _UNQUOTED.sub(_quote_token, fixed)
        try:
            value, _ = load_truncated(fixed)
        except (ValueError, json.JSONDecodeError) as exc:
            skipped.append((lineno, f"not JSON even after repair: {exc}"))
            continue
        objs.append(value)
    return objs, skipped
