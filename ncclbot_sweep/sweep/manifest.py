"""The campaign manifest: one SQLite file holding jobs, steps, their states and an event log.

The manifest is the campaign's memory across crashes. Rows are keyed by the plan's content
keys, so registering a plan twice adds nothing. Every change of a job or step state also
appends a row to ``events``, which triggers keep append-only. The file records its schema
version and the version of ncclbot-sweep that created it; opening a file of another schema
version fails with a message naming both (architecture section 4.6).

Only the campaign runner (and ``cancel``) write here; ``status`` reads a snapshot
(:meth:`Manifest.snapshot`) while a runner writes (WAL mode), and never writes the file.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ncclbot_sweep import __version__
from ncclbot_sweep.errors import ManifestError, NcclbotError, OutOfSpaceError, file_system_full
from ncclbot_sweep.outcomes import JobState, StepOutcome
from ncclbot_sweep.paths import PART_SUFFIX, CampaignPaths

__all__ = ["SCHEMA_VERSION", "JobPhase", "JobRow", "Manifest", "StepRow", "recorded_job_state"]

log = logging.getLogger(__name__)

#: Bump when the tables change; older files then fail to open with a message naming both versions.
SCHEMA_VERSION = 1


class JobPhase(str, enum.Enum):
    """Where a job is in the campaign's life (the scheduler's own state is kept beside it)."""

    PLANNED = "planned"  # waiting to be submitted (first time, or again on resume)
    SUBMITTED = "submitted"  # the executor has it (pending or running)
    FINISHED = "finished"  # the executor says it ended; its steps are classified
    CANCELLED = "cancelled"

    @property
    def open(self) -> bool:
        return self is JobPhase.SUBMITTED


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
    job_key TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    nodes INTEGER NOT NULL,
    n_steps INTEGER NOT NULL,
    time_limit_min INTEGER NOT NULL,
    phase TEXT NOT NULL,
    executor_job_id TEXT,
    known_ids TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    scheduler_state TEXT,
    exit_code INTEGER,
    reason TEXT,
    submitted_at REAL,
    updated_at REAL NOT NULL
);
CREATE TABLE steps (
    step_key TEXT PRIMARY KEY,
    job_key TEXT NOT NULL REFERENCES jobs(job_key),
    position INTEGER NOT NULL,
    label TEXT NOT NULL,
    outcome TEXT,
    exit_code INTEGER,
    runs INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);
CREATE INDEX steps_by_job ON steps(job_key);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job_key TEXT,
    step_key TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
"""


@dataclasses.dataclass(frozen=True)
class JobRow:
    job_key: str
    position: int
    nodes: int
    n_steps: int
    time_limit_min: int
    phase: JobPhase
    executor_job_id: str | None
    known_ids: tuple[str, ...]
    attempts: int
    scheduler_state: str | None
    exit_code: int | None
    reason: str | None
    submitted_at: float | None


@dataclasses.dataclass(frozen=True)
class StepRow:
    step_key: str
    job_key: str
    position: int
    label: str
    outcome: StepOutcome | None
    exit_code: int | None
    runs: int


