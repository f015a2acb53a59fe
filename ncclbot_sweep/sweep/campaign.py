"""Campaign specs and planning: a YAML spec becomes steps (one nccl-tests process each) in jobs.

A campaign says *what* to measure (kind, collectives, node counts, sizes, arms or policies,
iterations, repeats) and how to spend the machine (per-step timeout, steps per allocation,
node-hour budget). :func:`plan_campaign` expands it against an inventory:

* axes ``collective``, ``nodes``, ``policy``, ``variant`` and ``repeat`` are crossed (a
  matrix) except those grouped in ``zip`` (lists of equal length, walked together);
* forced campaigns add the ``arm`` axis per (collective, nodes): every valid arm, a list,
  or all valid arms minus exclusions; arms the fabric cannot run are pruned with the reason
  from :func:`ncclbot_sweep.names.arm_invalid_reason`;
* ``exclude`` entries drop every step whose axes match all their keys (a list value matches
  any of its items);
* steps with the same node count and node set are packed into jobs of ``packing.steps_per_job``.

Step and job keys are content hashes of canonical JSON, so planning twice gives the same
keys and a resumed campaign never runs a finished step again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ncclbot_sweep import pluginbuild
from ncclbot_sweep.errors import CampaignError, PlanError
from ncclbot_sweep.names import (
    AUTO,
    COLLECTIVE_BINARY,
    COLLECTIVES,
    FAMILIES,
    Arm,
    FabricOffer,
    all_arms,
    arm_invalid_reason,
    canonical_collective,
    human_size,
    parse_size,
)
from ncclbot_sweep.specfile import Bool, Bytes, Float, Int, SpecModel, load_spec, parse_spec
from ncclbot_sweep.stepmeta import MAX_TIMEOUT_S
from ncclbot_sweep.sweep.inventory import Inventory, env_mapping
from ncclbot_sweep.sweep.workload import (
    STATIC,
    WorkloadSpec,
    check_campaign,
    nodes_command,
    workload_plan_lines,
)
from ncclbot_sweep.sweep.workload import describe as describe_workload

__all__ = [
    "AXES",
    "Campaign",
    "Job",
    "Plan",
    "PrunedArmEntry",
    "SizeSpec",
    "Step",
    "content_key",
    "describe_plan",
    "human_size",
    "load_campaign",
    "parse_campaign_text",
    "parse_size",
    "plan_campaign",
    "resolve_campaign_path",
    "shipped_campaigns",
]

log = logging.getLogger(__name__)

#: Axes a campaign expands over (``arm`` only for forced campaigns).
AXES = ("collective", "nodes", "arm", "policy", "variant", "repeat")
Axis = Literal["collective", "nodes", "arm", "policy", "variant", "repeat"]
#: The policy name for "stock NCCL, no plugin loaded".
STOCK = "stock"
#: The most steps one campaign may expand into (a large real sweep has tens of thousands).
MAX_STEPS = 200_000

def content_key(payload: Any) -> str:
    """A stable 16-hex-digit key: SHA-256 of the canonical JSON of ``payload``."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class SizeSpec(SpecModel):
    """Message sizes: ``min``/``max``/``factor`` (nccl-tests ``-b -e -f``) or an explicit ``list``."""

    min: Bytes | str | None = None
    max: Bytes | str | None = None
    factor: Int = Field(2, ge=2)
    list: tuple[Bytes | str, ...] | None = Field(None, max_length=4096)

    @model_validator(mode="after")
    def _shape(self) -> SizeSpec:
        if self.list is not None:
            if self.min is not None or self.max is not None:
                raise ValueError("give either 'list' or 'min'/'max'/'factor', not both")
            if not self.list:
                raise ValueError("'list' must hold at least one size")
            for item in self.list:
                parse_size(item)
        else:
            if self.min is None or self.max is None:
                raise ValueError("sizes need 'min' and 'max' (and optionally 'factor'), or a 'list'")
            lo, hi = parse_size(self.min), parse_size(self.max)
            if lo > hi:
                raise ValueError(f"sizes.min ({lo} B) must not exceed sizes.max ({hi} B)")
        return self

    def values(self) -> tuple[int, ...]:
        """Every size in bytes, in the order nccl-tests runs them."""
        if self.list is not None:
            return tuple(sorted({parse_size(s) for s in self.list}))
        lo, hi = parse_size(self.min), parse_size(self.max)
        out, size = [], lo
        while size <= hi:
            out.append(size)
            size = size * self.factor if size else 1
        return tuple(out)

    def ranges(self) -> list[dict[str, Any]]:
        """The size ranges one step each: one geometric range, or one step per listed size."""
        if self.list is None:
            return [{"min": parse_size(self.min), "max": parse_size(self.max), "factor": self.factor}]
        return [{"min": s, "max": s, "factor": self.factor} for s in self.values()]


