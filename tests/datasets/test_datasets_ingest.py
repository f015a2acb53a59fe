"""Datasets and ingest: schemas, atomic idempotent writes, readers (pandas, polars, DuckDB),
campaign step folders, quarantine accounting and the two CLI commands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import DatasetError
from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import dataset_info, ingest

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _real() -> Path:
    return REAL


def test_write_rows_idempotent_and_read_back(tmp_path):
    rows = [dict(run_id="r", fabric="f", collective="AllReduce", nodes=2, size_bytes=8, time_us=1.5,
                 source_sha256="aa", source_path="p"),
            dict(run_id="r", fabric="f", collective="AllReduce", nodes=None, size_bytes=16, time_us=2.5,
                 source_sha256="aa", source_path="p")]
    assert datasets.write_rows(tmp_path, "iterations", rows) == 2
    assert datasets.write_rows(tmp_path, "iterations", rows) == 0
    df = datasets.read_table(tmp_path, "iterations").sort_values("size_bytes")
    assert list(df["size_bytes"]) == [8, 16]
    assert df["nodes"].iloc[0] == 2 and df["nodes"].isna().iloc[1]
    assert list(df.columns) == datasets.SCHEMAS["iterations"].names
    only2 = datasets.read_table(tmp_path, "iterations", filters=[("nodes", "=", 2)])
    assert len(only2) == 1
    assert not list(tmp_path.rglob("*.tmp"))


def test_read_absent_table_is_empty_with_columns(tmp_path):
    df = datasets.read_table(tmp_path, "runs")
    assert len(df) == 0 and list(df.columns) == datasets.SCHEMAS["runs"].names


def test_unknown_table_and_column_errors(tmp_path):
    with pytest.raises(DatasetError, match="unknown table"):
        datasets.write_rows(tmp_path, "nope", [])
    with pytest.raises(DatasetError, match="no column"):
        datasets.write_rows(tmp_path, "runs", [{"run_id": "x", "bogus": 1}])


@pytest.fixture(scope="module")
def fixture_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    summary = ingest([_real()], root)
    return root, summary


def test_every_fixture_file_is_accounted(fixture_dataset):
    root, summary = fixture_dataset
    files = [p for p in _real().rglob("*") if p.is_file()]
    sources = datasets.read_table(root, "sources")
    assert summary.files == len(files) == len(sources)
    assert set(sources["status"]) <= {"ingested", "partial", "quarantined"}
    quarantined = set(sources.loc[sources["status"] == "quarantined", "source_path"])
    assert {Path(p).name for p in quarantined} == {"INDEX.md"}
    q = datasets.read_table(root, "quarantine")
    assert set(quarantined) <= set(q["source_path"])
    assert q["reason"].notna().all()


def test_ingest_twice_adds_nothing(fixture_dataset):
    root, summary = fixture_dataset
    before = {name: datasets.read_arrow(root, name).num_rows for name in datasets.TABLES}
    again = ingest([_real()], root)
    assert again.skipped == summary.files and not again.rows
    assert {name: datasets.read_arrow(root, name).num_rows for name in datasets.TABLES} == before


def test_every_table_reads_with_duckdb_and_polars(fixture_dataset):
    duckdb = pytest.importorskip("duckdb")
    polars = pytest.importorskip("polars")
    root, summary = fixture_dataset
    for name in datasets.TABLES:
        files = list((root / name).rglob("*.parquet"))
        if not files:
            continue
        n = duckdb.sql(f"select count(*) from read_parquet('{root / name}/**/*.parquet', "
                       f"hive_partitioning=true, union_by_name=true)").fetchall()[0][0]
        assert n == datasets.read_arrow(root, name).num_rows, name
        assert polars.read_parquet(f"{root / name}/**/*.parquet", hive_partitioning=True).height == n
    a3 = duckdb.sql(f"select nodes, ranks, hosts from read_parquet('{root}/runs/**/*.parquet', "
                    "hive_partitioning=true) where hosts like 'ztan-mig%'").fetchall()
    assert a3 == [(2, 16, "ztan-mig-235z,ztan-mig-gq73")]
    assert summary.rows["iterations"] > 900 and summary.rows["tuning_tables"] == 145


def _step(folder: Path, *, arm: str | None, exit_code: str | None = "0", log: str = "", stdout: str | None = None,
          fabric: str = "sim-h100") -> Path:
    folder.mkdir(parents=True)
    meta = {"campaign": "demo", "campaign_key": "ck", "job_key": "jk", "step_key": folder.name, "fabric": fabric,
            "kind": "forced", "collective": "AllReduce", "binary": "all_reduce_perf", "nodes": 2,
            "gpus_per_node": 8, "ranks": 16, "arm": arm, "policy": None if arm else "AUTO",
            "env": {"NCCL_ALGO": arm.split("/")[0]} if arm else {}}
    (folder / "step.json").write_text(json.dumps(meta))
    src = _real() / "A" / "a3mega-h100-2node-16rank-allreduce.txt"
    (folder / "stdout.txt").write_text(stdout if stdout is not None else src.read_text())
    if log:
        (folder / "nccl.log").write_text(log)
    if exit_code is not None:
        (folder / "exit").write_text(exit_code + "\n")
    return folder


def test_campaign_step_folders(tmp_path):
    jobs = tmp_path / "camp" / "jobs" / "j1" / "steps"
    (tmp_path / "camp" / "campaign.yaml").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "camp" / "campaign.yaml").write_text("name: demo\n")
    _step(jobs / "s-ok", arm="Ring/LL128",
          log="h:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..1}\n")
    _step(jobs / "s-mismatch", arm="Tree/LL",
          log="h:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n")
    _step(jobs / "s-invalid", arm="NVLS/LL", exit_code="1", stdout="",
          log="h:1:1 [0] enqueue.cc:1 NCCL WARN Error : no algorithm/protocol available for AllReduce\n")
    _step(jobs / "s-timeout", arm="Ring/LL", exit_code="124")
    _step(jobs / "s-srun", arm="Ring/LL", exit_code="1",
          stdout="srun: error: fetch_config: DNS SRV lookup failed\nsrun: fatal: Could not establish a "
                 "configuration source\n")
    _step(jobs / "s-unfinished", arm="Ring/Simple", exit_code=None)
    summary = ingest([tmp_path / "camp"], tmp_path / "ds")
    assert summary.ignored == [str(tmp_path / "camp" / "campaign.yaml")]
    assert summary.unfinished == [str(jobs / "s-unfinished")]
    summary = ingest([tmp_path / "camp"], tmp_path / "ds", include_unfinished=True)
    assert summary.skipped == 5 and summary.ingested == 1
    runs = datasets.read_table(tmp_path / "ds", "runs").set_index("step_key")
    assert runs.loc["s-ok", "outcome"] == "ok" and not runs.loc["s-ok", "arm_mismatch"]
    assert runs.loc["s-mismatch", "arm_mismatch"] and "did not run" in runs.loc["s-mismatch", "failure"]
    assert runs.loc["s-invalid", "outcome"] == "invalid_arm"
    assert runs.loc["s-timeout", "outcome"] == "timeout"
    assert runs.loc["s-srun", "outcome"] == "failed"
    assert runs.loc["s-srun", "failure"] == "exit code 1: srun: fatal: Could not establish a configuration source"
    assert runs.loc["s-unfinished", "outcome"] == "failed"
    # Real nccl-tests output under a sim-* fabric name stays real: the simulator's stamp decides.
    assert not runs["synthetic"].any() and set(runs["fabric"]) == {"sim-h100"}
    it = datasets.read_table(tmp_path / "ds", "iterations", filters=[("fabric", "=", "sim-h100")])
    ok = it[it["run_id"] == runs.loc["s-ok", "run_id"]]
    assert len(ok) == 62 and set(ok["arm"]) == {"Ring/LL128"} and set(ok["nodes"]) == {2}
    assert set(ok["collective"]) == {"AllReduce"}


def test_step_result_json_per_iteration_rows_win(tmp_path):
    step = _step(tmp_path / "c" / "jobs" / "j" / "steps" / "s1", arm="Ring/Simple")
    shutil.copy(_real() / "A" / "gpusyslab-nt2.19.7-allreduce-t4-2gpu-J-output.json", step / "result.json")
    ingest([step], tmp_path / "ds")
    it = datasets.read_table(tmp_path / "ds", "iterations")
    assert len(it) == 100 and it["iteration"].notna().all()
    run = datasets.read_table(tmp_path / "ds", "runs").iloc[0]
    assert run["source_format"] == "nccl-tests-text+json" and run["outcome"] == "ok"


def test_cli_ingest_and_info(tmp_path):
    src = _real() / "A" / "superbench-nccl_reduce.txt"
    runner = CliRunner()
    res = runner.invoke(main, ["ingest", str(src), "--dataset", str(tmp_path / "ds"), "--fabric", "lab"])
    assert res.exit_code == 0, res.output
    assert "ingested: 1" in res.output and "iterations" in res.output
    res = runner.invoke(main, ["datasets", "info", str(tmp_path / "ds")])
    assert res.exit_code == 0 and "iterations" in res.output and "68 rows" in res.output
    assert datasets.read_table(tmp_path / "ds", "runs")["fabric"].tolist() == ["lab"]


def test_cli_info_missing_dataset(tmp_path):
    res = CliRunner().invoke(main, ["datasets", "info", str(tmp_path / "none")])
    assert res.exit_code == 1
    assert res.output.splitlines()[0] == f"Error: {tmp_path / 'none'}: dataset folder does not exist"


def test_dataset_info_counts(fixture_dataset):
    root, _ = fixture_dataset
    info = dataset_info(root)
    assert info["tables"]["runs"]["rows"] == datasets.read_arrow(root, "runs").num_rows
    assert info["sources"]["quarantined"] == 1
    # 12 loose NCCL logs (no outcome of their own), 13 runs that stopped before or during
    # their table (or a truncated JSON), 40 complete runs
    assert info["runs_by_fabric"]["unknown"] == {"?": 12, "failed": 13, "ok": 40}


def test_gzipped_text_and_duplicate_content(tmp_path):
    import gzip as gz

    src = (_real() / "A" / "superbench-nccl_allgather.txt").read_bytes()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "nccl_allgather-a.txt.gz").write_bytes(gz.compress(src))
    (tmp_path / "in" / "nccl_allgather-b.txt").write_bytes(src)
    (tmp_path / "in" / "nccl_allgather-c.txt").write_bytes(src)  # same content, another name: one source
    summary = ingest([tmp_path / "in"], tmp_path / "ds")
    assert summary.files == 3 and summary.skipped == 1 and summary.ingested == 2
    it = datasets.read_table(tmp_path / "ds", "iterations")
    assert len(it) == 2 * 68 and set(it["collective"]) == {"AllGather"}


def test_live_step_traces_become_live_events_of_the_run(tmp_path):
    step = _step(tmp_path / "c" / "jobs" / "j" / "steps" / "live", arm=None)
    (step / "trace").mkdir()
    header = ("# ncclbot-trace v1\nkind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,auto_arm,"
              "policy,latency_us,reward,round,sync_us\n")
    for rank in (0, 1):
        (step / "trace" / f"ncclbot-00000000000000ab-r{rank}.csv").write_text(
            header + f"pull,{1000 + rank},00000000000000ab,{rank},16,2,AllReduce,1048576,1,Ring/LL128,Ring/Simple,"
                     f"ucb1,{35.5 + rank},0.9,1,\n")
    ingest([tmp_path / "c"], tmp_path / "ds")
    run = datasets.read_table(tmp_path / "ds", "runs").iloc[0]
    ev = datasets.read_table(tmp_path / "ds", "live_events").sort_values("rank")
    assert list(ev["rank"]) == [0, 1] and list(ev["latency_us"]) == [35.5, 36.5]
    assert set(ev["run_id"]) == {run["run_id"]} and set(ev["fabric"]) == {"sim-h100"}
    assert set(ev["arm"]) == {"Ring/LL128"} and set(ev["policy"]) == {"ucb1"}


def test_cli_ingest_missing_path_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["ingest", str(tmp_path / "nope"), "--dataset", str(tmp_path / "ds")])
    assert res.exit_code == 2
    assert "does not exist" in res.output and not (tmp_path / "ds").exists()


def test_library_and_footer_flag_reach_the_runs_table(tmp_path):
    src = _real() / "A" / "issue-rccl-pr2078-allreduce-mi300x-16rank-tail-footer-elided-partial.txt"
    ingest([src], tmp_path / "ds")
    run = datasets.read_table(tmp_path / "ds", "runs").iloc[0]
    assert run["library"] == "rccl" and run["collective"] == "AllReduce"
    assert run["avg_busbw_gbs"] == pytest.approx(142.652) and bool(run["avg_busbw_elided"]) is True
    assert len(datasets.read_table(tmp_path / "ds", "iterations")) == 8
