"""Fabric inventories: one YAML per fabric, validated by pydantic, with errors that point at lines.

An inventory says how to reach a cluster (``access``), how to ask it for nodes
(``scheduler``, ``node_sets``), how to launch ranks (``launcher``), what the fabric needs in
its environment (``environment``), where nccl-tests, NCCL and the plugin live, and which
algorithm families the fabric offers (``algorithms``, feeding :class:`names.FabricOffer`),
and how its nodes run ncclbot-sweep itself (``ncclbot_sweep``, for tuning jobs).
It is read by ``plan`` (validity, estimate), ``render`` (job scripts) and the executors.

Loading never shows a traceback for a bad file: :func:`load_inventory` raises
:class:`~ncclbot_sweep.errors.InventoryError` naming the file, the line, the field and what
is allowed (the shared spec-file loader, :mod:`ncclbot_sweep.specfile`).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.errors import InventoryError
from ncclbot_sweep.names import PROTOCOLS, FabricOffer, canonical_protocol
from ncclbot_sweep.specfile import Bool, Float, Int, SpecModel, load_spec, parse_spec

__all__ = [
    "Access",
    "Algorithms",
    "Container",
    "Estimate",
    "GPUS_PER_PROCESS",
    "Inventory",
    "Launcher",
    "NcclInstall",
    "NcclTests",
    "NodeSet",
    "Plugin",
    "Scheduler",
    "SIM_BIN_DIR",
    "SweepTool",
    "describe_inventory",
    "env_mapping",
    "load_inventory",
    "parse_inventory_text",
    "resolve_inventory_path",
    "shipped_inventories",
    "sbatch_value_problem",
]

log = logging.getLogger(__name__)

#: Value of ``nccl_tests.bin_dir`` that means "the simulated fabric's executables".
SIM_BIN_DIR = "sim"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What an #SBATCH value may not hold: line breaks, quotes, '$', backquotes, backslashes.
_SBATCH_UNSAFE = re.compile(r"[\x00-\x1f\"'\\`$]")
# Slurm names (partition, account, qos, reservation) and host lists are single words.
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.:@+\-\[\],]+$")
_VERSION = re.compile(r"^\d+(\.\d+){0,3}([.+-][0-9A-Za-z.+-]*)?$")


def sbatch_value_problem(value: str) -> str | None:
    """Why ``value`` cannot go on an ``#SBATCH`` line, or None (the rule ``render`` applies too)."""
    if _SBATCH_UNSAFE.search(value):
        return "must be a single line without quotes, '$', backquotes or backslashes (it goes on an #SBATCH line)"
    return None


def _sbatch_word(value: str | None) -> str | None:
    if value is not None:
        problem = sbatch_value_problem(value)
        if problem or not _SLURM_WORD.match(value):
            raise ValueError(problem or f"must be one word of letters, digits and ._:@+-[], but got {value!r}")
    return value


def _sbatch_words(values: list[str]) -> list[str]:
    for value in values:
        _sbatch_word(value)
    return values


#: The longest wait an inventory may ask for (a poll interval, a connect timeout): a day.
_DAY_S = 86400.0


def _sbatch_text(value: str | None) -> str | None:
    if value is not None and (problem := sbatch_value_problem(value)):
        raise ValueError(problem)
    return value


class Access(SpecModel):
    """How to reach the machine that runs the scheduler: this one, or a login node over SSH."""

    kind: Literal["local", "ssh"] = "local"
    host: str | None = None
    port: Int = Field(22, ge=1, le=65535)
    user: str | None = None
    key_path: str | None = None
    known_hosts_path: str | None = None
    #: Host keys are verified against ``known_hosts_path``; a new host is refused unless this is set.
    accept_new_host_key: Bool = False
    #: Where campaign folders live on the cluster (shared file system); default: same path as locally.
    remote_workdir: str | None = None
    connect_timeout_s: Float = Field(30.0, gt=0, le=_DAY_S)

    @model_validator(mode="after")
    def _ssh_needs_host(self) -> Access:
        if self.kind == "ssh" and not self.host:
            raise ValueError("access.kind 'ssh' needs 'host' (and usually 'user' and 'key_path')")
        return self