class ArmExclusion(SpecModel):
    """Every valid arm except these."""

    exclude: list[str]


class Variant(SpecModel):
    """A named set of extra environment variables (e.g. one rung of the overhead ladder)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    env: dict[str, str] = Field(default_factory=dict)

    _env = field_validator("env", mode="before")(lambda cls, v: env_mapping(v))


class PluginSettings(SpecModel):
    """``NCCLBOT_*`` settings exported for every plugin step (names: ``plugin/README.md``)."""

    env: dict[str, str] = Field(default_factory=dict)

    _env = field_validator("env", mode="before")(lambda cls, v: env_mapping(v))


class Packing(SpecModel):
    """How steps share allocations."""

    steps_per_job: Int = Field(8, ge=1)
    #: Put each repeat in jobs of its own, so repeats measure between-job variation too
    #: (placement, neighbours' traffic), which one job cannot show (paper section 8).
    separate_repeats: Bool = True


class Campaign(SpecModel):
    """One campaign spec; see the module docstring for the expansion rules."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: Literal["forced", "live", "stock", "overhead", "workload"]
    description: str = ""
    collectives: list[str] = Field(default_factory=list)
    nodes: list[Int] = Field(min_length=1)
    node_set: str | None = None
    sizes: SizeSpec | None = None
    arms: Literal["all"] | list[str] | ArmExclusion = "all"
    policies: list[str] = Field(default_factory=list)
    plugin: PluginSettings = Field(default_factory=PluginSettings)
    variants: list[Variant] = Field(default_factory=lambda: [Variant(name="default")])
    #: Untimed iterations before each size; 0 keeps the lazy-connection transient in the measured ones.
    warmup: Int = Field(0, ge=0)
    iterations: Int = Field(100, ge=1)
    repeats: Int = Field(1, ge=1)
    timeout_s: Int = Field(1800, ge=10, le=MAX_TIMEOUT_S)
    #: Forced campaigns: add one step per scenario with NCCL's own choice (policy AUTO, no
    #: forcing, no plugin) in the same jobs, a paired baseline for forced-versus-stock.
    baseline: Bool = False
    packing: Packing = Field(default_factory=Packing)
    budget_node_hours: Float | None = Field(None, gt=0)
    zip: list[list[Axis]] = Field(default_factory=list)
    exclude: list[dict[Axis, Any]] = Field(default_factory=list)
    #: Extra environment for every step (applies to all kinds).
    env: dict[str, str] = Field(default_factory=dict)
    #: nccl-tests data type and reduction (``-d``, ``-o``) and extra flags.
    dtype: str = "float"
    op: str = "sum"
    extra_flags: list[str] = Field(default_factory=list)
    #: Workload campaigns: the user's command and how its step times are read (sweep/workload.py).
    workload: WorkloadSpec | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return env_mapping(value)

    @field_validator("collectives")
    @classmethod
    def _collectives(cls, values: list[str]) -> list[str]:
        if not values:
            raise ValueError("give at least one collective")
        return [canonical_collective(v) for v in values]

    @field_validator("arms")
    @classmethod
    def _arms(cls, value: Any) -> Any:
        names = value if isinstance(value, list) else value.exclude if isinstance(value, ArmExclusion) else []
        for name in names:
            Arm.parse(name)  # raises with the accepted spelling
        return value

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, values: list[int]) -> list[int]:
        if any(v < 1 for v in values):
            raise ValueError(f"node counts must be positive, but got {values}")
        return values

    @field_validator("policies")
    @classmethod
    def _policies(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_.-]*$", value):
                raise ValueError(f"policy names are identifiers like 'ucb1', 'AUTO' or 'stock', but got {value!r}")
        return values

    @model_validator(mode="after")
    def _kind_rules(self) -> Campaign:
        if self.kind == "forced" and self.policies:
            raise ValueError("a forced campaign forces arms; remove 'policies' (or use kind 'live')")
        if self.kind in ("live", "overhead") and not self.policies:
            raise ValueError(f"a {self.kind} campaign needs 'policies' (e.g. [stock, AUTO, ucb1])")
        check_campaign(self.kind, self.model_fields_set, policies=self.policies, spec=self.workload)
        if self.kind != "workload" and (not self.collectives or self.sizes is None):
            raise ValueError(f"a {self.kind} campaign needs 'collectives' and 'sizes'")
        if self.kind != "forced" and (self.arms != "all" or self.baseline):
            raise ValueError("'arms' and 'baseline' apply to forced campaigns only")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be unique, but got {names}")
        seen: set[str] = set()
        for group in self.zip:
            if "arm" in group:
                raise ValueError("'arm' cannot be zipped: arms depend on the collective and node count")
            if seen & set(group):
                raise ValueError(f"an axis may appear in one zip group only, but {sorted(seen & set(group))} repeat")
            seen |= set(group)
            lengths = {axis: self._axis_length(axis) for axis in group}
            if len(set(lengths.values())) > 1:
                raise ValueError(f"zipped axes must have the same length, but got {lengths}")
        return self

    def _axis_length(self, axis: str) -> int:
        """How many values an axis has, without building them (``repeats`` may be huge)."""
        return self.repeats if axis == "repeat" else len(self._axis_values(axis))

    def expansion_bound(self, arms_per_scenario: int) -> int:
        """An upper bound of the step count, computed before any step is built.

        Zipped axes count once per group; forced campaigns multiply by ``arms_per_scenario``
        (plus the baseline step). :func:`plan_campaign` refuses a campaign above MAX_STEPS.
        """
        grouped = {axis for group in self.zip for axis in group}
        bound = math.prod(self._axis_length(group[0]) for group in self.zip if group)
        for axis in ("collective", "nodes", "policy", "variant", "repeat"):
            if axis not in grouped:
                bound *= self._axis_length(axis)
        if self.kind == "forced":
            bound *= arms_per_scenario + (1 if self.baseline else 0)
        return bound * len(_size_ranges(self))

    def _axis_values(self, axis: str) -> list[Any]:
        if axis == "collective":
            return list(self.collectives) or [None]  # a workload campaign has none
        if axis == "nodes":
            return list(self.nodes)
        if axis == "policy":
            return self.effective_policies()
        if axis == "variant":
            return [v.name for v in self.variants]
        if axis == "repeat":
            return list(range(self.repeats))
        raise ValueError(axis)

    def effective_policies(self) -> list[str | None]:
        if self.kind == "forced":
            return [None]
        return list(self.policies) if self.policies else [STOCK]


