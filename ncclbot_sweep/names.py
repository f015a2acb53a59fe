"""One spelling for collectives, algorithms, protocols and arms, and the rules for valid arms.

Everything that names an NCCL collective, algorithm or protocol goes through this module
(architecture section 3). The validity rules are one table, written from NCCL's tuning code
as summarised in ``docs/nccl-cost-model.md`` (section 3) and
``docs/nccl-plugin-abi.md`` (section 3.5):

* Broadcast and Reduce run Ring only; AllGather and ReduceScatter run Ring, PAT, NVLS and
  CollNetDirect; AllReduce runs everything but PAT.
* NVLS, NVLSTree, PAT and both CollNet algorithms run the Simple protocol only.
* NVLSTree needs more than one node; NVLS on more than one node needs CollNet (NVLS+SHARP).
* PAT needs one GPU per node unless the fabric enables it for more.
* CollNet algorithms need a CollNet fabric, NVLS algorithms an NVLS fabric.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable

__all__ = [
    "COLLECTIVES",
    "ARMLESS_COLLECTIVES",
    "ALL_COLLECTIVES",
    "ALGORITHMS",
    "NVLS_ALGORITHMS",
    "PROTOCOLS",
    "FAMILIES",
    "AUTO",
    "STATIC",
    "STOCK",
    "SIMPLE_ONLY_ALGORITHMS",
    "SIMULATOR",
    "BINARY_COLLECTIVE",
    "COLLECTIVE_BINARY",
    "FULL_BUFFER_COLLECTIVES",
    "NCCL_DATATYPES",
    "PER_RANK_COUNT_COLLECTIVES",
    "SIZE_UNITS",
    "Arm",
    "FabricOffer",
    "PrunedArm",
    "algorithm_family",
    "all_arms",
    "arm_invalid_reason",
    "bus_bandwidth_gbs",
    "bus_factor",
    "canonical_algorithm",
    "canonical_collective",
    "canonical_dtype",
    "canonical_protocol",
    "collective_algorithms",
    "collective_in_text",
    "dtype_bytes",
    "full_buffer_bytes",
    "human_size",
    "log_algorithm_name",
    "log_protocol_name",
    "nccl_datatype",
    "nccl_type_name",
    "learning_policy",
    "parse_size",
    "prune_arms",
    "torch_collective",
    "valid_arms",
]

#: NCCL function names, in NCCL's function index order (0..4).
COLLECTIVES: tuple[str, ...] = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
#: Collectives that nccl-tests runs but NCCL's tuner does not model (no arms).
ARMLESS_COLLECTIVES: tuple[str, ...] = ("AlltoAll", "SendRecv", "Gather", "Scatter", "HyperCube")
ALL_COLLECTIVES: tuple[str, ...] = COLLECTIVES + ARMLESS_COLLECTIVES

#: ``NCCL_ALGO`` tokens, in NCCL's algorithm index order (0..6).
ALGORITHMS: tuple[str, ...] = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
#: The algorithms that run over NVLink SHARP multicast (their channels, their first-use set-up).
NVLS_ALGORITHMS: tuple[str, ...] = ("NVLS", "NVLSTree")
#: ``NCCL_PROTO`` tokens, in NCCL's protocol index order (0..2).
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")

#: The policy name for "no forcing": NCCL's own cost-model argmin.
AUTO = "AUTO"
#: The policy name for "stock NCCL, no plugin loaded".
STOCK = "stock"
#: The plugin's table replay (``NCCLBOT_POLICY=static``): it plays a table's arm but learns nothing.
STATIC = "static"


def learning_policy(policy: str | None, *, plugin: bool) -> bool:
    """True for a step whose plugin learns: it loads the plugin under a policy other than AUTO.

    AUTO through the plugin times NCCL's own choice and changes no arm; stock loads no plugin.
    Planning prices such a step over every arm, and its outcome says when the plugin fell back
    to NCCL's choice instead (:mod:`ncclbot_sweep.outcomes`).
    """
    return bool(plugin) and policy is not None and policy.upper() != AUTO

#: The stamp of the simulated fabric on what it prints: `` simulator=<SIMULATOR>`` ends the
#: nccl-tests version line and ``"simulator"`` is a key of its ``-J`` JSON. Ingest labels a
#: run synthetic from this stamp, never from a fabric's or an inventory's name.
SIMULATOR = "ncclbot-sweep"

#: Algorithm family an inventory can offer or not.
FAMILIES: tuple[str, ...] = ("tree", "ring", "collnet", "nvls", "pat")
_FAMILY = {
    "Tree": "tree",
    "Ring": "ring",
    "CollNetDirect": "collnet",
    "CollNetChain": "collnet",
    "NVLS": "nvls",
    "NVLSTree": "nvls",
    "PAT": "pat",
}

#: nccl-tests binary name -> collective.
BINARY_COLLECTIVE: dict[str, str] = {
    "broadcast_perf": "Broadcast",
    "reduce_perf": "Reduce",
    "all_gather_perf": "AllGather",
    "reduce_scatter_perf": "ReduceScatter",
    "all_reduce_perf": "AllReduce",
    "alltoall_perf": "AlltoAll",
    "sendrecv_perf": "SendRecv",
    "gather_perf": "Gather",
    "scatter_perf": "Scatter",
    "hypercube_perf": "HyperCube",
}
COLLECTIVE_BINARY: dict[str, str] = {coll: binary for binary, coll in BINARY_COLLECTIVE.items()}

# Names NCCL prints in its logs (ncclAlgoToString / ncclProtoToString) -> our tokens.
_LOG_ALGO = {
    "TREE": "Tree",
    "RING": "Ring",
    "COLLNET_DIRECT": "CollNetDirect",
    "COLLNETDIRECT": "CollNetDirect",
    "COLLNET_CHAIN": "CollNetChain",
    "COLLNETCHAIN": "CollNetChain",
    "COLLNET": "CollNetDirect",
    "NVLS": "NVLS",
    "NVLS_TREE": "NVLSTree",
    "NVLSTREE": "NVLSTree",
    "PAT": "PAT",
}
_LOG_PROTO = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}

# The validity table: which algorithms each collective can run.
_COLLECTIVE_ALGORITHMS: dict[str, frozenset[str]] = {
    "Broadcast": frozenset({"Ring"}),
    "Reduce": frozenset({"Ring"}),
    "AllGather": frozenset({"Ring", "PAT", "NVLS", "CollNetDirect"}),
    "ReduceScatter": frozenset({"Ring", "PAT", "NVLS", "CollNetDirect"}),
    "AllReduce": frozenset({"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"}),
}
#: Algorithms that run the Simple protocol only.
SIMPLE_ONLY_ALGORITHMS = frozenset({"NVLS", "NVLSTree", "PAT", "CollNetDirect", "CollNetChain"})

_CANON_COLL = {c.lower(): c for c in ALL_COLLECTIVES} | {
    "allgather": "AllGather",
    "all_gather": "AllGather",
    "reducescatter": "ReduceScatter",
    "reduce_scatter": "ReduceScatter",
    "allreduce": "AllReduce",
    "all_reduce": "AllReduce",
    "alltoall": "AlltoAll",
    "all_to_all": "AlltoAll",
    "sendrecv": "SendRecv",
}
_CANON_ALGO = {a.lower(): a for a in ALGORITHMS} | {k.lower(): v for k, v in _LOG_ALGO.items()}
_CANON_PROTO = {p.lower(): p for p in PROTOCOLS}


def canonical_collective(name: str) -> str:
    """Return the NCCL spelling of a collective given in any common form.

    Accepts NCCL names in any case (``allreduce``), snake case (``all_reduce``) and
    nccl-tests binary names (``all_reduce_perf``). Raises ``ValueError`` naming the valid ones.
    """
    key = name.strip()
    if key in BINARY_COLLECTIVE:
        return BINARY_COLLECTIVE[key]
    try:
        return _CANON_COLL[key.lower()]
    except KeyError:
        raise ValueError(
            f"collective must be one of {', '.join(ALL_COLLECTIVES)}, but got {name!r}"
        ) from None


def canonical_algorithm(name: str) -> str:
    """Return the ``NCCL_ALGO`` token for an algorithm name (any case, or NCCL's log name)."""
    try:
        return _CANON_ALGO[name.strip().lower()]
    except KeyError:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, but got {name!r}") from None


def canonical_protocol(name: str) -> str:
    """Return the ``NCCL_PROTO`` token for a protocol name (any case)."""
    try:
        return _CANON_PROTO[name.strip().lower()]
    except KeyError:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, but got {name!r}") from None


def log_algorithm_name(algorithm: str) -> str:
    """Return the name NCCL prints for an algorithm in its logs (``NVLSTree`` -> ``NVLS_TREE``)."""
    return {
        "Tree": "TREE",
        "Ring": "RING",
        "CollNetDirect": "COLLNET_DIRECT",
        "CollNetChain": "COLLNET_CHAIN",
        "NVLS": "NVLS",
        "NVLSTree": "NVLS_TREE",
        "PAT": "PAT",
    }[canonical_algorithm(algorithm)]


def log_protocol_name(protocol: str) -> str:
    """Return the name NCCL prints for a protocol in its logs (``Simple`` -> ``SIMPLE``)."""
    return canonical_protocol(protocol).upper()


def collective_algorithms(collective: str) -> frozenset[str]:
    """The algorithms NCCL computes for a collective (empty for the armless ones).

    The validity table's first rule; the simulator's tuning model computes exactly these cells.
    """
    return _COLLECTIVE_ALGORITHMS.get(canonical_collective(collective), frozenset())


def algorithm_family(algorithm: str) -> str:
    """Return the family (``tree``, ``ring``, ``collnet``, ``nvls``, ``pat``) of an algorithm."""
    return _FAMILY[canonical_algorithm(algorithm)]


_ARM_RE = re.compile(r"^\s*([A-Za-z_]+)\s*[/:, ]\s*([A-Za-z0-9_]+)\s*$")


@functools.total_ordering
@dataclasses.dataclass(frozen=True, slots=True)
class Arm:
    """An (algorithm, protocol) pair; its string form is ``"<algo>/<proto>"``.

    Arms order like NCCL's cost-table scan (algorithm index, then protocol index), which is
    also NCCL's tie-break order.
    """

    algorithm: str
    protocol: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", canonical_algorithm(self.algorithm))
        object.__setattr__(self, "protocol", canonical_protocol(self.protocol))

    @classmethod
    def parse(cls, text: str) -> Arm:
        """Parse ``Ring/LL128``, ``ring/ll128``, ``RING SIMPLE`` or ``NVLS_TREE/SIMPLE``."""
        match = _ARM_RE.match(text)
        if not match:
            raise ValueError(f"arm must look like 'Ring/LL128' (algorithm/protocol), but got {text!r}")
        return cls(match.group(1), match.group(2))

    @classmethod
    def from_indices(cls, algorithm: int, protocol: int) -> Arm:
        """Build an arm from NCCL's numeric algorithm and protocol indices."""
        if not (0 <= algorithm < len(ALGORITHMS) and 0 <= protocol < len(PROTOCOLS)):
            raise ValueError(
                f"algorithm index must be 0..{len(ALGORITHMS) - 1} and protocol index "
                f"0..{len(PROTOCOLS) - 1}, but got {algorithm}/{protocol}"
            )
        return cls(ALGORITHMS[algorithm], PROTOCOLS[protocol])

    @property
    def algorithm_index(self) -> int:
        return ALGORITHMS.index(self.algorithm)

    @property
    def protocol_index(self) -> int:
        return PROTOCOLS.index(self.protocol)

    @property
    def index(self) -> int:
        """Flat index ``algorithm * 3 + protocol`` (NCCL's scan order)."""
        return self.algorithm_index * len(PROTOCOLS) + self.protocol_index

    def __str__(self) -> str:
        return f"{self.algorithm}/{self.protocol}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Arm):
            return NotImplemented
        return self.index < other.index


def all_arms() -> tuple[Arm, ...]:
    """Every (algorithm, protocol) pair in NCCL's scan order, valid or not."""
    return tuple(Arm(a, p) for a in ALGORITHMS for p in PROTOCOLS)


@dataclasses.dataclass(frozen=True)
class FabricOffer:
    """What a fabric offers: algorithm families, protocols, and whether PAT runs multi-GPU.

    Built from an inventory; the default offers what every NCCL fabric has (Tree, Ring,
    all protocols) and nothing that needs special hardware.
    """

    families: frozenset[str] = frozenset({"tree", "ring"})
    protocols: frozenset[str] = frozenset(PROTOCOLS)
    pat_multi_gpu: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"families must be among {', '.join(FAMILIES)}, but got {sorted(unknown)}")
        object.__setattr__(self, "families", frozenset(self.families))
        object.__setattr__(self, "protocols", frozenset(canonical_protocol(p) for p in self.protocols))