class Scheduler(SpecModel):
    """How jobs are queued: the local executor, or Slurm (partition, account, limits)."""

    kind: Literal["local", "slurm"] = "local"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    exclude: list[str] = Field(default_factory=list)
    #: Upper bound for one job's time limit, in minutes (the plan asks for less when it can).
    time_limit_min: Int = Field(240, ge=1)
    #: Lower bound for one job's time limit, in minutes.
    min_time_limit_min: Int = Field(5, ge=1)
    #: Ask for GPUs with ``--gpus-per-node`` (off for clusters that hand out whole nodes without GRES).
    request_gpus: Bool = True
    #: Extra ``#SBATCH`` lines, given without the prefix, e.g. ``--exclusive``.
    extra_sbatch: list[str] = Field(default_factory=list)
    #: How many of the campaign's jobs may sit in the queue at once.
    max_jobs_in_queue: Int = Field(16, ge=1)
    #: Cancel a job that stayed pending this long (seconds); null keeps it waiting.
    cancel_pending_after_s: Int | None = Field(None, ge=1)
    #: Local executor only: how many jobs run at the same time.
    max_concurrent_jobs: Int = Field(2, ge=1)
    #: Local executor only: rank processes of a step that loads the plugin (default: one
    #: per node, at most 8); other steps run task 0 only.
    local_rank_processes: Int | None = Field(None, ge=1, le=64)
    #: Seconds between polls: first interval and cap (the interval doubles up to the cap).
    poll_interval_s: Float = Field(0.2, gt=0, le=_DAY_S)
    poll_interval_max_s: Float = Field(30.0, gt=0, le=_DAY_S)

    _words = field_validator("partition", "account", "qos", "reservation")(_sbatch_word)
    _constraint = field_validator("constraint")(_sbatch_text)

    _hosts = field_validator("exclude")(_sbatch_words)

    @field_validator("extra_sbatch")
    @classmethod
    def _options(cls, values: list[str]) -> list[str]:
        for value in values:
            _sbatch_text(value)
            if not value.startswith("-"):
                raise ValueError(f"each line is an sbatch option such as '--exclusive', without '#SBATCH', "
                                 f"but got {value!r}")
        return values

    @model_validator(mode="after")
    def _bounds(self) -> Scheduler:
        if self.min_time_limit_min > self.time_limit_min:
            raise ValueError(f"min_time_limit_min ({self.min_time_limit_min}) must not exceed time_limit_min "
                             f"({self.time_limit_min})")
        if self.poll_interval_s > self.poll_interval_max_s:
            raise ValueError(f"poll_interval_s ({self.poll_interval_s:g}) must not exceed poll_interval_max_s "
                             f"({self.poll_interval_max_s:g})")
        return self


class Container(SpecModel):
    """A Pyxis/enroot container for every rank (``srun --container-image``)."""

    image: str
    mounts: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)


#: GPUs each nccl-tests process drives (its ``-g``): every step starts one process per GPU.
GPUS_PER_PROCESS = 1


