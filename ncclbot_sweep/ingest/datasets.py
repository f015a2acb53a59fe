"""Arrow schemas, hive-partitioned Parquet writing and reading (architecture section 5).

This module is the one home of the dataset contract. Every table is a folder under the
dataset root, partitioned ``fabric=/collective=/nodes=`` where the table has those columns
(partition columns live in the folder names, not in the files, as hive layout expects).

Writes are atomic and idempotent per source, and there is one writer, :class:`SourceWriter`
(ingest streams into it; :func:`write_rows` groups rows by ``source_sha256`` and uses it
too): each (table, partition, source) becomes one file ``src-<key>.parquet``
(:func:`data_file_name`, the one spelling), written to a temporary name and renamed into
place, the ``sources`` ledger last. Writing the same source again finds the file and adds
nothing, so a killed ingest can simply be rerun. Writers hold the dataset's lock
(:func:`locked`, ``<root>/.ingest.lock``): concurrent ingests take turns, and temporary
files a killed one left behind are deleted under it.

An unknown partition value is written as an explicit placeholder (:data:`PLACEHOLDERS`:
``fabric=unknown``, ``collective=unknown``, ``nodes=0``), never as a null key, and every
table folder holds a zero-row ``_schema.parquet`` (:func:`ensure_schema_file`), so that plain
``pyarrow.dataset(path, partitioning="hive")``, DuckDB and polars read every table, empty
ones and loose files' included. Impossible values (NaN, infinite, negative or zero times,
negative sizes) never reach a table: ingest quarantines them (:mod:`ncclbot_sweep.ingest.rowcheck`).

Readers: :func:`read_table` (pandas), or any Parquet reader with hive partitioning:
``pyarrow.dataset.dataset('<root>/iterations', partitioning='hive')``,
``duckdb.sql("select * from read_parquet('<root>/iterations/**/*.parquet', hive_partitioning=true)")``,
``polars.read_parquet('<root>/iterations/**/*.parquet', hive_partitioning=True)``.

Column notes:

* ``iterations.iteration`` is the 0-based index of a measured iteration in the order it was
  measured (warm-up excluded; from ``result.json``'s ``times_us``, offset by its
  ``skipped_iterations``). It is null for an averaged row, whose ``n_iters`` says how many
  iterations nccl-tests averaged. ``cycle`` numbers repeated tables (``-N``), 0-based.
  ``in_place`` tells nccl-tests' out-of-place and in-place halves apart; ``line`` is the
  source line of a text row.
* Times are microseconds, sizes bytes, bandwidths GB/s (1e9 B/s).
* ``runs.synthetic`` is true for data the simulated fabric produced: it stamps its nccl-tests
  output (``simulator=`` on the version line, a ``"simulator"`` key in ``-J`` JSON); a
  fabric's name says nothing. ``runs.collective_inferred`` is true when no binary name was
  in the output and the collective was read from the table's numbers (``parsers.infer``).
* ``runs.avg_busbw_gbs`` is the ``# Avg bus bandwidth`` footer as printed (nccl-tests' mean of
  every row it measured); ``avg_busbw_elided`` is true when the stored rows do not give it
  (rows elided or cut in the output, or quarantined), false when they do, null without a
  footer (``parsers.footer``). ``runs.library`` is ``nccl`` or ``rccl`` (rccl-tests and RCCL
  outputs; ``parsers.library``), null when the output does not say.
* ``choices``: one row per run of identical consecutive per-call lines of an NCCL log;
  ``calls`` counts them and ``seq`` is the index of the first (``kind`` ``algo``); ``COLL``
  lines (``kind`` ``coll``) are one row each, with ``op_count``. NCCL 2.31+'s per-call
  ``Input``/``Best tuning`` pairs are ``kind`` ``tuning`` (every rank prints them; ``comm``
  is the communicator's address): ``predicted_us`` is the time NCCL selected on (its
  model's, or with a tuner plugin what the plugin left in the table, 0 for a forced arm;
  null for NCCL's -1), ``tuning_mask`` the candidates of that pass (beyond bit 20: the
  symmetric-kernel scheduler's pass) and ``sym_kernel`` the symmetric kernel it chose
  (``arm`` then null). ``predicted_us`` of ``algo`` rows is the choice line's ``time`` field.
  An ``algo`` row whose line names no collective takes it (and count, datatype, ``op_count``)
  from the ``COLL`` line of its call (``parsers.choices``), else keeps it null.
* ``runs``: ``outcome`` is a :class:`~ncclbot_sweep.sweep.executors.base.StepOutcome` value;
  ``failure`` says why a run is not ``ok``; ``arm_observed`` is the arm NCCL's choice lines
  show most and ``arm_mismatch`` is true when a forced ``arm`` did not run; ``hosts`` is a
  comma-separated list in rank order; ``nodes`` is null when the Rank list was elided;
  ``variant`` is the campaign variant of the step (``step.json``; the overhead ladder's rung).
* ``tuning_tables``: one row per cell of NCCL's init table (``layout`` ``single-line``,
  ``two-row`` or ``three-block``), ``nchannels`` the communicator's collective channels.
* ``cost_tables`` rows written by ingest come from choice lines that print NCCL's predicted
  time (``source`` ``nccl-log-choice``: the chosen arm only).
* ``live_events.source``: ``ncclbot`` (plugin trace), ``nccl-profiler``, ``nccl-inspector``,
  ``nccl-inspector-prometheus``; ``workload`` comes from Kineto traces, each collective call
  counted once across its views and only NCCL's (``parsers.kineto_calls``).
* ``quarantine`` lists what could not be used (file, line, reason); ``sources`` is the ledger
  of ingested files (status ``ingested``, ``partial`` or ``quarantined``).
* ``contexts`` is written by ``analyze`` (``analyze contexts``, ``analyze report``), not by
  ingest: one row per analysed context with every measured arm's steady mean
  (``steady_us``, a map arm -> us) and prediction (``predicted_us``), the measured-best arm,
  AUTO's arm (NCCL's cost-model argmin over the offered arms) and its loss against the best
  (a fraction), the runner-up margin, the degenerate-context ``flags`` (``;``-joined) and the
  analysis settings (steady window, ``rho_max``, warm-up kept). It is a derived table
  (:data:`DERIVED_TABLES`): :func:`replace_table` rewrites it as a whole, so re-running the
  analysis replaces its rows instead of adding to them. ``source_path`` names the producer
  (``ncclbot-sweep analyze``), ``source_sha256`` is a digest of the rows.

Files written by :class:`SourceWriter` keep strings dictionary-encoded and carry no Arrow
schema, so every reader sees plain strings; :func:`read_table` applies :data:`SCHEMAS`.
Line numbers are delta-encoded and strings carry no min/max statistics (what each costs to
write: :func:`_column_options`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ncclbot_sweep.errors import DatasetError, NcclbotError, OutOfSpaceError, is_out_of_space

__all__ = [
    "SCHEMAS",
    "TABLES",
    "DERIVED_TABLES",
    "PARTITION_KEYS",
    "partition_columns",
    "partition_values",
    "read_table",
    "read_arrow",
    "write_rows",
    "replace_table",
    "to_table",
    "to_arrow",
    "table_dir",
    "source_done",
    "sources_by_path",
    "drop_source",
    "SourceWriter",
    "PLACEHOLDERS",
    "SCHEMA_FILE",
    "data_file_name",
    "ensure_schema_file",
    "locked",
]

log = logging.getLogger(__name__)

PARTITION_KEYS: tuple[str, ...] = ("fabric", "collective", "nodes")
_PARTITION_TYPES = {"fabric": pa.string(), "collective": pa.string(), "nodes": pa.int32()}

_PROVENANCE = [
    pa.field("source_path", pa.string()),
    pa.field("source_sha256", pa.string()),
]

_S, _I32, _I64, _F64, _B = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
_TS = pa.timestamp("us", tz="UTC")


def _schema(*cols: tuple[str, pa.DataType], provenance: bool = True) -> pa.Schema:
    fields = [pa.field(name, typ) for name, typ in cols]
    return pa.schema(fields + (_PROVENANCE if provenance else []))


#: One Arrow schema per table; column order is the order in the files.
SCHEMAS: dict[str, pa.Schema] = {
    "runs": _schema(
        ("run_id", _S), ("campaign", _S), ("campaign_key", _S), ("job_key", _S), ("step_key", _S),
        ("fabric", _S), ("synthetic", _B), ("kind", _S), ("collective", _S), ("collective_inferred", _B),
        ("binary", _S),
        ("nodes", _I32), ("ranks", _I32), ("gpus_per_node", _I32), ("arm", _S), ("policy", _S),
        ("nccl_version", _S), ("nccl_tests_version", _S), ("library", _S), ("hosts", _S), ("n_hosts", _I32),
        ("gpu_name", _S), ("started_at", _TS), ("outcome", _S), ("exit_code", _I32),
        ("failure", _S), ("arm_observed", _S), ("arm_mismatch", _B), ("dtype", _S), ("redop", _S),
        ("min_bytes", _I64), ("max_bytes", _I64), ("warmup_iters", _I32), ("iters", _I32),
        ("agg_iters", _I32), ("validation", _I32), ("graph", _I32), ("cycles", _I32),
        ("oob_values", _I64), ("avg_busbw_gbs", _F64), ("avg_busbw_elided", _B), ("header", _S), ("source_format", _S),
        ("plugins", _S), ("func_matrix", _S), ("nccl_algo_env", _S), ("nccl_proto_env", _S), ("env", _S),
        ("variant", _S), ("samples_used", _I64), ("samples_dropped", _I64), ("drop_reasons", _S),
    ),
    "iterations": _schema(
        ("run_id", _S), ("fabric", _S), ("collective", _S), ("nodes", _I32), ("ranks", _I32),
        ("size_bytes", _I64), ("count", _I64), ("dtype", _S), ("redop", _S), ("root", _I32),
        ("in_place", _B), ("arm", _S), ("policy", _S), ("cycle", _I32), ("iteration", _I32),
        ("n_iters", _I32), ("time_us", _F64), ("algbw_gbs", _F64), ("busbw_gbs", _F64),
        ("wrong", _I64), ("error", _F64), ("timestamp", _S), ("line", _I64),
    ),
    "cost_tables": _schema(
        ("fabric", _S), ("collective", _S), ("nodes", _I32), ("ranks", _I32), ("size_bytes", _I64),
        ("arm", _S), ("predicted_us", _F64), ("source", _S), ("nccl_version", _S), ("run_id", _S),
    ),
    "tuning_tables": _schema(
        ("run_id", _S), ("fabric", _S), ("collective", _S), ("nodes", _I32), ("ranks", _I32),
        ("arm", _S), ("latency_us", _F64), ("algbw_gbs", _F64), ("max_nthreads", _I32),
        ("nchannels", _I32), ("nccl_version", _S), ("layout", _S), ("line", _I64),
    ),
    "choices": _schema(
        ("run_id", _S), ("fabric", _S), ("seq", _I64), ("collective", _S), ("nodes", _I32),
        ("ranks", _I32), ("size_bytes", _I64), ("count", _I64), ("datatype", _S), ("arm", _S),
        ("channels", _I32), ("channel_lo", _I32), ("channel_hi", _I32), ("predicted_us", _F64),
        ("op_count", _I64), ("comm", _S), ("kind", _S), ("line", _I64), ("calls", _I64),
        ("log_bytes", _I64), ("tuning_mask", _I64), ("sym_kernel", _S),
    ),
    "live_events": _schema(
        ("run_id", _S), ("fabric", _S), ("kind", _S), ("t_ns", _I64), ("rank", _I32),
        ("comm_id", _S), ("collective", _S), ("size_bytes", _I64), ("ranks", _I32), ("nodes", _I32),
        ("pull", _I64), ("arm", _S), ("auto_arm", _S), ("policy", _S), ("latency_us", _F64),
        ("reward", _F64), ("round", _I64), ("sync_us", _F64), ("reward_lag", _I64), ("samples", _I64),
        ("reason", _S), ("source", _S), ("line", _I64),
    ),
    "workload": _schema(
        ("trace_id", _S), ("fabric", _S), ("collective", _S), ("group_size", _I32),
        ("size_bytes", _I64), ("dtype", _S), ("calls", _I64), ("total_us", _F64),
        ("process_group", _S), ("source", _S), ("call_seq", pa.list_(_I64)),
    ),
    "workload_steps": _schema(
        ("run_id", _S), ("campaign", _S), ("fabric", _S), ("nodes", _I32), ("environment", _S),
        ("repetition", _I32), ("step", _I64), ("step_time_s", _F64), ("warmup", _B), ("source", _S),
        ("stdout_line", _I64), ("text", _S), ("line", _I64),
    ),
    "quarantine": _schema(
        ("source_format", _S), ("line", _I64), ("reason", _S), ("excerpt", _S), ("partial", _B),
    ),
    "sources": _schema(
        ("source_format", _S), ("status", _S), ("size_bytes", _I64), ("rows", _S), ("ingested_at", _TS),
    ),
    "contexts": _schema(
        ("fabric", _S), ("collective", _S), ("nodes", _I32), ("ranks", _I32), ("size_bytes", _I64),
        ("n_arms", _I32), ("n_offered", _I32), ("best_arm", _S), ("best_us", _F64), ("best_busbw_gbs", _F64),
        ("auto_arm", _S), ("auto_us", _F64), ("auto_busbw_gbs", _F64), ("auto_predicted_us", _F64),
        ("auto_errs", _B), ("auto_loss", _F64), ("margin", _F64),
        ("steady_us", pa.map_(_S, _F64)), ("predicted_us", pa.map_(_S, _F64)), ("flags", _S),
        ("window_first", _I32), ("window_last", _I32), ("rho_max", _F64), ("keep_warmup", _B), ("synthetic", _B),
    ),
}

#: Table names: ingest's, in the order it writes them, then the derived ones.
TABLES: tuple[str, ...] = tuple(SCHEMAS)
#: Tables the analysis derives from the others and rewrites as a whole (:func:`replace_table`).
DERIVED_TABLES: tuple[str, ...] = ("contexts",)


def partition_columns(name: str) -> tuple[str, ...]:
    """The partition keys a table has (a subset of ``fabric``, ``collective``, ``nodes``)."""
    names = set(_schema_of(name).names)
    return tuple(k for k in PARTITION_KEYS if k in names)


def _schema_of(name: str) -> pa.Schema:
    try:
        return SCHEMAS[name]
    except KeyError:
        raise DatasetError(f"unknown table {name!r}", hint=f"tables are {', '.join(TABLES)}") from None


def table_dir(root: str | Path, name: str) -> Path:
    """The folder of table ``name`` under the dataset root."""
    _schema_of(name)
    return Path(root) / name


def to_table(name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> pa.Table:
    """Coerce rows (dicts, a pandas frame or an Arrow table) to the table's schema.

    Missing columns become nulls; unknown columns raise :class:`DatasetError` so a typo in a
    producer is caught where it happens.
    """
    schema = _schema_of(name)
    if isinstance(rows, pa.Table):
        table = rows
    elif hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # pandas DataFrame
        _check_columns(name, rows.columns)
        # nested columns (a map of arm -> value) cannot be inferred from Python objects
        nested = [f for f in schema if pa.types.is_nested(f.type) and f.name in rows.columns]
        table = pa.Table.from_pandas(rows.drop(columns=[f.name for f in nested]), preserve_index=False)
        for field in nested:
            table = table.append_column(field.name, pa.array(rows[field.name].tolist(), type=field.type))
    else:
        rows = list(rows)
        _check_columns(name, {k for row in rows for k in row})
        return pa.Table.from_pylist(rows, schema=schema)
    _check_columns(name, table.column_names)
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(cols, schema=schema)


#: What a partition folder is called when its value is unknown (a loose file with no fabric,
#: collective or node count): an explicit value, never a null key, so that every hive reader
#: infers the key's type (``nodes`` stays an integer). :func:`read_arrow` gives null back for
#: ``collective`` and ``nodes``; ``unknown`` is also the fabric label ingest gives loose files.
PLACEHOLDERS: dict[str, Any] = {"fabric": "unknown", "collective": "unknown", "nodes": 0}

#: The zero-row file every table folder holds, so readers see its columns even when it is empty.
SCHEMA_FILE = "_schema.parquet"
_LOCK_FILE = ".ingest.lock"
_TMP_SUFFIX = ".tmp"


def data_file_name(key: str) -> str:
    """The one spelling of a data file's name: ``src-<source key>.parquet``.

    The key is the source's ``sha256`` (ingest), or a digest of the rows themselves when
    they carry no provenance (:func:`write_rows`), so writing the same rows twice is a no-op.
    """
    return f"src-{key}.parquet"


def to_arrow(name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> pa.Table:
    """Rows as an Arrow table of table ``name``: Arrow tables as they are (after a column
    check), anything else through :func:`to_table`. Cheap on the streaming path."""
    if isinstance(rows, pa.Table):
        _check_columns(name, rows.column_names)
        return rows
    return to_table(name, rows)


def _check_columns(name: str, columns: Iterable[str]) -> None:
    extra = set(columns) - set(_schema_of(name).names)
    if extra:
        raise DatasetError(f"table {name!r} has no column(s) {sorted(extra)}",
                           hint=f"columns are {', '.join(_schema_of(name).names)}")


def _partition_value(key: str, value: Any) -> str:
    if value is None:
        value = PLACEHOLDERS[key]
    text = str(value)
    # Hive escaping of the characters that would break a path segment.
    for ch in "%/=\\:\n":
        text = text.replace(ch, f"%{ord(ch):02X}")
    return text


def _partition_folder(root: str | Path, name: str, values: Sequence[Any]) -> Path:
    keys = partition_columns(name)
    return table_dir(root, name).joinpath(*(f"{k}={_partition_value(k, v)}" for k, v in zip(keys, values)))


def partition_values(root: str | Path, name: str, key: str) -> list[str]:
    """The values of partition ``key`` that table ``name`` holds data for, from its folder names (sorted).

    Cheap (no file is read): what an error message lists when a filter such as
    ``fabric=sim-h10`` matched nothing.
    """
    from urllib.parse import unquote

    if key not in partition_columns(name):
        raise DatasetError(f"table {name!r} is not partitioned by {key!r}",
                           hint=f"its partition keys are {', '.join(partition_columns(name)) or 'none'}")
    folder = table_dir(root, name)
    if not folder.is_dir():
        return []
    return sorted({unquote(p.name.split("=", 1)[1]) for p in folder.rglob(f"{key}=*")
                   if p.is_dir() and any(p.rglob(data_file_name("*")))})


def ensure_schema_file(root: str | Path, name: str) -> Path:
    """Write table ``name``'s zero-row schema file if it is missing; return its path.

    It sits in the placeholder partition (``fabric=unknown/...``) so that DuckDB and polars,
    which read it, see the same hive keys as in the data files; ``pyarrow.dataset`` skips it
    (leading ``_``). Called by every writer; safe to call concurrently (atomic rename).
    """
    path = _partition_folder(root, name, [None] * len(partition_columns(name))) / SCHEMA_FILE
    if not path.exists():
        try:
            _atomic_write(_storage_table(name, _schema_of(name).empty_table()), path)
        except OSError as exc:
            raise _write_error(Path(root), exc) from exc
    return path


def _atomic_write(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}{_TMP_SUFFIX}"
    try:
        pq.write_table(table, tmp, compression="snappy", store_schema=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def locked(root: str | Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[Path]:
    """Hold the dataset's writer lock (``<root>/.ingest.lock``) for the ``with`` block.

    Concurrent ingests into one dataset take turns: the second waits (``on_wait`` is called
    once when it has to) and then finds the first one's sources in the ledger. While the lock
    is held, temporary files left by a killed writer are deleted. Raises :class:`DatasetError`
    when the dataset folder cannot be created or locked (permissions, read-only disk).
    """
    import fcntl

    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / _LOCK_FILE, "a+b")
    except OSError as exc:
        raise _write_error(root, exc) from exc
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            _remove_leftovers(root)
            yield root
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_leftovers(root: Path) -> None:
    """Temporary files of a writer that was killed before its rename (only under the lock)."""
    for tmp in root.rglob(f".*{_TMP_SUFFIX}"):
        log.info("removing %s, left by an interrupted ingest", tmp)
        tmp.unlink(missing_ok=True)


def write_rows(root: str | Path, name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> int:
    """Write rows into table ``name``; return how many rows were newly written.

    Used by tests and by producers other than ingest (``analyze``'s tables). The rows go
    through :class:`SourceWriter`, one source per ``source_sha256`` (rows without one are
    keyed by their content), under the dataset lock: atomic, and idempotent since rows of a
    source already present in a partition are not written again. Raises
    :class:`DatasetError` for unknown tables or columns.
    """
    with locked(root):
        return _write_sources(root, name, to_table(name, rows))[0]


def _write_sources(root: str | Path, name: str, table: pa.Table) -> tuple[int, set[Path]]:
    """Under the caller's lock: ``table``'s rows through :class:`SourceWriter`, one source per
    ``source_sha256``; returns the rows newly written and the data files that hold the rows."""
    ensure_schema_file(root, name)
    keys = partition_columns(name)
    written, files = 0, set()
    for key, part in _split_sources(table):
        writer = SourceWriter(root, key)
        writer.write(name, part)
        written += sum(writer.commit().values())
        files |= {_partition_folder(root, name, values) / data_file_name(key)
                  for values, _ in _split_partitions(part, keys)}
    return written, files


def replace_table(root: str | Path, name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> int:
    """Make ``rows`` the whole content of derived table ``name``; return rows newly written.

    Under the dataset lock, the rows are written through :class:`SourceWriter` (one source
    per ``source_sha256``, atomic renames), then every other data file of the table is
    deleted, with the partition folders left empty. Writing the same rows again finds their
    files in place and changes nothing; different rows replace the old ones, never add to
    them. Only :data:`DERIVED_TABLES` can be replaced: ingest's tables are append-only (but
    for :func:`drop_source`, when a path comes back with newer content).
    """
    if name not in DERIVED_TABLES:
        raise DatasetError(f"table {name!r} is not derived and cannot be replaced",
                           hint=f"replace_table writes {', '.join(DERIVED_TABLES)}; ingest writes the others")
    table = to_table(name, rows)
    with locked(root):
        written, keep = _write_sources(root, name, table)
        folder = table_dir(root, name)
        for path in folder.rglob(data_file_name("*")):
            if path not in keep:
                path.unlink()
        for sub in sorted((d for d in folder.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            if not any(sub.iterdir()):
                sub.rmdir()
    return written


def _split_sources(table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """``(source key, rows)`` per ``source_sha256``; rows without one are keyed by their content."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return
    shas = table.column("source_sha256")
    for sha in pc.unique(shas).to_pylist():
        part = table.filter(pc.is_null(shas) if sha is None else pc.equal(shas, sha))
        yield (sha if sha is not None else _content_key(part)), part


