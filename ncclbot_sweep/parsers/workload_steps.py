"""A workload run's step times (``workload_steps.csv``) -> ``workload_steps`` rows.

The workload job writes the file on the node (``templates/step_times.py``): a first line
``# ncclbot-workload-steps v1``, the header ``source,step,step_time_s,warmup,line,text``, one
row per training step in run order (``warmup`` 1 for the run's first warm-up steps; ``line``
the stdout line the time was read from, empty for Kineto and wall-time sources). The step's
``step.json`` (``source.meta``) names the campaign, the environment (its ``policy``), the
repetition (its ``repeat``), the fabric and the node count.

Pure and total, like every parser: a row that is not what the header says (too few fields, a
step that is no integer, a time that is no number) becomes an issue with its line and the
others are kept; a NaN or infinite time is passed on as it is, and ingest's row check
(:mod:`ncclbot_sweep.ingest.rowcheck`) quarantines it with its line, so it is never stored.
"""

from __future__ import annotations

import csv

from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo, to_float, to_int

__all__ = ["HEADER", "parse_workload_steps"]

#: The first line of the file; a later version adds columns at the end and bumps v1.
HEADER = "# ncclbot-workload-steps v1"
_COLUMNS = ("source", "step", "step_time_s", "warmup", "line", "text")


def parse_workload_steps(text: str, source: SourceInfo) -> ParseResult:
    """Parse one ``workload_steps.csv`` (see the module docstring). Never raises on malformed input."""
    result = ParseResult()
    lines = text.split("\n")
    if not lines or not lines[0].strip().startswith("# ncclbot-workload-steps"):
        result.unusable = True
        result.issues.append(Issue(1, f"not a workload steps file: the first line must be {HEADER!r}",
                                   lines[0][:200] if lines else ""))
        return result
    meta = source.meta
    base = {"run_id": source.run_id, "campaign": meta.get("campaign"), "fabric": meta.get("fabric") or source.fabric,
            "nodes": meta.get("nodes"), "environment": meta.get("policy"), "repetition": meta.get("repeat"),
            "source_path": source.path, "source_sha256": source.sha256}
    header: list[str] | None = None
    for number, fields in _records(lines[1:]):
        if header is None:
            header = fields
            missing = [c for c in _COLUMNS if c not in header]
            if missing:
                result.unusable = True
                result.issues.append(Issue(number, f"the header lacks {', '.join(missing)}", ",".join(fields)[:200]))
                return result
            continue
        row = _row(dict(zip(header, fields)), len(fields) >= len(header), number, base, result)
        if row is not None:
            result.add("workload_steps", row)
    if not result.count("workload_steps"):
        result.unusable = True
        result.issues.append(Issue(None, "no step time in the file"))
    return result


def _records(lines: list[str]):
    """(line number, fields) of each non-empty CSV record after the first line."""
    for offset, fields in enumerate(csv.reader(lines)):
        if fields and any(field.strip() for field in fields):
            yield offset + 2, fields


def _row(values: dict[str, str], complete: bool, number: int, base: dict, result: ParseResult) -> dict | None:
    step = to_int(values.get("step"))
    seconds = to_float(values.get("step_time_s"))
    warmup = values.get("warmup", "").strip()
    problem = ("too few fields" if not complete else "step is not an integer" if step is None or step < 0
               else "step_time_s is not a number" if seconds is None
               else "warmup is not 0 or 1" if warmup not in ("0", "1") else None)
    if problem:
        result.issues.append(Issue(number, f"workload step left out: {problem}", ",".join(values.values())[:200]))
        return None
    return {**base, "step": step, "step_time_s": seconds, "warmup": warmup == "1",
            "source": values.get("source") or None, "stdout_line": to_int(values.get("line")),
            "text": (values.get("text") or "")[:500] or None, "line": number}
