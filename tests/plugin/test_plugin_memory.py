"""100,000 contexts: memory stays bounded (NCCLBOT_MAX_CONTEXTS caps the table;
contexts beyond it keep NCCL's choice)."""

from __future__ import annotations

import ctypes as C
import os
import resource

import nb_host as H


def rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_hundred_thousand_contexts_bounded(plugin, nb_env, comm_id):
    nb_env(policy="ucb1", min_bytes=0, max_contexts=20000)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    base = H.cost_table({H.TREE_LL: 30.0, H.TREE_SIMPLE: 22.0, H.RING_LL: 31.0, H.RING_LL128: 21.0,
                         H.RING_SIMPLE: 20.0, 14: 26.0})
    arr = (C.c_float * 21)()
    template = (C.c_float * 21)(*base)
    nch = C.c_int(0)
    gci = plugin.tuner.getCollInfo
    forced = passed = 0

    def calls(lo, hi):
        nonlocal forced, passed
        for i in range(lo, hi):
            C.memmove(arr, template, 84)
            assert gci(r.tctx, 4, (1 << 20) + 64 * i, 1, arr, 7, 3, 0, C.byref(nch)) == 0
            if 0.0 in arr[:]:
                forced += 1
            else:
                passed += 1

    before = rss_kib()
    calls(0, 20_000)
    learned_mib = (rss_kib() - before) / 1024
    calls(20_000, 100_000)
    beyond_mib = (rss_kib() - before) / 1024 - learned_mib
    r.finalize()
    assert forced == 20000 and passed == 80000
    sanitized = "asan" in os.environ.get("LD_PRELOAD", "")  # ASan's shadow and quarantine
    assert learned_mib < (64 if sanitized else 24), f"RSS grew {learned_mib:.1f} MiB for 20,000 contexts"
    assert beyond_mib < 1.5, f"80,000 contexts over the cap still took {beyond_mib:.1f} MiB"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2_000_000
