"""A small NCCL stand-in for the plugin tests: it loads the plugin through ctypes
and calls it the way NCCL 2.28-2.32 does (profiler init, then tuner init; a
cost table per collective; Coll and KernelCh profiler events; tuner finalize,
then profiler finalize). By default it is NCCL 2.28-2.30 (tuner v6, first-minimum
scan after the tuner); ``Rank(..., nccl_version=23102)`` plays 2.31+ (the
last-minimum scan over the arms NCCL's model found valid, docs/nccl-plugin-abi.md
section 3.5) and ``tuner_version=7`` loads ``ncclTunerPlugin_v7`` with v7 constants.
Used by every test in this folder and by the rank processes of the consistency
tests (``python nb_host.py ...`` is not a CLI; see nb_rank_worker.py)."""

from __future__ import annotations

import ctypes as C
import os
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "plugin"
NUM_ALGOS, NUM_PROTOS = 7, 3
ALGOS = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"]
PROTOS = ["LL", "LL128", "Simple"]
PROF_ALGOS = ["TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"]
PROF_PROTOS = ["LL", "LL128", "SIMPLE"]
COLLS = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"]
IGNORE = -1.0
PROFILE_COLL, PROFILE_KERNEL_CH = 1 << 1, 1 << 6
KERNEL_CH_STOP = 22


def lib_path() -> Path:
    """The library under test: NBTEST_LIB (the sanitizer run sets it) or the normal build."""
    return Path(os.environ.get("NBTEST_LIB", PLUGIN_DIR / "build" / "libnccl-ncclbot.so"))


def arm_name(arm: int) -> str:
    return f"{ALGOS[arm // 3]}/{PROTOS[arm % 3]}"


# ---- ABI mirrors (from docs/nccl-plugin-abi.md, sections 3-4) ----

LOGGER = C.c_void_p
TUNER_INIT = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_uint64, C.c_size_t, C.c_size_t,
                         LOGGER, C.c_void_p, C.c_void_p)
GET_COLL_INFO = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_size_t, C.c_int,
                            C.POINTER(C.c_float), C.c_int, C.c_int, C.c_int, C.POINTER(C.c_int))
TUNER_FINALIZE = C.CFUNCTYPE(C.c_int, C.c_void_p)
PROF_INIT = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_uint64, C.POINTER(C.c_int),
                        C.c_char_p, C.c_int, C.c_int, C.c_int, LOGGER)
PROF_START = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.c_void_p)
PROF_STOP = C.CFUNCTYPE(C.c_int, C.c_void_p)
PROF_RECORD = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_void_p)
PROF_FINALIZE = C.CFUNCTYPE(C.c_int, C.c_void_p)


class TunerV6(C.Structure):
    _fields_ = [("name", C.c_char_p), ("init", TUNER_INIT), ("getCollInfo", GET_COLL_INFO),
                ("finalize", TUNER_FINALIZE), ("getChunkSize", C.c_void_p)]


class TunerV5(C.Structure):
    _fields_ = TunerV6._fields_[:4]


class TunerV7(C.Structure):
    """Same members as v6; only the constants struct its init takes is larger."""
    _fields_ = TunerV6._fields_


#: ncclTunerConstants_v5: 7x3 + 3x7x3 latencies, then five [4][3] bandwidth arrays.
CONSTANTS_V5_DOUBLES = 21 + 63 + 5 * 4 * 3
#: ncclTunerConstants_v7: the five bandwidth arrays have a fifth (Rubin) row.
CONSTANTS_V7_DOUBLES = 21 + 63 + 5 * 5 * 3
#: ncclGetVersion's code of the first NCCL with the last-minimum scan (2.31.0).
NCCL_2_31 = 23100


class ProfilerV6(C.Structure):
    _fields_ = [("name", C.c_char_p), ("init", PROF_INIT), ("startEvent", PROF_START),
                ("stopEvent", PROF_STOP), ("recordEventState", PROF_RECORD),
                ("finalize", PROF_FINALIZE)]


class CollDescr(C.Structure):
    _fields_ = [("seqNumber", C.c_uint64), ("func", C.c_char_p), ("sendBuff", C.c_void_p),
                ("recvBuff", C.c_void_p), ("count", C.c_size_t), ("root", C.c_int),
                ("datatype", C.c_char_p), ("nChannels", C.c_uint8), ("nWarps", C.c_uint8),
                ("algo", C.c_char_p), ("proto", C.c_char_p), ("parentGroup", C.c_void_p)]


class KernelChDescr(C.Structure):
    _fields_ = [("channelId", C.c_uint8), ("pTimer", C.c_uint64)]


class DescrUnion(C.Union):
    _fields_ = [("coll", CollDescr), ("kernelCh", KernelChDescr), ("pad", C.c_ubyte * 88)]


class ProfDescrV6(C.Structure):
    _fields_ = [("type", C.c_uint64), ("parentObj", C.c_void_p), ("rank", C.c_int),
                ("u", DescrUnion)]


class StateArgs(C.Structure):
    _fields_ = [("pTimer", C.c_uint64)]


# ---- loading ----

