"""100,000 contexts: memory stays bounded (NCCLBOT_MAX_CONTEXTS caps the table;
contexts beyond it keep NCCL's choice).

RSS is a whole-process figure, so the measurement runs in a fresh interpreter that loads only
the plugin: threads and garbage left by other tests of the session cannot move it."""

from __future__ import annotations

import ctypes as C
import json
import os
import resource
import subprocess
import sys
from pathlib import Path


def rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def measure(lib: Path, comm_id: int) -> dict:
    """Calls for 20,000 contexts (the cap), then 80,000 more; RSS growth of each phase."""
    import nb_host as H

    plugin = H.Plugin(lib)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    base = H.cost_table({H.TREE_LL: 30.0, H.TREE_SIMPLE: 22.0, H.RING_LL: 31.0, H.RING_LL128: 21.0,
                         H.RING_SIMPLE: 20.0, 14: 26.0})
    arr = (C.c_float * 21)()
    template = (C.c_float * 21)(*base)
    nch = C.c_int(0)
    gci = plugin.tuner.getCollInfo
    counts = {"forced": 0, "passed": 0}

    def calls(lo, hi):
        for i in range(lo, hi):
            C.memmove(arr, template, 84)
            assert gci(r.tctx, 4, (1 << 20) + 64 * i, 1, arr, 7, 3, 0, C.byref(nch)) == 0
            counts["forced" if 0.0 in arr[:] else "passed"] += 1

    calls(0, 100)  # interpreter and ctypes warm-up, before the baseline
    counts.update(forced=0, passed=0)
    before = rss_kib()
    calls(100, 20_000)
    learned = rss_kib() - before
    calls(20_000, 100_000)
    beyond = rss_kib() - before - learned
    r.finalize()
    return {**counts, "learned_mib": learned / 1024, "beyond_mib": beyond / 1024,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def test_hundred_thousand_contexts_bounded(plugin, nb_env, comm_id):
    nb_env(policy="ucb1", min_bytes=0, max_contexts=20000)
    here = Path(__file__).resolve()
    code = (f"import json, sys; sys.path.insert(0, {str(here.parent)!r}); "
            f"from test_plugin_memory import measure; "
            f"print(json.dumps(measure(__import__('pathlib').Path({str(plugin.path)!r}), {comm_id})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["forced"] == 19_900 and got["passed"] == 80_000, got
    sanitized = "asan" in os.environ.get("LD_PRELOAD", "")  # ASan's shadow and quarantine
    assert got["learned_mib"] < (64 if sanitized else 24), f"RSS grew {got['learned_mib']:.1f} MiB for 20,000 contexts"
    # Storing them would take at least 80,000 x (key + 21 arm stats) = tens of MiB.
    assert got["beyond_mib"] < (6 if sanitized else 1.5), f"80,000 contexts over the cap still took {got['beyond_mib']:.1f} MiB"
    assert got["maxrss_kib"] < 2_000_000
