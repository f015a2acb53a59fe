"""The dataset's ``contexts`` table: the issue's question is one DuckDB query; re-running replaces it."""

from __future__ import annotations

import duckdb
import polars
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.audit import audit_auto
from ncclbot_sweep.analysis.inputs import load_problem
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import DatasetError
from ncclbot_sweep.ingest import datasets

from .simpools import write_sim_dataset

MIB64 = 64 * 1024 * 1024


@pytest.fixture
def dataset(tmp_path):
    return write_sim_dataset(tmp_path / "ds", collectives=("AllReduce", "AllGather"), nodes=(4, 8, 16),
                             sizes=(2**12, 2**20, MIB64), iters=30)


def _files(root):
    return sorted(p.relative_to(root) for p in (root / "contexts").rglob("src-*.parquet"))


def _query(root, sql_tail: str):
    return duckdb.sql(f"select * from read_parquet('{root}/contexts/**/*.parquet', hive_partitioning=true) "
                      + sql_tail)


def test_which_arm_is_fastest_and_what_nccl_picked_is_one_duckdb_query(dataset):
    result = CliRunner().invoke(main, ["analyze", "contexts", "--dataset", str(dataset)])
    assert result.exit_code == 0, result.output
    assert "18 contexts (18 rows written)" in result.output
    (row,) = duckdb.sql(
        f"select best_arm, auto_arm, auto_loss, steady_us[best_arm] = best_us, flags "
        f"from read_parquet('{dataset}/contexts/**/*.parquet', hive_partitioning=true) "
        f"where collective = 'AllReduce' and nodes = 16 and size_bytes = 64 * 1024 * 1024").fetchall()
    audit = audit_auto(load_problem(dataset)).set_index(["collective", "nodes", "size_bytes"])
    expected = audit.loc[("AllReduce", 16, MIB64)]
    assert row[:2] == (expected["best_arm"], expected["auto_arm"])
    assert row[2] == pytest.approx(expected["trlt_selection"]) and row[3] is True
    assert row[4] == "short_window"  # 30 iterations do not fill the 11-99 window


def test_every_row_is_an_audited_context_with_its_arms(dataset):
    CliRunner().invoke(main, ["analyze", "contexts", "--dataset", str(dataset)])
    frame = datasets.read_table(dataset, "contexts")
    audit = audit_auto(load_problem(dataset))
    assert len(frame) == len(audit) == 18
    for row in frame.itertuples(index=False):
        steady = dict(row.steady_us)
        assert min(steady, key=steady.get) == row.best_arm and steady[row.auto_arm] == pytest.approx(row.auto_us)
        predicted = dict(row.predicted_us)
        assert min(predicted, key=predicted.get) == row.auto_arm  # NCCL's argmin
        assert row.auto_errs == (row.auto_arm != row.best_arm)
        assert row.auto_loss == pytest.approx(row.auto_us / row.best_us - 1)
    assert set(frame["window_first"]) == {11} and set(frame["source_path"]) == {"ncclbot-sweep analyze"}
    # the other readers see the same rows (hive partitioning)
    assert ds.dataset(dataset / "contexts", partitioning="hive").to_table().num_rows == 18
    assert polars.read_parquet(f"{dataset}/contexts/**/*.parquet", hive_partitioning=True).height == 18


def test_rerunning_replaces_instead_of_appending(dataset):
    args = ["analyze", "contexts", "--dataset", str(dataset)]
    CliRunner().invoke(main, args)
    files = _files(dataset)
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "(unchanged)" in again.output and _files(dataset) == files
    other = CliRunner().invoke(main, [*args, "--window", "5", "20"])
    assert other.exit_code == 0, other.output
    assert _query(dataset, "").fetchall() and _query(dataset, "where window_first <> 5").fetchall() == []
    assert duckdb.sql(f"select count(*) from read_parquet('{dataset}/contexts/**/*.parquet')").fetchall() == [(18,)]
    assert set(_files(dataset)).isdisjoint(files)


def test_only_derived_tables_can_be_replaced(dataset):
    with pytest.raises(DatasetError, match="not derived"):
        datasets.replace_table(dataset, "iterations", [])