_LOGSHIM = None


def logshim() -> C.CDLL:
    """The C logger stand-in (built by conftest next to the plugin build)."""
    global _LOGSHIM
    if _LOGSHIM is None:
        path = Path(os.environ.get("NBTEST_LOGSHIM", PLUGIN_DIR / "build" / "test-logshim.so"))
        _LOGSHIM = C.CDLL(str(path))
        _LOGSHIM.nb_test_log_take.restype = C.c_size_t
        _LOGSHIM.nb_test_log_take.argtypes = [C.c_char_p, C.c_size_t]
    return _LOGSHIM


def take_log() -> str:
    buf = C.create_string_buffer(1 << 20)
    logshim().nb_test_log_take(buf, len(buf))
    return buf.value.decode(errors="replace")


def logger_ptr() -> int:
    return C.cast(logshim().nb_test_logger, C.c_void_p).value


def set_nccl_version(version: int | None) -> None:
    """What ncclGetVersion beside the logger answers from now on (None: it fails)."""
    logshim().nb_test_set_nccl_version(C.c_int(version or 0))


class Plugin:
    """The loaded library and its exported structs."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path or lib_path())
        self.lib = C.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.tuner = TunerV6.in_dll(self.lib, "ncclTunerPlugin_v6")
        self.tuner_v5 = TunerV5.in_dll(self.lib, "ncclTunerPlugin_v5")
        self.tuner_v7 = TunerV7.in_dll(self.lib, "ncclTunerPlugin_v7")
        self.profiler = ProfilerV6.in_dll(self.lib, "ncclProfiler_v6")


FLT_MAX = struct.unpack("f", struct.pack("f", 3.4028234663852886e38))[0]


def nccl_choice(table: list[float], num_algo: int = NUM_ALGOS, num_proto: int = NUM_PROTOS, *,
                scan: str = "first", before: list[float] | None = None):
    """NCCL's pick after the tuner returns (docs/nccl-plugin-abi.md section 3.5).

    ``scan="first"`` (NCCL <= 2.30): algorithms then protocols upwards, -1 skipped, the
    first strict minimum of entries >= 0. ``scan="last"`` (NCCL >= 2.31): the candidates
    are the arms NCCL's model found valid, i.e. not -1 in the table *before* the tuner
    (``before``; the table itself when not given), walked from the highest index down with
    a strict ``<`` and no sign check: a tie goes to the highest index and a negative value
    written over a valid arm wins; a cell the tuner wrote over -1 is no candidate.
    """
    cells = [(a, p) for a in range(num_algo) for p in range(num_proto)]
    if scan == "last":
        valid = before if before is not None else table
        best, best_v = None, FLT_MAX
        for a, p in reversed(cells):
            i = a * num_proto + p
            if valid[i] != IGNORE and table[i] < best_v:
                best, best_v = a * 3 + p, table[i]
        return best
    best, best_v = None, FLT_MAX
    for a, p in cells:
        v = table[a * num_proto + p]
        if v == IGNORE:
            continue
        if v >= 0.0 and v < best_v:
            best, best_v = a * 3 + p, v
    return best


class Rank:
    """One rank of one communicator, driven like NCCL drives the plugin."""

    def __init__(self, plugin: Plugin, comm_id: int, nranks: int, nnodes: int, rank: int,
                 *, profiler: bool = True, tuner_version: int = 6, nccl_version: int | None = None,
                 scan: str | None = None):
        """``tuner_version`` (5, 6 or 7) is the struct this NCCL loads; ``nccl_version`` what
        its ncclGetVersion says (None: unreadable); ``scan`` NCCL's pick after the tuner,
        by default the one of that version ("last" from 2.31, or with v7 when unreadable)."""
        self.p, self.comm_id, self.nranks, self.nnodes, self.rank = plugin, comm_id, nranks, nnodes, rank
        if scan is None:
            newer = (nccl_version or 0) >= NCCL_2_31 or (nccl_version is None and tuner_version >= 7)
            scan = "last" if newer else "first"
        self.scan = scan
        self.tuner = {5: plugin.tuner_v5, 6: plugin.tuner, 7: plugin.tuner_v7}[tuner_version]
        self.constants = (C.c_double * (CONSTANTS_V7_DOUBLES if tuner_version >= 7 else CONSTANTS_V5_DOUBLES))()
        self.nvl = (C.c_int * 3)(1, nranks, nranks)
        set_nccl_version(nccl_version)
        self.mask = C.c_int(0)
        self.pctx = C.c_void_p()
        self.tctx = C.c_void_p()
        self.seq = 0
        self.clock = 1_700_000_000_000_000_000
        if profiler:
            rc = plugin.profiler.init(C.byref(self.pctx), comm_id, C.byref(self.mask), b"test",
                                      nnodes, nranks, rank, logger_ptr())
            assert rc == 0
        rc = self.tuner.init(C.byref(self.tctx), comm_id, nranks, nnodes, logger_ptr(), C.addressof(self.nvl),
                             C.addressof(self.constants))
        assert rc == 0
        self._keep = []

    @property
    def active(self) -> bool:
        return bool(self.tctx.value)

    def call(self, coll: int, nbytes: int, table: list[float], num_algo: int = NUM_ALGOS,
             num_proto: int = NUM_PROTOS, num_pipe_ops: int = 1):
        """getCollInfo on a copy of table; returns (rc, NCCL's resulting arm, table after, nChannels)."""
        arr = (C.c_float * len(table))(*table)
        nch = C.c_int(0)
        rc = self.tuner.getCollInfo(self.tctx, coll, nbytes, num_pipe_ops, arr, num_algo, num_proto, 0,
                                    C.byref(nch))
        after = list(arr)
        return rc, nccl_choice(after, num_algo, num_proto, scan=self.scan, before=table), after, nch.value

    def coll_start(self, coll: int, nbytes: int, arm: int, nch: int, dtype: bytes = b"ncclFloat32"):
        size = {b"ncclFloat32": 4, b"ncclInt8": 1, b"ncclFloat64": 8, b"ncclBfloat16": 2}[dtype]
        count = nbytes // size
        if coll in (2, 3):  # profiler count is per rank for AllGather/ReduceScatter
            count //= self.nranks
        d = ProfDescrV6()
        d.type = PROFILE_COLL
        d.rank = self.rank
        d.u.coll.seqNumber = self.seq
        self.seq += 1
        d.u.coll.func = COLLS[coll].encode()
        d.u.coll.count = count
        d.u.coll.datatype = dtype
        d.u.coll.nChannels = nch
        d.u.coll.algo = PROF_ALGOS[arm // 3].encode()
        d.u.coll.proto = PROF_PROTOS[arm % 3].encode()
        h = C.c_void_p()
        assert self.p.profiler.startEvent(self.pctx, C.byref(h), C.byref(d)) == 0
        assert self.p.profiler.stopEvent(h) == 0  # "enqueued"
        return h

    def channel(self, parent, ch: int, start: int, stop: int | None, *, record_stop: bool = True):
        d = ProfDescrV6()
        d.type = PROFILE_KERNEL_CH
        d.parentObj = parent.value if isinstance(parent, C.c_void_p) else parent
        d.rank = self.rank
        d.u.kernelCh.channelId = ch
        d.u.kernelCh.pTimer = start
        h = C.c_void_p()
        assert self.p.profiler.startEvent(self.pctx, C.byref(h), C.byref(d)) == 0
        if record_stop:
            args = StateArgs(stop or 0)
            assert self.p.profiler.recordEventState(h, KERNEL_CH_STOP, C.byref(args)) == 0
        assert self.p.profiler.stopEvent(h) == 0
        return h

    def measure(self, coll: int, nbytes: int, arm: int, lat_us: float, nch: int = 2):
        """One collective's profiler events: max over channels = lat_us."""
        h = self.coll_start(coll, nbytes, arm, nch)
        self.clock += 1_000_000
        for ch in range(nch):
            dur = int(lat_us * 1000) if ch == 0 else int(lat_us * 1000 * 0.9)
            self.channel(h, ch, self.clock, self.clock + dur)

    def finalize(self):
        self.tuner.finalize(self.tctx)  # NULL when inert: must be harmless
        if self.pctx.value:
            self.p.profiler.finalize(self.pctx)
        self.tctx = C.c_void_p()
        self.pctx = C.c_void_p()


def cost_table(entries: dict[int, float]) -> list[float]:
    """A 7x3 table with IGNORE everywhere except the given arm ids."""
    t = [IGNORE] * (NUM_ALGOS * NUM_PROTOS)
    for arm, v in entries.items():
        t[arm] = v
    return t


RING_LL, RING_LL128, RING_SIMPLE = 3, 4, 5
TREE_LL, TREE_LL128, TREE_SIMPLE = 0, 1, 2


class ArmStat(C.Structure):
    """policy.h's nb_arm_stat."""
    _fields_ = [("mean", C.c_double), ("n", C.c_double), ("s2", C.c_double), ("rsn", C.c_double),
                ("seen", C.c_uint32), ("inflight", C.c_uint32), ("resolved", C.c_uint32), ("pad", C.c_uint32)]


def policy_probe(path: Path) -> C.CDLL:
    """The probe library of conftest.py: nb_set_n, nb_ucb_total/nb_ucb_index and the shared generator."""
    lib = C.CDLL(str(path))
    lib.nb_probe_set_n.restype = None
    lib.nb_probe_set_n.argtypes = [C.POINTER(ArmStat), C.c_double]
    lib.nb_ucb_total.restype = C.c_double
    lib.nb_ucb_total.argtypes = [C.POINTER(ArmStat), C.c_int]
    lib.nb_ucb_index.restype = C.c_double
    lib.nb_ucb_index.argtypes = [C.POINTER(ArmStat), C.c_double, C.c_double]
    lib.nb_probe_uniform.restype = C.c_double
    lib.nb_probe_uniform.argtypes = [C.c_uint64] * 5
    lib.nb_probe_normal.restype = C.c_double
    lib.nb_probe_normal.argtypes = [C.c_uint64] * 4 + [C.c_int]
    return lib
