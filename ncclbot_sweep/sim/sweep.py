"""The call sequence of one nccl-tests process, shared by the stand-in binaries and by tests.

nccl-tests warms up with ``-w`` calls at the largest size, then at the smallest, and then
runs each size out-of-place and in-place: ``-n x -m`` timed calls followed by ``-c`` check
calls each. Lazy-connection transients therefore land on the first timed iterations of
every size except the two warmed ones, as in the paper's pools. :func:`forced_arm_pools`
gives the same numbers without spawning a process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim.fabric import SimFabric
from ncclbot_sweep.sim.process import SimProcess, derive_seed

__all__ = ["SizeResult", "Warmup", "forced_arm_pools", "run_sweep"]


@dataclasses.dataclass(frozen=True)
class Warmup:
    """``calls`` untimed calls at ``size`` on ``arm``."""

    size: int
    arm: Arm | None
    calls: int


@dataclasses.dataclass(frozen=True)
class SizeResult:
    """One table row: per-iteration times (us) of the out-of-place and in-place passes."""

    size: int
    arm: Arm | None
    out_of_place: np.ndarray
    in_place: np.ndarray
    calls_per_pass: int  # timed calls plus check calls, per pass


def run_sweep(
    process: SimProcess,
    collective: str,
    sizes: list[int],
    choose_arm: Callable[[int], Arm | None],
    *,
    iters: int,
    warmup: int,
    agg: int = 1,
    check: int = 1,
    cycles: int = 1,
) -> Iterator[Warmup | SizeResult]:
    """Drive ``process`` through a benchmark over ``sizes`` (the sizes nccl-tests prints).

    ``choose_arm(size)`` is NCCL's choice for a call (it may raise to fail the run, as
    NCCL fails the first call that has no algorithm). Zero-byte sizes only pay a launch.
    """
    if warmup > 0 and sizes:
        for size in (sizes[-1], sizes[0]):
            arm = choose_arm(size)
            if size > 0:
                process.run(collective, arm, size, warmup * agg)
            yield Warmup(size, arm, warmup * agg if size > 0 else 0)
    for _cycle in range(max(1, cycles)):
        for size in sizes:
            arm = choose_arm(size)
            passes = []
            checks = check if check > 0 and size > 0 else 0
            for _in_place in (0, 1):
                if size == 0:
                    times = process.rng.uniform(1.5, 3.0, iters * agg)
                else:
                    times = process.run(collective, arm, size, iters * agg)
                    if checks:
                        process.run(collective, arm, size, checks)
                passes.append(times.reshape(iters, agg).mean(axis=1))
            yield SizeResult(size, arm, passes[0], passes[1], iters * agg + checks)


def forced_arm_pools(
    fabric: SimFabric,
    collective: str,
    nodes: int,
    arm: Arm,
    sizes: list[int],
    *,
    iters: int = 100,
    warmup: int = 1,
    seed: int | None = None,
) -> dict[int, np.ndarray]:
    """Per-size out-of-place latencies (us) of one forced-arm process, in iteration order.

    What a forced-arm nccl-tests job of this arm would report with ``-I 1``; the analysis
    and tests use it to build pools without running binaries. ``seed`` defaults to one
    derived from the arguments, so a call is reproducible.
    """
    seed = derive_seed(fabric.name, collective, nodes, str(arm), tuple(sizes), iters, warmup) if seed is None else seed
    process = SimProcess(fabric, nodes=nodes, seed=seed)
    pools: dict[int, np.ndarray] = {}
    for event in run_sweep(process, collective, sorted(sizes), lambda _size: arm, iters=iters, warmup=warmup):
        if isinstance(event, SizeResult):
            pools[event.size] = event.out_of_place
    return pools
