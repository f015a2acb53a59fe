"""Ingest: walk inputs, detect formats, hash sources, parse, write tables, account for every file.

Called by ``ncclbot-sweep ingest PATH... --dataset DIR``. Inputs are files, folders, and
campaign folders (:class:`~ncclbot_sweep.paths.CampaignPaths` layout); a folder holding
``step.json`` is one *step*, read as a unit (its ``stdout.txt``, ``nccl.log``,
``result.json`` and ``exit``), and its hash covers all of them.

Invariants: ingest is idempotent (a source whose hash the ``sources`` ledger holds is
skipped), and a path keeps one version in the dataset, its newest (a log appended to, a
step run again: the new content replaces the old, :func:`_replace_older`); every input ends
up ingested, partly ingested (rows plus quarantine rows saying
what was left out, with line numbers) or quarantined with a reason, whatever it holds, and
one bad input never stops the others; no impossible value becomes a row
(:mod:`~ncclbot_sweep.ingest.rowcheck`); a crash leaves no partial table file (see
:class:`~ncclbot_sweep.ingest.datasets.SourceWriter`), and ingests into one dataset take turns
(:func:`~ncclbot_sweep.ingest.datasets.locked`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import hashlib
import json
import logging
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ncclbot_sweep.errors import DatasetError, OutOfSpaceError, ParseError, is_out_of_space
from ncclbot_sweep.filekind import REGULAR, WHOLE_READ_LIMIT, file_kind, read_whole, too_big_to_read
from ncclbot_sweep.ingest import datasets, rowcheck
from ncclbot_sweep.names import learning_policy
from ncclbot_sweep.outcomes import StepOutcome, last_error_line, outcome_reason, step_outcome
from ncclbot_sweep.parsers import detect_format, parse_nccl_log_run, parse_nccltests_stream, parse_source
from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo, iter_lines
from ncclbot_sweep.paths import PART_SUFFIX, STEP_META, CampaignPaths, StepFiles
from ncclbot_sweep.step_output import StepOutput, read_step_output
from ncclbot_sweep.stepmeta import read_step_meta
from ncclbot_sweep.sweep.manifest import recorded_job_state

__all__ = ["IngestSummary", "ingest", "iter_inputs", "dataset_info"]

log = logging.getLogger(__name__)

_CHUNK = 4 << 20
#: What cannot be decompressed: a truncated or corrupt gzip member.
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def _campaign_file_names() -> frozenset[str]:
    """Campaign bookkeeping files (named by :mod:`ncclbot_sweep.paths`): not measurements, so
    neither ingested nor quarantined, only listed as ignored (as are files not finished yet,
    ``*`` + :data:`~ncclbot_sweep.paths.PART_SUFFIX`)."""
    camp = CampaignPaths.local("c")
    names = {camp.campaign_yaml.name, camp.inventory_yaml.name, camp.manifest.name, camp.job_script("j").name,
             camp.job_log("j").name, camp.provenance("j").name, camp.coordinator_log("j").name}
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
    #: Older versions of a path dropped because the path came back with other content.
    replaced: int = 0
    #: Inputs named by the caller that hold nothing to ingest (an empty folder, bookkeeping only).
    empty: list[str] = dataclasses.field(default_factory=list)
    rows: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """True when nothing was quarantined, not even part of a file (``ingest --strict``)."""
        return not self.quarantined and not self.partial

    @property
    def nothing_found(self) -> str | None:
        """Why an input named held nothing to ingest (``ingest`` exits 1 with it), or None."""
        if not self.empty:
            return None
        ignored = f" ({len(self.ignored)} campaign bookkeeping files ignored)" if self.ignored else ""
        return f"found nothing to ingest in {', '.join(self.empty)}{ignored}"

    def add_rows(self, rows: dict[str, int]) -> None:
        for name, n in rows.items():
            if name not in ("sources",):
                self.rows[name] = self.rows.get(name, 0) + n


@dataclasses.dataclass(frozen=True)
class _Unit:
    kind: str  # "file", "step", or "special" (FIFO, device, socket, broken or circular link: never read)
    path: Path


def _file_unit(path: Path, kind: str) -> _Unit:
    return _Unit("file" if kind == REGULAR else "special", path)


def _shown_path(path: str | os.PathLike[str]) -> str:
    """A path as text that can be stored and printed: the bytes of a name that is not valid
    UTF-8 become ``\\xff`` escapes (Parquet strings and terminals take valid UTF-8 only)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _ignored(unit: _Unit) -> bool:
    """Campaign bookkeeping and files not finished yet: listed, neither ingested nor quarantined."""
    return unit.kind == "file" and (unit.path.name in _CAMPAIGN_FILES or unit.path.name.endswith(PART_SUFFIX))


