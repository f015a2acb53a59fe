"""How long a step's calls take: every call nccl-tests makes, priced by the fabric's cost model.

``plan`` sizes jobs from this (architecture section 4.3): a step's time limit and its job's
``--time`` come from the calls it makes, not from its size range alone. The calls are
nccl-tests' own sequence, read from the step's command line with the simulator's parser of
nccl-tests 2.19 flags (:func:`ncclbot_sweep.sim.nccltests.options.parse_options`): ``-w``
warm-up calls at the largest and then the smallest size, then per size an out-of-place and an
in-place pass of ``-n x -m`` timed calls followed by ``-c`` check calls each, ``-N`` times over.

Each call is priced at what NCCL's cost model (:mod:`ncclbot_sweep.costmodel`, the one
formula the simulator and the analysis use) predicts for it on the fabric model the inventory
names (``estimate.model``: a simulated fabric's tuning table, seen through the step's
environment, so ``NCCL_NVLS_ENABLE=0`` or ``NCCL_MNNVL_ENABLE`` count): a forced arm at its
own cost; NCCL's own choice (stock, AUTO) at the cheapest arm; a learner, which may try any
arm, at the mean over the arms NCCL offers there. A size a dataset measured for the same
(collective, nodes, arm) is priced at its measured median instead (:class:`Measured`).
The model is NCCL's, so it errs where NCCL's choices err; the inventory's ``estimate.margin``
covers that, and its set-up terms what happens before the first call.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ncclbot_sweep import costmodel
from ncclbot_sweep.names import COLLECTIVES, NVLS_ALGORITHMS, Arm

if TYPE_CHECKING:
    from ncclbot_sweep.sim import SimFabric

__all__ = ["CallCounts", "Measured", "MeasuredTimes", "StepCalls", "call_counts", "calls_seconds"]

#: ``(collective, nodes, arm or None for NCCL's own choice, size_bytes)`` -> us per call.
MeasuredTimes = Mapping[tuple[str, int, str | None, int], float]
#: A collective NCCL runs without an algorithm choice (AlltoAll, SendRecv, ...) is priced as this
#: one of the same size: NCCL has no cost model for them, and AllGather moves the same bytes.
_ARMLESS_PROXY = "AllGather"


@dataclasses.dataclass(frozen=True)
class Measured:
    """Times an earlier campaign measured on this fabric (us per call), and where they come from.

    A campaign folder keeps the copy ``submit --from-dataset`` planned with (:meth:`to_json`),
    so ``status`` and ``resume`` plan the same jobs without the dataset.
    """

    times: MeasuredTimes
    source: str

    def to_json(self) -> str:
        rows = [[c, n, a, s, us] for (c, n, a, s), us in sorted(self.times.items(), key=str)]  # exact: replans agree
        return json.dumps({"source": self.source, "times": rows}, indent=0) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Measured:
        """Read :meth:`to_json`'s text; raises ValueError when it is not that."""
        data = json.loads(text)
        try:
            times = {(str(c), int(n), None if a is None else str(a), int(s)): float(us) for c, n, a, s, us in data["times"]}
            return cls(times=times, source=str(data["source"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a table of measured times ({exc})") from exc


@dataclasses.dataclass(frozen=True)
class CallCounts:
    """How many calls one nccl-tests process makes at each size (warm-up, both passes, checks)."""

    per_size: tuple[tuple[int, int], ...]


def call_counts(args: Sequence[str]) -> CallCounts:
    """The calls of an nccl-tests command line (its arguments after the binary), per size.

    Raises ValueError (the simulator's UsageError) for a flag nccl-tests 2.19 does not know.
    """
    from ncclbot_sweep.sim.nccltests.options import parse_options

    options = parse_options(list(args))
    sizes = options.sizes()
    counts = dict.fromkeys(sizes, 0)
    for size in sizes:
        checks = options.check if size > 0 else 0
        counts[size] += 2 * (options.iters * options.agg_iters + checks) * max(1, options.run_cycles)
    if options.warmup_iters > 0 and sizes:
        for size in (sizes[-1], sizes[0]):
            counts[size] += options.warmup_iters * options.agg_iters
    return CallCounts(tuple(counts.items()))


@dataclasses.dataclass(frozen=True)
class StepCalls:
    """What one step runs, as the estimate needs it."""

    collective: str
    nodes: int
    ranks: int
    arm: Arm | None
    learner: bool
    env: Mapping[str, str]
    counts: CallCounts


def calls_seconds(step: StepCalls, *, model: str, nvls_setup_s: float, measured: MeasuredTimes | None = None) -> float:
    """Seconds ``step``'s calls take: measured where ``measured`` has the size, else the cost model's price.

    ``model`` names the simulated fabric whose NCCL tuning table prices the calls. A step whose
    calls may run NVLS or NVLSTree pays ``nvls_setup_s`` once: NCCL's first NVLS call in a
    process stalls while it sets up multicast buffers (5.7-7.8 s measured on H100).
    """
    from ncclbot_sweep.sim import fabric_for_env

    fabric = fabric_for_env(model, dict(step.env))
    arm_key = None if step.arm is None else str(step.arm)
    total_us, nvls = 0.0, False
    for size, count in step.counts.per_size:
        if count == 0:
            continue
        collective = step.collective if step.collective in COLLECTIVES else _ARMLESS_PROXY
        costs = _cost_table(fabric, collective, step.nodes, size, step.ranks)
        arms = _arms_played(costs, step.arm, learner=step.learner)
        nvls = nvls or any(arm.algorithm in NVLS_ALGORITHMS for arm in arms)
        seen = None if measured is None or step.learner else measured.get((step.collective, step.nodes, arm_key, size))
        total_us += count * (seen if seen is not None else _price_us(costs, arms))
    return total_us / 1e6 + (nvls_setup_s if nvls else 0.0)


@functools.lru_cache(maxsize=1 << 16)
def _cost_table(fabric: SimFabric, collective: str, nodes: int, size: int, ranks: int) -> np.ndarray:
    """NCCL's cost table of one call (the steps of a campaign share most of them: its arms, its repeats)."""
    return fabric.cost_table(collective, nodes, size, ranks=ranks)


def _arms_played(costs: np.ndarray, arm: Arm | None, *, learner: bool) -> list[Arm]:
    """The arms a call may run: the forced one, NCCL's own choice (the first cheapest), or, for a learner,
    every arm NCCL offers. A forced arm the fabric model does not run (a fabric offering more than its
    model) stands as the model's slowest arm, so the estimate never counts it as free."""
    offered = [Arm.from_indices(a, p) for a, p in zip(*np.nonzero(costs >= 0.0), strict=True)]
    if not offered:
        return []
    if learner:
        return offered
    if arm is None:
        return [costmodel.auto_arm(costs)]
    if costs[arm.algorithm_index, arm.protocol_index] >= 0.0:
        return [arm]
    return [max(offered, key=lambda a: costs[a.algorithm_index, a.protocol_index])]


def _price_us(costs: np.ndarray, arms: list[Arm]) -> float:
    """One call's predicted us: the mean over the arms it may run (one arm but for a learner)."""
    if not arms:
        return 0.0
    return float(np.mean([costs[a.algorithm_index, a.protocol_index] for a in arms]))

