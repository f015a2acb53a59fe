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

__all__ = ["Play", "Played", "Runs", "SizeResult", "Warmup", "forced_arm_pools", "merge_runs", "one_arm_player",
           "run_sweep"]


#: Consecutive calls per arm, in call order: ``((Ring/LL128, 3), (Tree/LL, 1), ...)``.
Runs = tuple[tuple[Arm | None, int], ...]


@dataclasses.dataclass(frozen=True)
class Played:
    """What ``count`` consecutive calls at one size cost (us each) and which arms ran them.

    ``idle``: per call, the us the stream waited for the host before it (its share of
    ``times``); None where the host is not modelled (a forced or stock process, whose host
    always runs ahead of the GPU).
    """

    times: np.ndarray
    runs: Runs
    idle: np.ndarray | None = None


#: ``play(size, count)``: run ``count`` calls at ``size`` (a live step's plugin host decides
#: per call; a forced or stock step uses one arm per size).
Play = Callable[[int, int], Played]


@dataclasses.dataclass(frozen=True)
class Warmup:
    """``calls`` untimed calls at ``size`` on ``arm`` (``played``: every call's arm)."""

    size: int
    arm: Arm | None
    calls: int
    played: Runs = ()


@dataclasses.dataclass(frozen=True)
class SizeResult:
    """One table row: per-iteration times (us) of the out-of-place and in-place passes."""

    size: int
    arm: Arm | None
    out_of_place: np.ndarray
    in_place: np.ndarray
    calls_per_pass: int  # timed calls plus check calls, per pass
    played: Runs = ()  # every call's arm, both passes, checks included
    idle_us: float | None = None  # the stream's wait for the host within both timed passes


def merge_runs(*runs: Runs) -> Runs:
    """Concatenate runs, joining neighbours on the same arm."""
    out: list[tuple[Arm | None, int]] = []
    for arm, count in (item for group in runs for item in group):
        if count <= 0:
            continue
        if out and out[-1][0] == arm:
            out[-1] = (arm, out[-1][1] + count)
        else:
            out.append((arm, count))
    return tuple(out)


def one_arm_player(process: SimProcess, collective: str, choose_arm: Callable[[int], Arm | None], *,
                   host_us: float = 0.0) -> Play:
    """NCCL without a tuner plugin: one arm per size (AUTO's or the forced one).

    Its host enqueues faster than any kernel runs, so an iteration costs its GPU time; with
    ``host_us`` (nccl-tests' ``-z``: the host waits for each call) the enqueue is in series.
    """
    arms: dict[int, Arm | None] = {}

    def play(size: int, count: int) -> Played:
        if size not in arms:
            arms[size] = choose_arm(size)
        arm = arms[size]
        return Played(process.run(collective, arm, size, count) + host_us, ((arm, count),))
    return play


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
    play: Play | None = None,
) -> Iterator[Warmup | SizeResult]:
    """Drive ``process`` through a benchmark over ``sizes`` (the sizes nccl-tests prints).

    ``choose_arm(size)`` is NCCL's choice for a call (it may raise to fail the run, as
    NCCL fails the first call that has no algorithm). ``play`` runs the calls of one size
    (default: ``choose_arm``'s arm for all of them; a live step passes its plugin host's).
    Zero-byte sizes only pay a launch and never reach a tuner.
    """
    play = play or one_arm_player(process, collective, choose_arm)
    if warmup > 0 and sizes:
        for size in (sizes[-1], sizes[0]):
            if size > 0:
                played = play(size, warmup * agg)
                yield Warmup(size, played.runs[0][0], warmup * agg, played.runs)
            else:
                yield Warmup(size, choose_arm(size), 0)
    for _cycle in range(max(1, cycles)):
        for size in sizes:
            yield _one_size(process, play, choose_arm, size, iters=iters, agg=agg, check=check)


def _one_size(process: SimProcess, play: Play, choose_arm: Callable[[int], Arm | None], size: int, *,
              iters: int, agg: int, check: int) -> SizeResult:
    """The out-of-place and in-place passes of one size, each followed by its check calls."""
    passes, runs = [], []
    checks = check if check > 0 and size > 0 else 0
    arm = None
    idle: float | None = None
    for _in_place in (0, 1):
        if size == 0:
            arm = choose_arm(size)
            times = process.rng.uniform(1.5, 3.0, iters * agg)
        else:
            timed = play(size, iters * agg)
            times, arm = timed.times, arm or timed.runs[0][0]
            runs.append(timed.runs)
            if timed.idle is not None:
                idle = (idle or 0.0) + float(timed.idle.sum())
            if checks:
                runs.append(play(size, checks).runs)
        passes.append(times.reshape(iters, agg).mean(axis=1))
    return SizeResult(size, arm, passes[0], passes[1], iters * agg + checks, merge_runs(*runs), idle)


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