class Launcher(SpecModel):
    """How ranks start inside the allocation: ``srun`` (with PMIx, Pyxis) or ``mpirun``."""

    kind: Literal["srun", "mpirun"] = "srun"
    #: ``--mpi=<value>`` for srun; null leaves Slurm's default.
    mpi: str | None = "pmix"
    #: Extra srun flags, each one word such as ``--cpu-bind=none``.
    flags: list[str] = Field(default_factory=list)
    container: Container | None = None
    #: Flags for ``mpirun`` when ``kind`` is mpirun.
    mpirun_flags: list[str] = Field(default_factory=list)

    def expected_build(self, gpus_per_node: int) -> str:
        """Which nccl-tests build the job scripts need from this launcher (``inventory check`` says it).

        Every step runs one process per GPU (``-g 1``): the ranks of a multi-node job find each
        other through MPI, so nccl-tests must be built with ``MPI=1`` against an MPI this launcher
        starts; a build without MPI runs one process per node with ``-g <GPUs>``, on one node only.
        """
        if self.kind == "mpirun":
            how = "mpirun starts them: nccl-tests built with MPI=1 against that mpirun's MPI"
        elif self.mpi:
            how = f"srun --mpi={self.mpi} starts them: nccl-tests built with MPI=1 against an MPI with {self.mpi} support"
        else:
            how = ("srun starts them with Slurm's default MPI plugin: nccl-tests built with MPI=1 against an MPI "
                   "that plugin can start")
        inside = f", inside {self.container.image}" if self.container else ""
        return (f"one process per GPU ({gpus_per_node} per node, -g {GPUS_PER_PROCESS}); {how}{inside}. "
                "A build without MPI (one process per node with -g) cannot join nodes")


class NodeSet(SpecModel):
    """A named group of nodes: an explicit list, a constraint, and NVL72 block placement."""

    nodelist: str | None = None
    constraint: str | None = None
    exclude: list[str] = Field(default_factory=list)
    #: Nodes per NVLink block (18 for NVL72); jobs then ask ``--segment`` to stay inside blocks.
    block_nodes: Int | None = Field(None, ge=1)

    _nodelist = field_validator("nodelist")(_sbatch_word)
    _constraint = field_validator("constraint")(_sbatch_text)

    _hosts = field_validator("exclude")(_sbatch_words)

    def segment(self, nodes: int) -> int | None:
        """The ``--segment`` for a job of ``nodes`` nodes: its largest divisor that fits a block."""
        if self.block_nodes is None:
            return None
        return max(d for d in range(1, min(nodes, self.block_nodes) + 1) if nodes % d == 0)


class NcclTests(SpecModel):
    """Where the nccl-tests binaries are and which version (it decides the measurement flags)."""

    #: Folder holding ``all_reduce_perf`` etc., or ``sim`` for the simulated fabric's binaries.
    bin_dir: str
    version: str = "2.19.6"
    #: Extra flags for every run, e.g. ``["-c", "0"]`` to skip correctness checks.
    extra_flags: list[str] = Field(default_factory=list)

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError(f"must be a version like '2.19.6', but got {value!r}")
        return value

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", value_head(self.version)))

    @property
    def per_iteration_json(self) -> bool:
        """True when this nccl-tests has ``-I``/``-J`` (2.19 and later): every iteration in JSON."""
        return self.version_tuple[:2] >= (2, 19)

    def resolved_bin_dir(self) -> Path:
        """The folder of the executables; ``sim`` asks the simulator to install and return them.

        The simulator is part of the distribution, imported here only when asked for.
        """
        if self.bin_dir != SIM_BIN_DIR:
            return Path(self.bin_dir).expanduser()
        from ncclbot_sweep import sim

        return Path(sim.bin_dir())


def value_head(version: str) -> str:
    """The numeric head of a version string (``2.30.4+cuda12.9`` -> ``2.30.4``)."""
    match = re.match(r"\d+(\.\d+)*", version)
    return match.group(0) if match else "0"


class NcclInstall(SpecModel):
    """The NCCL library the jobs load (prepended to ``LD_LIBRARY_PATH`` when ``lib_dir`` is set)."""

    version: str | None = None
    lib_dir: str | None = None


class Plugin(SpecModel):
    """The ncclbot tuner+profiler plugin used by live campaigns (``plugin/README.md``)."""

    #: The shared library, loaded as both ``NCCL_TUNER_PLUGIN`` and ``NCCL_PROFILER_PLUGIN``.
    path: str | None = None
    version: str | None = None
    #: ``ncclbot-coordinator``; live jobs start it once on the batch host (learning needs it).
    coordinator: str | None = None

    def resolved_path(self) -> str | None:
        """``path``, with ``bundled`` resolved to the shipped plugin's absolute path (built on first use,
        :mod:`ncclbot_sweep.pluginbuild`; PluginBuildError when it cannot be)."""
        return _resolve_bundled(self.path, pluginbuild.LIBRARY)

    def resolved_coordinator(self) -> str | None:
        """``coordinator``, with ``bundled`` resolved like :meth:`resolved_path`."""
        return _resolve_bundled(self.coordinator, pluginbuild.COORDINATOR)


