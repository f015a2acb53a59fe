"""``ncclbot-sweep export``: what each consumer reads back from the files is the sweep's best arm.

A small forced-arm sweep of the simulated fabric is exported through the CLI; the example
tuner's CSV is read by a parser written here from its documented rules (docs/nccl-plugin-abi.md
section 6), the static table and the saved state by the real plugin through nb_host.py, and the
saved state once more by a live simulated campaign run through ``submit``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.export import decisions
from ncclbot_sweep.analysis.inputs import load_problem
from ncclbot_sweep.cli import main
from ncclbot_sweep.names import ALGORITHMS, PROTOCOLS, Arm
from ncclbot_sweep.sim.fabric import fabric

from .simpools import write_sim_dataset

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "plugin"))
import nb_host as H  # the plugin tests' NCCL stand-in (tests/plugin is not a package)

FABRIC = "sim-h100"
SIZES = tuple(2**k for k in range(14, 29, 2))  # 16 KiB .. 256 MiB
WINDOW = ("--window", "11", "39")
TUNER_ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
TUNER_COLLS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("export") / "dataset"
    write_sim_dataset(root, FABRIC, collectives=("AllGather", "ReduceScatter", "AllReduce"), nodes=(2, 4),
                      sizes=SIZES, iters=40)
    return root


@pytest.fixture(scope="module")
def problem(dataset):
    return load_problem(dataset, window=(11, 39))


def export(kind, dataset, out, *extra):
    result = CliRunner().invoke(main, ["export", kind, "--dataset", str(dataset), "--out", str(out), *WINDOW, *extra])
    assert result.exit_code == 0, result.output
    return out


def contexts(problem):
    """(collective, nodes, ranks, size, measured-best arm, problem row) of every context."""
    ctx = problem.contexts
    for c in range(len(problem)):
        yield (ctx["collective"].iat[c], int(ctx["nodes"].iat[c]), int(ctx["ranks"].iat[c]),
               int(ctx["size_bytes"].iat[c]), problem.pools.arms[problem.pools.best[c]], c)


# ---- NVIDIA's example tuner, from its documented rules ----

def read_tuner_rules(path: Path):
    """Rules as the example tuner reads them: '#' starts a comment, 8-10 fields, lower-case
    names compared exactly (unknown ones become allreduce / ring / simple), -1 wildcards."""
    rules = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        f = [x.strip() for x in line.split(",")]
        assert len(f) in (8, 9, 10), line
        coll = TUNER_COLLS.index(f[0]) if f[0] in TUNER_COLLS else TUNER_COLLS.index("allreduce")
        algo = TUNER_ALGOS.index(f[3]) if f[3] in TUNER_ALGOS else 1
        proto = ("ll", "ll128", "simple").index(f[4]) if f[4] in ("ll", "ll128", "simple") else 2
        rules.append({"coll": coll, "lo": int(f[1]), "hi": int(f[2]), "arm": str(Arm(ALGORITHMS[algo], PROTOCOLS[proto])),
                          "channels": int(f[5]), "nodes": int(f[6]), "ranks": int(f[7])})
    return rules


def tuner_choice(rules, collective: str, nbytes: int, nodes: int, ranks: int):
    """The first matching rule's arm, or None (NCCL's own choice stands)."""
    coll = TUNER_COLLS.index(collective.lower())
    for r in rules:
        if (r["coll"] == coll and r["lo"] <= nbytes <= r["hi"] and r["nodes"] in (-1, nodes)
                and r["ranks"] in (-1, ranks)):
            return r["arm"]
    return None


def test_nccl_tuner_returns_the_measured_best_arm_for_every_context(dataset, problem, tmp_path):
    out = export("nccl-tuner", dataset, tmp_path / "nccl_tuner.conf")
    text = out.read_text()
    assert f"# fabric: {FABRIC}" in text and f"# dataset: {dataset.resolve()}" in text and "# nccl version: " in text
    rules = read_tuner_rules(out)
    for coll, nodes, ranks, size, best, _ in contexts(problem):
        assert tuner_choice(rules, coll, size, nodes, ranks) == best, (coll, nodes, ranks, size)
        assert tuner_choice(rules, coll, size + 1, nodes, ranks) in (None, best, *problem.pools.arms)
    assert 0 < len(rules) < len(problem), "adjacent sizes sharing an arm are merged into one range"
    assert all(r["channels"] == -1 for r in rules), "NCCL keeps its channel count"
    by_shape = {}
    for r in rules:
        by_shape.setdefault((r["coll"], r["nodes"], r["ranks"]), []).append(r)
    for shape_rules in by_shape.values():
        for a, b in itertools.pairwise(shape_rules):
            assert a["arm"] != b["arm"] and a["hi"] < b["lo"], "one range per run of the same arm"
    for coll, nodes, ranks, *_ in contexts(problem):
        assert tuner_choice(rules, coll, SIZES[0] - 1, nodes, ranks) is None, "below the sweep NCCL decides"


def test_nccl_tuner_margin_leaves_close_contexts_to_nccl(dataset, problem, tmp_path):
    margin = 0.05
    rules = read_tuner_rules(export("nccl-tuner", dataset, tmp_path / "m.conf", "--margin", str(margin)))
    rows = np.arange(len(problem))
    steady = problem.pools.steady
    loss = steady[rows, problem.auto] / steady[rows, problem.pools.best] - 1.0
    kept = 0
    for coll, nodes, ranks, size, best, c in contexts(problem):
        expected = best if loss[c] >= margin else None
        kept += expected is not None
        assert tuner_choice(rules, coll, size, nodes, ranks) == expected, (coll, nodes, ranks, size, loss[c])
    assert 0 < kept < len(problem), "the fixture needs contexts on both sides of the margin"


# ---- the real plugin ----

@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The plugin of this checkout (make -C plugin) with the tests' C logger stand-in."""
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR)], check=True, stdout=subprocess.DEVNULL)
    shim = tmp_path_factory.mktemp("logshim") / "logshim.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(shim),
                    str(ROOT / "tests" / "plugin" / "logshim.c")], check=True)
    os.environ.setdefault("NBTEST_LOGSHIM", str(shim))
    return H.Plugin()