def _content_key(table: pa.Table) -> str:
    digest = hashlib.sha256()
    for batch in table.to_batches():
        for col in batch.columns:
            digest.update(str(col.to_pylist()).encode())
    return "rows-" + digest.hexdigest()[:32]


class SourceWriter:
    """The one writer of data files: streams the rows of one source into every table it
    touches, then commits atomically.

    Batches go to temporary Parquet files (one per table and partition) as they arrive, so
    memory does not grow with the file; :meth:`commit` renames them into place
    (:func:`data_file_name`), the ``sources`` ledger last, so that a source counts as
    ingested only once all its rows are in place. :meth:`abort` deletes them. A partition
    that already holds this source's file (a rerun after a kill between two renames) is left
    alone: its rows count in :attr:`rows` (this source's rows in the dataset) but not in what
    :meth:`commit` returns (rows newly written). Callers hold :func:`locked`.
    """

    def __init__(self, root: str | Path, key: str) -> None:
        self.root = Path(root)
        self.key = key
        self._writers: dict[tuple[str, Path], Any] = {}
        self._tmp: dict[tuple[str, Path], Path] = {}
        #: Rows of this source per table, whether written now or already present.
        self.rows: dict[str, int] = {}
        self._new: dict[str, int] = {}

    def write(self, name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> int:
        """Add rows (dicts, a frame or an Arrow table) of this source to table ``name``.

        String columns are stored dictionary-encoded as they come (constant columns such as
        ``source_path`` cost nothing); files carry no Arrow schema, so every reader sees
        plain strings.
        """
        table = _storage_table(name, rows)
        if table.num_rows == 0:
            return 0
        try:
            self._write(name, table)
        except OSError as exc:
            raise _write_error(self.root, exc) from exc
        return table.num_rows

    def _write(self, name: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        keys = partition_columns(name)
        for values, part in _split_partitions(table, keys):
            folder = _partition_folder(self.root, name, values)
            key = (name, folder)
            body = part.drop_columns(list(keys))
            if key not in self._writers:
                if (folder / data_file_name(self.key)).exists():
                    self._writers[key] = None
                else:
                    folder.mkdir(parents=True, exist_ok=True)
                    tmp = folder / f".{data_file_name(self.key)}.{uuid.uuid4().hex}{_TMP_SUFFIX}"
                    self._tmp[key] = tmp
                    self._writers[key] = pq.ParquetWriter(tmp, body.schema, compression="snappy", store_schema=False,
                                                          **_column_options(body))
            writer = self._writers[key]
            self.rows[name] = self.rows.get(name, 0) + part.num_rows
            if writer is not None:
                writer.write_table(body)
                self._new[name] = self._new.get(name, 0) + part.num_rows

    def commit(self) -> dict[str, int]:
        """Close and rename every file into place, the ledger last; return rows newly written
        per table."""
        order = sorted(self._writers, key=lambda k: k[0] == "sources")
        try:
            for key in order:
                writer = self._writers[key]
                if writer is None:
                    continue
                writer.close()
                os.replace(self._tmp[key], key[1] / data_file_name(self.key))
        except OSError as exc:
            raise _write_error(self.root, exc) from exc
        self._writers.clear()
        return dict(self._new)

    def abort(self) -> None:
        """Drop everything written so far (the source will be ingested again next time)."""
        for key, writer in self._writers.items():
            if writer is not None:
                with contextlib.suppress(OSError):  # a full disk fails the close too; the file goes
                    writer.close()
                    self._tmp[key].unlink(missing_ok=True)
        self._writers.clear()
        self.rows.clear()
        self._new.clear()


def _column_options(table: pa.Table) -> dict[str, Any]:
    """How the columns are stored, chosen for the cost of writing (profiled on nccl-tests
    tables, ``benchmarks/ingest.py``):

    * Parquet's dictionary encoding for all but measurements (floats) and line numbers,
      which are nearly all distinct, so a dictionary only costs time;
    * line numbers delta-encoded: consecutive ones take a few bits each;
    * min/max statistics for all but strings: those are the source's constants or a handful
      of names, and their statistics cost a quarter of the write.
    """
    names = [f.name for f in table.schema]
    return {
        "use_dictionary": [f.name for f in table.schema if not pa.types.is_floating(f.type) and f.name != "line"],
        "column_encoding": {"line": "DELTA_BINARY_PACKED"} if "line" in names else None,
        "write_statistics": [f.name for f in table.schema
                             if not pa.types.is_dictionary(f.type) and not pa.types.is_string(f.type)],
    }


def _write_error(root: Path, exc: OSError) -> NcclbotError:
    """A failed write as the error that says how to fix it: a full disk, or a folder not writable."""
    path = exc.filename or root
    if is_out_of_space(exc):
        return OutOfSpaceError(f"cannot write the dataset: the file system is full ({exc.strerror or exc})", path=path,
                               hint="free space on that file system, then run the command again: what is written "
                                    "stays, and the rest is added")
    return DatasetError(f"cannot write the dataset: {exc.strerror or exc}", path=path,
                        hint="pick a folder you can write (--dataset), or fix its permissions")


_DICT_STRING = pa.dictionary(pa.int32(), pa.string())


def _storage_table(name: str, rows: Any) -> pa.Table:
    """Rows in the table's schema, strings dictionary-encoded (the form every file is written in)."""
    schema = _schema_of(name)
    table = to_arrow(name, rows)
    cols = []
    for field in schema:
        if field.name not in table.column_names:
            col = pa.nulls(table.num_rows, field.type)
        else:
            col = table.column(field.name)
            if pa.types.is_dictionary(col.type) and not pa.types.is_string(field.type):
                col = col.cast(field.type)
            elif not pa.types.is_dictionary(col.type) and col.type != field.type:
                col = col.cast(field.type)
        if pa.types.is_string(field.type) and col.type != _DICT_STRING:
            col = col.cast(_DICT_STRING)
        cols.append(col)
    return pa.Table.from_arrays(cols, names=schema.names)


def _split_partitions(table: pa.Table, keys: tuple[str, ...]) -> list[tuple[tuple, pa.Table]]:
    """``[(partition values, rows)]``; one group without work when the keys are constant."""
    import pyarrow.compute as pc

    if not keys:
        return [((), table)]
    values = []
    for key in keys:
        value = _constant_value(table.column(key))
        if value is _MIXED:
            break
        values.append(value)
    else:
        return [(tuple(values), table)]
    plain = {k: (table.column(k).cast(_PARTITION_TYPES[k])) for k in keys}
    combos = pa.table(plain).group_by(list(keys)).aggregate([]).to_pylist()
    groups = []
    for combo in combos:
        mask = None
        for key in keys:
            cond = pc.is_null(plain[key]) if combo[key] is None else pc.equal(plain[key], combo[key])
            mask = cond if mask is None else pc.and_(mask, cond)
        groups.append((tuple(combo[k] for k in keys), table.filter(mask)))
    return groups


_MIXED = object()


def _constant_value(col: pa.ChunkedArray) -> Any:
    """The one value of a column, or ``_MIXED``; O(1) for the parsers' constant columns
    (dictionaries of one value without nulls), a ``unique`` otherwise."""
    import pyarrow.compute as pc

    if pa.types.is_dictionary(col.type) and col.null_count == 0 and col.num_chunks \
            and all(len(chunk.dictionary) == 1 for chunk in col.chunks):
        first = {chunk.dictionary[0].as_py() for chunk in col.chunks}
        return first.pop() if len(first) == 1 else _MIXED
    uniq = pc.unique(col.combine_chunks())
    if len(uniq) != 1:
        return _MIXED
    value = uniq[0].as_py()
    return value


def source_done(root: str | Path, sha256: str) -> bool:
    """True when the ``sources`` ledger already records this source (ingest skips it)."""
    return (table_dir(root, "sources") / data_file_name(sha256)).exists()


def sources_by_path(root: str | Path) -> dict[str, set[str]]:
    """The ``sources`` ledger as ``{source_path: {source keys}}``: what ingest replaces when a
    path comes back with other content."""
    ledger = read_arrow(root, "sources").select(["source_path", "source_sha256"]).to_pylist()
    out: dict[str, set[str]] = {}
    for row in ledger:
        out.setdefault(row["source_path"], set()).add(row["source_sha256"])
    return out


def drop_source(root: str | Path, key: str) -> None:
    """Delete source ``key`` from every table (its rows, its quarantine rows), the ``sources``
    ledger last: a crash half way leaves it in the ledger, to be dropped by the next ingest.
    Callers hold :func:`locked`. Ingest is append-only but for this: a path ingested again
    with newer content replaces its older rows."""
    name = data_file_name(key)
    ledger = table_dir(root, "sources")
    for path in sorted(Path(root).rglob(name), key=lambda p: ledger in p.parents):
        path.unlink()


def read_arrow(root: str | Path, name: str, *, filters: Any = None) -> pa.Table:
    """Read table ``name`` as an Arrow table with its full schema (empty when absent).

    ``filters`` is anything ``pyarrow.dataset`` accepts: an expression or a list of
    ``(column, op, value)`` tuples, e.g. ``[("collective", "=", "AllReduce")]``; they see the
    stored values, so an unknown node count matches ``("nodes", "=", 0)``, and the table
    returned has null there (:data:`PLACEHOLDERS`).
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    schema = _schema_of(name)
    folder = table_dir(root, name)
    if not folder.is_dir() or not any(folder.rglob("*.parquet")):
        return schema.empty_table()
    keys = partition_columns(name)
    part_schema = pa.schema([(k, _PARTITION_TYPES[k]) for k in keys])
    dataset = ds.dataset(
        folder, format="parquet", schema=schema,
        partitioning=ds.partitioning(part_schema, flavor="hive") if keys else None,
        exclude_invalid_files=False, ignore_prefixes=[".", "_"],
    )
    expr = pq.filters_to_expression(filters) if isinstance(filters, Sequence) else filters
    try:
        table = dataset.to_table(filter=expr)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"table {name!r} cannot be read: {exc}", path=folder,
                           hint="re-ingest into a fresh dataset folder") from exc
    table = table.select(schema.names)
    for key in ("collective", "nodes"):
        if key in keys:
            col = table.column(key)
            unknown = pc.fill_null(pc.equal(col, PLACEHOLDERS[key]), False)
            table = table.set_column(table.schema.get_field_index(key), key,
                                     pc.if_else(unknown, pa.scalar(None, col.type), col))
    return table


def read_table(root: str | Path, name: str, *, filters: Any = None):
    """Read table ``name`` into a pandas DataFrame (empty with the right columns when absent).

    Integer and boolean columns use pandas' nullable dtypes (``Int32``, ``Int64``,
    ``boolean``) so a missing ``nodes`` stays ``<NA>`` instead of turning the column to float.
    """
    import pandas as pd

    mapping = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
    return read_arrow(root, name, filters=filters).to_pandas(types_mapper=mapping.get)
