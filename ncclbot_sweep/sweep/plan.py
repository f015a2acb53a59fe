"""A planned campaign: its steps (one nccl-tests process, or one run of a workload, each), its jobs
(one allocation each) and their keys.

What :func:`ncclbot_sweep.sweep.campaign.plan_campaign` returns and ``render``, the campaign
folder and the runner read. Step and job keys are content hashes of canonical JSON
(:func:`content_key`), so planning twice gives the same keys and a resumed campaign never runs
a finished step again; a job's key names its steps, not how long it may take.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ncclbot_sweep.names import Arm, human_size, learning_policy
from ncclbot_sweep.sweep.workload import describe as describe_workload
from ncclbot_sweep.sweep.workload import workload_plan_lines

if TYPE_CHECKING:
    from ncclbot_sweep.sweep.campaign import Campaign
    from ncclbot_sweep.sweep.inventory import Inventory

__all__ = ["Job", "Plan", "PrunedArmEntry", "Step", "content_key", "describe_plan", "iter_scenarios"]


def content_key(payload: Any) -> str:
    """A stable 16-hex-digit key: SHA-256 of the canonical JSON of ``payload``."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Step:
    """One nccl-tests process: one collective, node count, arm or policy, variant and size range;
    or one run of a workload campaign's command (no collective, sizes or nccl-tests arguments)."""

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
    sizes: dict[str, Any] | None
    iterations: int
    warmup: int
    timeout_s: int
    dtype: str
    op: str
    env: dict[str, str]
    flags: tuple[str, ...]
    #: The nccl-tests arguments after the binary (``-J`` and its file added by the job script).
    args: tuple[str, ...]
    #: Seconds its calls take by the estimate, and seconds before its first call (a workload run:
    #: its expected wall time, set-up included).
    estimate_s: float
    setup_s: float
    #: A workload step's command as the job runs it (empty for nccl-tests steps).
    command: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def learns(self) -> bool:
        """True when its plugin is to learn (not AUTO's timing, not stock)."""
        return learning_policy(self.policy, plugin=self.plugin)

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
    #: Seconds its steps' calls take by the estimate, and seconds of set-up (the job's and its steps').
    estimate_s: float
    setup_s: float

    @property
    def node_hours(self) -> float:
        return self.nodes * (self.estimate_s + self.setup_s) / 3600.0


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
    #: What priced the calls: the fabric model, and the dataset when measured times were given.
    priced_by: str = ""

    @property
    def steps(self) -> list[Step]:
        return [s for job in self.jobs for s in job.steps]

    @property
    def node_hours(self) -> float:
        return sum(job.node_hours for job in self.jobs)

    @property
    def estimate_s(self) -> float:
        """Seconds of calls over every job, set-up apart."""
        return sum(job.estimate_s for job in self.jobs)

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
            "priced_by": self.priced_by,
            "jobs": [
                {"job_key": j.key, "nodes": j.nodes, "node_set": j.node_set, "time_limit_min": j.time_limit_min,
                 "estimate_s": round(j.estimate_s, 1), "setup_s": round(j.setup_s, 1),
                 "node_hours": round(j.node_hours, 3),
                 "steps": [{"step_key": s.key, "collective": s.collective, "nodes": s.nodes,
                            "arm": None if s.arm is None else str(s.arm), "policy": s.policy,
                            "variant": s.variant, "repeat": s.repeat, "sizes": s.sizes,
                            "estimate_s": round(s.estimate_s, 1), "timeout_s": s.timeout_s} for s in j.steps]}
                for j in self.jobs
            ],
            "estimate_s": round(self.estimate_s, 1),
            "pruned": [dataclasses.asdict(p) for p in self.pruned],
            "excluded_steps": self.excluded,
            "node_hours": round(self.node_hours, 3),
            "budget_node_hours": self.campaign.budget_node_hours,
            "warnings": list(self.warnings),
            **({"workload": describe_workload(self.campaign.workload)} if self.campaign.workload else {}),
        }


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
        lines += workload_plan_lines(c.workload, [(s.nodes, s.repeat, s.policy, s.estimate_s, s.timeout_s)
                                                  for s in plan.steps], steps=plan.steps[0].command)
        lines.append(f"  runs estimated by {plan.priced_by}; limits allow {inv.estimate.margin:g}x the estimate "
                     "plus set-up, at most each run's timeout")
    else:
        sizes = c.sizes.values()
        timeout = f"step timeout {c.timeout_s} s" if c.timeout_s else "step timeouts from the estimate"
        lines += [f"  sizes: {len(sizes)} from {human_size(sizes[0])} to {human_size(sizes[-1])}; warm-up {c.warmup}, "
                  f"iterations {c.iterations}, repeats {c.repeats}, {timeout}",
                  f"  calls priced by {plan.priced_by}; limits allow {inv.estimate.margin:g}x the calls plus set-up",
                  "", "scenarios:"]
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
        lines.append(f"  {job.key}  {job.nodes:>3} nodes  {len(job.steps):>3} steps  ~{job.estimate_s / 60:.1f} min "
                     f"+ {job.setup_s / 60:.1f} min set-up (limit {job.time_limit_min} min)  {job.node_hours:.2f} node-h")
    budget = f" of a {c.budget_node_hours:g} budget" if c.budget_node_hours else ""
    spent = "runs" if c.workload is not None else "calls"
    lines += ["", f"total: {len(plan.steps)} steps in {len(plan.jobs)} jobs, ~{plan.estimate_s / 3600:.1f} h of "
                  f"{spent}, ~{plan.node_hours:.1f} node-hours{budget}"]
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
