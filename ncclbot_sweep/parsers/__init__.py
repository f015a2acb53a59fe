"""Parsers: nccl-tests text/JSON, NCCL debug logs, plugin/profiler/Inspector traces, Kineto.

Each parser is pure (text and source metadata in, rows out, no I/O) and never raises on
malformed input: what it cannot use comes back as :class:`~ncclbot_sweep.parsers.common.Issue`
rows for the quarantine table. :func:`parse_source` picks the parser for a detected format.
"""

from __future__ import annotations

from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo
from ncclbot_sweep.parsers.detect import FORMATS, detect_format

__all__ = ["FORMATS", "Issue", "ParseResult", "SourceInfo", "detect_format", "parse_source"]


def parse_source(fmt: str, data: bytes, source: SourceInfo) -> ParseResult:
    """Parse ``data`` (a whole file, decompressed) in format ``fmt`` (one of :data:`FORMATS`)."""
    from ncclbot_sweep.parsers import kineto, nccl_log, nccltests_json, nccltests_text, traces

    if fmt == "nccl-tests-text":
        result = nccltests_text.parse_nccltests_text(data, source)
        if b"NCCL INFO" in data or b"NCCL WARN" in data:
            log_result, facts = nccl_log.parse_nccl_log(data.decode("utf-8", "replace"), source)
            for name in ("tuning_tables", "choices"):
                result.tables[name] = log_result.tables.get(name, [])
            for run in result.rows("runs"):
                for key, value in facts.as_run_columns(run.get("arm")).items():
                    if value is not None and run.get(key) is None:
                        run[key] = value
                if facts.invalid_arm:
                    run["outcome"], run["failure"] = "invalid_arm", facts.invalid_arm
        return result
    text = data.decode("utf-8", "replace")
    if fmt == "nccl-log":
        result, facts = nccl_log.parse_nccl_log(text, source)
        if not result.unusable:
            run = {"run_id": source.run_id, "fabric": source.meta.get("fabric") or source.fabric,
                   "nodes": facts.nodes, "ranks": facts.ranks, "source_format": "nccl-log",
                   "outcome": "invalid_arm" if facts.invalid_arm else None, "failure": facts.invalid_arm,
                   "source_path": source.path, "source_sha256": source.sha256,
                   **facts.as_run_columns(source.meta.get("arm"))}
            result.add("runs", run)
        return result
    parsers = {
        "nccl-tests-json": nccltests_json.parse_nccltests_json,
        "rccl-tests-jsonlines": nccltests_json.parse_rccl_jsonlines,
        "ncclbot-trace": traces.parse_ncclbot_trace,
        "nccl-profiler-trace": traces.parse_profiler_trace,
        "nccl-inspector-json": traces.parse_inspector_json,
        "nccl-inspector-prometheus": traces.parse_inspector_prometheus,
        "kineto-trace": kineto.parse_kineto,
    }
    if fmt not in parsers:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, but got {fmt!r}")
    return parsers[fmt](text, source)
