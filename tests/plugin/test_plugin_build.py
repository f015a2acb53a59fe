"""The built library: exported symbols (only the versioned plugin structs),
their sizes, the symbols NCCL 2.30.7 looks for, the bench, the coordinator CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import nb_host as H

EXPECTED = {  # symbol -> struct size in bytes (reference 3.1 and 4.1)
    "ncclTunerPlugin_v7": 40, "ncclTunerPlugin_v6": 40, "ncclTunerPlugin_v5": 32, "ncclTunerPlugin_v4": 32,
    "ncclTunerPlugin_v3": 32, "ncclProfiler_v6": 48, "ncclProfiler_v5": 48, "ncclProfiler_v4": 48,
}
#: Exported for a later NCCL than the 2.30.7 wheel below (tuner v7: NCCL 2.32.6+).
NEWER_THAN_2_30_7 = {"ncclTunerPlugin_v7"}
WHEEL = "nvidia-nccl-cu13==2.30.7"


def exported(lib: Path) -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "-S", "--defined-only", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:
            syms[parts[3]] = int(parts[1], 16)
        elif len(parts) == 3:
            syms[parts[2]] = -1
    return syms


def test_only_plugin_symbols_are_exported(plugin_build):
    assert exported(plugin_build) == EXPECTED


def test_names_and_members_through_ctypes(plugin):
    assert plugin.tuner.name == b"NCCL-BOT" and plugin.profiler.name == b"NCCL-BOT"
    assert plugin.tuner.getChunkSize is None  # optional: NCCL keeps its chunk size
    assert C_addr(plugin.tuner_v5.getCollInfo) == C_addr(plugin.tuner.getCollInfo)
    v7 = plugin.tuner_v7  # same functions as v6, its own init (v7 constants)
    assert v7.name == b"NCCL-BOT" and v7.getChunkSize is None
    assert C_addr(v7.getCollInfo) == C_addr(plugin.tuner.getCollInfo)
    assert C_addr(v7.finalize) == C_addr(plugin.tuner.finalize)


def C_addr(fn) -> int:
    import ctypes
    return ctypes.cast(fn, ctypes.c_void_p).value


def _wheel_lib() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ncclbot-sweep" / "nccl-wheel"
    lib = cache / "libnccl.so.2"
    if lib.exists():
        return lib
    cache.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache),
                        WHEEL], capture_output=True, text=True, timeout=900)
    wheels = sorted(cache.glob("nvidia_nccl_cu13-2.30.7-*.whl"))
    if r.returncode != 0 or not wheels:
        pytest.skip(f"cannot download {WHEEL}: {(r.stderr or r.stdout).strip()[-300:]}")
    with zipfile.ZipFile(wheels[0]) as z:
        name = next(n for n in z.namelist() if n.endswith("/libnccl.so.2"))
        lib.write_bytes(z.read(name))
    return lib


def test_nccl_2_30_7_looks_for_our_symbols(plugin_build):
    data = _wheel_lib().read_bytes()
    wanted = set(re.findall(rb"\x00(ncclTunerPlugin_v\d|ncclProfiler_v\d)\x00", data))
    wanted = {w.decode() for w in wanted}
    assert {"ncclTunerPlugin_v6", "ncclTunerPlugin_v5", "ncclProfiler_v6", "ncclProfiler_v5"} <= wanted
    assert "ncclTunerPlugin_v7" not in wanted  # so 2.30.7 keeps loading our v6
    extra = set(EXPECTED) - NEWER_THAN_2_30_7 - wanted
    assert not extra, f"we export symbols NCCL 2.30.7 never asks for: {extra}"


def test_bench_runs_and_reports_every_figure(plugin_build):
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "bench"], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([str(H.PLUGIN_DIR / "build" / "ncclbot-bench"), "20000"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert re.search(r"getCollInfo warm context: median [\d.]+ ns/call", out), out
    assert re.search(r"profiler per collective: median [\d.]+ ns", out), out
    assert len(re.findall(r"sync round \(8 ranks, m=64, loopback, [^)]*\): CPU [\d.]+ us/round", out)) == 2, out
    assert "allocations on the hot path: 0 in" in out, out
    assert out.count("allocations after warm-up: 0") == 2, out
    cold = re.findall(r"cold, (\d+) MiB written between collectives: getCollInfo median ([\d.]+) ns", out)
    assert [mib for mib, _ns in cold] == ["1", "64"] and all(float(ns) > 0 for _mib, ns in cold), out


def test_coordinator_cli_refuses_without_token():
    exe = H.PLUGIN_DIR / "build" / "ncclbot-coordinator"
    env = {k: v for k, v in os.environ.items() if k != "NCCLBOT_SYNC_TOKEN"}
    r = subprocess.run([str(exe), "--listen", "127.0.0.1:0"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "NCCLBOT_SYNC_TOKEN" in r.stderr


#: The plugin's files from the bottom up (plugin/README.md, "Layout"): a file may include a
#: header of its own level or below, never one above. Headers of one module share its level.
LEVELS = [
    {"clock", "nccl_abi", "wire", "mqueue", "log", "config", "names", "rng", "policy", "table"},
    {"ctxtable", "state"},
    {"comm"},
    {"profiler", "sync", "trace", "persist", "static_table"},
    {"learn"},
    {"plugin"},
]


def test_the_plugin_files_call_each_other_one_way():
    level = {name: i for i, names in enumerate(LEVELS) for name in names}
    src = H.PLUGIN_DIR / "src"
    wrong = []
    for path in sorted(src.glob("*.[ch]")):
        module = path.stem
        if module in ("coordinator", "coord_main", "settings_main"):
            continue  # the coordinator and the settings printer are programs of their own
        assert module in level, f"{path.name} is in no level of LEVELS: place it"
        for include in re.findall(r'^#include "([a-z_]+)\.h"', path.read_text(), re.M):
            if level[include] > level[module]:
                wrong.append(f"{path.name} includes {include}.h, a level above it")
    assert not wrong, wrong