def iter_inputs(paths: Iterable[str | Path]) -> Iterator[_Unit]:
    """Expand inputs into units: step folders (``step.json``), loose files and special files,
    sorted. A link that leads nowhere (or to itself) is a special file like a FIFO: quarantined,
    never read. Raises :class:`DatasetError` for a path that does not exist."""
    for raw in paths:
        path = Path(raw)
        kind = file_kind(path)
        if kind is None:
            raise DatasetError("input does not exist", path=path, hint="check the path, or quote globs")
        if kind != "directory":
            yield _file_unit(path, kind)
            continue
        if os.path.lexists(path / STEP_META):
            yield _Unit("step", path)
            continue
        step_dirs = sorted(p.parent for p in path.rglob(STEP_META))
        inside = set(step_dirs)
        for step in step_dirs:
            yield _Unit("step", step)
        for file in sorted(path.rglob("*")):
            hidden = any(part.startswith(".") for part in file.relative_to(path).parts)
            if hidden or any(parent in inside for parent in file.parents):
                continue  # executor bookkeeping (.executor/), editor files, and step members
            if (kind := file_kind(file)) not in ("directory", None):
                yield _file_unit(file, kind)


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


def _chunks(path: Path, issues: list[Issue], size: int = _CHUNK) -> Iterator[bytes]:
    """The file's bytes (gzip undone) in chunks of about ``size``. A truncated or corrupt gzip
    stream ends the chunks where it breaks, with an issue saying so: what came before it is
    still parsed (pieces are read with ``read1`` so that none is lost to the error)."""
    done = 0
    with _open_bytes(path) as fh:
        while True:
            parts: list[bytes] = []
            have = 0
            broken = None
            while have < size:
                try:
                    piece = fh.read1(size - have)
                except _GZIP_ERRORS as exc:
                    broken = exc
                    break
                if not piece:
                    break
                parts.append(piece)
                have += len(piece)
            if parts:
                yield b"".join(parts)
            done += have
            if broken is not None:
                issues.append(Issue(None, f"compressed data truncated or corrupt after {done} bytes: {broken}"))
                return
            if have < size:
                return


def _head(path: Path, n: int = 65536) -> bytes:
    return next(_chunks(path, [], n), b"")