@dataclasses.dataclass(frozen=True)
class Step:
    """One nccl-tests process: one collective, node count, arm or policy, variant and size range."""

    key: str
    kind: str
    collective: str
    binary: str
    nodes: int
    gpus_per_node: int
    node_set: str
    arm: Arm | None
    policy: str | None
    plugin: bool
    variant: str
    repeat: int
    sizes: dict[str, Any]
    iterations: int
    warmup: int
    timeout_s: int
    dtype: str
    op: str
    env: dict[str, str]
    flags: tuple[str, ...]
    estimate_s: float
    #: A workload step's command as the job runs it (empty for nccl-tests steps).
    command: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def label(self) -> str:
        what = str(self.arm) if self.arm is not None else f"policy {self.policy}"
        extra = "" if self.variant == "default" else f" [{self.variant}]"
        rep = f" #{self.repeat}" if self.repeat else ""
        return f"{self.collective or self.kind} {self.nodes}n {what}{extra}{rep}"


@dataclasses.dataclass(frozen=True)
class Job:
    """One allocation running its steps as ``srun`` steps, one after the other."""

    key: str
    nodes: int
    node_set: str
    steps: tuple[Step, ...]
    time_limit_min: int
    estimate_s: float

    @property
    def node_hours(self) -> float:
        return self.nodes * self.estimate_s / 3600.0


@dataclasses.dataclass(frozen=True)
class PrunedArmEntry:
    """An arm left out of a (collective, nodes) scenario, and why."""

    collective: str
    nodes: int
    arm: str
    reason: str


