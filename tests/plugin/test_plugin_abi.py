"""The ctypes mirrors the tests drive the plugin with match the layouts in
docs/nccl-plugin-abi.md (the C side pins the same numbers with
_Static_assert in plugin/src/nccl_abi.h), so every behaviour test exercises the
plugin at NCCL's real offsets."""

from __future__ import annotations

import ctypes as C

import nb_host as H


def test_profiler_descriptor_v6_layout():
    assert C.sizeof(H.ProfDescrV6) == 112
    assert H.ProfDescrV6.parentObj.offset == 8 and H.ProfDescrV6.rank.offset == 16
    assert H.ProfDescrV6.u.offset == 24
    coll = {f: getattr(H.CollDescr, f).offset + 24 for f, _ in H.CollDescr._fields_}
    assert coll["seqNumber"] == 24 and coll["func"] == 32 and coll["count"] == 56
    assert coll["datatype"] == 72 and coll["nChannels"] == 80 and coll["nWarps"] == 81
    assert coll["algo"] == 88 and coll["proto"] == 96 and coll["parentGroup"] == 104
    assert H.KernelChDescr.pTimer.offset + 24 == 32


def test_plugin_struct_sizes():
    assert C.sizeof(H.TunerV6) == 40 and C.sizeof(H.TunerV5) == 32
    assert C.sizeof(H.ProfilerV6) == 48
    assert C.sizeof(H.StateArgs) == 8


def test_v4_profiler_reads_an_eight_bit_type(plugin, nb_env, comm_id):
    """ncclProfiler_v4: type is a uint8_t; bytes after it are padding NCCL may leave dirty."""
    prof = H.ProfilerV6.in_dll(plugin.lib, "ncclProfiler_v4")
    init4 = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.POINTER(C.c_int), C.c_char_p, C.c_uint64,
                        C.c_int, C.c_int, C.c_int, C.c_void_p)
    ctx, mask = C.c_void_p(), C.c_int(0)
    fn = C.cast(C.cast(C.addressof(prof) + 8, C.POINTER(C.c_void_p)).contents.value, init4)
    assert fn(C.byref(ctx), C.byref(mask), b"c", comm_id, 1, 1, 0, H.logger_ptr()) == 0 and ctx.value
    nb_env(policy="greedy", min_bytes=0)  # a timed pull for the collective to measure
    tctx = C.c_void_p()
    assert plugin.tuner.init(C.byref(tctx), comm_id, 1, 1, H.logger_ptr(), None, None) == 0
    table = (C.c_float * 21)(*H.cost_table({H.RING_LL: 10.0, H.RING_SIMPLE: 12.0}))
    assert plugin.tuner.getCollInfo(tctx, 4, 16, 1, table, 7, 3, 0, C.byref(C.c_int())) == 0
    d = H.ProfDescrV6()
    d.type = H.PROFILE_COLL | (0xAB << 8)  # garbage above the 8-bit type
    d.u.coll.func, d.u.coll.datatype, d.u.coll.count, d.u.coll.nChannels = b"AllReduce", b"ncclFloat32", 4, 1
    assert H.nccl_choice(list(table)) == H.RING_LL
    d.u.coll.algo, d.u.coll.proto = b"RING", b"LL"
    h = C.c_void_p()
    assert prof.startEvent(ctx, C.byref(h), C.byref(d)) == 0 and h.value
    assert plugin.profiler.startEvent(ctx, C.byref(h), C.byref(d)) == 0 and h.value is None  # v6: 64-bit type
    assert plugin.tuner.finalize(tctx) == 0 and prof.finalize(ctx) == 0
