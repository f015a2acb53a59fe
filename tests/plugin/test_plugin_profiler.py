"""Profiler events -> per-collective latency (max over channels of GPU stop -
start), seen through the tuner's trace; robustness to bad or missing timers,
odd event orders, a concurrent proxy thread and a GPU up to 1,024 collectives behind
its host (the C driver plugin/bench/lag.c, also under ThreadSanitizer)."""

from __future__ import annotations

import ctypes as C
import os
import random
import re
import subprocess
import threading
import time

import pytest

import nb_host as H
from nb_trace import read_trace, trace_path

AR, MIB = 4, 1 << 20
TABLE = H.cost_table({H.RING_LL128: 10.0, H.RING_SIMPLE: 12.0})


def learning_rank(plugin, nb_env, comm_id, tmp_path, **env):
    nb_env(policy="greedy", min_bytes=0, trace_dir=tmp_path, **env)
    return H.Rank(plugin, comm_id, 1, 1, 0)


def pulls(tmp_path, comm_id):
    return [r for r in read_trace(trace_path(tmp_path, comm_id, 0)) if r["kind"] == "pull"]


def test_latency_is_max_over_channels(plugin, nb_env, comm_id, tmp_path):
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    arm = r.call(AR, MIB, TABLE)[1]
    h = r.coll_start(AR, MIB, arm, 3)
    for ch, (t0, dur) in enumerate([(1000, 5000), (1200, 9000), (900, 7000)]):
        r.channel(h, ch, t0, t0 + dur)
    r.call(AR, MIB, TABLE)
    r.finalize()
    rows = pulls(tmp_path, comm_id)
    assert rows[0]["latency_us"] == "9.000" and rows[0]["arm"] == H.arm_name(arm)
    assert float(rows[0]["reward"]) == pytest.approx(10.0 / 9.0, rel=1e-8)
    assert rows[0]["auto_arm"] == "Ring/LL128" and rows[0]["collective"] == "AllReduce"
    assert rows[0]["size_bytes"] == str(MIB) and rows[0]["policy"] == "greedy"


def test_bad_timers_drop_the_sample_and_count_it(plugin, nb_env, comm_id, tmp_path):
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    cases = [
        [(100, 500), (100, 0)],          # zero stop
        [(0, 500), (100, 600)],          # zero start
        [(900, 500), (100, 600)],        # stop before start
        [(100, None), (100, 600)],       # stop event without the stop timer
    ]
    for chans in cases:
        arm = r.call(AR, MIB, TABLE)[1]
        h = r.coll_start(AR, MIB, arm, 2)
        for ch, (t0, t1) in enumerate(chans):
            r.channel(h, ch, t0, t1, record_stop=t1 is not None)
    arm = r.call(AR, MIB, TABLE)[1]
    h = r.coll_start(AR, MIB, arm, 2)   # a channel reported twice, the other never
    r.channel(h, 0, 100, 600)
    r.channel(h, 0, 100, 600)
    arm = r.call(AR, MIB, TABLE)[1]
    h = r.coll_start(AR, MIB, arm, 4)   # fewer channel events than announced
    for ch in range(3):
        r.channel(h, ch, 100, 400)
    r.finalize()
    rows = pulls(tmp_path, comm_id)
    assert len(rows) == 6 and all(x["latency_us"] == "" and x["reward"] == "" for x in rows)
    log = H.take_log()
    assert "5 profiler drops" in log and "6 missing" in log


def test_unknown_events_and_foreign_parents_get_no_handle(plugin, nb_env, comm_id, tmp_path):
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    for etype in (1 << 0, 1 << 2, 1 << 3, 1 << 8, 1 << 11, 1 << 12):
        d = H.ProfDescrV6()
        d.type = etype
        h = C.c_void_p(99)
        assert plugin.profiler.startEvent(r.pctx, C.byref(h), C.byref(d)) == 0 and h.value is None
    foreign = C.create_string_buffer(1024)
    d = H.ProfDescrV6()
    d.type = H.PROFILE_KERNEL_CH
    d.parentObj = C.addressof(foreign)
    h = C.c_void_p(99)
    assert plugin.profiler.startEvent(r.pctx, C.byref(h), C.byref(d)) == 0 and h.value is None
    d = H.ProfDescrV6()  # a collective NCCL-BOT cannot key (unknown datatype) is ignored
    d.type = H.PROFILE_COLL
    d.u.coll.func, d.u.coll.datatype, d.u.coll.nChannels = b"AllReduce", b"ncclWeird", 2
    d.u.coll.algo, d.u.coll.proto = b"RING", b"LL"
    assert plugin.profiler.startEvent(r.pctx, C.byref(h), C.byref(d)) == 0 and h.value is None
    r.finalize()