@dataclasses.dataclass
class Plan:
    """The expanded campaign: jobs of steps, what was pruned or excluded, and the estimate."""

    campaign: Campaign
    inventory: Inventory
    campaign_key: str
    jobs: list[Job]
    pruned: list[PrunedArmEntry]
    excluded: int
    warnings: list[str]

    @property
    def steps(self) -> list[Step]:
        return [s for job in self.jobs for s in job.steps]

    @property
    def node_hours(self) -> float:
        return sum(job.node_hours for job in self.jobs)

    def job_name(self, job_key: str) -> str:
        """A job's readable scheduler name: campaign, collectives and nodes (``demo-AllReduce-4n``).

        For people reading ``squeue``; the job is identified by its tag (in the comment).
        """
        job = next(j for j in self.jobs if j.key == job_key)
        collectives = list(dict.fromkeys(s.collective for s in job.steps))
        what = "+".join(collectives) if len(collectives) <= 3 else f"{len(collectives)}-collectives"
        what = what or self.campaign.kind
        return f"{self.campaign.name}-{what}-{job.nodes}n"

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (what ``plan --json`` prints)."""
        return {
            "campaign": self.campaign.name,
            "campaign_key": self.campaign_key,
            "fabric": self.inventory.name,
            "kind": self.campaign.kind,
            "steps": len(self.steps),
            "jobs": [
                {"job_key": j.key, "nodes": j.nodes, "node_set": j.node_set, "time_limit_min": j.time_limit_min,
                 "estimate_s": round(j.estimate_s, 1), "node_hours": round(j.node_hours, 3),
                 "steps": [{"step_key": s.key, "collective": s.collective, "nodes": s.nodes,
                            "arm": None if s.arm is None else str(s.arm), "policy": s.policy,
                            "variant": s.variant, "repeat": s.repeat, "sizes": s.sizes} for s in j.steps]}
                for j in self.jobs
            ],
            "pruned": [dataclasses.asdict(p) for p in self.pruned],
            "excluded_steps": self.excluded,
            "node_hours": round(self.node_hours, 3),
            "budget_node_hours": self.campaign.budget_node_hours,
            "warnings": list(self.warnings),
            **({"workload": describe_workload(self.campaign.workload)} if self.campaign.workload else {}),
        }


# --------------------------------------------------------------------------- loading


_HINT = "fix the field named above; 'ncclbot-sweep plan FILE --inventory INV' re-checks it"


def parse_campaign_text(text: str, path: str | Path = "<campaign>") -> Campaign:
    """Validate campaign YAML text; raises CampaignError with file, line, field and allowed values."""
    return parse_spec(text, path, Campaign, CampaignError, what="campaign", hint=_HINT)


def load_campaign(path: str | Path) -> Campaign:
    """Load and validate a campaign file (a path, or a name shipped in ``campaigns/``)."""
    path = resolve_campaign_path(Path(path))
    return load_spec(path, Campaign, CampaignError, what="campaign", hint=_HINT)


def shipped_campaigns() -> list[tuple[str, Campaign]]:
    """Every campaign shipped with the package, validated, as (name, campaign) sorted by name."""
    from ncclbot_sweep.resources import resource_path, shipped_names

    return [(name, load_campaign(resource_path("campaigns", f"{name}.yaml")))
            for name in shipped_names("campaigns")]


def resolve_campaign_path(path: Path) -> Path:
    """A path as given if it exists, else the shipped campaign of that name (``demo``)."""
    from ncclbot_sweep.resources import resolve_shipped

    return resolve_shipped("campaigns", path, CampaignError)


# --------------------------------------------------------------------------- expansion


def _combinations(campaign: Campaign) -> Iterator[dict[str, Any]]:
    """Every combination of the non-arm axes: zip groups walked together, the rest crossed."""
    grouped = {axis for group in campaign.zip for axis in group}
    blocks: list[list[dict[str, Any]]] = []
    for group in campaign.zip:
        columns = [campaign._axis_values(axis) for axis in group]
        blocks.append([dict(zip(group, values)) for values in zip(*columns)])
    for axis in ("collective", "nodes", "policy", "variant", "repeat"):
        if axis not in grouped:
            blocks.append([{axis: value} for value in campaign._axis_values(axis)])
    for parts in itertools.product(*blocks):
        combo: dict[str, Any] = {}
        for part in parts:
            combo.update(part)
        yield combo


def _matches(rule: dict[str, Any], values: dict[str, Any]) -> bool:
    for axis, wanted in rule.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        have = values.get(axis)
        canon = [_canon_axis(axis, o) for o in options]
        if _canon_axis(axis, have) not in canon:
            return False
    return True


def _canon_axis(axis: str, value: Any) -> Any:
    if value is None:
        return None
    if axis == "collective":
        return canonical_collective(str(value))
    if axis == "arm":
        return str(value if isinstance(value, Arm) else Arm.parse(str(value)))
    if axis in ("nodes", "repeat"):
        return int(value)
    return str(value)


def _check_exclusions(campaign: Campaign) -> None:
    for i, rule in enumerate(campaign.exclude):
        for axis, wanted in rule.items():
            for option in wanted if isinstance(wanted, list) else [wanted]:
                try:
                    _canon_axis(axis, option)
                except ValueError as exc:
                    raise CampaignError(f"exclude[{i}].{axis}: {exc}") from exc


def _select_arms(campaign: Campaign, inventory: Inventory, collective: str, nodes: int,
                 node_set: str) -> tuple[list[Arm], list[PrunedArmEntry]]:
    """The arms to force for one scenario, and those pruned (invalid here), with reasons."""
    nccl_nodes, nccl_gpus = inventory.nccl_view(nodes, node_set)
    offer = inventory.offer()
    if campaign.arms == "all":
        wanted, excluded = list(all_arms()), set()
    elif isinstance(campaign.arms, ArmExclusion):
        wanted, excluded = list(all_arms()), {Arm.parse(a) for a in campaign.arms.exclude}
    else:
        wanted, excluded = [Arm.parse(a) for a in campaign.arms], set()
    kept: list[Arm] = []
    pruned: list[PrunedArmEntry] = []
    explicit = isinstance(campaign.arms, list)
    for arm in sorted(set(wanted)):
        if arm in excluded:
            continue
        reason = arm_invalid_reason(collective, arm, nodes=nccl_nodes, gpus_per_node=nccl_gpus, offer=offer)
        if reason is None:
            kept.append(arm)
        elif explicit or not _structurally_invalid(collective, arm):
            pruned.append(PrunedArmEntry(collective, nodes, str(arm), reason))
    return kept, pruned


def _structurally_invalid(collective: str, arm: Arm) -> bool:
    """True for arms NCCL never runs for this collective anywhere (not worth listing for 'all')."""
    everything = arm_invalid_reason(collective, arm, nodes=2, gpus_per_node=1,
                                    offer=_FULL_OFFER)
    return everything is not None


_FULL_OFFER = FabricOffer(families=frozenset(FAMILIES), pat_multi_gpu=True)


def _step_env(campaign: Campaign, inventory: Inventory, arm: Arm | None, policy: str | None,
              variant: str) -> tuple[dict[str, str], bool]:
    """The environment that defines a step's measurement, and whether it loads the plugin."""
    env: dict[str, str] = dict(campaign.env)
    plugin = False
    if arm is not None:
        env["NCCL_ALGO"] = arm.algorithm
        env["NCCL_PROTO"] = arm.protocol
    elif policy is not None and policy != STOCK and not (campaign.kind == "forced" and policy == AUTO):
        if not inventory.plugin.path:
            raise PlanError(f"campaign {campaign.name!r} runs policy {policy!r} through the plugin, "
                            f"but inventory {inventory.name!r} has no plugin.path",
                            hint="set plugin.path in the inventory, or use policy 'stock'")
        plugin = True
        library = inventory.plugin.resolved_path()  # 'bundled': built on first use (pluginbuild)
        env["NCCL_TUNER_PLUGIN"] = library
        env["NCCL_PROFILER_PLUGIN"] = library
        env.update(campaign.plugin.env)
        env["NCCLBOT_POLICY"] = policy.lower()  # the plugin's spelling: auto, greedy, ucb1, ...
    variant_env = next(v.env for v in campaign.variants if v.name == variant)
    env.update(variant_env)
    return env, plugin