@pytest.fixture()
def nb_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("NCCLBOT_") or key in ("SLURM_LAUNCH_NODE_IPADDR", "SLURM_JOB_ID"):
            monkeypatch.delenv(key)

    def set_env(**kw):
        for k, v in kw.items():
            monkeypatch.setenv(f"NCCLBOT_{k.upper()}", str(v))
    return set_env


_COMM_IDS = iter(range(0x7E00_0000 + (os.getpid() << 8), 1 << 62))


def sim_table(coll: str, nodes: int, size: int) -> list[float]:
    """The simulated fabric's cost table for a context, as NCCL hands it to the tuner."""
    return [float(v) for v in fabric(FABRIC).cost_table(coll, nodes, size).ravel()]


def test_static_export_loaded_by_the_plugin_returns_the_measured_best_arm(plugin, nb_env, dataset, problem, tmp_path):
    table = export("static", dataset, tmp_path / "static.csv")
    nb_env(policy="static", static_table=table, min_bytes=0)
    H.take_log()
    ranks = {}
    try:
        for coll, nodes, nranks, size, best, _ in contexts(problem):
            rank = ranks.get((nodes, nranks))
            if rank is None:
                rank = ranks[(nodes, nranks)] = H.Rank(plugin, next(_COMM_IDS), nranks, nodes, 0, profiler=False)
            assert rank.active, H.take_log()
            rc, arm, _, _ = rank.call(H.COLLS.index(coll), size, sim_table(coll, nodes, size))
            assert rc == 0 and H.arm_name(arm) == best, (coll, nodes, nranks, size)
    finally:
        for rank in ranks.values():
            rank.finalize()
    assert "WARN" not in H.take_log()


