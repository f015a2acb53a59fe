"""The simulator's plugin host (plugin/host/simhost.c through ncclbot_sweep.sim.pluginhost).

A recording plugin (recplugin.c, compiled here) logs every call with its thread, so the
tests see NCCL's order: profiler init before tuner init, Coll events on the caller's thread
and kernel-channel events from a second (proxy) thread with GPU timers whose maximum span
is the served latency, every kernel event delivered before tuner finalize, tuner finalize
before profiler finalize. The real plugin then runs under the stand-in nccl-tests binary.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim import bin_dir
from ncclbot_sweep.sim.pluginhost import CommInfo, HostError, PluginHost

HERE = Path(__file__).resolve().parent
RING_SIMPLE = Arm("Ring", "Simple")


@pytest.fixture(scope="module")
def built():
    """The plugin build of this checkout (make -C plugin), with the host."""
    subprocess.run(["make", "-s", "-C", str(pluginbuild.build_dir().parent)], check=True)
    return pluginbuild.build_dir()


@pytest.fixture(scope="module")
def recplugins(tmp_path_factory, built):
    """(v6 recording plugin, v5-only recording plugin)."""
    out = tmp_path_factory.mktemp("rec")
    paths = []
    for name, flags in (("librec6.so", []), ("librec5.so", ["-DREC_V5_ONLY"])):
        path = out / name
        subprocess.run(["gcc", "-std=gnu11", "-O1", "-Wall", "-Werror", "-fPIC", "-shared", "-fvisibility=hidden",
                        *flags, "-o", str(path), str(HERE / "recplugin.c")], check=True)
        paths.append(path)
    return paths


def _table() -> np.ndarray:
    table = np.full((7, 3), -1.0, dtype=np.float32)
    table[0, 0], table[1, 1], table[1, 2] = 30.0, 20.0, 20.0  # Ring/LL128 and Ring/Simple tie
    return table


def _comm(**kw) -> CommInfo:
    base = dict(comm_id=0xABCDEF, nranks=4, nnodes=2, rank=1, nvl_domains=2, nvl_ranks=8, debug_level="INFO")
    return CommInfo(**(base | kw))


def _records(log: Path) -> list[dict]:
    rows = []
    for line in log.read_text().splitlines():
        tid, event, *rest = line.split(" ")
        fields = dict(item.split("=", 1) for item in rest if "=" in item)
        rows.append({"tid": tid, "event": event, "kind": rest[0] if rest and "=" not in rest[0] else "", **fields})
    return rows


def _run_host(lib: Path, monkeypatch, tmp_path, *, calls: int, lat_us: float = 250.0,
              **env) -> tuple[list, PluginHost, list[dict]]:
    log = tmp_path / "rec.log"
    monkeypatch.setenv("REC_LOG", str(log))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    host = PluginHost(_comm(), tuner=str(lib), profiler=str(lib), host_lib=built_host(),
                      constants=[6.8] + [0.0] * 143)
    arms = []
    for _ in range(calls):
        rc, arm, _us = host.choose("AllReduce", 1 << 20, _table())
        assert rc == 0
        host.played("AllReduce", 1 << 20, elt=4, dtype="ncclFloat32", arm=arm, channels=4, latency_us=lat_us)
        arms.append(arm)
    host.close()
    return arms, host, _records(log)


def built_host() -> Path:
    return pluginbuild.build_dir() / pluginbuild.SIM_HOST


def test_init_order_and_what_the_plugin_is_told(recplugins, monkeypatch, tmp_path):
    _arms, host, rows = _run_host(recplugins[0], monkeypatch, tmp_path, calls=1)
    events = [r["event"] for r in rows]
    assert events.index("pinit") < events.index("tinit"), "NCCL inits the profiler before the tuner"
    pinit, tinit = rows[events.index("pinit")], rows[events.index("tinit")]
    assert (pinit["comm"], pinit["nranks"], pinit["rank"], pinit["nnodes"]) == ("abcdef", "4", "1", "2")
    assert (tinit["comm"], tinit["nranks"], tinit["nnodes"], tinit["nvl"], tinit["base0"]) == \
        ("abcdef", "4", "2", "2,8,8", "6.8")
    assert host.stats()["tuner_version"] == 6 and host.stats()["profiler_version"] == 6


def test_v5_tuner_is_used_when_v6_is_missing(recplugins, monkeypatch, tmp_path):
    _arms, host, rows = _run_host(recplugins[1], monkeypatch, tmp_path, calls=2)
    assert host.stats()["tuner_version"] == 5
    assert sum(r["event"] == "gci" for r in rows) == 2


def test_first_minimum_scan_after_the_tuner(recplugins, monkeypatch, tmp_path):
    arms, _host, _rows = _run_host(recplugins[0], monkeypatch, tmp_path, calls=2)
    assert arms == [Arm("Ring", "LL128")] * 2, "a tie goes to the lower (algorithm, protocol) index"
    (tmp_path / "forced").mkdir()
    forced, _host, rows = _run_host(recplugins[0], monkeypatch, tmp_path / "forced", calls=1, REC_FORCE="5")
    assert forced == [RING_SIMPLE], "the entry the tuner set to 0.0 wins the scan"
    assert all(r["ring_simple"] == "20" for r in rows if r["event"] == "gci"), "the plugin gets the table as is"


def test_kernel_events_come_from_the_proxy_thread_with_the_served_latency(recplugins, monkeypatch, tmp_path):
    _arms, host, rows = _run_host(recplugins[0], monkeypatch, tmp_path, calls=50, lat_us=250.0)
    caller = {r["tid"] for r in rows if r["event"] == "gci"}
    assert len(caller) == 1
    colls = {r["h"]: r for r in rows if r["event"] == "pstart" and r["kind"] == "coll"}
    assert [int(c["seq"]) for c in colls.values()] == list(range(50))
    assert {c["tid"] for c in colls.values()} == caller and {c["algo"] for c in colls.values()} == {"RING"}
    assert {(c["func"], c["count"], c["dtype"], c["nch"]) for c in colls.values()} == \
        {("AllReduce", str((1 << 20) // 4), "ncclFloat32", "4")}
    kch = {r["h"]: r for r in rows if r["event"] == "pstart" and r["kind"] == "kch"}
    assert len(kch) == 50 * 4 and {r["tid"] for r in kch.values()}.isdisjoint(caller), \
        "kernel-channel events come from a second thread"
    stops = {r["h"]: int(r["stop"]) for r in rows if r["event"] == "record" and r["state"] == "22"}
    spans: dict[str, int] = {}
    for h, event in kch.items():
        spans[event["parent"]] = max(spans.get(event["parent"], 0), stops[h] - int(event["start"]))
    assert set(spans) == set(colls) and set(spans.values()) == {250_000}, "max over channels = served latency"
    events = [r["event"] for r in rows]
    assert events.index("tfin") > max(i for i, r in enumerate(rows) if r["event"] == "record"), \
        "every kernel event is delivered before the tuner finalizes"
    assert events.index("tfin") < events.index("pfin"), "NCCL finalizes the tuner, then the profiler"
    assert host.stats()["kernel_events"] == 200


def test_host_time_is_what_the_plugin_really_computed(recplugins, monkeypatch, tmp_path):
    """A call that computes 3 ms is charged them (on a busy machine too: a long call is charged
    its thread's CPU time); one that sleeps 3 ms, a wait the simulated ranks' sharing of the
    cores makes and a coupled real rank would not, is not."""
    log = tmp_path / "rec.log"
    monkeypatch.setenv("REC_LOG", str(log))
    host = PluginHost(_comm(), tuner=str(recplugins[0]), profiler=str(recplugins[0]), host_lib=built_host())
    monkeypatch.setenv("REC_SPIN_US", "3000")
    _rc, _arm, busy = host.choose("AllReduce", 1 << 20, _table())
    monkeypatch.delenv("REC_SPIN_US")
    monkeypatch.setenv("REC_BLOCK_US", "3000")
    _rc, _arm, blocked = host.choose("AllReduce", 1 << 20, _table())
    monkeypatch.delenv("REC_BLOCK_US")
    _rc, _arm, fast = host.choose("AllReduce", 1 << 20, _table())
    host.close()
    assert 2900.0 <= busy < 4000.0, busy
    assert blocked < 300.0 and fast < 300.0, (blocked, fast)


def test_logger_lines_and_a_failing_tuner_init(recplugins, monkeypatch, tmp_path):
    monkeypatch.setenv("REC_LOG", str(tmp_path / "rec.log"))
    host = PluginHost(_comm(), tuner=str(recplugins[0]), profiler=None, host_lib=built_host())
    messages = [r.message for r in host.take_log()]
    host.close()
    assert any("TUNER/Plugin: Using" in m and "(v6)" in m for m in messages)
    assert "rec tuner up for 4 ranks" in messages
    monkeypatch.setenv("REC_FAIL_INIT", "1")
    with pytest.raises(HostError, match="tuner init of .* failed with error 2"):
        PluginHost(_comm(), tuner=str(recplugins[0]), profiler=None, host_lib=built_host())
    with pytest.raises(HostError, match="cannot load NCCL_TUNER_PLUGIN"):
        PluginHost(_comm(), tuner=str(tmp_path / "missing.so"), profiler=None, host_lib=built_host())


def test_the_plugin_reads_the_hosts_nccl_version_and_scan(built, monkeypatch):
    """The host stands in for NCCL 2.30.7 (ncclGetVersion beside its logger) and scans for the
    first minimum, which is what the real plugin concludes (plugin/src/table.c)."""
    for k in [k for k in os.environ if k.startswith(("NCCLBOT_", "SLURM_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("NCCLBOT_POLICY", "auto")
    lib = str(pluginbuild.build_dir() / pluginbuild.LIBRARY)
    host = PluginHost(_comm(rank=0, nranks=1, nnodes=1), tuner=lib, profiler=lib, host_lib=built_host())
    messages = [r.message for r in host.take_log()]
    host.close()
    assert any("NCCL 2.30.7, tuner v6: NCCL takes the first minimum" in m for m in messages), messages


def _stand_in(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    lib = str(pluginbuild.build_dir() / pluginbuild.LIBRARY)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL", "SLURM_"))}
    full.update({"NCCL_TUNER_PLUGIN": lib, "NCCL_PROFILER_PLUGIN": lib, "NCCLSWEEP_RANK_PROCESSES": "1",
                 "SLURM_NNODES": "8", "SLURM_NTASKS": "64", "NCCL_DEBUG": "INFO",
                 "NCCL_DEBUG_SUBSYS": "INIT,TUNING", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.log")} | env)
    return subprocess.run([str(Path(bin_dir()) / "all_reduce_perf"), *args], env=full, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)


def _traced_run(tmp_path: Path, *args: str) -> tuple[dict[int, list[dict]], list[dict], str]:
    """One rank, UCB1, 16-64 MiB: (trace pull rows by size, the JSON results, NCCL's log)."""
    trace = tmp_path / "trace"
    trace.mkdir()
    done = _stand_in(tmp_path, "-b", "16M", "-e", "64M", "-f", "2", "-n", "200", "-w", "0", "-I", "1", "-g", "1",
                     "-J", str(tmp_path / "result.json"), *args, NCCLBOT_POLICY="ucb1", NCCLBOT_TRACE_DIR=str(trace))
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = trace.glob("ncclbot-*-r0.csv")
    pulls = [r for r in csv.DictReader(line for line in path.open() if not line.startswith("#")) if r["kind"] == "pull"]
    by_size: dict[int, list[dict]] = {}
    for row in pulls:
        by_size.setdefault(int(row["size_bytes"]), []).append(row)
    return by_size, json.loads((tmp_path / "result.json").read_text())["results"], (tmp_path / "nccl.log").read_text()


def _extra_us(by_size: dict[int, list[dict]], record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(iteration time - the GPU time the trace measured, that GPU time) of the out-of-place pass."""
    times = record["out_of_place_per_iter"]["times_us"]
    rows = sorted(by_size[record["size"]], key=lambda r: int(r["pull"]))[:len(times)]
    served = np.array([float(r["latency_us"]) for r in rows])
    return np.array(times) - served, served


def test_real_plugin_learns_from_what_the_simulator_served(built, tmp_path):
    """One rank, UCB1, nccl-tests' default loop: the host launches ahead of the GPU, so an
    iteration costs its GPU time alone (the plugin's host time hides behind the queue) and each
    reward arrives as many collectives late as the host ran ahead."""
    by_size, results, log = _traced_run(tmp_path)
    for record in results:
        extra, served = _extra_us(by_size, record)
        assert (np.abs(extra) <= 1e-6 * served + 0.002).all(), "iteration = GPU time (float32 trace precision)"
        lags = [int(r["reward_lag"]) for r in by_size[record["size"]] if r["reward_lag"]]
        assert np.median(lags) > 50, "the host ran far ahead of the GPU: rewards came late"
    # When a reward lands decides whether Tree/LL128's slow first, lazy-connection call keeps
    # UCB1 away from it for a while; what must hold is that UCB1 tries the better arm.
    arms = {r["arm"] for r in by_size[67108864]}
    assert 16777216 in by_size and "Tree/LL128" in arms, "at 64 MiB UCB1 leaves AUTO's NVLSTree/Simple"
    assert re.search(r"AllReduce: 67108864 Bytes -> Algo TREE proto LL128", log), "choice lines show the arm played"
    assert re.search(r"AllReduce: 67108864 Bytes -> Algo NVLS_TREE proto SIMPLE", log)
    assert re.search(r"NCCLBOT-SIM: AllReduce 67108864 bytes: the stream waited 0\.0 us", log)


def test_blocking_loop_puts_the_host_in_series(built, tmp_path):
    """-z 1: the host waits for each iteration, so NCCL's enqueue (5 us on sim-h100) and the
    plugin's time are in series with the GPU's, and a reward comes one call later at most."""
    by_size, results, _log = _traced_run(tmp_path, "-z", "1")
    for record in results:
        extra, _served = _extra_us(by_size, record)
        assert (extra >= 5.0).all() and np.median(extra) < 50.0, extra
        assert {int(r["reward_lag"]) for r in by_size[record["size"]] if r["reward_lag"]} <= {0, 1}


def test_graph_replays_call_no_tuner_and_time_nothing(built, tmp_path):
    """-G 4: each loop is captured once (getCollInfo then, the arm fixed) and replayed four times.
    A replay's Coll event comes from CUDA's host-callback thread, not the caller's, so the plugin
    binds none of them: every captured pull ends without a sample, as never launched, and no
    replay is timed; the iterations still cost their GPU time."""
    by_size, results, log = _traced_run(tmp_path, "-n", "50", "-G", "4")
    assert all(not r["latency_us"] for rows in by_size.values() for r in rows), "a replay was credited to a pull"
    stats = re.search(r"plugin host time .* in (\d+) getCollInfo calls and (\d+) collectives' events .* (\d+) "
                      r"kernel-channel events", log)
    calls, colls, kernel_events = (int(x) for x in stats.groups())
    assert colls == 4 * calls and kernel_events == 0, "four replays per capture, none traced"
    assert re.search(rf"{calls} timed pulls, 0 rewards applied, {calls} missing \(0 bad timers, 0 lost, {calls} "
                     r"unlaunched", log)
    for record in results:
        assert 300.0 < record["in_place"]["time"] < 2000.0  # (out-of-place 16 MiB carries the NVLS set-up)


def test_a_missing_plugin_fails_like_nccl_init(built, tmp_path):
    done = _stand_in(tmp_path, "-b", "1M", "-e", "1M", "-n", "5", "-g", "1",
                     NCCL_TUNER_PLUGIN=str(tmp_path / "nope.so"), NCCL_PROFILER_PLUGIN="")
    assert done.returncode == 1
    assert "Test NCCL failure" in done.stdout and "cannot load NCCL_TUNER_PLUGIN" in done.stdout


def test_a_failing_get_coll_info_fails_the_test_like_nccl(recplugins, tmp_path):
    lib = str(recplugins[0])
    done = _stand_in(tmp_path, "-b", "1M", "-e", "1M", "-n", "5", "-g", "1", NCCL_TUNER_PLUGIN=lib,
                     NCCL_PROFILER_PLUGIN=lib, REC_FAIL_CALL="1", REC_LOG=str(tmp_path / "rec.log"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Test NCCL failure" in done.stdout and "tuner getCollInfo failed for AllReduce of 1048576 bytes" in done.stdout
    events = [r["event"] for r in _records(tmp_path / "rec.log")]
    assert events[-2:] == ["tfin", "pfin"], "a failed run still finalizes in NCCL's order"