def ingest(paths: Iterable[str | Path], dataset: str | Path, *, fabric: str | None = None,
           include_unfinished: bool = False,
           on_progress: Callable[[str, int, int], None] | None = None,
           on_wait: Callable[[], None] | None = None) -> IngestSummary:
    """Ingest every input under ``paths`` into the dataset at ``dataset``; return a summary.

    ``fabric`` labels loose files (default ``unknown``); step folders use their ``step.json``.
    A step folder without its ``exit`` marker has not finished: it is skipped (and listed in
    ``summary.unfinished``) so that ingesting again once it finishes gives one run, not two;
    ``include_unfinished`` ingests it now, with outcome ``failed``.
    ``on_progress(path, done, total)`` is called after each unit (the CLI draws a bar);
    ``on_wait()`` once if another ingest holds the dataset and this one waits for it.
    Raises :class:`DatasetError` for inputs that do not exist and for a dataset that cannot
    be written (permissions, read-only disk), :class:`OutOfSpaceError` naming the path when its
    disk is full (what was written stays; the same ingest again adds the rest); every problem
    of an input quarantines it.
    """
    summary = IngestSummary()
    units = []
    for raw in paths:
        found = list(iter_inputs([raw]))
        if all(_ignored(unit) for unit in found):
            summary.empty.append(_shown_path(raw))
        units += found
    try:
        with datasets.locked(dataset, on_wait=on_wait) as root:
            for name in datasets.TABLES:
                datasets.ensure_schema_file(root, name)
            ledger = datasets.sources_by_path(root)
            for done, unit in enumerate(units, 1):
                if _to_ingest(unit, include_unfinished, summary):
                    key = _ingest_unit(unit, root, fabric or "unknown", summary)
                    if key is not None:
                        _replace_older(root, _shown_path(unit.path), key, ledger, summary)
                if on_progress is not None:
                    on_progress(_shown_path(unit.path), done, len(units))
    except (OSError, OutOfSpaceError) as exc:
        if not is_out_of_space(exc):
            raise
        if isinstance(exc, OutOfSpaceError):
            reason, path = exc.reason, exc.path
        else:
            reason = f"cannot write the dataset: the file system is full ({exc.strerror or exc})"
            path = exc.filename or str(dataset)
        raise OutOfSpaceError(reason, path=path, hint="free space on that file system, then run the same ingest "
                                                      "again: it keeps what is in and adds the rest") from exc
    return summary


def _to_ingest(unit: _Unit, include_unfinished: bool, summary: IngestSummary) -> bool:
    """Whether ``unit`` is ingested (and counted): bookkeeping files and unfinished steps are only listed."""
    if _ignored(unit):
        summary.ignored.append(_shown_path(unit.path))
        return False
    if unit.kind == "step" and not include_unfinished and not os.path.lexists(StepFiles(unit.path).exit_marker):
        summary.unfinished.append(_shown_path(unit.path))
        return False
    summary.files += 1
    return True


def _ingest_unit(unit: _Unit, root: Path, fabric: str, summary: IngestSummary) -> str | None:
    """One input, inside the one boundary where any failure of it becomes its quarantine;
    returns its content key, or None when it could not be read (then its path is the key)."""
    key = None
    try:
        if _shown_path(unit.path) != str(unit.path):
            raise _Unreadable("the path is not valid UTF-8: not read (rename it to ingest it)")
        if unit.kind == "special":
            raise _Unreadable(f"not a regular file ({file_kind(unit.path)}): not read")
        members = _step_members(unit.path) if unit.kind == "step" else [unit.path]
        key = _sha256_files(members, named=unit.kind == "step")
        if datasets.source_done(root, key):
            summary.skipped += 1
        elif unit.kind == "step":
            _ingest_step(unit.path, members, key, root, summary)
        else:
            _ingest_file(unit.path, key, root, fabric, summary)
    except Exception as exc:  # the one marked boundary: logged, then quarantined
        if isinstance(exc, DatasetError) or is_out_of_space(exc):
            raise  # the dataset itself cannot be written: every later input would fail alike
        content = key
        key = key or _path_key(unit.path)
        if datasets.source_done(root, key):  # unreadable last time too: already quarantined
            summary.skipped += 1
            return content
        expected = isinstance(exc, (_Unreadable, ParseError, OSError, RecursionError, MemoryError, *_GZIP_ERRORS))
        # Unreadable inputs are the user's to see (the CLI lists them); a parser failure is a bug to report.
        log.log(logging.INFO if expected else logging.WARNING, "%s: quarantined: %s", _shown_path(unit.path), exc,
                exc_info=not expected)
        _quarantine_unit(unit, key, root, _reason(exc), summary)
        return content
    return key


def _replace_older(root: Path, path: str, key: str, ledger: dict[str, set[str]], summary: IngestSummary) -> None:
    """The dataset keeps one version of a path, the newest: the content just read (``key``)
    replaces whatever an earlier ingest of that path stored (a log appended to, a step run
    again). An input that could not be read replaces nothing: its older rows stay."""
    older = ledger.get(path, set()) - {key}
    for old in sorted(older):
        datasets.drop_source(root, old)
    if older:
        summary.replaced += len(older)
        log.info("%s: replaced %d older version(s) of this path in the dataset", path, len(older))
    ledger[path] = {key}


