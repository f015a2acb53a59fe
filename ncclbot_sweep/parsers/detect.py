"""Which parser reads a file, decided from its first bytes (never from its name alone)."""

from __future__ import annotations

import re

from ncclbot_sweep.parsers.common import normalize_chunks
from ncclbot_sweep.parsers.prefixes import PREFIX_RE_B, unglue

__all__ = ["detect_format", "FORMATS", "HEADER_RE"]

#: Every format ingest knows, with the parser that reads it.
FORMATS = (
    "nccl-tests-text", "nccl-tests-json", "rccl-tests-jsonlines", "nccl-log", "ncclbot-trace",
    "nccl-profiler-trace", "nccl-inspector-json", "nccl-inspector-prometheus", "kineto-trace", "workload-steps",
)

#: nccl-tests' header line, ``nThread 1 nGpus 8 ...`` or old rccl-tests' ``nThreads: 1 nGpus: 4 ...``.
HEADER_RE = re.compile(r"nThreads?:?\s+\d+\s+nGpus:?\s+\d+")
_TEXT_TABLE = re.compile(HEADER_RE.pattern + r"|^\W*#?\s*size\s+count\s+type|out-of-place\s+in-place"
                         r"|Collective test starting|nccl-tests version|^\s*\d+\s+\d+\s+[a-z0-9_]+\s+"
                         r"(?:[a-z]+\s+)?-?\d*\s*[\d.]+\s+[\d.]+\s+[\d.]+", re.M)


_FORK_JSON = re.compile(r'^\s*\{\s*"identifier"\s*:\s*"nccl-tests structured output"', re.M)


def detect_format(head: bytes) -> str | None:
    """Name the format of a file from its first bytes (gzip already undone), or None."""
    head = PREFIX_RE_B.sub(b"", b"".join(normalize_chunks([head])))
    text = head.decode("utf-8", "replace")
    stripped = text.lstrip()
    if stripped.startswith("# ncclbot-trace"):
        return "ncclbot-trace"
    if stripped.startswith("# ncclbot-workload-steps"):
        return "workload-steps"
    if '"traceEvents"' in text or ('"schemaVersion"' in text and '"deviceProperties"' in text):
        return "kineto-trace"
    if stripped.startswith("{") and ("inspector_output_format_version" in text or '"coll_perf"' in text):
        return "nccl-inspector-json"
    if re.search(r"^# (?:HELP|TYPE) nccl_|^nccl_[a-z_]+\{", text, re.M):
        return "nccl-inspector-prometheus"
    if '"ph"' in text and re.search(r'"cat"\s*:\s*"(?:COLL|GROUP|PROXY|NET|P2P|KERNEL|GPU)', text):
        return "nccl-profiler-trace"
    if stripped.startswith("{") and '"busBw"' in text and '"inPlace"' in text:
        return "rccl-tests-jsonlines"
    if _FORK_JSON.search(text) or (stripped.startswith("{") and '"results"' in text) \
            or (stripped.startswith("{") and '"config"' in text and '"nccl_version"' in text):
        return "nccl-tests-json"
    if _TEXT_TABLE.search(unglue(text)):
        return "nccl-tests-text"
    if "NCCL INFO" in text or "NCCL WARN" in text:
        return "nccl-log"
    return None
