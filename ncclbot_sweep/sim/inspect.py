"""Human-readable views of the simulated fabric for ``ncclbot-sweep sim`` (no printing here).

:func:`cost_table_rows` lays one context's cost table beside the ground truth, the way an
engineer checks AUTO by hand: predicted time, true steady-state time, AUTO's pick and the
measured-best arm.
"""

from __future__ import annotations

import dataclasses

from ncclbot_sweep import costmodel
from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim.fabric import fabric
from ncclbot_sweep.sim.nccltests.ncclog import tuning_table_lines

__all__ = ["CostRow", "auto_loss_and_margin", "cost_table_rows", "format_cost_table", "tuning_table_text"]


@dataclasses.dataclass(frozen=True)
class CostRow:
    """One arm of a context: NCCL's predicted time and the simulator's true steady time."""

    arm: Arm
    predicted_us: float
    true_us: float
    auto: bool
    best: bool


def cost_table_rows(fabric_name: str, collective: str, nodes: int, size_bytes: int) -> list[CostRow]:
    """Every valid arm of the context with its predicted and true latency, AUTO and best marked."""
    sim = fabric(fabric_name)
    costs = sim.cost_table(collective, nodes, size_bytes)
    arms = sim.valid_arms(collective, nodes)
    auto = costmodel.auto_arm(costs)
    truth = {arm: sim.steady_latency_us(collective, nodes, arm, size_bytes) for arm in arms}
    best = min(truth, key=truth.get) if truth else None
    return [
        CostRow(arm, float(costs[arm.algorithm_index, arm.protocol_index]), truth[arm], arm == auto, arm == best)
        for arm in arms
    ]


def auto_loss_and_margin(rows: list[CostRow]) -> tuple[float | None, float | None]:
    """AUTO's loss against the best arm (true time, a fraction) and the predicted runner-up margin.

    Each is ``None`` when undefined: no AUTO or best arm, or fewer than two usable predictions.
    """
    auto = next((r for r in rows if r.auto), None)
    best = next((r for r in rows if r.best), None)
    loss = auto.true_us / best.true_us - 1 if auto and best else None
    predicted = sorted(r.predicted_us for r in rows if r.predicted_us >= 0)
    margin = predicted[1] / predicted[0] - 1 if len(predicted) > 1 and predicted[0] > 0 else None
    return loss, margin


def format_cost_table(rows: list[CostRow]) -> list[str]:
    """Lines of a small fixed-width table, with AUTO's loss against the best arm at the end."""
    lines = [f"{'arm':<16s} {'predicted_us':>14s} {'true_us':>14s}  mark"]
    for row in rows:
        mark = " ".join(m for m, on in (("AUTO", row.auto), ("BEST", row.best)) if on)
        lines.append(f"{str(row.arm):<16s} {row.predicted_us:14.2f} {row.true_us:14.2f}  {mark}")
    loss, margin = auto_loss_and_margin(rows)
    if loss is not None:
        lines.append(f"AUTO loss vs best: {100 * loss:.1f}%   predicted runner-up margin: "
                     f"{float('inf') if margin is None else margin:.2f}")
    return lines


def tuning_table_text(fabric_name: str, nodes: int) -> list[str]:
    """NCCL's init tuning table for a job of ``nodes`` nodes, as the simulator logs it."""
    sim = fabric(fabric_name)
    tuned = sim.tuned(nodes)
    return tuning_table_lines(tuned.table, tuned.max_threads)
