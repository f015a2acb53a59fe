"""100,000 contexts: memory stays bounded (NCCLBOT_MAX_CONTEXTS caps the table;
contexts beyond it keep NCCL's choice)."""

from __future__ import annotations

import ctypes as C
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
    nch = C.c_int(0)
    gci = plugin.tuner.getCollInfo
    before = rss_kib()
    forced = passed = 0
    for i in range(100_000):
        C.memmove(arr, (C.c_float * 21)(*base), 84)
        assert gci(r.tctx, 4, (1 << 20) + 64 * i, 1, arr, 7, 3, 0, C.byref(nch)) == 0
        if 0.0 in list(arr):
            forced += 1
        else:
            passed += 1
    grown_mib = (rss_kib() - before) / 1024
    r.finalize()
    assert forced == 20000 and passed == 80000
    assert grown_mib < 24, f"RSS grew by {grown_mib:.1f} MiB for 20,000 learned contexts"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2_000_000
