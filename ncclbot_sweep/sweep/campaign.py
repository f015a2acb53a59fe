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
* every call a step makes is priced (:mod:`ncclbot_sweep.sweep.estimate`), and steps with the
  same node count and node set are packed into jobs as long as their steps need and no longer
  than the partition allows (:mod:`ncclbot_sweep.sweep.packing`; a step that cannot fit any
  job is refused, naming the partition's limit); a ``workload`` campaign's steps are runs of the
  user's command (:mod:`ncclbot_sweep.sweep.workload`), one per environment and repetition,
  each estimated at ``workload.run_estimate_s`` (else up to its timeout).

The result is a :class:`~ncclbot_sweep.sweep.plan.Plan`, whose step and job keys are content
hashes, so planning twice gives the same keys and a resumed campaign never runs a finished
step again.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import re
from collections.abc import Iterator
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
    STATIC,
    STOCK,
    Arm,
    FabricOffer,
    all_arms,
    arm_invalid_reason,
    canonical_collective,
    human_size,
    learning_policy,
    parse_size,
)
from ncclbot_sweep.specfile import BYTES_MAX, Bool, Bytes, Float, Int, SpecModel, load_spec, parse_spec
from ncclbot_sweep.stepmeta import MAX_TIMEOUT_S
from ncclbot_sweep.sweep.estimate import CallCounts, Measured, MeasuredTimes, StepCalls, call_counts, calls_seconds
from ncclbot_sweep.sweep.inventory import GPUS_PER_PROCESS, Inventory, env_mapping
from ncclbot_sweep.sweep.packing import pack
from ncclbot_sweep.sweep.plan import Job, Plan, PrunedArmEntry, Step, content_key, describe_plan
from ncclbot_sweep.sweep.workload import DEFAULT_RUN_TIMEOUT_S, WorkloadSpec, check_campaign, nodes_command

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
#: The most steps one campaign may expand into (a large real sweep has tens of thousands).
MAX_STEPS = 200_000

def _size_in_range(value: int | str) -> int:
    """Bytes of one campaign size; raises ValueError (pydantic names the file and line) beyond int64."""
    size = parse_size(value)
    if size > BYTES_MAX:
        raise ValueError(f"{value!r} is {size:,} bytes, more than the largest size nccl-tests and the dataset "
                         f"hold (2**63-1 bytes, {BYTES_MAX >> 40:,} TiB): give a size such as '16GiB' "
                         "(a sweep stops at what fits in GPU memory)")
    return size


