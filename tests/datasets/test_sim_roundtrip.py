"""Round trip: the simulated fabric's nccl-tests binaries -> step folders -> ingest -> dataset.

Values must come back exactly: every per-iteration time of ``result.json``, every row of the
text table (with ``-N`` cycles), every tuning-table cell of the NCCL log, and the run facts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest

sim = pytest.importorskip("ncclbot_sweep.sim")
if not hasattr(sim, "bin_dir"):
    pytest.skip("the simulated fabric has no bin_dir yet", allow_module_level=True)


@pytest.fixture(scope="module")
def bins(tmp_path_factory):
    os.environ.setdefault("NCCLBOT_SIM_BIN_CACHE", str(tmp_path_factory.mktemp("simbin")))
    return Path(sim.bin_dir())


def _run_step(folder: Path, bins: Path, binary: str, args: list[str], *, nodes: int, arm: str | None,
              collective: str, json_out: bool = False) -> int:
    folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SLURM_"))}
    env.update(SLURM_NNODES=str(nodes), SLURM_NTASKS=str(nodes), SLURM_JOB_NODELIST=f"n[1-{nodes}]" if nodes > 1
               else "n1", NCCLBOT_SIM_FABRIC="sim-h100", NCCLBOT_SIM_SEED="7", NCCL_DEBUG="INFO",
               NCCL_DEBUG_SUBSYS="INIT,TUNING", NCCL_DEBUG_FILE=str(folder / "nccl.log"))
    if arm:
        env["NCCL_ALGO"], env["NCCL_PROTO"] = arm.split("/")
    argv = [str(bins / binary), *args] + (["-I", "1", "-J", str(folder / "result.json")] if json_out else [])
    with open(folder / "stdout.txt", "wb") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120).returncode
    (folder / "exit").write_text(f"{code}\n")
    meta = {"campaign": "rt", "campaign_key": "ck", "job_key": "jk", "step_key": folder.name,
            "fabric": "sim-h100", "kind": "forced", "collective": collective, "binary": binary, "nodes": nodes,
            "gpus_per_node": 8, "ranks": 8 * nodes, "arm": arm, "policy": None,
            "env": {k: v for k, v in env.items() if k.startswith("NCCL")}}
    (folder / "step.json").write_text(json.dumps(meta))
    return code


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, bins):
    root = tmp_path_factory.mktemp("campaign")
    steps = root / "jobs" / "j1" / "steps"
    codes = {
        "ring": _run_step(steps / "ring", bins, "all_reduce_perf", ["-b", "8", "-e", "1M", "-f", "4", "-g", "8",
                                                                   "-n", "5", "-w", "2"],
                          nodes=2, arm="Ring/LL128", collective="AllReduce", json_out=True),
        "pat": _run_step(steps / "pat", bins, "all_reduce_perf", ["-b", "8", "-e", "64", "-g", "8"],
                         nodes=2, arm="PAT/Simple", collective="AllReduce"),
        "cycles": _run_step(steps / "cycles", bins, "all_gather_perf", ["-b", "1K", "-e", "4K", "-f", "2", "-g",
                                                                       "8", "-n", "3", "-w", "1", "-N", "2"],
                            nodes=1, arm=None, collective="AllGather"),
    }
    summary = ingest([root], root / "dataset")
    return root, steps, codes, summary


def test_runs_facts(campaign):
    root, _, codes, summary = campaign
    assert codes == {"ring": 0, "pat": 1, "cycles": 0}
    assert summary.ingested == 3 and not summary.quarantined
    runs = datasets.read_table(root / "dataset", "runs").set_index("step_key")
    ring = runs.loc["ring"]
    assert (ring["outcome"], ring["nodes"], ring["ranks"], ring["hosts"]) == ("ok", 2, 16, "n1,n2")
    assert (ring["nccl_version"], ring["nccl_tests_version"]) == ("2.30.4", "2.19.7")
    assert ring["arm"] == "Ring/LL128" and ring["arm_observed"] == "Ring/LL128" and not ring["arm_mismatch"]
    assert ring["synthetic"] and ring["fabric"] == "sim-h100"
    assert runs.loc["pat", "outcome"] == "invalid_arm"
    assert "no algorithm/protocol available" in runs.loc["pat", "failure"]
    assert runs.loc["cycles", "cycles"] == 2 and runs.loc["cycles", "outcome"] == "ok"


def test_per_iteration_times_exact(campaign):
    root, steps, _, _ = campaign
    doc = json.loads((steps / "ring" / "result.json").read_text())
    expected = []
    for res in doc["results"]:
        for side, in_place in (("out_of_place", False), ("in_place", True)):
            for k, t in enumerate(res[f"{side}_per_iter"]["times_us"]):
                expected.append((res["size"], in_place, k, t))
    runs = datasets.read_table(root / "dataset", "runs").set_index("step_key")
    it = datasets.read_table(root / "dataset", "iterations")
    it = it[it["run_id"] == runs.loc["ring", "run_id"]]
    got = sorted(zip(it["size_bytes"], it["in_place"], it["iteration"], it["time_us"]))
    assert got == sorted(expected)
    assert set(it["arm"]) == {"Ring/LL128"} and set(it["nodes"]) == {2} and set(it["ranks"]) == {16}


def test_text_rows_and_cycles_exact(campaign):
    root, steps, _, _ = campaign
    expected = []
    cycle, last = 0, -1
    for line in (steps / "cycles" / "stdout.txt").read_text().splitlines():
        tok = line.split()
        if len(tok) == 13 and tok[0].isdigit():
            size = int(tok[0])
            if size < last:
                cycle += 1
            last = size
            expected.append((cycle, size, False, float(tok[5]), float(tok[7])))
            expected.append((cycle, size, True, float(tok[9]), float(tok[11])))
    runs = datasets.read_table(root / "dataset", "runs").set_index("step_key")
    it = datasets.read_table(root / "dataset", "iterations")
    it = it[it["run_id"] == runs.loc["cycles", "run_id"]]
    got = sorted(zip(it["cycle"], it["size_bytes"], it["in_place"], it["time_us"], it["busbw_gbs"]))
    assert got == sorted(expected) and len(got) == 12
    assert set(it["n_iters"]) == {3} and it["iteration"].isna().all()


def test_tuning_table_cells_exact(campaign):
    root, steps, _, _ = campaign
    cells = {}
    algos: list[str] = []
    for line in (steps / "ring" / "nccl.log").read_text().splitlines():
        if "NCCL INFO" not in line or "|" not in line:
            continue
        head, *rest = [c.strip() for c in line.split("NCCL INFO", 1)[1].split("|")]
        if head == "Algorithm":
            algos = [c for c in rest if c]
        elif head == "Protocol":
            protos = rest[: 3 * len(algos)]
        elif head in ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"):
            for k, cell in enumerate(c for c in rest if c):
                lat, bw = (float(x) for x in cell.split("/"))
                cells[(head, algos[k // 3], protos[k])] = (lat, bw)
    runs = datasets.read_table(root / "dataset", "runs").set_index("step_key")
    tt = datasets.read_table(root / "dataset", "tuning_tables")
    tt = tt[tt["run_id"] == runs.loc["ring", "run_id"]]
    got = {(r.collective, *r.arm.split("/")): (r.latency_us, r.algbw_gbs) for r in tt.itertuples()}
    assert got == cells and len(got) == 105
    assert set(tt["nccl_version"]) == {"2.30.4"}
    coll_channels = re.search(r"NCCL INFO (\d+) coll channels", (steps / "ring" / "nccl.log").read_text())
    assert set(tt["nchannels"]) == {int(coll_channels.group(1))}
    assert set(tt["nodes"]) == {2} and set(tt["ranks"]) == {16}


def test_one_file_and_row_group_per_table_partition_and_source(campaign):
    import pyarrow.parquet as pq

    root, _, _, _ = campaign
    files = list((root / "dataset" / "iterations").rglob(datasets.data_file_name("*")))
    assert len(files) == 2  # the ring and cycles steps (the invalid arm has no rows), one partition each
    assert all(pq.ParquetFile(f).num_row_groups <= 2 for f in files)  # text steps: one per placement batch


def test_choice_sizes_are_full_buffers(campaign):
    """NCCL logs an AllGather's per-rank bytes; ``choices.size_bytes`` is the nccl-tests size."""
    root = campaign[0] / "dataset"
    choices = datasets.read_table(root, "choices")
    gathers = choices[choices["collective"] == "AllGather"]
    assert len(gathers)
    sizes = set(datasets.read_table(root, "iterations").query("collective == 'AllGather'")["size_bytes"])
    assert set(gathers["size_bytes"]) <= sizes
    assert (gathers["size_bytes"] == gathers["log_bytes"] * gathers["ranks"]).all()