class Manifest:
    """Open with :meth:`create` (new campaign folder) or :meth:`open` (existing one)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn

    # ------------------------------------------------------------------ opening

    @classmethod
    def _connect(cls, path: Path) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.OperationalError as exc:
            raise _storage_error(exc, path) from exc
        return conn

    @classmethod
    def create(cls, path: Path, meta: dict[str, str]) -> Manifest:
        """Create a manifest with ``meta`` (campaign, campaign_key, fabric), or open the existing one.

        Creation is atomic: the tables and ``meta`` are written into ``<path>.ncclbot-part``
        and renamed into place, so a manifest that exists is whole (a full disk or a kill
        leaves none, and the next ``submit``/``resume`` creates it). A file left empty by an
        older release that died while creating it holds nothing and is replaced. Raises
        ManifestError when the existing file belongs to another campaign key,
        OutOfSpaceError when the disk is full.
        """
        path = Path(path)
        if path.exists() and _holds_nothing(path):
            log.warning("%s was left empty by an interrupted submit; creating it again", path)
            path.unlink()
        if path.exists():
            manifest = cls.open(path)
            existing = manifest.meta()
            theirs = existing.get("campaign_key")
            if theirs != meta["campaign_key"]:
                manifest.close()
                raise ManifestError(
                    f"this folder holds campaign {manifest_name(theirs, existing)}, not "
                    f"{meta.get('campaign')!r} on {meta.get('fabric')!r} (key {meta['campaign_key']})",
                    path=path, hint="use another --workdir for a different campaign or fabric")
            return manifest
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_new(path, meta)
        log.info("created manifest %s", path)
        return cls(path, cls._connect(path))

    @classmethod
    def open(cls, path: Path) -> Manifest:
        """Open an existing manifest; raises ManifestError if missing or of another schema version."""
        path = Path(path)
        _require(path)
        conn = cls._connect(path)
        _check_schema(conn, path)
        return cls(path, conn)

    @classmethod
    def snapshot(cls, path: Path) -> Manifest:
        """A private in-memory copy of an existing manifest, for read-only commands (``status``).

        The file is opened read-only and copied; the copy can be reconciled like the real
        manifest (so ``status`` shows what the scheduler says) without changing the file.
        Raises ManifestError like :meth:`open`.
        """
        path = Path(path)
        _require(path)
        try:
            memory = _copy_read_only(path, immutable=not Path(f"{path}-wal").exists())
        except sqlite3.DatabaseError:  # a runner started meanwhile: read through its write-ahead log
            try:
                memory = _copy_read_only(path, immutable=False)
            except sqlite3.DatabaseError as exc:
                raise ManifestError(f"cannot read the manifest ({exc})", path=path,
                                    hint="check the file's permissions; 'ncclbot-sweep status' only reads it") from exc
        memory.row_factory = sqlite3.Row
        return cls(path, memory)

    def close(self) -> None:
        self._conn.close()

    def meta(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    # ------------------------------------------------------------------ registering

    def register(self, jobs: Iterable[Any]) -> int:
        """Add planned jobs and their steps that are not yet known; returns how many jobs were new.

        ``jobs`` are :class:`ncclbot_sweep.sweep.campaign.Job` objects. Idempotent.
        """
        jobs = list(jobs)
        self._check_packing(jobs)
        now = time.time()
        added = 0
        with _transaction(self._conn, self.path):
            start = self._conn.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM jobs").fetchone()[0]
            for offset, job in enumerate(jobs):
                cur = self._conn.execute(
                    "INSERT OR IGNORE INTO jobs(job_key, position, nodes, n_steps, time_limit_min, phase, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (job.key, start + offset, job.nodes, len(job.steps), job.time_limit_min,
                     JobPhase.PLANNED.value, now))
                if cur.rowcount == 0:
                    continue
                added += 1
                _event(self._conn, job.key, None, "planned", f"{len(job.steps)} steps on {job.nodes} nodes")
                self._conn.executemany(
                    "INSERT OR IGNORE INTO steps(step_key, job_key, position, label, updated_at) VALUES (?, ?, ?, ?, ?)",
                    [(s.key, job.key, i, s.label, now) for i, s in enumerate(job.steps)])
        return added

    def _check_packing(self, jobs: list[Any]) -> None:
        """Refuse a plan that puts a known step into another job (the packing changed)."""
        owner = dict(self._conn.execute("SELECT step_key, job_key FROM steps").fetchall())
        for job in jobs:
            for step in job.steps:
                known = owner.get(step.key)
                if known is not None and known != job.key:
                    raise ManifestError(
                        f"step {step.key} ({step.label}) belongs to job {known} in this campaign, but the plan "
                        f"now puts it in job {job.key}: the packing changed", path=self.path,
                        hint="restore packing.steps_per_job (and separate_repeats), or use a new --workdir")

    # ------------------------------------------------------------------ reading

    def jobs(self, phases: Iterable[JobPhase] | None = None) -> list[JobRow]:
        rows = self._conn.execute("SELECT * FROM jobs ORDER BY position").fetchall()
        wanted = None if phases is None else {JobPhase(p) for p in phases}
        out = [_job_row(r) for r in rows]
        return out if wanted is None else [j for j in out if j.phase in wanted]

    def job(self, job_key: str) -> JobRow:
        row = self._conn.execute("SELECT * FROM jobs WHERE job_key = ?", (job_key,)).fetchone()
        if row is None:
            raise ManifestError(f"job {job_key} is not in this manifest", path=self.path)
        return _job_row(row)

    def steps(self, job_key: str | None = None) -> list[StepRow]:
        if job_key is None:
            rows = self._conn.execute(
                "SELECT s.* FROM steps s JOIN jobs j USING(job_key) ORDER BY j.position, s.position").fetchall()
        else:
            rows = self._conn.execute("SELECT * FROM steps WHERE job_key = ? ORDER BY position", (job_key,)).fetchall()
        return [StepRow(r["step_key"], r["job_key"], r["position"], r["label"],
                        None if r["outcome"] is None else StepOutcome(r["outcome"]), r["exit_code"], r["runs"])
                for r in rows]

    def events(self, job_key: str | None = None) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM events ORDER BY id", ()
        if job_key is not None:
            query, args = "SELECT * FROM events WHERE job_key = ? ORDER BY id", (job_key,)
        return [dict(r) for r in self._conn.execute(query, args).fetchall()]

    # ------------------------------------------------------------------ writing

    def mark_submitted(self, job_key: str, job_id: str, *, adopted: bool = False) -> None:
        """The executor accepted (or, after a crash, turned out to have) this job under ``job_id``."""
        job = self.job(job_key)
        known = ",".join([*job.known_ids, job_id]) if job_id not in job.known_ids else ",".join(job.known_ids)
        now = time.time()
        with _transaction(self._conn, self.path):
            self._conn.execute(
                "UPDATE jobs SET phase = ?, executor_job_id = ?, known_ids = ?, attempts = attempts + 1, "
                "scheduler_state = 'PENDING', exit_code = NULL, reason = NULL, submitted_at = ?, updated_at = ? "
                "WHERE job_key = ?", (JobPhase.SUBMITTED.value, job_id, known, now, now, job_key))
            _event(self._conn, job_key, None, "adopted" if adopted else "submitted", f"executor job {job_id}")

    def update_job(self, job_key: str, phase: JobPhase, *, scheduler_state: str | None = None,
                   exit_code: int | None = None, reason: str | None = None) -> bool:
        """Record what the scheduler says of a job; logs an event only when something changed."""
        job = self.job(job_key)
        if (job.phase, job.scheduler_state, job.exit_code, job.reason) == (phase, scheduler_state, exit_code, reason):
            return False
        with _transaction(self._conn, self.path):
            self._conn.execute(
                "UPDATE jobs SET phase = ?, scheduler_state = ?, exit_code = ?, reason = ?, updated_at = ? "
                "WHERE job_key = ?", (phase.value, scheduler_state, exit_code, reason, time.time(), job_key))
            detail = f"{scheduler_state or ''} {'' if exit_code is None else f'exit {exit_code}'} {reason or ''}"
            _event(self._conn, job_key, None, f"job_{phase.value}", " ".join(detail.split()))
        return True

    def record_step(self, step_key: str, outcome: StepOutcome | None, *, exit_code: int | None) -> bool:
        """Set a step's outcome (None: not finished, to run again); event only on change."""
        row = self._conn.execute("SELECT job_key, outcome, exit_code FROM steps WHERE step_key = ?",
                                 (step_key,)).fetchone()
        if row is None:
            raise ManifestError(f"step {step_key} is not in this manifest", path=self.path)
        value = None if outcome is None else outcome.value
        if (row["outcome"], row["exit_code"]) == (value, exit_code):
            return False
        with _transaction(self._conn, self.path):
            runs = "runs + 1" if outcome is not None else "runs"
            self._conn.execute(f"UPDATE steps SET outcome = ?, exit_code = ?, runs = {runs}, updated_at = ? "
                               "WHERE step_key = ?", (value, exit_code, time.time(), step_key))
            _event(self._conn, row["job_key"], step_key, "step_" + (value or "reset"),
                   "" if exit_code is None else f"exit {exit_code}")
        return True

    def note(self, kind: str, detail: str, *, job_key: str | None = None) -> None:
        """Append a free event (e.g. a reconcile finding or a scheduler error)."""
        with _transaction(self._conn, self.path):
            _event(self._conn, job_key, None, kind, detail)