def test_a_name_at_a_remembered_address_is_read_again(plugin, nb_env, comm_id, tmp_path):
    """The profiler remembers where each descriptor name was found; the same address holding
    another name (a reused buffer) must be looked up again, not taken for the old one."""
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    dtype = C.create_string_buffer(b"ncclFloat32", 16)

    def start(nbytes_per_elt_4: int):
        arm = r.call(AR, MIB, TABLE)[1]
        d = H.ProfDescrV6()
        d.type = H.PROFILE_COLL
        d.u.coll.func, d.u.coll.count, d.u.coll.nChannels = b"AllReduce", nbytes_per_elt_4, 1
        d.u.coll.datatype = C.cast(dtype, C.c_char_p)
        d.u.coll.algo, d.u.coll.proto = H.PROF_ALGOS[arm // 3].encode(), H.PROF_PROTOS[arm % 3].encode()
        h = C.c_void_p(99)
        assert plugin.profiler.startEvent(r.pctx, C.byref(h), C.byref(d)) == 0
        return h.value

    assert start(MIB // 4) is not None  # 1 MiB of float32: the pull's own collective
    C.memmove(dtype, b"ncclFloat64\0", 12)
    assert start(MIB // 4) is None  # now 2 MiB: no 1 MiB pull to bind, no handle
    r.finalize()

def test_activation_mask_asks_for_coll_and_kernel_channels(plugin, nb_env, comm_id, tmp_path):
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    assert r.mask.value & (H.PROFILE_COLL | H.PROFILE_KERNEL_CH) == H.PROFILE_COLL | H.PROFILE_KERNEL_CH
    r.finalize()


def test_fuzzed_event_orders_never_crash_or_misattribute(plugin, nb_env, comm_id, tmp_path):
    """Shuffle channel events across in-flight collectives; every latency seen is one we sent."""
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    rng = random.Random(5)
    sent = set()
    for _ in range(300):
        inflight = []
        for _ in range(rng.randint(1, 4)):
            arm = r.call(AR, MIB, TABLE)[1]
            nch = rng.randint(1, 4)
            h = r.coll_start(AR, MIB, arm, nch)
            durs = [rng.randint(1000, 90000) for _ in range(nch)]
            sent.add(f"{max(durs) / 1000:.3f}")
            inflight.append((h, durs))
        events = []
        for h, durs in inflight:
            for ch, dur in enumerate(durs):
                if rng.random() < 0.05:
                    continue  # a lost channel
                events.append((h, ch, dur))
        rng.shuffle(events)
        for h, ch, dur in events:
            r.channel(h, ch, 5000, 5000 + dur, record_stop=rng.random() > 0.02)
    r.finalize()
    rows = pulls(tmp_path, comm_id)
    assert len(rows) >= 700
    seen = [x["latency_us"] for x in rows if x["latency_us"]]
    assert len(seen) > 400 and set(seen) <= sent


def test_proxy_thread_concurrent_with_tuner(plugin, nb_env, comm_id, tmp_path):
    """Channel events from a second thread while the user thread keeps calling getCollInfo."""
    r = learning_rank(plugin, nb_env, comm_id, tmp_path)
    work, done = [], threading.Event()
    lock = threading.Lock()

    def proxy():
        while not done.is_set() or work:
            with lock:
                item = work.pop(0) if work else None
            if item is None:
                continue
            h, nch = item
            for ch in range(nch):
                r.channel(h, ch, 1000, 1000 + 20000 + ch)

    t = threading.Thread(target=proxy)
    t.start()
    for _ in range(3000):
        arm = r.call(AR, MIB, TABLE)[1]
        h = r.coll_start(AR, MIB, arm, 2)
        with lock:
            work.append((h, 2))
        while len(work) > 64:  # a GPU runs only so far ahead (NCCL's ring holds 64 per channel)
            time.sleep(0)
    done.set()
    t.join()
    r.finalize()
    rows = pulls(tmp_path, comm_id)
    assert len(rows) == 3000
    assert sum(1 for x in rows if x["latency_us"] == "20.001") > 2500


def _lag(exe, calls, lag, tmp_path, env=None):
    out = tmp_path / f"trace-{lag}"
    out.mkdir()
    r = subprocess.run([str(exe), str(calls), str(lag), str(out)], capture_output=True, text=True,
                       timeout=600, env=env)
    m = re.search(r"(\d+) pull rows, (\d+) measured, (\d+) wrong, (\d+) unmatched", r.stdout)
    assert m, r.stdout + r.stderr[-3000:]
    return r, [int(x) for x in m.groups()]


@pytest.mark.parametrize("lag", [256, 1024])
def test_a_gpu_far_behind_never_gets_another_calls_latency(tmp_path, lag):
    """build/ncclbot-lag: kernel events trail their collective by `lag` collectives, from a
    second thread; each collective's GPU time is unique, so a misattributed pull shows."""
    sanitized = bool(os.environ.get("NBTEST_LIB"))  # the ASan run: its own build of the driver
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "sanitize" if sanitized else "lag"], check=True,
                   stdout=subprocess.DEVNULL)
    exe = H.PLUGIN_DIR / "build" / ("asan" if sanitized else "") / "ncclbot-lag"
    r, (rows, measured, wrong, _) = _lag(exe, 20000, lag, tmp_path)
    assert wrong == 0 and r.returncode == 0, r.stdout
    assert rows == 20000 and measured > 0.95 * rows, r.stdout


def test_a_gpu_far_behind_is_clean_under_thread_sanitizer(tmp_path):
    if os.environ.get("NBTEST_LIB"):
        pytest.skip("inside the ASan run (TSan runs in the normal one)")
    subprocess.run(["make", "-s", "-C", str(H.PLUGIN_DIR), "tsan"], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1:exitcode=66")
    env.pop("LD_PRELOAD", None)
    r, (rows, measured, wrong, _) = _lag(H.PLUGIN_DIR / "build" / "tsan" / "ncclbot-lag", 4000, 1024,
                                         tmp_path, env)
    assert "ThreadSanitizer" not in r.stderr and r.returncode == 0, r.stderr[-4000:]
    assert wrong == 0 and rows == 4000 and measured > 0.95 * rows, r.stdout