def _resolve_bundled(value: str | None, name: str) -> str | None:
    if value != pluginbuild.BUNDLED:
        return value
    return str(pluginbuild.built_file(name))


class SweepTool(SpecModel):
    """ncclbot-sweep itself as the cluster's nodes run it: the command of a tuning job (``analyze tune -i``).

    The nodes need ncclbot-sweep installed (a virtual environment on the shared file system,
    say); the job does not inherit the submitting shell's ``PATH`` over SSH, so a full path
    is the safe choice.
    """

    #: The command's words: ``/shared/ncclbot/venv/bin/ncclbot-sweep``, or a list such as
    #: ``[apptainer, exec, /shared/ncclbot.sif, ncclbot-sweep]``; a string is one word.
    command: list[str] = Field(default_factory=lambda: ["ncclbot-sweep"], min_length=1)

    @field_validator("command", mode="before")
    @classmethod
    def _words(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class Algorithms(SpecModel):
    """Which algorithm families and protocols the fabric offers, and how NCCL sees its nodes."""

    families: list[Literal["tree", "ring", "collnet", "nvls", "pat"]] = Field(
        default_factory=lambda: ["tree", "ring"])
    protocols: list[str] = Field(default_factory=lambda: list(PROTOCOLS))
    #: PAT with more than one GPU per node (``NCCL_PAT_ENABLE=1``).
    pat_multi_gpu: Bool = False
    #: Multi-node NVLink: NCCL sees each NVLink block (segment) as one node.
    mnnvl: Bool = False

    @field_validator("protocols")
    @classmethod
    def _protocols(cls, values: list[str]) -> list[str]:
        return [canonical_protocol(v) for v in values]

    def offer(self) -> FabricOffer:
        return FabricOffer(families=frozenset(self.families), protocols=frozenset(self.protocols),
                           pat_multi_gpu=self.pat_multi_gpu)


class Estimate(SpecModel):
    """How ``plan`` prices a step and sizes its time limits (:mod:`ncclbot_sweep.sweep.estimate`).

    A step's calls are priced by NCCL's cost model on the fabric model named here; its
    timeout is ``margin`` times that plus its set-up, and a job's ``--time`` is its set-up
    plus its steps' timeouts.
    """

    #: The simulated fabric whose NCCL tuning table prices every call (``ncclbot-sweep sim tuning-table``):
    #: the one closest to this fabric. Null: the fabric ``environment.NCCLBOT_SIM_FABRIC`` names, else
    #: sim-h100 (``plan`` warns).
    model: str | None = None
    #: Seconds a step spends before its first call, on one node: launch, NCCL's init.
    step_setup_s: Float = Field(20.0, ge=0, le=_DAY_S)
    #: Seconds more per node: NCCL's bootstrap and connection set-up grow with the job.
    step_setup_per_node_s: Float = Field(0.5, ge=0, le=_DAY_S)
    #: Seconds one job spends before its first step (allocation, provenance).
    job_setup_s: Float = Field(60.0, ge=0, le=_DAY_S)
    #: How many times its priced calls a step may take before its timeout: NCCL's model errs both
    #: ways (the analysis measures by how much), and a real fabric's slow arms are slower still.
    margin: Float = Field(1.5, ge=1.0, le=100.0)
    #: Seconds the first NVLS or NVLSTree call of a step stalls while NCCL sets up multicast
    #: buffers (5.7-7.8 s measured on H100; paper section 6.5).
    nvls_setup_s: Float = Field(6.6, ge=0, le=_DAY_S)
    #: The shortest step timeout, in seconds.
    min_step_timeout_s: Int = Field(60, ge=1, le=int(_DAY_S))

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None:
            from ncclbot_sweep.sim import fabric

            fabric(value)  # raises ValueError listing the simulated fabrics
        return value

    def fabric_model(self, environment: dict[str, str]) -> tuple[str, bool]:
        """(the fabric model's name, whether the inventory named it): ``model``, else the simulated
        fabric the environment runs, else sim-h100."""
        from ncclbot_sweep.sim import fabric_names

        if self.model is not None:
            return self.model, True
        simulated = environment.get("NCCLBOT_SIM_FABRIC")
        return (simulated, True) if simulated in fabric_names() else ("sim-h100", False)

    def setup_s(self, nodes: int) -> float:
        """Seconds a step of ``nodes`` nodes spends before its first call."""
        return self.step_setup_s + self.step_setup_per_node_s * nodes

    def step_timeout_s(self, calls_s: float, nodes: int) -> int:
        """A step's timeout: its calls with the margin, plus its set-up, at least ``min_step_timeout_s``."""
        return max(self.min_step_timeout_s, math.ceil(self.margin * calls_s + self.setup_s(nodes)))


class Inventory(SpecModel):
    """One fabric: see the module docstring. ``name`` is the ``fabric`` column in datasets."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    gpus_per_node: Int = Field(ge=1, le=64)
    access: Access = Field(default_factory=Access)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    launcher: Launcher = Field(default_factory=Launcher)
    node_sets: dict[str, NodeSet] = Field(default_factory=lambda: {"default": NodeSet()})
    default_node_set: str = "default"
    #: Fabric environment exported in every job (NIC, RoCE/IB, MNNVL/IMEX variables).
    environment: dict[str, str] = Field(default_factory=dict)
    nccl_tests: NcclTests
    nccl: NcclInstall = Field(default_factory=NcclInstall)
    plugin: Plugin = Field(default_factory=Plugin)
    ncclbot_sweep: SweepTool = Field(default_factory=SweepTool)
    algorithms: Algorithms = Field(default_factory=Algorithms)
    estimate: Estimate = Field(default_factory=Estimate)

    @field_validator("environment", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return env_mapping(value)

    @model_validator(mode="after")
    def _default_set(self) -> Inventory:
        if self.default_node_set not in self.node_sets:
            raise ValueError(f"default_node_set {self.default_node_set!r} is not among node_sets "
                             f"({', '.join(sorted(self.node_sets))})")
        return self

    @property
    def synthetic(self) -> bool:
        """True when the simulator will produce this fabric's data (``nccl_tests.bin_dir: sim``),
        whatever the fabric is called; ingest then finds the simulator's stamp in every output."""
        return self.nccl_tests.bin_dir == SIM_BIN_DIR

    def offer(self) -> FabricOffer:
        return self.algorithms.offer()

    def node_set(self, name: str | None) -> NodeSet:
        key = name or self.default_node_set
        try:
            return self.node_sets[key]
        except KeyError:
            raise InventoryError(f"node set {key!r} is not defined in inventory {self.name!r}",
                                 hint=f"use one of {', '.join(sorted(self.node_sets))}") from None

    def nccl_view(self, nodes: int, node_set: str | None = None) -> tuple[int, int]:
        """(nodes, GPUs per node) as NCCL sees them, for the arm validity rules.

        With MNNVL an NVLink block is one NCCL node, so a 16-node GB200 job inside one block
        has one node of 64 GPUs (which disables NVLSTree and PAT there, as in NCCL).
        """
        segment = self.node_set(node_set).segment(nodes) if self.algorithms.mnnvl else None
        if not segment:
            return nodes, self.gpus_per_node
        return math.ceil(nodes / segment), segment * self.gpus_per_node


def env_mapping(value: Any) -> Any:
    """Check environment variable names and turn numbers and booleans into strings (YAML ``106``)."""
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str) or not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"environment variable names must match [A-Za-z_][A-Za-z0-9_]*, but got {bad}")
        return {k: _env_value(v) for k, v in value.items()}
    return value


