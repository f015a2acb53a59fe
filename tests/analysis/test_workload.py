"""``analyze workload``: a Kineto trace, ingested by the real parser, replayed in its call order over
a simulated sweep; what the sweep lacks is reported, never invented or fatal."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.inputs import load_problem, load_workload
from ncclbot_sweep.analysis.study.harness import AblateOptions, Harness, resolve_policies
from ncclbot_sweep.analysis.study.workload import map_trace, trace_replay, trace_sequence, uniform_workload
from ncclbot_sweep.analysis.summary import summarize
from ncclbot_sweep.cli import main
from ncclbot_sweep.ingest.datasets import read_table
from ncclbot_sweep.ingest.walk import ingest

from .simpools import write_sim_dataset

SIZES = tuple(2**k for k in range(12, 29, 2))  # 4 KiB .. 256 MiB
#: One training step: two AllReduce sizes and an AllGather the sweep has, then three calls it cannot price.
STEP = [("allreduce", 1 << 20, 16), ("allgather", 1 << 16, 32), ("allreduce", 1 << 26, 16)]
EXTRA = [("send", 1024, 2), ("allreduce", 1 << 22, 3), ("allreduce", 1 << 40, 16)]


def kineto_trace(steps) -> dict:
    """A PyTorch profiler trace: one ``record_param_comms`` op per call (float, so nelems = bytes / 4)."""
    events, ts = [], 0
    for calls in steps:
        for coll, size, group in calls:
            ts += 100
            events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": ts, "dur": 2,
                           "args": {"Collective name": coll, "In msg nelems": size // 4, "Out msg nelems": size // 4,
                                    "dtype": "Float", "Group size": group, "Process Group Name": "0"}})
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": events}


def _trace_id(root, name):
    """The trace id ingest gave the trace file ``name``."""
    rows = read_table(root, "workload")
    return rows[rows["source_path"].str.endswith(name)]["trace_id"].iloc[0]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("workload") / "dataset"
    write_sim_dataset(root, collectives=("AllGather", "AllReduce"), nodes=(2, 4, 8), sizes=SIZES, iters=30)
    traces = tmp_path_factory.mktemp("traces")
    steps = [STEP + (EXTRA if i % 3 == 0 else []) for i in range(12)]
    (traces / "job.json").write_text(json.dumps(kineto_trace(steps)))
    (traces / "alien.json").write_text(json.dumps(kineto_trace([[("alltoall", 1 << 20, 16), ("allreduce", 4096, 5)]])))
    ingest([traces], root)
    return root


@pytest.fixture(scope="module")
def harness(dataset):
    return Harness(load_problem(dataset), AblateOptions(horizon=30, seeds=2), resolve_policies())


def test_calls_map_onto_swept_contexts_and_the_rest_is_reported(dataset, harness):
    rows = load_workload(dataset, _trace_id(dataset, "job.json"))
    mapped = map_trace(rows, harness.problem)
    ok = mapped[mapped["context"] >= 0].set_index(["collective", "size_bytes"])
    assert ok.loc[("AllReduce", 1 << 20), ["swept_nodes", "swept_ranks", "swept_size_bytes"]].tolist() == [2, 16, 1 << 20]
    assert ok.loc[("AllGather", 1 << 16), ["swept_nodes", "swept_ranks"]].tolist() == [4, 32]
    reasons = dict(zip(mapped["collective"] + "/" + mapped["group_size"].astype(str), mapped["reason"]))
    assert "not in the sweep" in reasons["SendRecv/2"]
    assert "no 3-rank or 3-node communicator" in reasons["AllReduce/3"]
    huge = mapped[mapped["size_bytes"] == 1 << 40]["reason"].item()
    assert "outside the swept sizes" in huge
    assert map_trace(rows, harness.problem, ranks=16).query("group_size == 3")["context"].item() >= 0, "--ranks maps all"


def test_the_sequence_follows_the_trace_call_order(dataset, harness):
    rows = load_workload(dataset, _trace_id(dataset, "job.json"))
    mapped = map_trace(rows, harness.problem)
    sequence, ordered = trace_sequence(mapped)
    ctx = harness.problem.contexts
    names = [f"{ctx['collective'][c]}/{ctx['size_bytes'][c]}" for c in sequence[:6]]
    assert ordered and names == [f"AllReduce/{1 << 20}", f"AllGather/{1 << 16}", f"AllReduce/{1 << 26}"] * 2
    assert len(sequence) == 3 * 12
    unordered, ordered = trace_sequence(mapped.assign(call_seq=None))
    assert not ordered and sorted(unordered) == sorted(sequence), "no stored order: same calls, grouped"


def test_trace_replay_carries_state_across_cycles_and_prices_auto_exactly(dataset, harness, tmp_path):
    trace = _trace_id(dataset, "job.json")
    h = Harness(harness.problem, harness.options, harness.policies, figures=tmp_path)
    section = trace_replay(h, load_workload(dataset, trace), trace_id=trace, cycles=3)
    table = section.tables["workload"].set_index("policy")
    problem = h.problem
    sequence, _ = trace_sequence(map_trace(load_workload(dataset, trace), problem))
    steady = problem.pools.steady
    auto = steady[sequence, problem.auto[sequence]].sum() / steady[sequence, problem.pools.best[sequence]].sum() - 1
    for column in ("cycle1_pct", "cycle2_pct", "cycle3_pct", "path_pct"):
        assert table.loc["AUTO", column] == pytest.approx(100 * auto), "AUTO loses the same fraction every cycle"
    ucb1 = table.loc["UCB1"]
    assert ucb1["cycle3_pct"] <= ucb1["cycle2_pct"] <= ucb1["cycle1_pct"], "state is carried, exploration amortised"
    assert ucb1["path_sd_pct"] == 0.0
    unmeasured = section.tables["workload-unmeasured"]
    assert sorted(unmeasured["collective"]) == ["AllReduce", "AllReduce", "SendRecv"]
    assert unmeasured["calls"].sum() == 3 * 4
    assert section.figures[0].is_file()
    curve = section.long[section.long["policy"] == "AUTO"]
    assert curve["step"].max() == 3 * len(sequence)
    assert curve["value_pct"].iloc[-1] == pytest.approx(100 * auto)


def test_a_trace_the_sweep_never_measured_is_reported_not_replayed(dataset, harness):
    trace = _trace_id(dataset, "alien.json")
    section = trace_replay(harness, load_workload(dataset, trace), trace_id=trace)
    assert section.tables["workload"].empty and len(section.tables["workload-unmeasured"]) == 2
    assert any("nothing to replay" in n for n in section.notes)


def test_uniform_workload_is_the_per_context_selection_replay(harness):
    section = uniform_workload(harness)
    table = section.tables["workload-uniform"].set_index("policy")
    summary = summarize(harness.replay(["AUTO", "UCB1", "Random"])).set_index("policy")
    for name in ("AUTO", "UCB1", "Random"):
        assert table.loc[name, "mean_pct"] == pytest.approx(summary.loc[name, "selection_mean_pct"])
        assert table.loc[name, "contexts"] == harness.test().sum()
    assert table.loc["Random", "path_pct"] > table.loc["UCB1", "path_pct"]


def test_cli_workload_writes_sections_and_names_unknown_traces(dataset, tmp_path):
    trace = _trace_id(dataset, "job.json")
    out = tmp_path / "wl"
    result = CliRunner().invoke(main, ["analyze", "workload", "--dataset", str(dataset), "--out", str(out),
                                       "--trace", trace, "--seeds", "1", "--horizon", "20"])
    assert result.exit_code == 0, result.output
    assert "outside the swept sizes" in result.output and "Note: 12 calls in 3" in result.output
    doc = json.loads((out / "sections.json").read_text())
    assert [s["name"] for s in doc["sections"]] == ["workload", "workload-uniform"]
    assert doc["sections"][0]["figures"] == ["figures/workload.png"]
    bad = CliRunner().invoke(main, ["analyze", "workload", "--dataset", str(dataset), "--out", str(out),
                                    "--trace", "no-such-trace"])
    assert bad.exit_code == 1
    first = bad.output.splitlines()[0]
    assert "trace 'no-such-trace' is not in the workload table (traces: " in first
    assert trace in first and _trace_id(dataset, "alien.json") in first
    assert np.all([line.startswith(("Error", "  hint")) for line in bad.output.splitlines()])
