"""Ingest: walk inputs, detect formats, hash sources, parse, write tables, account for every file.

Called by ``ncclbot-sweep ingest PATH... --dataset DIR``. Inputs are files, folders, and
campaign folders (:class:`~ncclbot_sweep.paths.CampaignPaths` layout); a folder holding
``step.json`` is one *step*, read as a unit (its ``stdout.txt``, ``nccl.log``,
``result.json`` and ``exit``), and its hash covers all of them.

Invariants: ingest is idempotent (a source whose hash the ``sources`` ledger holds is
skipped); every input file ends up ingested, partly ingested (rows plus quarantine rows
saying what was left out, with line numbers) or quarantined; a crash leaves no partial
table file (see :class:`~ncclbot_sweep.datasets.SourceWriter`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ncclbot_sweep import datasets
from ncclbot_sweep.errors import DatasetError
from ncclbot_sweep.manifest import recorded_job_state
from ncclbot_sweep.names import is_synthetic_fabric
from ncclbot_sweep.outcomes import StepOutcome, classify_step, last_error_line, read_exit_marker
from ncclbot_sweep.outcomes import step_mentions_invalid_arm
from ncclbot_sweep.parsers import detect_format, parse_nccl_log_run, parse_nccltests_stream, parse_source
from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo
from ncclbot_sweep.paths import STEP_META, CampaignPaths, StepFiles

__all__ = ["IngestSummary", "ingest", "iter_inputs", "dataset_info"]

log = logging.getLogger(__name__)

_CHUNK = 4 << 20
def _campaign_file_names() -> frozenset[str]:
    """Campaign bookkeeping files (named by :mod:`ncclbot_sweep.paths`): not measurements, so
    neither ingested nor quarantined, only listed as ignored."""
    camp = CampaignPaths.local("c")
    names = {camp.campaign_yaml.name, camp.inventory_yaml.name, camp.manifest.name, camp.job_script("j").name,
             camp.job_log("j").name, camp.provenance("j").name}
    names |= {f"{camp.manifest.name}-{suffix}" for suffix in ("journal", "wal", "shm")}
    return frozenset(names)


_CAMPAIGN_FILES = _campaign_file_names()


@dataclasses.dataclass
class IngestSummary:
    """What one ingest did: per file outcome, rows per table, quarantine reasons."""

    files: int = 0
    ingested: int = 0
    partial: int = 0
    skipped: int = 0
    quarantined: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)
    #: Step folders without an exit marker (still running, or killed): not ingested yet.
    unfinished: list[str] = dataclasses.field(default_factory=list)
    rows: dict[str, int] = dataclasses.field(default_factory=dict)

    def add_rows(self, rows: dict[str, int]) -> None:
        for name, n in rows.items():
            if name not in ("sources",):
                self.rows[name] = self.rows.get(name, 0) + n


@dataclasses.dataclass(frozen=True)
class _Unit:
    kind: str  # "file" or "step"
    path: Path


def iter_inputs(paths: Iterable[str | Path]) -> Iterator[_Unit]:
    """Expand inputs into units: step folders (``step.json``) and loose files, sorted."""
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise DatasetError("input does not exist", path=path, hint="check the path, or quote globs")
        if path.is_file():
            yield _Unit("file", path)
            continue
        if (path / STEP_META).is_file():
            yield _Unit("step", path)
            continue
        step_dirs = sorted(p.parent for p in path.rglob(STEP_META))
        inside = set(step_dirs)
        for step in step_dirs:
            yield _Unit("step", step)
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            hidden = any(part.startswith(".") for part in file.relative_to(path).parts)
            if hidden or any(parent in inside for parent in file.parents):
                continue  # executor bookkeeping (.executor/), editor files, and step members
            yield _Unit("file", file)


def _sha256_files(files: Sequence[Path], *, named: bool = False) -> str:
    """Content hash of one file, or of a step's files (then ``named``: each member's name counts)."""
    digest = hashlib.sha256()
    for file in files:
        if named:
            digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
        if named:
            digest.update(b"\0")
    return digest.hexdigest()


def _open_bytes(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _head(path: Path, n: int = 65536) -> bytes:
    with _open_bytes(path) as fh:
        return fh.read(n)


def ingest(paths: Iterable[str | Path], dataset: str | Path, *, fabric: str | None = None,
           include_unfinished: bool = False,
           on_progress: Callable[[str, int, int], None] | None = None) -> IngestSummary:
    """Ingest every input under ``paths`` into the dataset at ``dataset``; return a summary.

    ``fabric`` labels loose files (default ``unknown``); step folders use their ``step.json``.
    A step folder without its ``exit`` marker has not finished: it is skipped (and listed in
    ``summary.unfinished``) so that ingesting again once it finishes gives one run, not two;
    ``include_unfinished`` ingests it now, with outcome ``failed``.
    ``on_progress(path, done, total)`` is called after each unit (the CLI draws a bar).
    Raises :class:`DatasetError` only for inputs that do not exist.
    """
    root = Path(dataset)
    root.mkdir(parents=True, exist_ok=True)
    units = list(iter_inputs(paths))
    summary = IngestSummary()
    for done, unit in enumerate(units, 1):
        if unit.kind == "file" and unit.path.name in _CAMPAIGN_FILES:
            summary.ignored.append(str(unit.path))
        elif unit.kind == "step":
            if include_unfinished or Path(StepFiles(unit.path).exit_marker).is_file():
                _ingest_step(unit.path, root, summary)
            else:
                summary.unfinished.append(str(unit.path))
        else:
            _ingest_file(unit.path, root, fabric or "unknown", summary)
        if on_progress is not None:
            on_progress(str(unit.path), done, len(units))
    return summary


# ---------------------------------------------------------------------- loose files
def _ingest_file(path: Path, root: Path, fabric: str, summary: IngestSummary) -> None:
    summary.files += 1
    sha = _sha256_files([path])
    if datasets.source_done(root, sha):
        summary.skipped += 1
        return
    source = SourceInfo(path=str(path), sha256=sha, run_id=sha[:16], fabric=fabric)
    writer = datasets.SourceWriter(root, sha)
    head = _head(path)
    fmt = detect_format(head)
    try:
        result = _parse_file(path, fmt, source, writer)
        if fmt is None:
            first = next((ln for ln in head.decode("utf-8", "replace").splitlines() if ln.strip()), "")
            result.issues = [Issue(1, result.issues[0].reason, first[:200])]
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        # A file we cannot even read goes to quarantine with the reason, not into a crash.
        log.warning("cannot read %s: %s", path, exc)
        result = ParseResult(unusable=True, issues=[Issue(None, f"cannot read: {exc}")])
    _finish(root, writer, source, fmt, result, summary, size=path.stat().st_size)


def _parse_file(path: Path, fmt: str | None, source: SourceInfo, writer: datasets.SourceWriter) -> ParseResult:
    if fmt is None:
        return ParseResult(unusable=True, issues=[Issue(None, "unrecognised format (not nccl-tests output, "
                                                              "an NCCL log or a known trace)")])
    if fmt == "nccl-tests-text":
        return _stream_text(path, source, writer)
    if fmt == "nccl-log":  # streamed: debug logs can be far bigger than memory
        with _open_bytes(path) as fh:
            return parse_nccl_log_run((raw.decode("utf-8", "replace") for raw in fh), source)
    with _open_bytes(path) as fh:
        data = fh.read()
    return parse_source(fmt, data, source)


def _stream_text(path: Path, source: SourceInfo, writer: datasets.SourceWriter) -> ParseResult:
    """Big nccl-tests logs: rows go to the writer batch by batch (memory stays flat)."""

    def chunks() -> Iterator[bytes]:
        with _open_bytes(path) as fh:
            while chunk := fh.read(_CHUNK):
                yield chunk

    return parse_nccltests_stream(chunks(), source, on_rows=lambda table: writer.write("iterations", table))


# ---------------------------------------------------------------------- step folders
def _ingest_step(folder: Path, root: Path, summary: IngestSummary) -> None:
    files = StepFiles(folder)
    members = [Path(p) for p in (files.meta, files.stdout, files.nccl_log, files.result_json, files.exit_marker)
               if Path(p).is_file()]
    members += _trace_files(files)
    summary.files += 1
    sha = _sha256_files(members, named=True)
    if datasets.source_done(root, sha):
        summary.skipped += 1
        return
    try:
        meta = json.loads(Path(files.meta).read_text())
        if not isinstance(meta, dict):
            raise ValueError("step.json is not an object")
    except (ValueError, OSError) as exc:
        source = SourceInfo(path=str(folder), sha256=sha, run_id=sha[:16])
        result = ParseResult(unusable=True, issues=[Issue(1, f"step.json unreadable: {exc}")])
        _finish(root, datasets.SourceWriter(root, sha), source, "step", result, summary, size=0)
        return
    run_id = f"{meta.get('step_key') or sha[:16]}.{sha[:8]}"
    source = SourceInfo(path=str(folder), sha256=sha, run_id=run_id,
                        fabric=str(meta.get("fabric") or "unknown"), meta=meta)
    writer = datasets.SourceWriter(root, sha)
    result = _parse_step(files, meta, source)
    size = sum(p.stat().st_size for p in members)
    _finish(root, writer, source, "step", result, summary, size=size)


def _trace_files(files: StepFiles) -> list[Path]:
    """The plugin's per-rank trace CSVs of a live step (``trace/``), in name order."""
    folder = Path(files.trace_dir)
    return sorted(p for p in folder.glob("*.csv") if p.is_file()) if folder.is_dir() else []