def _read_only_uri(path: Path, *, immutable: bool) -> str:
    return f"{path.resolve().as_uri()}?{'mode=ro&immutable=1' if immutable else 'mode=ro'}"


def _copy_read_only(path: Path, *, immutable: bool) -> sqlite3.Connection:
    """An in-memory copy of the manifest at ``path``, opened so that nothing is written.

    With no runner active (no ``-wal`` file) the file is read as immutable, so SQLite does not
    create its ``-wal``/``-shm`` companions either; with one, through the runner's WAL.
    """
    source = sqlite3.connect(_read_only_uri(path, immutable=immutable), uri=True, timeout=30)
    try:
        _check_schema(source, path)
        memory = sqlite3.connect(":memory:", isolation_level=None)
        source.backup(memory)
        return memory
    finally:
        source.close()


def recorded_job_state(step_dir: Path) -> JobState | None:
    """The final scheduler state the manifest holds for the job of a step folder; None if unknown.

    Ingest calls it so that a step's outcome in ``runs`` follows the same rule, with the same
    job state, as in the manifest. Reads only; a step folder outside a campaign folder, or a
    manifest that cannot be read, gives None.
    """
    step_dir = Path(step_dir).resolve()
    if len(step_dir.parents) < 4 or step_dir.parents[0].name != "steps":
        return None
    root, job_key = step_dir.parents[3], step_dir.parents[1].name
    if CampaignPaths.local(root).job_dir(job_key) != step_dir.parents[1]:
        return None
    path = Path(CampaignPaths.local(root).manifest)
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(_read_only_uri(path, immutable=not Path(f"{path}-wal").exists()), uri=True,
                               timeout=5)
        try:
            row = conn.execute("SELECT scheduler_state FROM jobs WHERE job_key = ?", (job_key,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        log.info("cannot read the job state of %s from %s: %s", step_dir, path, exc)
        return None
    try:
        state = JobState(row[0]) if row and row[0] else None
    except ValueError:
        return None
    return state if state is not None and state.finished else None


def _write_new(path: Path, meta: dict[str, str]) -> None:
    """A new manifest at ``path``, written whole under a temporary name and renamed into place."""
    part = path.with_name(path.name + PART_SUFFIX)
    for leftover in (part, Path(f"{part}-journal")):
        leftover.unlink(missing_ok=True)
    values = dict(meta, schema_version=str(SCHEMA_VERSION), writer_version=__version__, created_at=str(time.time()))
    try:
        conn = sqlite3.connect(str(part), isolation_level=None)
        try:
            conn.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
            with _transaction(conn, path):
                conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", sorted(values.items()))
                _event(conn, None, None, "created", json.dumps(meta, sort_keys=True))
        finally:
            conn.close()
        os.replace(part, path)
    except sqlite3.OperationalError as exc:
        raise _storage_error(exc, path) from exc
    finally:
        for leftover in (part, Path(f"{part}-journal")):
            leftover.unlink(missing_ok=True)


def _holds_nothing(path: Path) -> bool:
    """True for a manifest file with no tables (an older release's interrupted creation)."""
    if path.stat().st_size == 0:
        return True
    try:
        conn = sqlite3.connect(_read_only_uri(path, immutable=False), uri=True, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False  # not SQLite at all: opening it says so


def _require(path: Path) -> None:
    if not path.exists():
        raise ManifestError("no manifest here", path=path,
                            hint="run 'ncclbot-sweep submit CAMPAIGN --inventory INV --workdir DIR' first")


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Raise ManifestError (closing ``conn``) unless ``conn`` holds a manifest of our schema version."""
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ManifestError(f"not a campaign manifest ({exc})", path=path) from exc
    version = rows.get("schema_version")
    if version != str(SCHEMA_VERSION):
        conn.close()
        raise ManifestError(
            f"manifest schema version {version} (written by ncclbot-sweep {rows.get('writer_version')}) "
            f"cannot be read by ncclbot-sweep {__version__}, which reads schema version {SCHEMA_VERSION}",
            path=path, hint=f"finish this campaign with ncclbot-sweep {rows.get('writer_version')}, "
            "or start a new campaign folder (there is no migration yet)")


def manifest_name(key: str | None, meta: dict[str, str]) -> str:
    return f"{meta.get('campaign')!r} on {meta.get('fabric')!r} (key {key})"


def _job_row(r: sqlite3.Row) -> JobRow:
    return JobRow(r["job_key"], r["position"], r["nodes"], r["n_steps"], r["time_limit_min"], JobPhase(r["phase"]),
                  r["executor_job_id"], tuple(i for i in r["known_ids"].split(",") if i), r["attempts"],
                  r["scheduler_state"], r["exit_code"], r["reason"], r["submitted_at"])


def _event(conn: sqlite3.Connection, job_key: str | None, step_key: str | None, kind: str, detail: str) -> None:
    conn.execute("INSERT INTO events(at, job_key, step_key, kind, detail) VALUES (?, ?, ?, ?, ?)",
                 (time.time(), job_key, step_key, kind, detail))


@contextmanager
def _transaction(conn: sqlite3.Connection, path: Path | None = None) -> Iterator[None]:
    """One write; SQLite's disk faults (full, read-only, unopenable) become ManifestError."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite rolls back by itself on some errors (a full disk)
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        raise _storage_error(exc, path) from exc


#: SQLite's primary result code for a full disk (``SQLITE_FULL``), and its I/O error, which it also
#: gives when a full disk stops it growing its write-ahead index (``SQLITE_IOERR_SHMSIZE``).
_SQLITE_FULL, _SQLITE_IOERR = 13, 10


def _storage_error(exc: sqlite3.OperationalError, path: Path | None) -> NcclbotError:
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == _SQLITE_FULL or "full" in text or (
            code == _SQLITE_IOERR and path is not None and file_system_full(path)):
        return OutOfSpaceError(f"cannot write the manifest: the file system is full ({text})", path=path,
                               hint="free space on that file system, then run the command again: it continues")
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        hint = "check the permissions of the campaign folder, or that its file system is writable"
    else:
        hint = "another program may hold the manifest; run the command again"
    return ManifestError(f"cannot write the manifest: {text}", path=path, hint=hint)
