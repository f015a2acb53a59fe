"""Workload campaigns: the user's own command, run with and without the plugin (issue 27).

A campaign of kind ``workload`` runs one command (``torchrun train.py ...``, a container entry
point, the simulator's ``ncclbot-sweep sim workload``) in several *environments*, its
``policies``: ``stock`` (no plugin), ``AUTO`` through the plugin (NCCL's choice, timed), each
learner by the plugin's name (``ucb1``, ``greedy``, ...) and ``static`` (the plugin replays the
table in ``workload.static_table``: ``ncclbot-sweep export static``). Repetitions are interleaved
(every environment once per repetition, in the campaign's order), so drift and neighbours hit
every environment alike. Each run is one step of the campaign, launched like every other step
(the inventory's launcher, container and tasks per node, under ``timeout``), with the plugin's
trace kept in the step's ``trace/``.

A run's step times are read on the node right after the command ends, by
``templates/step_times.py`` (stdlib only), from one source per campaign (:class:`StepTime`):

* ``pattern``: a ready regular expression for a framework's step lines (:data:`READY_PATTERNS`),
  or ``regex``: one of the user's, over every line of stdout (``\\r``-separated progress-bar
  updates included); the time is its named group ``us``, ``ms`` or ``s``, or ``per_s`` (a rate,
  steps per second); a group ``step`` numbers the steps (a step printed twice counts once, the
  last time);
* ``kineto``: the ``ProfilerStep#N`` spans of the Kineto traces the command writes into
  ``$NCCLSWEEP_KINETO_DIR`` (the step's ``kineto/``; per step the longest over the traces, i.e.
  the ranks);
* ``wall``: the command's wall time, one step per run.

The first ``warmup_steps`` steps of every run are marked as warm-up (kept, flagged, left out of
the analysis). A run that prints no step time fails (``step_times.py`` exits 4) with the
first lines it saw; a crash or a hang past ``timeout_s`` fails it as any step fails; the other
runs still count.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field, model_validator

from ncclbot_sweep.names import STATIC
from ncclbot_sweep.specfile import Bool, Float, Int, SpecModel

__all__ = ["DEFAULT_RUN_TIMEOUT_S", "NOT_FOR_WORKLOADS", "READY_PATTERNS", "StepTime",
           "TIME_GROUPS", "WorkloadSpec", "check_campaign", "describe", "extractor_args", "nodes_command", "workload_plan_lines"]

#: A run's timeout, and its estimate, when the campaign gives neither ``timeout_s`` nor
#: ``workload.run_estimate_s`` (a user's command has no calls ``plan`` could price).
DEFAULT_RUN_TIMEOUT_S = 1800
#: Campaign keys that describe nccl-tests steps, which a workload campaign has none of.
NOT_FOR_WORKLOADS = ("collectives", "sizes", "arms", "baseline", "warmup", "iterations", "dtype", "op", "extra_flags")
#: Named groups a step-time regex may capture the time in, and what one unit is in seconds
#: (``per_s`` is a rate: the step time is its inverse).
TIME_GROUPS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "per_s": None}

_TQDM_RATE = r"\[[^\],]*,\s*(?:(?P<per_s>[0-9]*\.?[0-9]+)it/s|(?P<s>[0-9]*\.?[0-9]+)s/it)"
#: Ready step-line patterns: Megatron-LM's log line, and the progress bars (tqdm) of PyTorch
#: Lightning (``Epoch N: ... | 12/100 [...]``) and of the Hugging Face Trainer (`` 12%|...| 12/100 [...]``).
#: tqdm's rate is its smoothed recent average, not one step's time: prefer ``kineto`` or a log line
#: of your own where single steps matter.
READY_PATTERNS: dict[str, str] = {
    "megatron": r"iteration\s+(?P<step>\d+)/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*(?P<ms>[0-9]*\.?[0-9]+)",
    "lightning": r"Epoch \d+:.*?\|\s*(?P<step>\d+)/\d+\s*" + _TQDM_RATE,
    "hf": r"^\s*\d+%\|[^|]*\|\s*(?P<step>\d+)/\d+\s*" + _TQDM_RATE,
}


class StepTime(SpecModel):
    """Where a run's step times come from: exactly one of ``pattern``, ``regex``, ``kineto``, ``wall``."""

    pattern: Literal["megatron", "lightning", "hf"] | None = None
    regex: str | None = Field(None, min_length=1, max_length=2000)
    kineto: Bool = False
    wall: Bool = False

    @model_validator(mode="after")
    def _one_source(self) -> StepTime:
        given = [name for name in ("pattern", "regex", "kineto", "wall") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("give exactly one step-time source: pattern (megatron, lightning or hf), regex, "
                             f"kineto: true or wall: true, but got {given or 'none'}")
        if self.regex is not None:
            _check_regex(self.regex)
        return self

    @property
    def source(self) -> str:
        """The source's name, as ``workload_steps.source`` records it."""
        return self.pattern or ("regex" if self.regex else "kineto" if self.kineto else "wall")

    @property
    def expression(self) -> str | None:
        """The regular expression applied to stdout, if the source is one."""
        return READY_PATTERNS[self.pattern] if self.pattern else self.regex


def _check_regex(text: str) -> None:
    try:
        compiled = re.compile(text)
    except re.error as exc:
        raise ValueError(f"regex does not compile: {exc}") from None
    groups = set(compiled.groupindex)
    if not groups & set(TIME_GROUPS):
        raise ValueError(f"regex must capture the time in a named group, one of {', '.join(TIME_GROUPS)} "
                         f"(e.g. 'step time: (?P<ms>[0-9.]+) ms'), but it names {sorted(groups) or 'none'}")


class WorkloadSpec(SpecModel):
    """The ``workload`` block of a campaign of kind ``workload`` (see the module docstring)."""

    #: The program and its arguments, one word each; a first word ``ncclbot-sweep`` becomes the
    #: ncclbot-sweep the inventory's nodes run (:func:`nodes_command`).
    command: list[str] = Field(min_length=1, max_length=1000)
    step_time: StepTime
    warmup_steps: Int = Field(5, ge=0, le=1_000_000)
    #: The plugin's static table (``NCCLBOT_STATIC_TABLE``) for the environment ``static``, as the
    #: nodes see it.
    static_table: str | None = Field(None, min_length=1, max_length=1023)
    #: Expected wall time of one run, for ``plan``'s estimate and, without the campaign's
    #: ``timeout_s``, each run's timeout (``estimate.margin`` times it, plus the set-up); default:
    #: every run is budgeted up to its timeout.
    run_estimate_s: Float | None = Field(None, gt=0)
    #: Tasks the launcher starts per node (default: one per GPU, each a rank); 1 for a command that
    #: starts its ranks itself (``torchrun --nproc-per-node=8``).
    tasks_per_node: Int | None = Field(None, ge=1, le=1024)

    @model_validator(mode="after")
    def _rules(self) -> WorkloadSpec:
        if self.step_time.wall and self.warmup_steps:
            raise ValueError("with step_time wall: true a run is one step; set warmup_steps: 0")
        if any("\0" in word for word in self.command):
            raise ValueError("command words cannot hold a NUL character (no program argument can)")
        return self


def check_campaign(kind: str, given: set[str], *, policies: list[str], spec: WorkloadSpec | None) -> None:
    """The rules a campaign's kind sets on its ``workload`` block; raises ValueError naming the key.

    Called when a campaign is validated: a ``workload`` campaign needs the block, its
    environments (``policies``) and, for ``static``, the table, and takes none of the nccl-tests
    keys (:data:`NOT_FOR_WORKLOADS`); the other kinds take no ``workload`` block.
    """
    if kind != "workload":
        if spec is not None:
            raise ValueError(f"'workload' applies to campaigns of kind workload, not {kind}")
        return
    if spec is None:
        raise ValueError("a workload campaign needs a 'workload' block (command and step_time)")
    extra = [key for key in NOT_FOR_WORKLOADS if key in given]
    if extra:
        raise ValueError(f"a workload campaign runs the user's command, not nccl-tests: remove {', '.join(extra)} "
                         "(its warm-up is workload.warmup_steps)")
    if not policies:
        raise ValueError("a workload campaign needs 'policies', the environments to compare "
                         "(e.g. [stock, AUTO, ucb1])")
    if any(p.lower() == STATIC for p in policies) and not spec.static_table:
        raise ValueError("the environment 'static' needs workload.static_table (ncclbot-sweep export static)")


def nodes_command(command: list[str], *, local: bool, tool: list[str]) -> list[str]:
    """The command as the job runs it: a first word ``ncclbot-sweep`` becomes ``tool`` (the
    inventory's ``ncclbot_sweep.command``), or, on the local executor with the default tool, this
    interpreter running the package (its ``ncclbot-sweep`` need not be on the jobs' ``PATH``)."""
    if command[0] != "ncclbot-sweep":
        return list(command)
    if local and tool == ["ncclbot-sweep"]:
        return [sys.executable, "-m", "ncclbot_sweep", *command[1:]]
    return [*tool, *command[1:]]


def extractor_args(spec: WorkloadSpec) -> list[str]:
    """The arguments of ``templates/step_times.py`` for a run (the job script adds its files)."""
    step_time = spec.step_time
    args: list[str] = ["--source", step_time.source, "--warmup", str(spec.warmup_steps)]
    if step_time.expression is not None:
        args += ["--regex", step_time.expression]
    return args


def describe(spec: WorkloadSpec) -> dict[str, Any]:
    """The spec as ``plan --json`` shows it."""
    return {"command": list(spec.command), "step_time": spec.step_time.source, "warmup_steps": spec.warmup_steps,
            "static_table": spec.static_table, "run_estimate_s": spec.run_estimate_s}


def workload_plan_lines(spec: WorkloadSpec, runs: list[tuple[int, int, str, float, int]], *,
                        steps: tuple[str, ...]) -> list[str]:
    """What ``plan`` says of a workload campaign: the command as the nodes run it (``steps``), the
    step-time source, the runs in the order they run (``runs``: nodes, repetition, environment,
    estimate and timeout in seconds) and the time budget (expected, and at most: every run up to
    its timeout)."""
    source = spec.step_time.source + (f" ({spec.step_time.expression})" if spec.step_time.regex else "")
    order: dict[tuple[int, int], list[str]] = {}
    for nodes, repeat, environment, _e, _t in runs:
        order.setdefault((nodes, repeat), []).append(environment)
    environments = len({environment for _n, _r, environment, _e, _t in runs})
    lines = [f"  command: {' '.join(steps)}",
             f"  step time: {source}; the first {spec.warmup_steps} step(s) of each run are warm-up, left out",
             f"  runs: {len(runs)} ({environments} environments x {len(order)} repetitions, interleaved):"]
    lines += [f"    {nodes:>3} nodes  repetition {repeat}: {', '.join(envs)}" for (nodes, repeat), envs in order.items()]
    expected = sum(nodes * estimate for nodes, _r, _e, estimate, _t in runs)
    most = sum(nodes * timeout for nodes, _r, _e, _s, timeout in runs)
    lines += [f"  time budget: each run up to {_span(t for *_, t in runs)} s (expected "
              f"{_span(e for *_, e, _t in runs)} s): ~{expected / 3600:.2f} node-hours expected, at most "
              f"{most / 3600:.2f} node-hours if every run hits its timeout"]
    return lines


def _span(values: Iterable[float]) -> str:
    """``100`` for one value, ``64-69`` for several."""
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"