@dataclasses.dataclass(frozen=True)
class PrunedArm:
    """An arm left out of a context, and why."""

    arm: Arm
    reason: str


def arm_invalid_reason(
    collective: str,
    arm: Arm,
    *,
    nodes: int,
    gpus_per_node: int,
    offer: FabricOffer = FabricOffer(),
) -> str | None:
    """Return why ``arm`` cannot run ``collective`` on this fabric and scale, or None if it can.

    Called at planning time to prune arms, and by the simulator to refuse a forced arm the
    way NCCL does. The first rule that fails is reported.
    """
    coll = canonical_collective(collective)
    if coll not in _COLLECTIVE_ALGORITHMS:
        return f"{coll} has no algorithm/protocol choice in NCCL"
    if arm.algorithm not in _COLLECTIVE_ALGORITHMS[coll]:
        allowed = ", ".join(a for a in ALGORITHMS if a in _COLLECTIVE_ALGORITHMS[coll])
        return f"{coll} does not run {arm.algorithm} (it runs {allowed})"
    if arm.algorithm in SIMPLE_ONLY_ALGORITHMS and arm.protocol != "Simple":
        return f"{arm.algorithm} runs the Simple protocol only"
    family = _FAMILY[arm.algorithm]
    if family not in offer.families:
        return f"the fabric does not offer {family} (inventory 'algorithms' lacks it)"
    if arm.protocol not in offer.protocols:
        return f"the fabric does not offer the {arm.protocol} protocol"
    if arm.algorithm == "NVLSTree" and nodes <= 1:
        return "NVLSTree needs more than one node"
    if arm.algorithm == "NVLS" and nodes > 1 and "collnet" not in offer.families:
        return "NVLS on more than one node needs CollNet (NVLS+SHARP)"
    if arm.algorithm == "PAT" and gpus_per_node > 1 and not offer.pat_multi_gpu:
        return "PAT needs one GPU per node unless the fabric enables it (NCCL_PAT_ENABLE)"
    return None