def _path_key(path: Path) -> str:
    """The ledger key of an input that cannot be read (its content has no hash)."""
    return hashlib.sha256(b"unread\0" + str(path).encode("utf-8", "surrogateescape")).hexdigest()


class _Unreadable(Exception):
    """An input that is never read (special files); its message is the quarantine reason."""


def _reason(exc: Exception) -> str:
    if isinstance(exc, _Unreadable):
        return str(exc)
    if isinstance(exc, ParseError):
        return exc.reason
    if isinstance(exc, RecursionError):
        return "nested too deeply to parse (JSON or trace deeper than Python's recursion limit)"
    if isinstance(exc, MemoryError):
        return "too big to parse in memory"
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}" + (" (check its permissions)" if exc.errno == 13 else "")
    if isinstance(exc, _GZIP_ERRORS):
        return f"compressed data truncated or corrupt: {exc}"
    return f"parser failed on this input ({type(exc).__name__}: {exc})"[:500]


def _quarantine_unit(unit: _Unit, key: str, root: Path, reason: str, summary: IngestSummary) -> None:
    """Record an input that failed as a whole (ledger + quarantine), keyed by its content hash,
    or by its path when it could not even be read."""
    source = SourceInfo(path=_shown_path(unit.path), sha256=key, run_id=key[:16])
    result = ParseResult(unusable=True, issues=[Issue(None, reason)])
    _finish(root, datasets.SourceWriter(root, key), source, unit.kind if unit.kind == "step" else None,
            result, summary, size=0)


# ---------------------------------------------------------------------- loose files
def _ingest_file(path: Path, sha: str, root: Path, fabric: str, summary: IngestSummary) -> None:
    source = SourceInfo(path=str(path), sha256=sha, run_id=sha[:16], fabric=fabric)
    writer = datasets.SourceWriter(root, sha)
    read_issues: list[Issue] = []
    head = _head(path)
    fmt = detect_format(head)
    try:
        result = _parse_file(path, fmt, source, writer, read_issues)
    except BaseException:
        writer.abort()
        raise
    if fmt is None:
        first = next((ln for ln in head.decode("utf-8", "replace").splitlines() if ln.strip()), "")
        result.issues = [Issue(1, result.issues[0].reason, first[:200])]
    result.issues.extend(read_issues)
    _finish(root, writer, source, fmt, result, summary, size=path.stat().st_size)


def _parse_file(path: Path, fmt: str | None, source: SourceInfo, writer: datasets.SourceWriter,
                issues: list[Issue]) -> ParseResult:
    if fmt is None:
        return ParseResult(unusable=True, issues=[Issue(None, "unrecognised format (not nccl-tests output, "
                                                              "an NCCL log or a known trace)")])
    if fmt == "nccl-tests-text":  # streamed: rows go to the writer batch by batch (memory stays flat)
        return parse_nccltests_stream(_chunks(path, issues), source,
                                      on_rows=lambda table: _write_batch(writer, "iterations", table, issues))
    if fmt == "nccl-log":  # streamed: debug logs can be far bigger than memory
        return parse_nccl_log_run(_chunks(path, issues), source)
    return parse_source(fmt, _read_whole(path, issues), source)


def _read_whole(path: Path, issues: list[Issue]) -> bytes:
    """A file parsed whole (JSON, traces), gzip undone; one of more than
    :data:`~ncclbot_sweep.filekind.WHOLE_READ_LIMIT` bytes, before or after decompression, is
    refused before it is read whole."""
    if (stored := path.stat().st_size) > WHOLE_READ_LIMIT:
        raise _Unreadable(too_big_to_read(stored))
    parts, size = [], 0
    for chunk in _chunks(path, issues):
        size += len(chunk)
        if size > WHOLE_READ_LIMIT:
            raise _Unreadable(too_big_to_read(size))
        parts.append(chunk)
    return b"".join(parts)