def _parse_traces(files: StepFiles, source: SourceInfo, result: ParseResult) -> None:
    """Plugin traces of a live step become ``live_events`` of the step's run."""
    for path in _trace_files(files):
        parsed = parse_source("ncclbot-trace", path.read_bytes(), source)
        for name, items in parsed.tables.items():
            result.tables.setdefault(name, []).extend(items)
        result.issues.extend(Issue(i.line, f"{path.name}: {i.reason}", i.excerpt) for i in parsed.issues)


def _parse_step(files: StepFiles, meta: dict[str, Any], source: SourceInfo) -> ParseResult:
    from ncclbot_sweep.parsers.nccl_log import parse_nccl_log

    result = ParseResult()
    text_runs: list[dict] = []
    stdout = Path(files.stdout)
    if stdout.is_file():
        text = parse_source("nccl-tests-text", stdout.read_bytes(), source)
        text_runs = text.rows("runs")
        # NCCL lines in stdout (NCCL_DEBUG without NCCL_DEBUG_FILE) count unless nccl.log has them.
        keep = ("iterations", "tuning_tables", "choices", "cost_tables")
        result.merge(ParseResult(tables={k: v for k, v in text.tables.items() if k in keep}, issues=text.issues))
    result_json = Path(files.result_json)
    json_runs: list[dict] = []
    if result_json.is_file():
        parsed = parse_source("nccl-tests-json", result_json.read_bytes(), source)
        json_runs = parsed.rows("runs")
        result.issues.extend(parsed.issues)
        json_iters = parsed.tables.get("iterations", [])
        per_iter = any(_has_iteration(item) for item in json_iters)
        if per_iter or not result.count("iterations"):
            result.tables["iterations"] = json_iters  # per-iteration rows win (architecture section 4)
    run = _merge_runs(text_runs, json_runs)
    facts = None
    log_path = Path(files.nccl_log)
    if log_path.is_file():
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            log_result, facts = parse_nccl_log(fh, source)
        for name in ("tuning_tables", "choices", "cost_tables"):
            if log_result.tables.get(name):
                result.tables[name] = log_result.tables[name]
        result.issues.extend(i for i in log_result.issues if i.line is not None)
    _parse_traces(files, source, result)
    _apply_log_facts([run], facts, meta.get("arm"), result)
    _step_run_columns(run, meta, files, source)  # after the log facts: it decides the outcome
    result.tables["runs"] = [run]
    return result