def prune_arms(
    collective: str,
    arms: Iterable[Arm] | None = None,
    *,
    nodes: int,
    gpus_per_node: int,
    offer: FabricOffer = FabricOffer(),
) -> tuple[list[Arm], list[PrunedArm]]:
    """Split ``arms`` (default: every arm) into the valid ones and the pruned ones with reasons."""
    kept: list[Arm] = []
    pruned: list[PrunedArm] = []
    for arm in sorted(all_arms() if arms is None else arms):
        reason = arm_invalid_reason(collective, arm, nodes=nodes, gpus_per_node=gpus_per_node, offer=offer)
        if reason is None:
            kept.append(arm)
        else:
            pruned.append(PrunedArm(arm, reason))
    return kept, pruned


def valid_arms(
    collective: str,
    *,
    nodes: int,
    gpus_per_node: int,
    offer: FabricOffer = FabricOffer(),
) -> list[Arm]:
    """The arms a context offers, in NCCL's scan order."""
    return prune_arms(collective, nodes=nodes, gpus_per_node=gpus_per_node, offer=offer)[0]


# --------------------------------------------------------------------------- sizes and buffers

#: Collectives whose nccl-tests ``size`` (and the tuner's ``nBytes``) is the whole buffer of all
#: ranks, while NCCL's own log lines and counts are per rank (architecture section 3).
FULL_BUFFER_COLLECTIVES = frozenset({"AllGather", "ReduceScatter"})
#: Collectives whose nccl-tests ``size`` is the whole buffer and whose printed ``count`` is per
#: rank (each rank moves (ranks - 1) / ranks of the buffer): the full-buffer ones plus AlltoAll.
#: AlltoAll is not in :data:`FULL_BUFFER_COLLECTIVES`: NCCL runs it as point-to-point calls that
#: never reach the tuner, so no ``nBytes`` or NCCL log line is ever converted for it.
PER_RANK_COUNT_COLLECTIVES = FULL_BUFFER_COLLECTIVES | {"AlltoAll"}


