"""Parsers: nccl-tests text/JSON, NCCL debug logs, plugin/profiler/Inspector traces, Kineto.

Each parser is pure (text and source metadata in, rows out, no I/O) and never raises on
malformed input: what it cannot use comes back as :class:`~ncclbot_sweep.parsers.common.Issue`
rows for the quarantine table. :func:`parse_source` picks the parser for a detected format.

A leaf of the package root rather than a part of ``ingest/``: the sweep's runner parses a
step's output too (:mod:`ncclbot_sweep.step_output`), and a stage never imports a later one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo, iter_lines, normalize_chunks, whole_lines
from ncclbot_sweep.parsers.detect import FORMATS, detect_format

__all__ = ["FORMATS", "Issue", "ParseResult", "SourceInfo", "detect_format", "parse_source",
           "parse_nccltests_stream", "parse_nccl_log_run"]


def parse_nccltests_stream(chunks: Iterable[bytes], source: SourceInfo, *,
                           on_rows: Callable[[Any], None] | None = None) -> ParseResult:
    """nccl-tests stdout, possibly with NCCL debug lines mixed in, in one streaming pass.

    Table rows go to ``on_rows`` in Arrow batches (or into the result when None); the lines
    that are not table rows also feed the NCCL log parser, whose tuning tables, choices and
    run facts (version, plugins, ``invalid_arm``, forced arm that did not run) are merged.
    A line longer than :data:`~ncclbot_sweep.parsers.common.MAX_LINE_BYTES` is not read (an issue).
    """
    from ncclbot_sweep.parsers.nccl_log import LogParser
    from ncclbot_sweep.parsers.nccltests_text import TextParser

    parser = TextParser(source, on_rows=on_rows)
    log = LogParser(source)
    parser.on_other = log.line
    parser.coll_hint = lambda: log.last_coll
    long_lines: list[Issue] = []
    parser.feed_all(whole_lines(chunks, long_lines), workers=2)
    result = parser.close()
    result.issues.extend(long_lines)
    tested = {r["collective"] for r in result.rows("runs")} - {None}
    log_result, facts = log.finish(ranks=next((r["ranks"] for r in result.rows("runs") if r.get("ranks")), None),
                                   collective=tested.pop() if len(tested) == 1 else None)
    for name in ("tuning_tables", "choices", "cost_tables"):
        if log_result.tables.get(name):
            result.tables[name] = log_result.tables[name]
    result.issues.extend(i for i in log_result.issues if i.line is not None)
    for run in result.rows("runs"):
        run.pop("_gpus_per_process", None)
        run.pop("_rows", None)
        if not log.any_nccl:
            continue
        for key, value in facts.as_run_columns(run.get("arm")).items():
            if value is not None and (run.get(key) is None or key in ("arm_observed", "arm_mismatch")):
                run[key] = value
        run["nodes"] = run.get("nodes") or facts.nodes
        run["ranks"] = run.get("ranks") or facts.ranks
        if facts.invalid_arm:
            run["outcome"], run["failure"] = "invalid_arm", facts.invalid_arm
    return result


def parse_nccl_log_run(chunks: Iterable[bytes], source: SourceInfo) -> ParseResult:
    """An NCCL debug log on its own (its bytes, streamed line by line): its tables plus one
    ``runs`` row with what the log says (version, scale, plugins, ``invalid_arm``)."""
    from ncclbot_sweep.parsers import nccl_log

    long_lines: list[Issue] = []
    result, facts = nccl_log.parse_nccl_log(iter_lines(chunks, long_lines), source)
    result.issues.extend(long_lines)
    if not result.unusable:
        run = {"run_id": source.run_id, "fabric": source.meta.get("fabric") or source.fabric,
               "nodes": facts.nodes, "ranks": facts.ranks, "source_format": "nccl-log",
               "outcome": "invalid_arm" if facts.invalid_arm else None, "failure": facts.invalid_arm,
               "source_path": source.path, "source_sha256": source.sha256,
               **facts.as_run_columns(source.meta.get("arm"))}
        result.add("runs", run)
    return result


def parse_source(fmt: str, data: bytes, source: SourceInfo) -> ParseResult:
    """Parse ``data`` (a whole file, decompressed) in format ``fmt`` (one of :data:`FORMATS`)."""
    from ncclbot_sweep.parsers import kineto, nccltests_json, traces, workload_steps

    if fmt == "nccl-tests-text":
        return parse_nccltests_stream([data], source)
    if fmt == "nccl-log":
        return parse_nccl_log_run([data], source)
    text = b"".join(normalize_chunks([data])).decode("utf-8", "replace")
    parsers = {
        "nccl-tests-json": nccltests_json.parse_nccltests_json,
        "rccl-tests-jsonlines": nccltests_json.parse_rccl_jsonlines,
        "ncclbot-trace": traces.parse_ncclbot_trace,
        "nccl-profiler-trace": traces.parse_profiler_trace,
        "nccl-inspector-json": traces.parse_inspector_json,
        "nccl-inspector-prometheus": traces.parse_inspector_prometheus,
        "kineto-trace": kineto.parse_kineto,
        "workload-steps": workload_steps.parse_workload_steps,
    }
    if fmt not in parsers:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, but got {fmt!r}")
    return parsers[fmt](text, source)