def _has_iteration(item: Any) -> bool:
    if isinstance(item, dict):
        return item.get("iteration") is not None
    if isinstance(item, list):
        return any(row.get("iteration") is not None for row in item)
    return "iteration" in item.column_names and item.column("iteration").null_count < item.num_rows


def _merge_runs(text_runs: list[dict], json_runs: list[dict]) -> dict[str, Any]:
    run: dict[str, Any] = {}
    for candidate in (json_runs[:1] + text_runs[:1]):
        for key, value in candidate.items():
            if value is not None and run.get(key) is None:
                run[key] = value
    if text_runs and json_runs:
        run["source_format"] = "nccl-tests-text+json"
        if text_runs[0].get("outcome") == "ok" or json_runs[0].get("outcome") == "ok":
            run["outcome"] = "ok"
            run["failure"] = None
    run.pop("_gpus_per_process", None)
    run.pop("_rows", None)
    return run


def _step_run_columns(run: dict[str, Any], meta: dict[str, Any], files: StepFiles, source: SourceInfo) -> None:
    """Fill a step's ``runs`` row from ``step.json`` and its exit marker."""
    for key in ("campaign", "campaign_key", "job_key", "step_key", "kind", "collective", "binary",
                "nodes", "ranks", "gpus_per_node", "arm", "policy", "variant"):
        if meta.get(key) is not None:
            run[key] = meta[key]
    # What the inventory says is installed, when the outputs do not say it themselves.
    for key in ("nccl_version", "nccl_tests_version", "dtype"):
        if run.get(key) is None and isinstance(meta.get(key), str):
            run[key] = meta[key]
    run["fabric"] = source.fabric
    run["run_id"] = source.run_id
    run["source_path"] = source.path
    run["source_sha256"] = source.sha256
    run["source_format"] = run.get("source_format") or "step"
    if meta.get("env") is not None:
        run["env"] = json.dumps(meta["env"], sort_keys=True)
    code = read_exit_marker(files.exit_marker)
    run["exit_code"] = code
    invalid = run.get("outcome") == StepOutcome.INVALID_ARM.value or (
        code not in (None, 0) and step_mentions_invalid_arm(files))
    output_ok = run.get("outcome") != StepOutcome.FAILED.value and not run.get("_rows_missing")
    outcome = classify_step(code, job_state=recorded_job_state(Path(files.root)), started=Path(files.stdout).exists(),
                            invalid_arm=invalid, output_ok=output_ok) or StepOutcome.FAILED
    if outcome is StepOutcome.OK:
        why = run.get("failure")
    elif code is None:
        why = "no exit marker: the step did not finish"
    elif outcome is StepOutcome.TIMEOUT:
        why = f"exit code {code} (timeout)"
    elif outcome is StepOutcome.INVALID_ARM:
        why = run.get("failure") or f"exit code {code}: NCCL refused the forced arm"
    else:
        why = run.get("failure") or _last_error(files, code)
    run["outcome"] = outcome.value
    run["failure"] = why