def test_state_export_warm_starts_the_plugin_on_the_measured_best_arm(plugin, nb_env, dataset, problem, tmp_path):
    """Each shape's file, placed where a one-rank communicator finds its own (n1-r1: learning on
    one rank needs no coordinator), makes UCB1's first choice the measured best of every
    context whose best arm the plugin's filter offers; without it the cost model's arm wins."""
    folder = export("state", dataset, tmp_path / "state")
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["ncclbot-state-n2-r16.csv", "ncclbot-state-n4-r32.csv"]
    model_wrong = checked = 0
    for name in files:
        nodes = int(name.split("-n")[1].split("-")[0])
        nranks = int(name.split("-r")[1].split(".")[0])
        one = tmp_path / f"one-{name}"
        one.mkdir()
        shutil.copy(folder / name, one / "ncclbot-state-n1-r1.csv")
        for state_dir in (one, ""):
            nb_env(policy="ucb1", min_bytes=0, state_dir=state_dir)
            H.take_log()
            rank = H.Rank(plugin, next(_COMM_IDS), 1, 1, 0)
            try:
                for coll, n, r, size, best, c in contexts(problem):
                    if (n, r) != (nodes, nranks) or not problem.offered[c, problem.pools.best[c]]:
                        continue
                    rc, arm, _, _ = rank.call(H.COLLS.index(coll), size, sim_table(coll, nodes, size))
                    assert rc == 0
                    if state_dir:
                        checked += 1
                        assert H.arm_name(arm) == best, (coll, nodes, nranks, size)
                    else:
                        model_wrong += H.arm_name(arm) != best
            finally:
                rank.finalize()
            log = H.take_log()
            assert "no saved state loaded" not in log and "WARN" not in log, log
    assert checked >= 0.8 * len(problem), "nearly every context's best arm passes the filter"
    assert model_wrong > 0, "the cost model alone misses some best arm, so the state is what decides"


LIVE_NODES = 2
#: sim-h100 AllReduce on 2 nodes: AUTO plays NVLSTree/Simple at 4-256 MiB where a Ring arm is 12-37% faster.
LIVE_CAMPAIGN = """\
name: warm-state
kind: live
collectives: [AllReduce]
nodes: [{nodes}]
sizes: {{min: 4MiB, max: 256MiB, factor: 4}}
policies: [ucb1]
variants:
  - {{name: model}}
  - {{name: state, env: {{NCCLBOT_STATE_DIR: {state}}}}}
# One rank process learning alone (no coordinator): every reward is applied on the next call.
plugin: {{env: {{NCCLBOT_SYNC_ADDR: ""}}}}
warmup: 0
iterations: 40
timeout_s: 300
packing: {{steps_per_job: 2}}
budget_node_hours: 10
"""


def _first_pulls_trlt(pulls, size: int, first: int = 30) -> float:
    """Selection TRLT of a context's first pulls, each priced at its arm's true steady latency."""
    sim = fabric(FABRIC)
    arms = pulls[pulls["size_bytes"] == size].sort_values("pull")["arm"].head(first)
    assert len(arms) == first, (size, len(arms))
    truth = [sim.steady_latency_us("AllReduce", LIVE_NODES, Arm.parse(a), size) for a in arms]
    best = sim.steady_latency_us("AllReduce", LIVE_NODES, sim.best_arm("AllReduce", LIVE_NODES, size), size)
    return float(np.mean(truth)) / best - 1.0