def _keyed_env(env: dict[str, str], inventory: Inventory) -> dict[str, str]:
    """A step's environment as its key sees it: a ``bundled`` plugin is named so, not by its build's folder.

    That folder depends on the user's cache and the release (:mod:`ncclbot_sweep.pluginbuild`);
    planning the campaign again (``status`` from another shell, ``resume`` after an upgrade)
    must give the same keys, as it does for a plugin path written in the inventory.
    """
    if inventory.plugin.path != pluginbuild.BUNDLED or "NCCL_TUNER_PLUGIN" not in env:
        return env
    library = inventory.plugin.resolved_path()
    return {name: pluginbuild.BUNDLED if value == library else value for name, value in env.items()}


def _step_estimate(inventory: Inventory, campaign: Campaign, sizes: dict[str, Any]) -> float:
    spec = SizeSpec(min=sizes["min"], max=sizes["max"], factor=sizes["factor"])
    per_pass = sum(inventory.estimate.iteration_us(s) for s in spec.values()) / 1e6
    return inventory.estimate.step_overhead_s + per_pass * (campaign.warmup + campaign.iterations)


def _size_ranges(campaign: Campaign) -> list[dict[str, Any] | None]:
    """The size range of each step per combination; one step without sizes for a workload campaign."""
    return campaign.sizes.ranges() if campaign.sizes is not None else [None]