def full_buffer_bytes(collective: str | None, per_rank_bytes: int, ranks: int | None) -> int | None:
    """``size_bytes`` from the bytes one rank handles: ranks x bytes for AllGather/ReduceScatter.

    None when the collective needs the rank count and it is not known.
    """
    if collective not in FULL_BUFFER_COLLECTIVES:
        return per_rank_bytes
    return per_rank_bytes * ranks if ranks else None


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: ``busbw = algbw * bus_factor`` (its PERFORMANCE.md).

    Used by the simulator's perf binaries and by the report's bandwidth figures, so both turn a
    time into the bus bandwidth nccl-tests would print.
    """
    if collective == "AllReduce":
        return 2.0 * (ranks - 1) / ranks
    if collective in PER_RANK_COUNT_COLLECTIVES:
        return (ranks - 1) / ranks
    return 1.0


def bus_bandwidth_gbs(collective: str, ranks: int, size_bytes: float, time_us: float) -> float:
    """The bus bandwidth (GB/s) nccl-tests prints for ``size_bytes`` moved in ``time_us``."""
    return float(size_bytes) / (float(time_us) * 1e3) * bus_factor(collective, int(ranks))


#: Size suffixes (upper case) -> bytes: binary units, as nccl-tests reads ``-b``/``-e``/``-i``.
SIZE_UNITS: dict[str, int] = {
    "": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
    "G": 1024**3, "GB": 1024**3, "GIB": 1024**3, "T": 1024**4, "TB": 1024**4, "TIB": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")
# nccl-tests' ``parsesize``: ``sscanf(value, "%lf %1s")``, a decimal number, then the first
# non-blank character as the unit (K, M or G in either case); what follows it is ignored.
_NCCLTESTS_SIZE_RE = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S?)")


def parse_size(value: int | str, *, nccl_tests: bool = False) -> int:
    """Bytes from ``4096``, ``"512B"``, ``"1M"``, ``"4KB"`` or ``"16GiB"`` (binary units, as nccl-tests).

    With ``nccl_tests`` the spellings nccl-tests' ``-b``/``-e``/``-i`` accept, and only those: a
    decimal number with an optional K, M or G (``1.5K`` is 1536, ``1KB`` is 1024, ``512B`` and
    ``1T`` are refused); the bytes are truncated to a whole number, as its cast does.
    """
    if nccl_tests:
        match = _NCCLTESTS_SIZE_RE.match(str(value))
        if not match or match.group(2) not in ("", *"KkMmGg") or float(match.group(1)) < 0:
            raise ValueError(f"size must be a number with an optional K, M or G (nccl-tests' -b/-e/-i), "
                             f"but got {value!r}")
        return int(float(match.group(1)) * SIZE_UNITS[match.group(2).upper()])
    if isinstance(value, bool):
        raise ValueError(f"size must be bytes or a string like '16GiB', but got {value!r}")
    if isinstance(value, int):
        number, unit = value, ""
    else:
        match = _SIZE_RE.match(str(value))
        if not match or match.group(2).upper() not in SIZE_UNITS:
            raise ValueError(f"size must be bytes or a string like '512B', '1M', '16GiB', but got {value!r}")
        number, unit = int(match.group(1)), match.group(2)
    size = number * SIZE_UNITS[unit.upper()]
    if size < 0:
        raise ValueError(f"size must not be negative, but got {value!r}")
    return size


def human_size(size: int | float) -> str:
    """A byte count in the largest binary unit it reaches: ``16 GiB``, ``512 B``, ``1.5 KiB``.

    Exact multiples print as whole numbers (so :func:`parse_size` reads them back); other sizes
    (an AllGather buffer rounded to the rank count) keep six significant digits: ``1023.98 KiB``.
    """
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(size) >= factor:
            return f"{int(size) // factor} {unit}" if size % factor == 0 else f"{size / factor:g} {unit}"
    return f"{int(size)} B" if size == int(size) else f"{size:g} B"


# --------------------------------------------------------------------------- data types

# NCCL's data types in ``ncclDataType_t`` order (index 0..11): the nccl-tests ``-d`` name, bytes
# per element and the enum's name (what NCCL's warnings print).
_NCCL_TYPE_TABLE: tuple[tuple[str, int, str], ...] = (
    ("int8", 1, "ncclInt8"), ("uint8", 1, "ncclUint8"), ("int32", 4, "ncclInt32"), ("uint32", 4, "ncclUint32"),
    ("int64", 8, "ncclInt64"), ("uint64", 8, "ncclUint64"), ("half", 2, "ncclFloat16"), ("float", 4, "ncclFloat32"),
    ("double", 8, "ncclFloat64"), ("bfloat16", 2, "ncclBfloat16"), ("f8e4m3", 1, "ncclFloat8e4m3"),
    ("f8e5m2", 1, "ncclFloat8e5m2"))
#: NCCL's data types in ``ncclDataType_t`` order (index 0..11), by their nccl-tests ``-d`` name,
#: with bytes per element.
NCCL_DATATYPES: tuple[tuple[str, int], ...] = tuple((name, width) for name, width, _enum in _NCCL_TYPE_TABLE)
_NCCL_ENUM_NAME = {name: enum for name, _width, enum in _NCCL_TYPE_TABLE}
# Types that traces name but NCCL has no enum for, with their widths.
_OTHER_WIDTHS = {"int16": 2}
_DTYPE_WIDTH = dict(NCCL_DATATYPES) | _OTHER_WIDTHS
# NCCL's enum names (what its profiler and warnings print), its legacy aliases (``nccl.h``),
# PyTorch, kernel-name and C spellings of a data type -> the nccl-tests name.
_DTYPE_ALIASES = {name: name for name in _DTYPE_WIDTH} | {
    enum.lower(): name for name, enum in _NCCL_ENUM_NAME.items()} | {
    "ncclchar": "int8", "ncclint": "int32", "ncclhalf": "half", "ncclfloat": "float", "nccldouble": "double",
    "float32": "float", "f32": "float", "fp32": "float", "float16": "half", "c10::half": "half", "f16": "half",
    "fp16": "half", "c10::bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "double", "f64": "double",
    "fp64": "double", "long": "int64", "i64": "int64", "int": "int32", "i32": "int32", "signed char": "int8",
    "char": "int8", "i8": "int8", "unsigned char": "uint8", "byte": "uint8", "u8": "uint8", "u32": "uint32",
    "u64": "uint64", "bool": "uint8", "short": "int16"}


def nccl_datatype(index: int) -> tuple[str, int] | None:
    """(name, bytes per element) of NCCL's datatype index (an NCCL log's ``datatype N``), or None."""
    return NCCL_DATATYPES[index] if 0 <= index < len(NCCL_DATATYPES) else None


def canonical_dtype(name: str) -> str | None:
    """The nccl-tests name of a data type spelled as PyTorch, a kernel or C does; None if unknown."""
    return _DTYPE_ALIASES.get(name.strip().lower())


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of a data type in any known spelling; None if unknown."""
    canon = canonical_dtype(name)
    return None if canon is None else _DTYPE_WIDTH[canon]