def _env_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return str(value)
    return value


_HINT = "fix the field named above; 'ncclbot-sweep inventory check FILE' re-checks it"


def parse_inventory_text(text: str, path: str | Path = "<inventory>") -> Inventory:
    """Validate inventory YAML text; raises InventoryError with file, line, field and allowed values."""
    return parse_spec(text, path, Inventory, InventoryError, what="inventory", hint=_HINT)


def load_inventory(path: str | Path) -> Inventory:
    """Load and validate an inventory file (a path, or a name shipped in ``inventories/``)."""
    path = resolve_inventory_path(Path(path))
    inventory = load_spec(path, Inventory, InventoryError, what="inventory", hint=_HINT)
    log.debug("loaded inventory %s from %s", inventory.name, path)
    return inventory


def shipped_inventories() -> list[tuple[str, Inventory]]:
    """Every inventory shipped with the package, validated, as (name, inventory) sorted by name."""
    from ncclbot_sweep.resources import resource_path, shipped_names

    return [(name, load_inventory(resource_path("inventories", f"{name}.yaml")))
            for name in shipped_names("inventories")]


def resolve_inventory_path(path: Path) -> Path:
    """A path as given if it exists, else the shipped inventory of that name (``sim-h100``)."""
    from ncclbot_sweep.resources import resolve_shipped

    return resolve_shipped("inventories", path, InventoryError)