def _make_workload_step(campaign: Campaign, inventory: Inventory, combo: dict[str, Any], node_set: str) -> Step:
    """One run of a workload campaign's command in one environment (``combo["policy"]``)."""
    spec = campaign.workload
    env, plugin = _step_env(campaign, inventory, None, combo["policy"], combo["variant"])
    if combo["policy"].lower() == STATIC:
        env["NCCLBOT_STATIC_TABLE"] = spec.static_table
    command = nodes_command(spec.command, local=inventory.scheduler.kind == "local",
                            tool=list(inventory.ncclbot_sweep.command))
    content = {
        "fabric": inventory.name, "gpus_per_node": inventory.gpus_per_node, "kind": campaign.kind,
        "nodes": combo["nodes"], "node_set": node_set, "policy": combo["policy"], "plugin": plugin,
        "variant": combo["variant"], "repeat": combo["repeat"], "workload": spec.model_dump(mode="json"),
        "timeout_s": campaign.timeout_s, "env": _keyed_env(env, inventory), "fabric_env": inventory.environment,
    }
    return Step(
        key=content_key(content), kind=campaign.kind, collective="", binary=PurePath(command[0]).name,
        nodes=combo["nodes"], gpus_per_node=inventory.gpus_per_node, node_set=node_set, arm=None,
        policy=combo["policy"], plugin=plugin, variant=combo["variant"], repeat=combo["repeat"], sizes=None,
        iterations=0, warmup=spec.warmup_steps, timeout_s=campaign.timeout_s, dtype="", op="", env=env, flags=(),
        estimate_s=spec.run_estimate_s or float(campaign.timeout_s), command=tuple(command),
    )


def _make_step(campaign: Campaign, inventory: Inventory, combo: dict[str, Any], arm: Arm | None,
               sizes: dict[str, Any] | None, node_set: str) -> Step:
    if campaign.kind == "workload":
        return _make_workload_step(campaign, inventory, combo, node_set)
    collective, nodes = combo["collective"], combo["nodes"]
    if campaign.kind == "forced" and arm is None:
        combo = dict(combo, policy=AUTO)  # the baseline step of a forced campaign: no forcing, no plugin
    env, plugin = _step_env(campaign, inventory, arm, combo["policy"], combo["variant"])
    binary = COLLECTIVE_BINARY[collective]
    flags = tuple(inventory.nccl_tests.extra_flags) + tuple(campaign.extra_flags)
    content = {
        "fabric": inventory.name, "gpus_per_node": inventory.gpus_per_node, "kind": campaign.kind,
        "collective": collective, "binary": binary, "nodes": nodes, "node_set": node_set,
        "arm": None if arm is None else str(arm), "policy": combo["policy"], "plugin": plugin,
        "variant": combo["variant"], "repeat": combo["repeat"], "sizes": sizes,
        "iterations": campaign.iterations, "warmup": campaign.warmup, "timeout_s": campaign.timeout_s,
        "dtype": campaign.dtype, "op": campaign.op, "env": _keyed_env(env, inventory), "flags": list(flags),
        "fabric_env": inventory.environment, "nccl_tests_version": inventory.nccl_tests.version,
    }
    return Step(
        key=content_key(content), kind=campaign.kind, collective=collective, binary=binary, nodes=nodes,
        gpus_per_node=inventory.gpus_per_node, node_set=node_set, arm=arm,
        policy=(None if arm is not None else combo["policy"]), plugin=plugin, variant=combo["variant"],
        repeat=combo["repeat"], sizes=sizes, iterations=campaign.iterations, warmup=campaign.warmup,
        timeout_s=campaign.timeout_s, dtype=campaign.dtype, op=campaign.op, env=env, flags=flags,
        estimate_s=_step_estimate(inventory, campaign, sizes),
    )