def test_a_live_run_warm_started_from_the_state_export_selects_better_than_the_cost_model(plugin, dataset, tmp_path):
    """A live simulated campaign (the real plugin in the simulator's nccl-tests, through ``submit``)
    run twice with UCB1: warm-started from the cost model, and from the ``state`` export. Over the
    first 30 collectives of each size, priced by the simulator's ground truth, the state's run
    loses less. The stand-in communicator has one rank process, so the plugin looks for the
    ``n2-r1`` file: the export's 2-node file is copied there (same contexts, same cost tables)."""
    from ncclbot_sweep.ingest.datasets import read_table
    from ncclbot_sweep.resources import resource_path

    folder = export("state", dataset, tmp_path / "state")
    state = tmp_path / "plugin-state"
    state.mkdir()
    shutil.copy(folder / f"ncclbot-state-n{LIVE_NODES}-r{fabric(FABRIC).ranks(LIVE_NODES)}.csv",
                state / f"ncclbot-state-n{LIVE_NODES}-r1.csv")
    inventory = tmp_path / "sim-h100-1rank.yaml"
    inventory.write_text(resource_path("inventories", "sim-h100.yaml").read_text().replace(
        "  max_concurrent_jobs: 2\n", "  max_concurrent_jobs: 2\n  local_rank_processes: 1\n"))
    campaign = tmp_path / "warm-state.yaml"
    campaign.write_text(LIVE_CAMPAIGN.format(nodes=LIVE_NODES, state=json.dumps(str(state))))
    run = CliRunner().invoke(main, ["submit", str(campaign), "-i", str(inventory), "-w", str(tmp_path / "run")])
    assert run.exit_code == 0 and "steps: 2/2 ok" in run.output, run.output
    ingested = CliRunner().invoke(main, ["ingest", str(tmp_path / "run"), "--dataset", str(tmp_path / "live")])
    assert ingested.exit_code == 0, ingested.output
    variants = {json.loads(p.read_text())["step_key"]: json.loads(p.read_text())["variant"]
                for p in (tmp_path / "run").glob("jobs/*/steps/*/step.json")}
    pulls = read_table(tmp_path / "live", "live_events")
    pulls = pulls[pulls["kind"] == "pull"].assign(variant=lambda f: f["run_id"].str.split(".").str[0].map(variants))
    sizes = sorted(pulls["size_bytes"].unique())
    assert len(sizes) == 4
    sim = fabric(FABRIC)
    assert all(sim.auto_arm("AllReduce", LIVE_NODES, s) != sim.best_arm("AllReduce", LIVE_NODES, s) for s in sizes)
    trlt = {v: np.mean([_first_pulls_trlt(pulls[pulls["variant"] == v], s) for s in sizes]) for v in ("model", "state")}
    assert trlt["state"] < trlt["model"], trlt
    assert trlt["state"] < 0.5 * trlt["model"], f"the measured state should remove most of the loss: {trlt}"


def test_state_rows_are_the_measured_rewards(dataset, problem, tmp_path):
    folder = export("state", dataset, tmp_path / "state")
    lines = (folder / "ncclbot-state-n2-r16.csv").read_text().splitlines()
    assert lines[0] == "# ncclbot-state v1"
    assert "collective,size_bytes,mu_min,arm,n,mean" in lines
    header_at = lines.index("collective,size_bytes,mu_min,arm,n,mean")
    assert all(line.startswith("#") for line in lines[1:header_at])
    table = decisions(problem)
    ctx = problem.contexts
    for line in lines[header_at + 1:]:
        coll, size, mu_min, arm, n, mean = line.split(",")
        c = int(np.flatnonzero((ctx["collective"] == coll) & (ctx["nodes"] == 2) & (ctx["size_bytes"] == int(size)))[0])
        k = problem.pools.arms.index(arm)
        assert float(mu_min) == problem.mu_min[c] and int(n) == problem.pools.depth[c, k]
        assert float(mean) == problem.mu_min[c] / problem.pools.steady[c, k]
        assert table.loc[(table["collective"] == coll) & (table["nodes"] == 2)
                         & (table["size_bytes"] == int(size)), "best"].item() in problem.pools.arms


def test_a_missing_dataset_is_an_error_naming_it(tmp_path):
    result = CliRunner().invoke(main, ["export", "state", "--dataset", str(tmp_path / "none"),
                                       "--out", str(tmp_path / "state")])
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"Error: {tmp_path / 'none'}: dataset folder does not exist"
    assert not (tmp_path / "state").exists()


def test_a_dataset_with_two_fabrics_needs_fabric(tmp_path):
    root = tmp_path / "two"
    for name in ("sim-h100", "sim-gb200-mnnvl-off"):
        write_sim_dataset(root, name, collectives=("AllReduce",), nodes=(2,), sizes=SIZES[-3:], iters=20)
    result = CliRunner().invoke(main, ["export", "static", "--dataset", str(root), "--out", str(tmp_path / "s.csv"),
                                       "--window", "5", "19"])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"Error: {root}: dataset holds 2 fabrics (sim-gb200-mnnvl-off, sim-h100); an export is for one",
        "  hint: choose one with --fabric NAME"]
    result = CliRunner().invoke(main, ["export", "static", "--dataset", str(root), "--out", str(tmp_path / "s.csv"),
                                       "--window", "5", "19", "--fabric", "sim-h100"])
    assert result.exit_code == 0, result.output
    assert "# fabric: sim-h100" in (tmp_path / "s.csv").read_text()
