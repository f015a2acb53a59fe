"""Steps into jobs: as few allocations as the partition's limit allows, each as long as its steps need.

A job's ``--time`` is its set-up plus, per step, the step's priced calls times the
inventory's ``estimate.margin`` plus the step's set-up (within its timeout). Steps of one
allocation shape (node count, node set, repeat) are cut in plan order into at most
``packing.steps_per_job`` steps per job, spread evenly over the jobs needed; a step that needs
more than the partition allows even alone is refused, naming the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ncclbot_sweep.errors import PlanError
from ncclbot_sweep.sweep.inventory import Inventory
from ncclbot_sweep.sweep.plan import Job, Step, content_key

if TYPE_CHECKING:
    from ncclbot_sweep.sweep.campaign import Packing

__all__ = ["pack"]


def _allowance_s(step: Step, inventory: Inventory) -> float:
    """The seconds a job allows one of its steps: its calls with the margin and its set-up, within its timeout."""
    return min(step.timeout_s, inventory.estimate.step_timeout_s(step.estimate_s, step.nodes))


def _limit_min(steps: Sequence[Step], inventory: Inventory) -> int:
    """A job's ``--time`` in minutes: its set-up and every step's allowance, at least the scheduler's minimum."""
    seconds = inventory.estimate.job_setup_s + sum(_allowance_s(s, inventory) for s in steps)
    return max(inventory.scheduler.min_time_limit_min, math.ceil(seconds / 60))


def _make_job(chunk: Sequence[Step], inventory: Inventory) -> Job:
    nodes, node_set = chunk[0].nodes, chunk[0].node_set
    # The key is what the job runs, not how long it may take: a new time limit is the same job.
    key = content_key({"fabric": inventory.name, "nodes": nodes, "node_set": node_set,
                       "steps": [s.key for s in chunk]})
    return Job(key=key, nodes=nodes, node_set=node_set, steps=tuple(chunk), time_limit_min=_limit_min(chunk, inventory),
               estimate_s=sum(s.estimate_s for s in chunk),
               setup_s=inventory.estimate.job_setup_s + sum(s.setup_s for s in chunk))


def pack(steps: Sequence[Step], packing: Packing, inventory: Inventory) -> tuple[list[Job], list[str]]:
    """Pack steps with the same allocation shape into jobs, in plan order.

    A job takes at most ``steps_per_job`` steps and ends before the step that would take its
    limit past ``packing.max_job_minutes`` (default: the partition's limit). A step that needs
    more than the partition allows, even alone, is refused (PlanError naming the limit).
    """
    sched = inventory.scheduler
    cap = min(packing.max_job_minutes or sched.time_limit_min, sched.time_limit_min)
    groups: dict[tuple[int, str, int], list[Step]] = {}
    for step in steps:
        repeat = step.repeat if packing.separate_repeats else 0
        groups.setdefault((step.nodes, step.node_set, repeat), []).append(step)
    jobs: list[Job] = []
    warnings: list[str] = []
    too_long = [s for s in steps if _limit_min([s], inventory) > sched.time_limit_min]
    if too_long:
        raise _cannot_fit(too_long, inventory)
    for members in groups.values():
        jobs += [_make_job(chunk, inventory) for chunk in _chunks(members, packing.steps_per_job, cap, inventory)]
    for job in jobs:
        if job.time_limit_min > cap:
            warnings.append(f"{job.steps[0].label} needs {job.time_limit_min} min alone, above packing.max_job_minutes "
                            f"({cap}); it runs in a job of its own")
    return jobs, warnings


def _chunks(members: Sequence[Step], most: int, cap: int, inventory: Inventory) -> list[list[Step]]:
    """Consecutive chunks of at most ``most`` steps whose limits stay within ``cap`` minutes, as even as that allows.

    Greedy filling finds how many jobs are needed; the steps are then spread evenly over that
    many (13 steps of at most 4 make 4+3+3+3, not 4+4+4+1 with a short last job), unless an
    even chunk would outgrow ``cap``.
    """
    greedy: list[list[Step]] = [[]]
    for step in members:
        chunk = greedy[-1]
        if chunk and (len(chunk) == most or _limit_min([*chunk, step], inventory) > cap):
            greedy.append([])
        greedy[-1].append(step)
    count, extra = divmod(len(members), len(greedy))
    even, start = [], 0
    for index in range(len(greedy)):
        end = start + count + (index < extra)
        even.append(list(members[start:end]))
        start = end
    fits = all(len(chunk) == 1 or _limit_min(chunk, inventory) <= cap for chunk in even)
    return even if fits else greedy


def _cannot_fit(steps: Sequence[Step], inventory: Inventory) -> PlanError:
    """The error for steps that no job of the partition can hold: the first few, with what they need."""
    sched, est = inventory.scheduler, inventory.estimate
    where = f"partition {sched.partition}" if sched.partition else f"inventory {inventory.name}"
    lines = [f"  {s.label}: {_needs(s, inventory)} + {est.job_setup_s:.0f} s job set-up = "
             f"{_limit_min([s], inventory)} min" for s in steps[:5]]
    more = [f"  ... and {len(steps) - 5} more"] if len(steps) > 5 else []
    if steps[0].command:  # a workload campaign's runs: the user's command, no sizes
        hint = ("shorten the runs (fewer training steps in the command), give workload.run_estimate_s or a "
                "timeout_s that fits, or raise scheduler.time_limit_min if the partition allows more")
    else:
        hint = ("split the sizes into more steps ('sizes: {list: [...]}' runs one step per size) or campaigns, "
                "lower iterations, or raise scheduler.time_limit_min if the partition allows more")
    return PlanError("\n".join([f"{len(steps)} step(s) need more than the {sched.time_limit_min} min "
                                f"({where}'s scheduler.time_limit_min) a job may run:", *lines, *more]), hint=hint)


def _needs(step: Step, inventory: Inventory) -> str:
    """What a job allows ``step`` (:func:`_allowance_s`), in words: its timeout, or its estimate with the margin."""
    est = inventory.estimate
    if step.timeout_s < est.step_timeout_s(step.estimate_s, step.nodes):
        return f"its timeout {step.timeout_s} s"
    what = "a run" if step.command else "of calls"
    return f"{step.estimate_s / 60:.1f} min {what} x margin {est.margin:g} + {est.setup_s(step.nodes):.0f} s set-up"