def _last_error(files: StepFiles, code: int) -> str:
    """``exit code N``, plus the line of stderr/stdout that looks like the reason."""
    line = last_error_line(files)
    return f"exit code {code}: {line}" if line else f"exit code {code}"


def _apply_log_facts(runs: list[dict], facts: Any, forced_arm: str | None, result: ParseResult) -> None:
    if facts is None:
        return
    for run in runs:
        cols = facts.as_run_columns(forced_arm or run.get("arm"))
        for key, value in cols.items():
            if value is not None and (run.get(key) is None or key in ("arm_observed", "arm_mismatch")):
                run[key] = value
        if facts.invalid_arm:
            run["outcome"] = StepOutcome.INVALID_ARM.value
            run["failure"] = facts.invalid_arm
        if cols.get("arm_mismatch"):
            note = f"forced arm {forced_arm or run.get('arm')} did not run: NCCL chose {cols['arm_observed']}"
            run["failure"] = f"{run['failure']}; {note}" if run.get("failure") else note
        run["nodes"] = run.get("nodes") or facts.nodes
        run["ranks"] = run.get("ranks") or facts.ranks


# ---------------------------------------------------------------------- writing
def _finish(root: Path, writer: datasets.SourceWriter, source: SourceInfo, fmt: str | None,
            result: ParseResult, summary: IngestSummary, *, size: int) -> None:
    rows_written = 0
    try:
        if not result.unusable:
            rows_written = _write_tables(writer, source, result)
        if rows_written < 0:  # rows that do not fit the schema: nothing of the file is kept
            writer.abort()
            writer = datasets.SourceWriter(root, source.sha256)
            rows_written = 0
        status = "quarantined" if result.unusable or rows_written == 0 else (
            "partial" if result.issues else "ingested")
        if status == "quarantined" and not result.issues:
            result.issues.append(Issue(None, "no rows could be read from the file"))
        quarantine = [{"source_format": fmt, "line": i.line, "reason": i.reason, "excerpt": i.excerpt[:500],
                       "partial": status == "partial", "source_path": source.path,
                       "source_sha256": source.sha256} for i in result.issues]
        if quarantine:
            writer.write("quarantine", quarantine)
        counts = {k: v for k, v in writer.rows.items() if k != "quarantine"}
        writer.write("sources", [{"source_format": fmt, "status": status, "size_bytes": size,
                                  "rows": json.dumps(counts, sort_keys=True),
                                  "ingested_at": dt.datetime.now(dt.timezone.utc),
                                  "source_path": source.path, "source_sha256": source.sha256}])
        written = writer.commit()
    except BaseException:
        writer.abort()
        raise
    summary.add_rows({k: v for k, v in written.items() if k not in ("quarantine",)})
    if status == "quarantined":
        summary.quarantined.append((source.path, "; ".join(i.reason for i in result.issues[:3])))
    elif status == "partial":
        summary.partial += 1
        summary.ingested += 1
    else:
        summary.ingested += 1
    if result.issues:
        summary.rows["quarantine"] = summary.rows.get("quarantine", 0) + len(result.issues)


