"""Arrow schemas, hive-partitioned Parquet writing and reading (architecture section 5).

This module is the one home of the dataset contract. Every table is a folder under the
dataset root, partitioned ``fabric=/collective=/nodes=`` where the table has those columns
(partition columns live in the folder names, not in the files, as hive layout expects).

Writes are atomic and idempotent per source: rows are grouped by ``source_sha256`` and
partition, and each group becomes one file ``src-<sha256>.parquet`` written to a temporary
name and renamed into place. Writing the same source again finds the file and adds nothing,
so a crashed ingest can simply be rerun.

Readers: :func:`read_table` (pandas), or any Parquet reader with hive partitioning:
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
* ``runs.synthetic`` is true for fabrics whose name starts with ``sim-``.
* ``choices``: one row per run of identical consecutive per-call lines of an NCCL log;
  ``calls`` counts them and ``seq`` is the index of the first (``kind`` ``algo``); ``COLL``
  lines (``kind`` ``coll``) are one row each, with ``op_count``.
* ``runs``: ``outcome`` is a :class:`~ncclbot_sweep.executors.base.StepOutcome` value;
  ``failure`` says why a run is not ``ok``; ``arm_observed`` is the arm NCCL's choice lines
  show most and ``arm_mismatch`` is true when a forced ``arm`` did not run; ``hosts`` is a
  comma-separated list in rank order; ``nodes`` is null when the Rank list was elided;
  ``variant`` is the campaign variant of the step (``step.json``; the overhead ladder's rung).
* ``tuning_tables``: one row per cell of NCCL's init table (``layout`` ``single-line``,
  ``two-row`` or ``three-block``), ``nchannels`` the communicator's collective channels.
* ``cost_tables`` rows written by ingest come from choice lines that print NCCL's predicted
  time (``source`` ``nccl-log-choice``: the chosen arm only).
* ``live_events.source``: ``ncclbot`` (plugin trace), ``nccl-profiler``, ``nccl-inspector``,
  ``nccl-inspector-prometheus``; ``workload`` comes from Kineto traces.
* ``quarantine`` lists what could not be used (file, line, reason); ``sources`` is the ledger
  of ingested files (status ``ingested``, ``partial`` or ``quarantined``).

Files written by :class:`SourceWriter` keep strings dictionary-encoded and carry no Arrow
schema, so every reader sees plain strings; :func:`read_table` applies :data:`SCHEMAS`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ncclbot_sweep.errors import DatasetError

__all__ = [
    "SCHEMAS",
    "TABLES",
    "PARTITION_KEYS",
    "partition_columns",
    "read_table",
    "read_arrow",
    "write_rows",
    "to_table",
    "table_dir",
    "source_done",
    "SourceWriter",
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
        ("fabric", _S), ("synthetic", _B), ("kind", _S), ("collective", _S), ("binary", _S),
        ("nodes", _I32), ("ranks", _I32), ("gpus_per_node", _I32), ("arm", _S), ("policy", _S),
        ("nccl_version", _S), ("nccl_tests_version", _S), ("hosts", _S), ("n_hosts", _I32),
        ("gpu_name", _S), ("started_at", _TS), ("outcome", _S), ("exit_code", _I32),
        ("failure", _S), ("arm_observed", _S), ("arm_mismatch", _B), ("dtype", _S), ("redop", _S),
        ("min_bytes", _I64), ("max_bytes", _I64), ("warmup_iters", _I32), ("iters", _I32),
        ("agg_iters", _I32), ("validation", _I32), ("graph", _I32), ("cycles", _I32),
        ("oob_values", _I64), ("avg_busbw_gbs", _F64), ("header", _S), ("source_format", _S),
        ("plugins", _S), ("func_matrix", _S), ("nccl_algo_env", _S), ("nccl_proto_env", _S), ("env", _S),
        ("variant", _S),
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
        ("log_bytes", _I64),
    ),
    "live_events": _schema(
        ("run_id", _S), ("fabric", _S), ("kind", _S), ("t_ns", _I64), ("rank", _I32),
        ("comm_id", _S), ("collective", _S), ("size_bytes", _I64), ("ranks", _I32), ("nodes", _I32),
        ("pull", _I64), ("arm", _S), ("auto_arm", _S), ("policy", _S), ("latency_us", _F64),
        ("reward", _F64), ("round", _I64), ("sync_us", _F64), ("source", _S), ("line", _I64),
    ),
    "workload": _schema(
        ("trace_id", _S), ("fabric", _S), ("collective", _S), ("group_size", _I32),
        ("size_bytes", _I64), ("dtype", _S), ("calls", _I64), ("total_us", _F64),
        ("process_group", _S), ("source", _S),
    ),
    "quarantine": _schema(
        ("source_format", _S), ("line", _I64), ("reason", _S), ("excerpt", _S), ("partial", _B),
    ),
    "sources": _schema(
        ("source_format", _S), ("status", _S), ("size_bytes", _I64), ("rows", _S), ("ingested_at", _TS),
    ),
}

#: Table names, in the order ingest writes them.
TABLES: tuple[str, ...] = tuple(SCHEMAS)


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
        table = pa.Table.from_pandas(rows, preserve_index=False)
    else:
        rows = list(rows)
        extra = {k for row in rows for k in row} - set(schema.names)
        if extra:
            raise DatasetError(f"table {name!r} has no column(s) {sorted(extra)}",
                               hint=f"columns are {', '.join(schema.names)}")
        return pa.Table.from_pylist(rows, schema=schema)
    extra = set(table.column_names) - set(schema.names)
    if extra:
        raise DatasetError(f"table {name!r} has no column(s) {sorted(extra)}",
                           hint=f"columns are {', '.join(schema.names)}")
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _partition_value(value: Any) -> str:
    if value is None:
        return "__HIVE_DEFAULT_PARTITION__"
    text = str(value)
    # Hive escaping of the characters that would break a path segment.
    for ch in "%/=\\:\n":
        text = text.replace(ch, f"%{ord(ch):02X}")
    return text


def _file_name(sha: str | None, table: pa.Table) -> str:
    if sha:
        return f"src-{sha}.parquet"
    # Rows without provenance: name the file by its content so rewriting it is a no-op.
    digest = hashlib.sha256()
    for batch in table.to_batches():
        for col in batch.columns:
            digest.update(str(col.to_pylist()).encode())
    return f"rows-{digest.hexdigest()[:32]}.parquet"


def _atomic_write(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        pq.write_table(table, tmp, compression="snappy")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_rows(root: str | Path, name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> int:
    """Write rows into table ``name``; return how many rows were newly written.

    Atomic (temporary file, then rename) and idempotent per ``source_sha256``: rows of a
    source already present in a partition are not written again. Raises
    :class:`DatasetError` for unknown tables or columns.
    """
    import pyarrow.compute as pc

    table = to_table(name, rows)
    if table.num_rows == 0:
        return 0
    keys = partition_columns(name)
    group_keys = [*keys, "source_sha256"]
    uniq = table.select(group_keys).group_by(group_keys).aggregate([])
    written = 0
    base = table_dir(root, name)
    for combo in uniq.to_pylist():
        mask = None
        for key in group_keys:
            col = table.column(key)
            cond = pc.is_null(col) if combo[key] is None else pc.equal(col, combo[key])
            mask = cond if mask is None else pc.and_(mask, cond)
        part = table.filter(mask).drop_columns(list(keys))
        folder = base.joinpath(*(f"{k}={_partition_value(combo[k])}" for k in keys))
        path = folder / _file_name(combo["source_sha256"], part)
        if path.exists():
            log.debug("%s already holds %s; skipped", name, path.name)
            continue
        _atomic_write(part, path)
        written += part.num_rows
    return written


class SourceWriter:
    """Streams the rows of one source into every table it touches, then commits atomically.

    Used by ingest for big files: batches go to temporary Parquet files (one per table and
    partition) as they arrive, so memory does not grow with the file; :meth:`commit` renames
    them into place (``src-<sha256>.parquet``), :meth:`abort` deletes them. A partition
    that already holds this source's file is left alone (idempotent).
    """

    def __init__(self, root: str | Path, sha256: str) -> None:
        self.root = Path(root)
        self.sha256 = sha256
        self._writers: dict[tuple[str, Path], Any] = {}
        self._tmp: dict[tuple[str, Path], Path] = {}
        self.rows: dict[str, int] = {}

    def write(self, name: str, rows: Iterable[Mapping[str, Any]] | pa.Table | Any) -> int:
        """Add rows (dicts, a frame or an Arrow table) of this source to table ``name``.

        String columns are stored dictionary-encoded as they come (constant columns such as
        ``source_path`` cost nothing); files carry no Arrow schema, so every reader sees
        plain strings.
        """
        import pyarrow.parquet as pq

        table = _storage_table(name, rows)
        if table.num_rows == 0:
            return 0
        keys = partition_columns(name)
        for values, part in _split_partitions(table, keys):
            folder = table_dir(self.root, name).joinpath(
                *(f"{k}={_partition_value(v)}" for k, v in zip(keys, values)))
            key = (name, folder)
            body = part.drop_columns(list(keys))
            if key not in self._writers:
                if (folder / f"src-{self.sha256}.parquet").exists():
                    self._writers[key] = None
                else:
                    folder.mkdir(parents=True, exist_ok=True)
                    tmp = folder / f".src-{self.sha256}.{uuid.uuid4().hex}.tmp"
                    self._tmp[key] = tmp
                    self._writers[key] = pq.ParquetWriter(tmp, body.schema, compression="snappy",
                                                          store_schema=False)
            writer = self._writers[key]
            if writer is not None:
                writer.write_table(body)
                self.rows[name] = self.rows.get(name, 0) + part.num_rows
        return table.num_rows

    def commit(self) -> dict[str, int]:
        """Close and rename every file into place; return rows written per table."""
        for key, writer in self._writers.items():
            if writer is None:
                continue
            writer.close()
            tmp = self._tmp[key]
            os.replace(tmp, key[1] / f"src-{self.sha256}.parquet")
        self._writers.clear()
        return dict(self.rows)

    def abort(self) -> None:
        """Drop everything written so far (the source will be ingested again next time)."""
        for key, writer in self._writers.items():
            if writer is not None:
                writer.close()
                self._tmp[key].unlink(missing_ok=True)
        self._writers.clear()
        self.rows.clear()


_DICT_STRING = pa.dictionary(pa.int32(), pa.string())


def _storage_table(name: str, rows: Any) -> pa.Table:
    """Rows in the table's schema, strings dictionary-encoded (the streaming writer's form)."""
    schema = _schema_of(name)
    if not isinstance(rows, pa.Table):
        table = to_table(name, rows)
    else:
        extra = set(rows.column_names) - set(schema.names)
        if extra:
            raise DatasetError(f"table {name!r} has no column(s) {sorted(extra)}",
                               hint=f"columns are {', '.join(schema.names)}")
        table = rows
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
        col = table.column(key).combine_chunks() if table.num_rows else table.column(key)
        uniq = pc.unique(col.dictionary_decode() if pa.types.is_dictionary(col.type) else col)
        if len(uniq) != 1:
            break
        values.append(uniq[0].as_py())
    else:
        return [(tuple(values), table)]
    plain = {k: (table.column(k).cast(_schema_partition_type(k))) for k in keys}
    combos = pa.table(plain).group_by(list(keys)).aggregate([]).to_pylist()
    groups = []
    for combo in combos:
        mask = None
        for key in keys:
            cond = pc.is_null(plain[key]) if combo[key] is None else pc.equal(plain[key], combo[key])
            mask = cond if mask is None else pc.and_(mask, cond)
        groups.append((tuple(combo[k] for k in keys), table.filter(mask)))
    return groups


def _schema_partition_type(key: str) -> pa.DataType:
    return _PARTITION_TYPES[key]


def source_done(root: str | Path, sha256: str) -> bool:
    """True when the ``sources`` ledger already records this source (ingest skips it)."""
    return (table_dir(root, "sources") / f"src-{sha256}.parquet").exists()


def read_arrow(root: str | Path, name: str, *, filters: Any = None) -> pa.Table:
    """Read table ``name`` as an Arrow table with its full schema (empty when absent).

    ``filters`` is anything ``pyarrow.dataset`` accepts: an expression or a list of
    ``(column, op, value)`` tuples, e.g. ``[("collective", "=", "AllReduce")]``.
    """
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
    return table.select(schema.names)


def read_table(root: str | Path, name: str, *, filters: Any = None):
    """Read table ``name`` into a pandas DataFrame (empty with the right columns when absent).

    Integer and boolean columns use pandas' nullable dtypes (``Int32``, ``Int64``,
    ``boolean``) so a missing ``nodes`` stays ``<NA>`` instead of turning the column to float.
    """
    import pandas as pd

    mapping = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
    return read_arrow(root, name, filters=filters).to_pandas(types_mapper=mapping.get)