class SizeSpec(SpecModel):
    """Message sizes: ``min``/``max``/``factor`` (nccl-tests ``-b -e -f``) or an explicit ``list``."""

    min: Bytes | str | None = None
    max: Bytes | str | None = None
    factor: Int = Field(2, ge=2)
    list: tuple[Bytes | str, ...] | None = Field(None, max_length=4096)

    @field_validator("min", "max")
    @classmethod
    def _bound(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            _size_in_range(value)
        return value

    @field_validator("list")
    @classmethod
    def _items(cls, values: tuple[int | str, ...] | None) -> tuple[int | str, ...] | None:
        for item in values or ():
            _size_in_range(item)
        return values

    @model_validator(mode="after")
    def _shape(self) -> SizeSpec:
        if self.list is not None:
            if self.min is not None or self.max is not None:
                raise ValueError("give either 'list' or 'min'/'max'/'factor', not both")
            if not self.list:
                raise ValueError("'list' must hold at least one size")
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
    #: The longest ``--time`` a job may ask for, in minutes (shorter jobs start sooner in a busy
    #: queue); null: the inventory's ``scheduler.time_limit_min``, the partition's limit.
    max_job_minutes: Int | None = Field(None, ge=1)
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
    #: Every step's timeout, in seconds; null: each step's own, from its estimate (the inventory's
    #: ``estimate.margin`` times its priced calls, plus its set-up; a workload run's from
    #: ``workload.run_estimate_s`` alike, else :data:`~ncclbot_sweep.sweep.workload.DEFAULT_RUN_TIMEOUT_S`).
    timeout_s: Int | None = Field(None, ge=10, le=MAX_TIMEOUT_S)
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


@dataclasses.dataclass(frozen=True)
class _Pricing:
    """What prices a plan's calls: the fabric model, and measured times where a dataset has them."""

    model: str
    measured: MeasuredTimes | None = None


def _test_args(campaign: Campaign, inventory: Inventory, sizes: dict[str, Any],
               flags: tuple[str, ...]) -> tuple[str, ...]:
    """nccl-tests arguments of one step (the per-iteration flags depend on the version)."""
    args = ["-b", str(sizes["min"]), "-e", str(sizes["max"]), "-f", str(sizes["factor"]), "-g", str(GPUS_PER_PROCESS),
            "-d", campaign.dtype, "-o", campaign.op, "-w", str(campaign.warmup)]
    if inventory.nccl_tests.per_iteration_json:
        args += ["-n", str(campaign.iterations), "-I", "1"]
    else:
        args += ["-n", "1", "-N", str(campaign.iterations)]
    return (*args, *flags)


def _counts(args: tuple[str, ...], extra: int, warnings: list[str]) -> CallCounts:
    """The calls of a step's command line; extra flags nccl-tests 2.19 does not know are left out (with a warning)."""
    try:
        return call_counts(args)
    except ValueError as exc:
        if not extra:
            raise  # the arguments plan writes itself: a bug, not the user's
        note = (f"the estimate leaves out nccl-tests flags it does not know ({' '.join(args[len(args) - extra:])}: "
                f"{exc}); check the step timeouts")
        if note not in warnings:
            warnings.append(note)
        return call_counts(args[:len(args) - extra])


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
    # Without run_estimate_s a run is budgeted up to its timeout; the run's expected wall time
    # covers its launch and NCCL's set-up, so no set-up is added on top.
    timeout = campaign.timeout_s or (inventory.estimate.step_timeout_s(spec.run_estimate_s, combo["nodes"])
                                     if spec.run_estimate_s else DEFAULT_RUN_TIMEOUT_S)
    estimate = spec.run_estimate_s or float(timeout)
    return Step(
        key=content_key(content), kind=campaign.kind, collective="", binary=PurePath(command[0]).name,
        nodes=combo["nodes"], gpus_per_node=inventory.gpus_per_node, node_set=node_set, arm=None,
        policy=combo["policy"], plugin=plugin, variant=combo["variant"], repeat=combo["repeat"], sizes=None,
        iterations=0, warmup=spec.warmup_steps, timeout_s=timeout, dtype="", op="", env=env, flags=(), args=(),
        estimate_s=estimate, setup_s=0.0, command=tuple(command),
    )


def _make_step(campaign: Campaign, inventory: Inventory, combo: dict[str, Any], arm: Arm | None,
               sizes: dict[str, Any] | None, node_set: str, *, pricing: _Pricing, warnings: list[str]) -> Step:
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
    args = _test_args(campaign, inventory, sizes, flags)
    calls = StepCalls(collective=collective, nodes=nodes, ranks=nodes * inventory.gpus_per_node, arm=arm,
                      learner=learning_policy(combo["policy"], plugin=plugin), env={**inventory.environment, **env},
                      counts=_counts(args, len(flags), warnings))
    estimate = calls_seconds(calls, model=pricing.model, nvls_setup_s=inventory.estimate.nvls_setup_s,
                             measured=pricing.measured)
    timeout = campaign.timeout_s or inventory.estimate.step_timeout_s(estimate, nodes)
    return Step(
        key=content_key(content), kind=campaign.kind, collective=collective, binary=binary, nodes=nodes,
        gpus_per_node=inventory.gpus_per_node, node_set=node_set, arm=arm,
        policy=(None if arm is not None else combo["policy"]), plugin=plugin, variant=combo["variant"],
        repeat=combo["repeat"], sizes=sizes, iterations=campaign.iterations, warmup=campaign.warmup,
        timeout_s=timeout, dtype=campaign.dtype, op=campaign.op, env=env, flags=flags, args=args,
        estimate_s=estimate, setup_s=inventory.estimate.setup_s(nodes),
    )


def _expand_steps(campaign: Campaign, inventory: Inventory, *, pricing: _Pricing,
                  warnings: list[str]) -> tuple[list[Step], list[PrunedArmEntry], int]:
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
                steps.append(_make_step(campaign, inventory, combo, arm, sizes, node_set, pricing=pricing,
                                        warnings=warnings))
    order = {c: i for i, c in enumerate(COLLECTIVES)}
    steps.sort(key=lambda s: (s.nodes, order.get(s.collective, 99), s.arm.index if s.arm else -1,
                              s.repeat, (s.sizes or {}).get("min", 0)))
    return steps, sorted(pruned.values(), key=lambda p: (p.nodes, p.collective, p.arm)), excluded


def plan_campaign(campaign: Campaign, inventory: Inventory, *, enforce_budget: bool = True,
                  measured: Measured | None = None) -> Plan:
    """Expand ``campaign`` on ``inventory`` into jobs of steps, with pruned arms and the estimate.

    Called by ``plan``, ``render`` and ``submit``; pure (no files written). ``measured`` prices
    the sizes an earlier campaign measured on this fabric. Raises PlanError when nothing is left
    to run, when a step's key repeats (identical steps), when a step needs more than the
    partition's limit, or when the estimate exceeds ``budget_node_hours`` (unless
    ``enforce_budget`` is False).
    """
    _check_exclusions(campaign)
    bound = campaign.expansion_bound(len(all_arms()))
    if bound > MAX_STEPS:
        raise PlanError(f"campaign {campaign.name!r} would expand into up to {bound:,} steps, more than "
                        f"{MAX_STEPS:,}", hint="lower repeats, or split the sizes, node counts or collectives "
                        "into several campaigns")
    workload = campaign.workload
    if workload is not None and measured is not None:
        raise PlanError(f"campaign {campaign.name!r} runs a workload: its runs make no nccl-tests calls to price with "
                        f"the times measured in {measured.source}",
                        hint="leave out --from-dataset; workload.run_estimate_s gives a run's expected wall time")
    model, named = inventory.estimate.fabric_model(inventory.environment)
    warnings = [] if named or workload is not None else [  # a workload's runs are not priced by the model
        f"inventory {inventory.name!r} names no estimate.model: the calls are priced with {model}'s cost model; "
        "name the simulated fabric closest to this one"]
    pricing = _Pricing(model=model, measured=measured.times if measured else None)
    steps, pruned, excluded = _expand_steps(campaign, inventory, pricing=pricing, warnings=warnings)
    if not steps:
        raise PlanError(f"campaign {campaign.name!r} has no step to run on {inventory.name!r}",
                        hint="every arm was pruned or excluded; see 'ncclbot-sweep plan' for the reasons")
    seen: set[str] = set()
    for step in steps:
        if step.key in seen:
            raise PlanError(f"two steps are identical ({step.label}); "
                            "repeat them with 'repeats' or give zipped variants different settings")
        seen.add(step.key)
    short = [s for s in steps if campaign.timeout_s and s.estimate_s + s.setup_s > campaign.timeout_s]
    if short:
        worst = max(short, key=lambda s: s.estimate_s)
        warnings.append(f"{len(short)} step(s) may need more than the campaign's timeout_s ({campaign.timeout_s} s): "
                        f"{worst.label} is estimated at " + (
                            f"{worst.estimate_s:.0f} s a run (workload.run_estimate_s)" if workload is not None else
                            f"{worst.estimate_s:.0f} s of calls and {worst.setup_s:.0f} s of set-up")
                        + "; leave timeout_s out to size each step's timeout from its estimate")
    jobs, packing_notes = pack(steps, campaign.packing, inventory)
    if workload is not None:
        priced_by = (f"workload.run_estimate_s ({workload.run_estimate_s:g} s a run)" if workload.run_estimate_s
                     else "the runs' timeouts (no workload.run_estimate_s)")
    else:
        priced_by = f"NCCL's cost model of {model}" + (f", and times measured in {measured.source}" if measured else "")
    plan = Plan(campaign=campaign, inventory=inventory,
                campaign_key=content_key({"campaign": campaign.name, "fabric": inventory.name}),
                jobs=jobs, pruned=pruned, excluded=excluded, warnings=warnings + packing_notes, priced_by=priced_by)
    budget = campaign.budget_node_hours
    if enforce_budget and budget is not None and plan.node_hours > budget:
        raise PlanError(f"campaign {campaign.name!r} is estimated at {plan.node_hours:.1f} node-hours, "
                        f"over its budget of {budget:g}",
                        hint="drop sizes, arms or node counts, or raise budget_node_hours")
    log.info("planned %s on %s: %d steps in %d jobs, %.1f node-hours", campaign.name, inventory.name,
             len(steps), len(jobs), plan.node_hours)
    return plan