def _write_tables(writer: datasets.SourceWriter, source: SourceInfo, result: ParseResult) -> int:
    """Write every parsed table; -1 (and an issue) when some rows do not fit the schema.

    This is the one place where a broad set of conversion errors is caught: a parser bug or
    an input value of an unexpected type must quarantine the file, not stop the ingest.
    """
    import pyarrow as pa

    try:
        for name, items in result.tables.items():
            for batch in _batches(items):
                if name == "runs":
                    batch = [_clean_run(r, source) for r in batch]
                writer.write(name, batch)
    except (pa.ArrowInvalid, pa.ArrowTypeError, DatasetError, TypeError, ValueError, OverflowError) as exc:
        log.warning("%s: rows do not fit the dataset schema: %s", source.path, exc)
        result.issues.append(Issue(None, f"rows do not fit the dataset schema: {exc}"[:500]))
        result.unusable = True
        return -1
    return sum(writer.rows.values())


def _batches(items: list[Any]) -> Iterator[Any]:
    """Arrow tables as they are; runs of single-row dicts and row lists joined into one list
    (one Parquet row group per write, not one per row)."""
    rows: list[dict] = []
    for item in items:
        if isinstance(item, dict):
            rows.append(item)
        elif isinstance(item, list):
            rows.extend(item)
        else:
            if rows:
                yield rows
                rows = []
            yield item
    if rows:
        yield rows


def _clean_run(run: dict[str, Any], source: SourceInfo) -> dict[str, Any]:
    out = {k: v for k, v in run.items() if not k.startswith("_")}
    out.setdefault("fabric", source.fabric)
    out["synthetic"] = is_synthetic_fabric(out.get("fabric"))
    if out.get("nodes") and out.get("ranks") and not out.get("gpus_per_node"):
        out["gpus_per_node"] = out["ranks"] // out["nodes"]
    return out


# ---------------------------------------------------------------------- info
def dataset_info(dataset: str | Path) -> dict[str, Any]:
    """Rows per table, sources by status, and the quarantine reasons of a dataset folder."""
    root = Path(dataset)
    if not root.is_dir():
        raise DatasetError("dataset folder does not exist", path=root,
                           hint="run `ncclbot-sweep ingest PATH... --dataset DIR` first")
    tables = {}
    for name in datasets.TABLES:
        folder = datasets.table_dir(root, name)
        files = list(folder.rglob("*.parquet")) if folder.is_dir() else []
        tables[name] = {"files": len(files), "rows": datasets.read_arrow(root, name).num_rows if files else 0}
    sources = datasets.read_table(root, "sources")
    quarantine = datasets.read_table(root, "quarantine")
    by_status = sources["status"].value_counts().to_dict() if len(sources) else {}
    reasons = quarantine["reason"].value_counts().head(20).to_dict() if len(quarantine) else {}
    runs = datasets.read_table(root, "runs")
    outcomes: dict[str, dict[str, int]] = {}
    if len(runs):
        for (fabric, outcome), n in runs.groupby([runs["fabric"].fillna("?"), runs["outcome"].fillna("?")]).size().items():
            outcomes.setdefault(str(fabric), {})[str(outcome)] = int(n)
    return {"root": str(root), "tables": tables, "sources": by_status, "quarantine_reasons": reasons,
            "runs_by_fabric": outcomes}
