"""What a simulated nccl-tests process reads from its environment: the job and the NCCL knobs.

* The job (from Slurm): nodes (``SLURM_NNODES``/``SLURM_JOB_NUM_NODES``), tasks
  (``SLURM_NTASKS``), this task's rank (``SLURM_PROCID``), host names
  (``SLURM_JOB_NODELIST``). Ranks are ``tasks * nthreads * ngpus``; the local executor runs
  only task 0, so nothing here counts processes (a live step's rank processes are counted
  by :mod:`ncclbot_sweep.sim.live`).
* The fabric and seed (``NCCLBOT_SIM_FABRIC``, ``NCCLBOT_SIM_SEED``).
* ``NCCL_ALGO``/``NCCL_PROTO`` in the 2.24+ syntax ``[list][;func:list]*`` with ``^``
  exclusions (``docs/nccl-plugin-abi.md`` section 9), and the debug settings
  ``NCCL_DEBUG``, ``NCCL_DEBUG_SUBSYS``, ``NCCL_DEBUG_FILE``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping

from ncclbot_sweep.names import ALGORITHMS, COLLECTIVES, PROTOCOLS, canonical_algorithm, canonical_collective, canonical_protocol

__all__ = [
    "SUBSYSTEMS",
    "DebugConfig",
    "EnvError",
    "JobLayout",
    "allowed_names",
    "expand_hostlist",
    "job_layout",
    "debug_config",
]


class EnvError(ValueError):
    """An environment value NCCL rejects (``ncclInvalidUsage``); the message is NCCL's WARN text."""


@dataclasses.dataclass(frozen=True)
class JobLayout:
    """Where this process sits in the job."""

    nodes: int
    tasks: int
    procid: int
    hosts: tuple[str, ...]

    def host_of_task(self, task: int) -> str:
        per_node = max(1, -(-self.tasks // self.nodes))
        return self.hosts[min(task // per_node, len(self.hosts) - 1)]

    def local_rank(self, task: int) -> int:
        per_node = max(1, -(-self.tasks // self.nodes))
        return task % per_node


def _int_env(env: Mapping[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            match = re.match(r"\d+", value)  # SLURM_NNODES may read "4" or "4(x2)"
            if match:
                return max(1, int(match.group()))
    return default


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list (``n[1-3,7],gpu-[001-002]``) into host names."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        match = re.fullmatch(r"(.*?)\[([^\]]*)\](.*)", part)
        if not match:
            if part:
                hosts.append(part)
            continue
        prefix, body, suffix = match.groups()
        for item in body.split(","):
            low, _, high = item.partition("-")
            if high and low.isdigit() and high.isdigit():
                width = len(low)
                hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(low), int(high) + 1))
            else:
                hosts.append(f"{prefix}{item}{suffix}")
    return hosts


def job_layout(env: Mapping[str, str], fabric_name: str) -> JobLayout:
    """The job as Slurm describes it; without Slurm, one node and one task."""
    nodes = _int_env(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES", default=1)
    tasks = _int_env(env, "SLURM_NTASKS", "SLURM_NPROCS", default=nodes)
    procid = int(env.get("SLURM_PROCID", "0") or 0)
    hosts = expand_hostlist(env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "")))
    if len(hosts) < nodes:
        if nodes == 1 and not hosts:
            hosts = [socket.gethostname().split(".")[0]]
        else:
            hosts = hosts + [f"{fabric_name}-n{i:03d}" for i in range(len(hosts) + 1, nodes + 1)]
    return JobLayout(nodes=nodes, tasks=tasks, procid=procid, hosts=tuple(hosts[:nodes]))


_FUNC_NAMES = {c.lower(): c for c in COLLECTIVES}


def allowed_names(value: str | None, kind: str, collective: str) -> frozenset[str] | None:
    """The algorithms (``kind='algo'``) or protocols allowed for ``collective``; None = all.

    Parses NCCL 2.24+'s ``[list][;func:list]*``: the entry for the collective wins, else
    the unprefixed one; a list may start with ``^`` to exclude. Raises :class:`EnvError`
    for an unknown token or prefix, as NCCL does.
    """
    if value is None or not value.strip():
        return None
    universe = ALGORITHMS if kind == "algo" else PROTOCOLS
    canon = canonical_algorithm if kind == "algo" else canonical_protocol
    variable = "NCCL_ALGO" if kind == "algo" else "NCCL_PROTO"
    default_entry: str | None = None
    entries: dict[str, str] = {}
    for index, raw in enumerate(value.split(";")):
        entry = raw.strip()
        if not entry:
            continue
        head, colon, rest = entry.partition(":")
        if colon and head.strip().lower() in _FUNC_NAMES:
            entries[_FUNC_NAMES[head.strip().lower()]] = rest
        elif colon:
            raise EnvError(f"Invalid {variable} function prefix '{head}' in '{value}'")
        elif index == 0 or default_entry is None:
            default_entry = entry
        else:
            raise EnvError(f"Only the first entry of {variable} may lack a function prefix: '{value}'")
    chosen = entries.get(canonical_collective(collective), default_entry)
    if chosen is None:
        return None
    text = chosen.strip()
    exclude = text.startswith("^")
    tokens = [t.strip() for t in text.lstrip("^").split(",") if t.strip()]
    names: set[str] = set()
    for token in tokens:
        try:
            names.add(canon(token))
        except ValueError:
            raise EnvError(f"Unrecognized element token \"{token}\" when parsing {variable}=\"{value}\"") from None
    return frozenset(u for u in universe if (u in names) != exclude)


#: NCCL_DEBUG_SUBSYS names; index i is the logger flag bit 1 << i (reference section 2).
SUBSYSTEMS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY", "NVLS",
           "BOOTSTRAP", "REG", "PROFILE", "RAS")


@dataclasses.dataclass(frozen=True)
class DebugConfig:
    """``NCCL_DEBUG*``: the level, the subsystems logged at INFO and where lines go."""

    level: str  # VERSION, WARN, INFO, TRACE or "" (off)
    subsystems: frozenset[str]
    file_path: str | None

    def info(self, subsystem: str) -> bool:
        return self.level in ("INFO", "TRACE") and subsystem in self.subsystems

    @property
    def warn(self) -> bool:
        return self.level in ("WARN", "INFO", "TRACE")

    @property
    def version(self) -> bool:
        return self.level in ("VERSION", "WARN", "INFO", "TRACE")


def debug_config(env: Mapping[str, str], *, host: str, pid: int) -> DebugConfig:
    """Read the debug settings; ``%h``/``%p`` in ``NCCL_DEBUG_FILE`` become host and pid."""
    level = env.get("NCCL_DEBUG", "").strip().upper()
    subsys_text = env.get("NCCL_DEBUG_SUBSYS", "").strip().upper()
    if not subsys_text:
        subsystems = {"INIT", "BOOTSTRAP", "ENV"}
    else:
        exclude = subsys_text.startswith("^")
        tokens = {t.strip() for t in subsys_text.lstrip("^").split(",") if t.strip()}
        if "ALL" in tokens:
            tokens = set(SUBSYSTEMS)
        subsystems = set(SUBSYSTEMS) - tokens if exclude else tokens
    file_path = env.get("NCCL_DEBUG_FILE") or None
    if file_path:
        file_path = file_path.replace("%h", host).replace("%p", str(pid))
    return DebugConfig(level=level, subsystems=frozenset(subsystems), file_path=file_path)


def environ() -> dict[str, str]:
    """A copy of the process environment (one place to read it, for tests to replace)."""
    return dict(os.environ)