def _expand_steps(campaign: Campaign, inventory: Inventory) -> tuple[list[Step], list[PrunedArmEntry], int]:
    node_set = campaign.node_set or inventory.default_node_set
    inventory.node_set(node_set)  # raises with the valid names
    steps: list[Step] = []
    pruned: dict[tuple[str, int, str], PrunedArmEntry] = {}
    excluded = 0
    for combo in _combinations(campaign):
        collective, nodes = combo["collective"], combo["nodes"]
        if campaign.kind == "forced":
            if collective not in COLLECTIVES:
                raise PlanError(f"{collective} has no algorithm/protocol arms to force",
                                hint=f"force arms of {', '.join(COLLECTIVES)}, or use kind 'stock'")
            arms, dropped = _select_arms(campaign, inventory, collective, nodes, node_set)
            for entry in dropped:
                pruned[(entry.collective, entry.nodes, entry.arm)] = entry
            if campaign.baseline:
                arms = [None, *arms]  # NCCL's own choice, in the same job as the forced arms
        else:
            arms = [None]
        for arm in arms:
            values = dict(combo, arm=arm)
            if any(_matches(rule, values) for rule in campaign.exclude):
                excluded += len(_size_ranges(campaign))
                continue
            for sizes in _size_ranges(campaign):
                steps.append(_make_step(campaign, inventory, combo, arm, sizes, node_set))
    order = {c: i for i, c in enumerate(COLLECTIVES)}
    steps.sort(key=lambda s: (s.nodes, order.get(s.collective, 99), s.arm.index if s.arm else -1,
                              s.repeat, (s.sizes or {}).get("min", 0)))
    return steps, sorted(pruned.values(), key=lambda p: (p.nodes, p.collective, p.arm)), excluded


def _pack(steps: Sequence[Step], campaign: Campaign, inventory: Inventory) -> tuple[list[Job], list[str]]:
    """Pack steps with the same allocation shape into jobs of at most ``steps_per_job`` steps."""
    jobs: list[Job] = []
    warnings: list[str] = []
    groups: dict[tuple[int, str, int], list[Step]] = {}
    for step in steps:
        repeat = step.repeat if campaign.packing.separate_repeats else 0
        groups.setdefault((step.nodes, step.node_set, repeat), []).append(step)
    sched = inventory.scheduler
    for (nodes, node_set, _), members in groups.items():
        for start in range(0, len(members), campaign.packing.steps_per_job):
            chunk = tuple(members[start:start + campaign.packing.steps_per_job])
            estimate = inventory.estimate.job_overhead_s + sum(s.estimate_s for s in chunk)
            wanted = math.ceil(1.5 * estimate / 60) + 5
            limit = max(sched.min_time_limit_min, min(wanted, sched.time_limit_min))
            if wanted > sched.time_limit_min:
                warnings.append(f"a {nodes}-node job of {len(chunk)} steps is estimated at {estimate / 60:.0f} min, "
                                f"above the {sched.time_limit_min} min limit: lower packing.steps_per_job")
            # The key is what the job runs, not how long it may take: a new time limit is the same job.
            key = content_key({"fabric": inventory.name, "nodes": nodes, "node_set": node_set,
                               "steps": [s.key for s in chunk]})
            jobs.append(Job(key=key, nodes=nodes, node_set=node_set, steps=chunk, time_limit_min=limit,
                            estimate_s=estimate))
    return jobs, warnings


