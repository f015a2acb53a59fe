"""Every table of a dataset reads with plain pyarrow.dataset (hive), DuckDB and polars, the
same rows as :func:`datasets.read_arrow`, including a dataset built from loose files whose
fabric, collective or node count is unknown, and tables that are empty."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import polars
import pyarrow.dataset as ds
import pytest

from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
LOOSE = [
    "A/li-plus-sendrecv-a100-8gpu-fragment.txt",  # no header: nodes unknown
    "A/awsome-p4de-2node-srun-prefix.txt",  # table only: collective and nodes unknown
    "A/coreweave-h100-8node-64gpu-sharp-elided.txt",  # Rank list elided: nodes unknown
    "B/issue-nccl1595-bytes-algo-proto-time-numeric-partial.txt",  # choice lines without a collective
    "C/nccl-inspector-plugin-output-v4.json",
]


@pytest.fixture(scope="module")
def loose_dataset(tmp_path_factory):
    src = tmp_path_factory.mktemp("loose")
    for rel in LOOSE:
        shutil.copy(REAL / rel, src / Path(rel).name.replace("all_", "x_"))
    root = tmp_path_factory.mktemp("ds")
    ingest([src], root)  # no --fabric: every fabric is unknown
    return root


def test_unknown_partition_values_are_explicit_placeholders(loose_dataset):
    folders = {p.name for p in loose_dataset.rglob("*") if p.is_dir() and "=" in p.name}
    assert "fabric=unknown" in folders and "collective=unknown" in folders and "nodes=0" in folders
    assert not any("HIVE_DEFAULT" in name for name in folders)
    runs = datasets.read_table(loose_dataset, "runs")
    assert runs["nodes"].isna().any() and runs["collective"].isna().any()  # our reader gives null back


@pytest.mark.parametrize("name", datasets.TABLES)
def test_every_table_reads_with_pyarrow_duckdb_and_polars(loose_dataset, name):
    expected = datasets.read_arrow(loose_dataset, name).num_rows
    folder = loose_dataset / name
    table = ds.dataset(folder, partitioning="hive").to_table()
    assert table.num_rows == expected
    glob = f"{folder}/**/*.parquet"
    columns = set(datasets.SCHEMAS[name].names)
    got = duckdb.sql(f"select * from read_parquet('{glob}', hive_partitioning=true)")
    assert set(got.columns) == columns  # the schema file gives an empty table its columns too
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}', hive_partitioning=true)").fetchall()[0][0] \
        == expected
    frame = polars.read_parquet(glob, hive_partitioning=True)
    assert frame.height == expected and set(frame.columns) == columns


def test_the_loose_dataset_has_empty_and_filled_tables(loose_dataset):
    rows = {name: datasets.read_arrow(loose_dataset, name).num_rows for name in datasets.TABLES}
    assert rows["iterations"] > 0 and rows["choices"] > 0 and rows["live_events"] > 0
    assert rows["workload"] == 0 and rows["tuning_tables"] == 0  # empty: only the schema file
    nodes = duckdb.sql(f"select distinct nodes from read_parquet('{loose_dataset}/iterations/**/*.parquet', "
                       "hive_partitioning=true) order by 1").fetchall()
    assert nodes[0] == (0,)  # the placeholder, an integer like every other node count


def test_write_rows_and_ingest_name_files_alike(tmp_path):
    ingest([REAL / "A" / "superbench-nccl_reduce.txt"], tmp_path / "a")
    sha = datasets.read_table(tmp_path / "a", "sources")["source_sha256"].iloc[0]
    rows = datasets.read_arrow(tmp_path / "a", "iterations")
    assert datasets.write_rows(tmp_path / "b", "iterations", rows) == len(rows)
    names_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a" / "iterations").rglob("src-*"))
    names_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b" / "iterations").rglob("src-*"))
    assert names_a == names_b and names_a[0].name == datasets.data_file_name(sha)


def test_workload_call_order_round_trips_and_older_files_read_as_null(tmp_path):
    """``workload.call_seq`` is a list column: written, it reads back alike in pandas and DuckDB;
    a file written before the column existed reads with the column null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = dict(trace_id="t:rank0", fabric="sim-h100", collective="AllReduce", group_size=8, size_bytes=4096,
               dtype="float", calls=3, total_us=12.0, process_group="0", source="kineto", call_seq=[0, 4, 9],
               source_path="t.json", source_sha256="ab")
    datasets.write_rows(tmp_path, "workload", [row])
    older = pa.table({k: [v] for k, v in row.items() if k not in ("call_seq", "fabric", "collective")})
    folder = tmp_path / "workload" / "fabric=sim-h100" / "collective=AllGather"
    folder.mkdir(parents=True)
    pq.write_table(older, folder / "src-old.parquet")
    frame = datasets.read_table(tmp_path, "workload").sort_values("collective")
    assert list(frame["call_seq"].iloc[1]) == [0, 4, 9] and frame["call_seq"].iloc[0] is None
    got = duckdb.sql(f"select call_seq from read_parquet('{tmp_path}/workload/**/src-*.parquet', "
                     "hive_partitioning=true, union_by_name=true) where collective = 'AllReduce'").fetchall()
    assert got == [([0, 4, 9],)]


def test_readers_see_the_same_values(loose_dataset):
    """Values, not only counts: line numbers (stored delta-encoded) and measurements read back
    the same in every reader, and numeric columns keep their min/max statistics (what
    readers prune row groups with)."""
    import pyarrow.parquet as pq

    cols = ["source_sha256", "line", "in_place", "size_bytes", "time_us"]
    ours = datasets.read_arrow(loose_dataset, "iterations").select(cols).to_pylist()
    expected = sorted(tuple(r[c] for c in cols) for r in ours)
    assert expected and all(row[1] is not None for row in expected)
    glob = f"{loose_dataset / 'iterations'}/**/*.parquet"
    query = f"select {', '.join(cols)} from read_parquet('{glob}', hive_partitioning=true)"
    assert sorted(duckdb.sql(query).fetchall()) == expected
    assert sorted(polars.read_parquet(glob, hive_partitioning=True).select(cols).iter_rows()) == expected
    data = next(p for p in (loose_dataset / "iterations").rglob("src-*.parquet"))
    meta = pq.ParquetFile(data).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    stats = meta.row_group(0).column(names.index("size_bytes")).statistics
    assert stats is not None and stats.has_min_max