# ---------------------------------------------------------------------- step folders
def _step_members(folder: Path) -> list[Path]:
    """The files of a step folder that make up its source (and its hash), in a fixed order."""
    files = StepFiles(folder)
    members = [Path(p) for p in (files.meta, files.stdout, files.nccl_log, files.result_json, files.workload_steps,
                                 files.exit_marker) if Path(p).is_file()]
    return members + _trace_files(files)


def _ingest_step(folder: Path, members: list[Path], sha: str, root: Path, summary: IngestSummary) -> None:
    """A step folder as a unit; a ``step.json`` or ``exit`` that cannot be what it says quarantines the step."""
    files = StepFiles(folder)
    try:
        meta = read_step_meta(files.meta).as_dict()
        kind = file_kind(files.exit_marker)
        if kind not in (REGULAR, None):
            raise ParseError(f"exit is a {kind}, not the file the job writes the step's exit code into: "
                             "the step is not ingested", path=files.exit_marker)
    except ParseError as exc:
        source = SourceInfo(path=str(folder), sha256=sha, run_id=sha[:16])
        result = ParseResult(unusable=True, issues=[Issue(exc.line, exc.reason)])
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
        try:
            parsed = parse_source("ncclbot-trace", read_whole(path), source)
        except ParseError as exc:
            result.issues.append(Issue(None, f"{path.name}: {exc.reason}"))
            continue
        for name, items in parsed.tables.items():
            result.tables.setdefault(name, []).extend(items)
        result.issues.extend(Issue(i.line, f"{path.name}: {i.reason}", i.excerpt) for i in parsed.issues)


def _samples_columns(run: dict[str, Any], events: list[dict]) -> None:
    """The run's pulls applied with a reward and without, over every rank's trace (v2 traces'
    ``samples`` rows; a v1 trace says nothing, and the columns stay null)."""
    counts: dict[str, int] = {}
    for row in events:
        if row.get("kind") == "samples" and row.get("samples") is not None and row.get("reason"):
            counts[row["reason"]] = counts.get(row["reason"], 0) + int(row["samples"])
    if not counts:
        return
    dropped = {reason: n for reason, n in sorted(counts.items()) if reason != "used" and n}
    run["samples_used"] = counts.get("used", 0)
    run["samples_dropped"] = sum(dropped.values())
    run["drop_reasons"] = ";".join(f"{reason}:{n}" for reason, n in dropped.items()) or None


def _parse_step(files: StepFiles, meta: dict[str, Any], source: SourceInfo) -> ParseResult:
    from ncclbot_sweep.parsers.nccl_log import parse_nccl_log

    result = ParseResult()
    output = read_step_output(files, source)
    text_runs: list[dict] = []
    if output.text is not None:
        text = output.text
        text_runs = text.rows("runs")
        # NCCL lines in stdout (NCCL_DEBUG without NCCL_DEBUG_FILE) count unless nccl.log has them.
        keep = ("iterations", "tuning_tables", "choices", "cost_tables")
        result.merge(ParseResult(tables={k: v for k, v in text.tables.items() if k in keep}, issues=text.issues))
    json_runs: list[dict] = []
    if output.json is not None:
        parsed = output.json
        json_runs = parsed.rows("runs")
        result.issues.extend(parsed.issues)
        json_iters = parsed.tables.get("iterations", [])
        per_iter = any(_has_iteration(item) for item in json_iters)
        if per_iter or not result.count("iterations"):
            result.tables["iterations"] = json_iters  # per-iteration rows win (architecture section 4)
    run = _merge_runs(text_runs, json_runs)
    if output.is_workload:
        result.merge(output.workload or ParseResult())
        run["synthetic"] = output.synthetic
    if output.refused and run.get("failure") is None:
        run["failure"] = "; ".join(output.refused)
    facts = None
    log_path = Path(files.nccl_log)
    if log_path.is_file():
        read_issues: list[Issue] = []
        log_result, facts = parse_nccl_log(iter_lines(_chunks(log_path, read_issues), read_issues), source)
        for name in ("tuning_tables", "choices", "cost_tables"):
            if log_result.tables.get(name):
                result.tables[name] = log_result.tables[name]
        result.issues.extend([i for i in log_result.issues if i.line is not None] + read_issues)
    _parse_traces(files, source, result)
    _apply_log_facts([run], facts, meta.get("arm"), result)
    _step_run_columns(run, meta, files, source, output)  # after the log facts: it decides the outcome
    _samples_columns(run, result.tables.get("live_events", []))
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
    lines: dict[str, int] = {}
    for candidate in (json_runs[:1] + text_runs[:1]):
        for key, value in candidate.items():
            if value is not None and run.get(key) is None and key != "_lines":
                run[key] = value
                if (candidate.get("_lines") or {}).get(key) is not None:
                    lines[key] = candidate["_lines"][key]  # the line of the file the value came from
    run["_lines"] = lines
    if text_runs and json_runs:
        run["source_format"] = "nccl-tests-text+json"
        if text_runs[0].get("outcome") == "ok" or json_runs[0].get("outcome") == "ok":
            run["outcome"] = "ok"
            run["failure"] = None
    run.pop("_gpus_per_process", None)
    run.pop("_rows", None)
    return run