def plan_campaign(campaign: Campaign, inventory: Inventory, *, enforce_budget: bool = True) -> Plan:
    """Expand ``campaign`` on ``inventory`` into jobs of steps, with pruned arms and the estimate.

    Called by ``plan``, ``render`` and ``submit``; pure (no files written). Raises PlanError
    when nothing is left to run, when a step's key repeats (identical steps), or when the
    estimate exceeds ``budget_node_hours`` (unless ``enforce_budget`` is False).
    """
    _check_exclusions(campaign)
    bound = campaign.expansion_bound(len(all_arms()))
    if bound > MAX_STEPS:
        raise PlanError(f"campaign {campaign.name!r} would expand into up to {bound:,} steps, more than "
                        f"{MAX_STEPS:,}", hint="lower repeats, or split the sizes, node counts or collectives "
                        "into several campaigns")
    steps, pruned, excluded = _expand_steps(campaign, inventory)
    if not steps:
        raise PlanError(f"campaign {campaign.name!r} has no step to run on {inventory.name!r}",
                        hint="every arm was pruned or excluded; see 'ncclbot-sweep plan' for the reasons")
    seen: set[str] = set()
    for step in steps:
        if step.key in seen:
            raise PlanError(f"two steps are identical ({step.label}); "
                            "repeat them with 'repeats' or give zipped variants different settings")
        seen.add(step.key)
    jobs, warnings = _pack(steps, campaign, inventory)
    plan = Plan(campaign=campaign, inventory=inventory,
                campaign_key=content_key({"campaign": campaign.name, "fabric": inventory.name}),
                jobs=jobs, pruned=pruned, excluded=excluded, warnings=warnings)
    budget = campaign.budget_node_hours
    if enforce_budget and budget is not None and plan.node_hours > budget:
        raise PlanError(f"campaign {campaign.name!r} is estimated at {plan.node_hours:.1f} node-hours, "
                        f"over its budget of {budget:g}",
                        hint="drop sizes, arms or node counts, or raise budget_node_hours")
    log.info("planned %s on %s: %d steps in %d jobs, %.1f node-hours", campaign.name, inventory.name,
             len(steps), len(jobs), plan.node_hours)
    return plan


def iter_scenarios(plan: Plan) -> Iterable[tuple[str, int, list[Step]]]:
    """(collective, nodes, steps) per scenario, in plan order (for the plan table)."""
    groups: dict[tuple[str, int], list[Step]] = {}
    for step in plan.steps:
        groups.setdefault((step.collective, step.nodes), []).append(step)
    for (collective, nodes), members in groups.items():
        yield collective, nodes, members


def describe_plan(plan: Plan) -> str:
    """The plan as text: scenarios with their arms or policies, pruned arms, jobs and the estimate."""
    c, inv = plan.campaign, plan.inventory
    lines = [f"campaign {c.name} ({c.kind}) on {inv.name}: campaign key {plan.campaign_key}"]
    if c.workload is not None:
        lines += workload_plan_lines(c.workload, [(s.nodes, s.repeat, s.policy) for s in plan.steps],
                                     timeout_s=c.timeout_s, steps=plan.steps[0].command)
    else:
        sizes = c.sizes.values()
        lines += [f"  sizes: {len(sizes)} from {human_size(sizes[0])} to {human_size(sizes[-1])}; warm-up {c.warmup}, "
                  f"iterations {c.iterations}, repeats {c.repeats}, step timeout {c.timeout_s} s", "", "scenarios:"]
    for collective, nodes, steps in iter_scenarios(plan) if c.workload is None else ():
        what = sorted({str(s.arm) if s.arm else f"{s.policy}" + ("" if s.variant == "default" else f"[{s.variant}]")
                       for s in steps})
        lines.append(f"  {collective:<14}{nodes:>4} nodes {len(steps):>4} steps  {', '.join(what)}")
    if plan.pruned:
        lines += ["", "pruned arms:"]
        reasons: dict[tuple[str, str], list[int]] = {}
        for p in plan.pruned:
            reasons.setdefault((f"{p.collective} {p.arm}", p.reason), []).append(p.nodes)
        for (what, reason), nodes in reasons.items():
            lines.append(f"  {what:<36} at {','.join(map(str, nodes))} nodes: {reason}")
    if plan.excluded:
        lines += ["", f"excluded by the campaign: {plan.excluded} steps"]
    lines += ["", "jobs:"]
    for job in plan.jobs:
        lines.append(f"  {job.key}  {job.nodes:>3} nodes  {len(job.steps):>3} steps  "
                     f"~{job.estimate_s / 60:.1f} min (limit {job.time_limit_min} min)  {job.node_hours:.2f} node-h")
    budget = f" of a {c.budget_node_hours:g} budget" if c.budget_node_hours else ""
    lines += ["", f"total: {len(plan.steps)} steps in {len(plan.jobs)} jobs, ~{plan.node_hours:.1f} node-hours{budget}"]
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