def nccl_type_name(name: str) -> str:
    """The ``ncclDataType_t`` name NCCL prints for an NCCL data type (``float`` -> ``ncclFloat32``).

    Raises ``ValueError`` naming NCCL's types when ``name`` (any known spelling) is not one.
    """
    canon = canonical_dtype(name)
    if canon not in _NCCL_ENUM_NAME:
        raise ValueError(f"data type must be one of {', '.join(_NCCL_ENUM_NAME)}, but got {name!r}")
    return _NCCL_ENUM_NAME[canon]


# --------------------------------------------------------------------------- collectives in text

_BY_LENGTH = sorted(_CANON_COLL.items(), key=lambda item: -len(item[0]))


def collective_in_text(text: str) -> str | None:
    """The collective a name mentions (``nccl_allgather.log`` -> ``AllGather``), or None.

    Longer spellings are tried first, so ``reduce_scatter`` is not read as ``Reduce``.
    """
    lowered = text.lower().replace("-", "_")
    return next((coll for alias, coll in _BY_LENGTH if alias in lowered), None)


# PyTorch's names for what it issues through NCCL that are not NCCL spellings: point-to-point
# ops, and ``barrier`` (an AllReduce of one element, kept apart from the workload's AllReduces).
_TORCH_ONLY = {"send": "SendRecv", "recv": "SendRecv", "barrier": "Barrier"}
_TORCH_BY_LENGTH = sorted(({alias.replace("_", ""): coll for alias, coll in _CANON_COLL.items()} | _TORCH_ONLY).items(),
                          key=lambda item: -len(item[0]))


def torch_collective(name: str) -> str | None:
    """The collective a PyTorch op or an NCCL kernel names, or None (``wait``, anything else).

    ``nccl:_all_gather_base`` -> ``AllGather``, ``reduce_scatter_tensor`` -> ``ReduceScatter``,
    ``allreduce_coalesced`` -> ``AllReduce``, ``send`` -> ``SendRecv``; longer spellings first.
    """
    key = name.lower().replace("nccl:", "").replace("_", "")
    key = key.removesuffix("base").removesuffix("intotensor").removesuffix("tensor").removesuffix("coalesced")
    return next((coll for alias, coll in _TORCH_BY_LENGTH if key.startswith(alias)), None)