def _step_run_columns(run: dict[str, Any], meta: dict[str, Any], files: StepFiles, source: SourceInfo,
                      output: StepOutput) -> None:
    """Fill a step's ``runs`` row from ``step.json``, its exit marker and its output (the runner's rule)."""
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
    outcome, code = step_outcome(files, job_state=recorded_job_state(Path(files.root)),
                                 output_ok=lambda: output.usable,
                                 learner=learning_policy(meta.get("policy"), plugin=meta.get("plugin") is True))
    outcome = outcome or StepOutcome.FAILED
    run["exit_code"] = code
    if outcome is StepOutcome.OK:
        why = run.get("failure")
    elif code is None:
        why = "no exit marker: the step did not finish"
    elif outcome is StepOutcome.TIMEOUT:
        why = f"exit code {code} (timeout)"
    elif outcome is StepOutcome.INVALID_ARM:
        why = run.get("failure") or f"exit code {code}: NCCL refused the forced arm"
    elif outcome is StepOutcome.AUTO_FALLBACK:
        why = f"the plugin kept NCCL's own choice: {outcome_reason(files, outcome)}"
    elif code == 0:
        why = run.get("failure") or ("exit code 0, but no workload_steps.csv with a step time" if output.is_workload
                                     else "exit code 0, but neither stdout nor result.json holds an nccl-tests result")
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
    """Write every parsed table; return this source's rows in the dataset, or -1 (and an
    issue) when some rows do not fit the schema.

    This is the one place where a broad set of conversion errors is caught: a parser bug or
    an input value of an unexpected type must quarantine the file, not stop the ingest.
    """
    import pyarrow as pa

    try:
        for name, items in result.tables.items():
            for batch in _batches(items):
                lines = None
                if name == "runs":
                    lines = [r.get("_lines") or {} for r in batch]
                    batch = [_clean_run(r, source) for r in batch]
                _write_batch(writer, name, batch, result.issues, lines=lines)
    except (pa.ArrowInvalid, pa.ArrowTypeError, DatasetError, TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, DatasetError) and exc.path is not None:
            raise  # the dataset cannot be written (see SourceWriter), not a fault of this input
        log.warning("%s: rows do not fit the dataset schema: %s", source.path, exc)
        result.issues.append(Issue(None, f"rows do not fit the dataset schema: {exc}"[:500]))
        result.unusable = True
        return -1
    return sum(writer.rows.values())


def _write_batch(writer: datasets.SourceWriter, name: str, batch: Any, issues: list[Issue], *,
                 lines: rowcheck.Lines | None = None) -> None:
    """One batch into the writer, without its impossible values (those become issues)."""
    table, unfit = rowcheck.fit(name, batch)
    good, bad = rowcheck.split_impossible(name, table, lines=lines)
    issues.extend(unfit + bad)
    writer.write(name, good)


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
    # What produced the data decides (the simulator's stamp), never the fabric's name.
    out["synthetic"] = bool(out.get("synthetic"))
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
        files = list(folder.rglob(datasets.data_file_name("*"))) if folder.is_dir() else []
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
