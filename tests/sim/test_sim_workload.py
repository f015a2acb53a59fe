"""The simulator's workload player (``ncclbot-sweep sim workload``) and the host's compute kernels.

Everything runs for real: the C host (``plugin/host/simhost.c``) through ctypes, the real plugin
(one rank process, synchronisation off) where a learner is under test, and the ready step-line
patterns of workload campaigns against what the player prints.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import WorkloadError
from ncclbot_sweep.sim import fabric
from ncclbot_sweep.sim.pluginhost import CommInfo, PluginHost
from ncclbot_sweep.sim.workload import Call, Compute, load_step
from ncclbot_sweep.sim.workload_run import PROFILE_TRACE, run_workload
from ncclbot_sweep.sweep.workload import READY_PATTERNS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "C"
H100_8N = {"NCCLBOT_SIM_FABRIC": "sim-h100", "SLURM_NNODES": "8", "SLURM_NTASKS": "64"}


@pytest.fixture(scope="module")
def built() -> Path:
    """The plugin build of this checkout (make -C plugin), with the host."""
    subprocess.run(["make", "-s", "-C", str(pluginbuild.build_dir().parent)], check=True)
    return pluginbuild.build_dir()


def _host(built: Path, **kw) -> PluginHost:
    comm = CommInfo(**({"comm_id": 0x5EED, "nranks": 1, "nnodes": 1, "rank": 0, "nvl_domains": 1, "nvl_ranks": 8}
                       | kw))
    return PluginHost(comm, tuner=None, profiler=None, host_lib=built / pluginbuild.SIM_HOST)


#: Variables a call of :func:`_play` sets, or removes when its environment lacks them.
_SCOPED = ("SLURM_PROCID", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCLSWEEP_RANK_PROCESSES", "NCCLBOT_POLICY",
           "NCCLBOT_SYNC_ADDR")


def _play(monkeypatch, source: str, env: dict[str, str], *, steps: int, log_format: str = "megatron",
          profile_dir: Path | None = None) -> tuple[int, str, str]:
    """One run in this process's environment: the plugin reads its NCCLBOT_* variables with getenv."""
    out, err = io.StringIO(), io.StringIO()
    with monkeypatch.context() as scoped:
        for name in _SCOPED:
            scoped.delenv(name, raising=False)
        for name, value in env.items():
            scoped.setenv(name, value)
        code = run_workload(source, steps=steps, log_format=log_format, profile_dir=profile_dir, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _megatron_ms(text: str) -> np.ndarray:
    return np.array([float(m.group("ms")) for m in re.finditer(READY_PATTERNS["megatron"], text)])


def _plugin_env(built: Path, policy: str) -> dict[str, str]:
    library = str(built / "libnccl-ncclbot.so")
    return H100_8N | {"NCCL_TUNER_PLUGIN": library, "NCCL_PROFILER_PLUGIN": library, "NCCLBOT_POLICY": policy,
                      "NCCLBOT_SYNC_ADDR": "", "NCCLSWEEP_RANK_PROCESSES": "1"}


# --------------------------------------------------------------------------- specs and traces


def test_shipped_specs_expand_their_repeats():
    ddp = load_step("ddp-buckets", ranks=64)
    calls = [op for op in ddp.ops if isinstance(op, Call)]
    assert len(calls) == 54 and calls[0].size_bytes == 1 << 20 and calls[-1].size_bytes == 9 << 20
    assert sum(c.size_bytes == 25 << 20 for c in calls) == 52 and {c.collective for c in calls} == {"AllReduce"}
    fsdp = load_step("fsdp-layers", ranks=64)
    kinds = [op.collective for op in fsdp.ops if isinstance(op, Call)]
    assert kinds.count("AllGather") == 48 and kinds.count("ReduceScatter") == 24
    assert {op.dtype for op in fsdp.ops if isinstance(op, Call)} == {"bfloat16"}


@pytest.mark.parametrize(("text", "line", "words"), [
    ("name: bad\nstep:\n  - {gpu_us: 10}\n  - {collective: AllToAll, size: 1MiB}\n", 4, "collective must be one of"),
    ("name: bad\nstep:\n  - {gpu_us: 10, host: 3}\n", 3, "host"),
    ("name: bad\nstep:\n  - repeat: 2\n    items:\n      - {collective: AllReduce, size: -1}\n", 5, "size"),
])
def test_a_bad_spec_names_file_line_and_field(tmp_path, text, line, words):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        load_step(str(spec), ranks=8)
    assert caught.value.path == str(spec) and caught.value.line == line
    assert words in str(caught.value)


def test_a_spec_without_collective_or_too_large_is_refused(tmp_path):
    spec = tmp_path / "idle.yaml"
    spec.write_text("name: idle\nstep:\n  - {gpu_us: 10}\n")
    with pytest.raises(WorkloadError, match="holds no collective"):
        load_step(str(spec), ranks=8)
    spec.write_text("name: huge\nstep:\n  - repeat: 1000\n    items:\n      - repeat: 1000\n        items:\n"
                    "          - {collective: AllReduce, size: 1MiB}\n")
    with pytest.raises(WorkloadError, match="more than 200,000 operations"):
        load_step(str(spec), ranks=8)
    with pytest.raises(WorkloadError, match="did you mean 'ddp-buckets'"):
        load_step("ddp-bucket", ranks=8)


def test_a_kineto_trace_becomes_calls_with_the_compute_between_them():
    step = load_step(str(FIXTURES / "hta-trace_filter-sampled_rank-0.json.gz"), ranks=8)
    assert [type(op).__name__ for op in step.ops] == ["Compute", "Call", "Compute", "Call", "Compute", "Call",
                                                      "Compute"]
    calls = [op for op in step.ops if isinstance(op, Call)]
    assert [(c.collective, c.size_bytes) for c in calls] == [("AllReduce", 105033720), ("AllReduce", 22866616),
                                                             ("AllGather", 16777216)]
    assert all(op.gpu_us > 1000 for op in step.ops if isinstance(op, Compute)), "the non-NCCL kernels' GPU time"
    assert step.notes == ("2 call(s) left out: AlltoAll has no algorithm choice",)
    other_group = load_step(str(FIXTURES / "hta-nccl_data-excerpt.json"), ranks=2)
    assert other_group.calls > 0
    with pytest.raises(WorkloadError, match="group of 2 ranks, not the job's 8"):
        load_step(str(FIXTURES / "hta-nccl_data-excerpt.json"), ranks=8)


def test_rccl_generic_kernels_count_as_nccl_not_as_compute():
    """RCCL launches ncclDevKernel_Generic for every collective (INDEX row 83: 12 kernels with the
    call's metadata, 5 launched before the trace began): its calls replay, no NCCL kernel becomes
    compute time, and the kernels no call launched are named as left out."""
    step = load_step(str(FIXTURES / "tracelens-mi300-resnet-ddp-rccl-generic-kernels-excerpt.json"), ranks=8)
    assert not [op for op in step.ops if isinstance(op, Compute)], "the excerpt holds NCCL kernels only"
    assert [(c.collective, c.size_bytes) for c in step.ops[:4]] == [("Broadcast", 19200), ("Broadcast", 160),
                                                                    ("AllReduce", 5746640), ("AllReduce", 17632384)]
    assert step.calls == 12
    assert step.notes == ("5 call(s) left out: an NCCL kernel that names no collective (ncclDevKernel_Generic) and "
                          "no call launched",)


# --------------------------------------------------------------------------- the host's compute kernels


def test_compute_kernels_queue_on_the_stream_and_host_time_advances_the_clock(built):
    host = _host(built)
    host.compute(host_us=500.0, gpu_us=0.0)
    assert host.clock_us() == pytest.approx(500.0)
    host.compute(host_us=10.0, gpu_us=2000.0)  # launched at 510 us, runs 2 ms
    assert host.clock_us() == pytest.approx(510.0), "the host does not wait for its kernel"
    host.sync()
    assert host.clock_us() == pytest.approx(2510.0)
    table = np.ascontiguousarray(fabric("sim-h100").cost_table("AllReduce", 1, 1 << 20), dtype=np.float32)
    rc, arm, _us = host.choose("AllReduce", 1 << 20, table)
    host.played("AllReduce", 1 << 20, elt=4, dtype="ncclFloat32", arm=arm, channels=4, latency_us=300.0)
    host.compute(host_us=0.0, gpu_us=1000.0)  # behind the collective on the one stream
    host.sync()
    assert rc == 0 and host.clock_us() == pytest.approx(2510.0 + 5.0 + 300.0 + 1000.0)
    host.close()


def test_a_compute_kernel_does_not_wait_for_the_other_ranks(built):
    # Two coupled ranks, the peer never launches: a collective would wait 10 s for it, a compute kernel not.
    host = _host(built, comm_id=0xC0FFEE + time.time_ns() % 1000, nranks=2, couple=True)
    began = time.monotonic()
    host.compute(host_us=0.0, gpu_us=1000.0)
    host.sync()
    assert time.monotonic() - began < 2.0 and host.clock_us() == pytest.approx(1000.0)
    host.close()


# --------------------------------------------------------------------------- the player


def test_stock_steps_cost_their_compute_plus_autos_collectives(built, monkeypatch):
    code, out, err = _play(monkeypatch, "ddp-buckets", H100_8N, steps=8)
    assert code == 0, err
    times = _megatron_ms(out)
    assert len(times) == 8 and "(synthetic)" in out.splitlines()[0]
    step = load_step("ddp-buckets", ranks=64)
    sim = fabric("sim-h100")
    gpu = sum(op.gpu_us for op in step.ops if isinstance(op, Compute))
    nccl = sum(sim.steady_latency_us(op.collective, 8, sim.auto_arm(op.collective, 8, op.size_bytes), op.size_bytes)
               for op in step.ops if isinstance(op, Call))
    # After the step's end the stream is idle: the host time up to its first kernel is not hidden.
    first_kernel = next(i for i, op in enumerate(step.ops) if isinstance(op, Compute) and op.gpu_us)
    exposed = sum(op.host_us for op in step.ops[:first_kernel + 1])
    assert times[0] > 1000.0 * 3, "the first step pays NCCL's first NVLS use (seconds)"
    assert np.median(times[2:]) == pytest.approx((gpu + nccl + exposed) / 1000.0, rel=0.01)


def test_every_log_format_is_read_by_its_ready_pattern(tmp_path, built, monkeypatch):
    _code, megatron, _err = _play(monkeypatch, "fsdp-layers", H100_8N, steps=5, profile_dir=tmp_path)
    expected = _megatron_ms(megatron)
    for fmt in ("lightning", "hf"):
        code, out, err = _play(monkeypatch, "fsdp-layers", H100_8N, steps=5, log_format=fmt)
        assert code == 0, err
        rates = [m for piece in re.split("[\r\n]", out) for m in re.finditer(READY_PATTERNS[fmt], piece)]
        assert [int(m.group("step")) for m in rates] == [1, 2, 3, 4, 5]
        seconds = [1.0 / float(m.group("per_s")) if m.group("per_s") else float(m.group("s")) for m in rates]
        assert np.allclose(np.array(seconds) * 1e3, expected, rtol=0.01)
    spans = json.loads((tmp_path / PROFILE_TRACE).read_text())["traceEvents"]
    assert [s["name"] for s in spans] == [f"ProfilerStep#{i}" for i in range(5)]
    assert np.allclose([s["dur"] / 1e3 for s in spans], expected, atol=0.06)


def test_a_learner_finds_the_faster_arm_where_auto_errs(built, monkeypatch):
    _code, stock, _err = _play(monkeypatch, "ddp-buckets", H100_8N, steps=16)
    code, learned, err = _play(monkeypatch, "ddp-buckets", _plugin_env(built, "ucb1"), steps=16)
    assert code == 0, err
    _code, auto, _err = _play(monkeypatch, "ddp-buckets", _plugin_env(built, "auto"), steps=16)
    assert list(_megatron_ms(auto)) == list(_megatron_ms(stock)), \
        "AUTO through the plugin keeps NCCL's arms; with the same seed its steps are stock's to the printed digit"
    saving = 1.0 - np.median(_megatron_ms(learned)[8:]) / np.median(_megatron_ms(stock)[8:])
    assert saving > 0.03, f"UCB1 should beat NVLSTree/Simple at 25 MiB by Tree/LL128: saved {saving:.1%}"


def test_where_auto_is_exact_the_learner_stays_within_one_percent(built, monkeypatch):
    _code, stock, _err = _play(monkeypatch, "fsdp-layers", H100_8N, steps=16)
    code, learned, err = _play(monkeypatch, "fsdp-layers", _plugin_env(built, "ucb1"), steps=16)
    assert code == 0, err
    change = np.median(_megatron_ms(learned)[8:]) / np.median(_megatron_ms(stock)[8:]) - 1.0
    assert abs(change) < 0.01, f"UCB1 changed the FSDP step by {change:.2%}"


def test_only_task_zero_plays_stock_and_a_bad_plugin_fails_the_run(built, monkeypatch):
    assert _play(monkeypatch, "ddp-buckets", H100_8N | {"SLURM_PROCID": "3"}, steps=2) == (0, "", "")
    code, out, err = _play(monkeypatch, "ddp-buckets", H100_8N | {"NCCL_TUNER_PLUGIN": "/nonexistent/libx.so"},
                           steps=2)
    assert code == 1 and out == ""
    assert "cannot load NCCL_TUNER_PLUGIN /nonexistent/libx.so" in err and "communicator init failed" in err


def test_cli_prints_step_lines_and_refuses_a_missing_spec(built):
    result = CliRunner().invoke(main, ["sim", "workload", "fsdp-layers", "--nodes", "8", "--steps", "3"],
                                env={"NCCLBOT_SIM_FABRIC": "sim-gb200-mnnvl-off"})
    assert result.exit_code == 0, result.output
    assert len(_megatron_ms(result.output)) == 3 and "sim-gb200-mnnvl-off: 8 nodes, 32 ranks" in result.output
    result = CliRunner().invoke(main, ["sim", "workload", "no-such-workload"])
    assert result.exit_code == 1
    assert "Error: no-such-workload: no such file, and no shipped workload of that name" in result.output