def describe_inventory(inventory: Inventory, path: str | Path | None = None) -> str:
    """A short human summary of a valid inventory (what ``inventory check`` prints)."""
    sched = inventory.scheduler
    where = inventory.access.host if inventory.access.kind == "ssh" else "this machine"
    offer = inventory.offer()
    lines = [
        f"{path}: valid" if path else f"{inventory.name}: valid",
        f"  fabric       {inventory.name}{' (synthetic)' if inventory.synthetic else ''}"
        + (f" - {inventory.description}" if inventory.description else ""),
        f"  access       {inventory.access.kind} ({where})",
        f"  scheduler    {sched.kind}" + (f", partition {sched.partition}" if sched.partition else "")
        + (f", account {sched.account}" if sched.account else "")
        + f", time limit <= {sched.time_limit_min} min",
        f"  launcher     {inventory.launcher.kind}" + (f" --mpi={inventory.launcher.mpi}" if inventory.launcher.mpi else "")
        + (f", container {inventory.launcher.container.image}" if inventory.launcher.container else ""),
        f"  gpus/node    {inventory.gpus_per_node}",
        "  node sets    " + ", ".join(
            name + (f" (block {ns.block_nodes} nodes)" if ns.block_nodes else "")
            + (" [default]" if name == inventory.default_node_set else "")
            for name, ns in inventory.node_sets.items()),
        f"  algorithms   {', '.join(sorted(offer.families))}; protocols {', '.join(sorted(offer.protocols))}"
        + ("; MNNVL" if inventory.algorithms.mnnvl else ""),
        f"  nccl-tests   {inventory.nccl_tests.bin_dir} (version {inventory.nccl_tests.version}, "
        + ("per-iteration JSON -I/-J" if inventory.nccl_tests.per_iteration_json else "per-iteration cycles -N") + ")",
        "  build        " + ("no MPI: the local executor's srun stand-in starts task 0 with the job's size in the "
                             "Slurm environment, as the simulator's stand-ins expect" if sched.kind == "local"
                             else inventory.launcher.expected_build(inventory.gpus_per_node)),
        f"  nccl         {inventory.nccl.version or 'unknown version'}"
        + (f", plugin {inventory.plugin.path}" if inventory.plugin.path else ", no plugin")
        + (f", coordinator {inventory.plugin.coordinator}" if inventory.plugin.coordinator else ""),
        *([f"  tuning jobs  {' '.join(inventory.ncclbot_sweep.command)} (analyze tune -i)"]
          if sched.kind == "slurm" else []),
        f"  environment  {len(inventory.environment)} variables"
        + (": " + ", ".join(sorted(inventory.environment)) if inventory.environment else ""),
    ]
    return "\n".join(lines)
