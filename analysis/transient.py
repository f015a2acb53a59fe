"""Where the lazy-connection transient ends: a BIC switch-point grid per scenario.

The paper (appendix B.2) pools every arm's per-iteration *relative duration* (latency over
the arm's robust location) and compares one Gaussian segment against two segments split at
a change point ``tau``; the two-segment model with ``tau`` near 8 motivates the steady
window 11..99. This is the fast BIC companion check of that fit: for each scenario we build
the pooled trace (mean relative duration per iteration index over its contexts and arms),
score every split point and keep the best. The robust location is the median of the arm's
pool (the paper uses a Huber location; the median is the zero-tuning robust choice).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd

from .pools import SCENARIO_COLUMNS, Pools

__all__ = ["SwitchPoint", "bic_switch_point", "detect_transients"]


@dataclasses.dataclass(frozen=True)
class SwitchPoint:
    """Result of one-versus-two-segment model selection on one trace.

    ``tau`` is the first index of the second (steady) segment; ``delta_bic`` is
    BIC(one segment) - BIC(two segments), positive when the switch is supported.
    """

    tau: int
    mean_before: float
    mean_after: float
    bic_one: float
    bic_two: float

    @property
    def delta_bic(self) -> float:
        return self.bic_one - self.bic_two

    @property
    def two_segments(self) -> bool:
        return self.delta_bic > 0


def _gauss_bic(rss: np.ndarray | float, n: int, k: int) -> np.ndarray | float:
    # Gaussian log-likelihood at the ML variance, up to a constant shared by both models.
    return n * np.log(np.maximum(rss, 1e-300) / n) + k * np.log(n)


def bic_switch_point(trace: np.ndarray, *, min_segment: int = 2) -> SwitchPoint:
    """Fit one versus two Gaussian segments (own means, shared variance) to ``trace``.

    Every split ``tau`` with at least ``min_segment`` points on each side is scored with
    BIC (the two-segment model has 2 extra parameters: a second mean and the switch).
    """
    y = np.asarray(trace, dtype=float)
    y = y[np.isfinite(y)]
    n = len(y)
    if n < 2 * min_segment + 1:
        m = float(y.mean()) if n else float("nan")
        return SwitchPoint(0, m, m, float("nan"), float("nan"))
    csum, csq = np.cumsum(y), np.cumsum(y * y)
    taus = np.arange(min_segment, n - min_segment + 1)
    left_n, right_n = taus, n - taus
    left_s, right_s = csum[taus - 1], csum[-1] - csum[taus - 1]
    left_q, right_q = csq[taus - 1], csq[-1] - csq[taus - 1]
    rss = (left_q - left_s**2 / left_n) + (right_q - right_s**2 / right_n)
    bic_two = _gauss_bic(rss, n, 4)
    j = int(np.argmin(bic_two))
    rss_one = float(csq[-1] - csum[-1] ** 2 / n)
    tau = int(taus[j])
    return SwitchPoint(
        tau=tau,
        mean_before=float(left_s[j] / left_n[j]),
        mean_after=float(right_s[j] / right_n[j]),
        bic_one=float(_gauss_bic(rss_one, n, 2)),
        bic_two=float(bic_two[j]),
    )


def _relative_trace(pools: Pools, rows: np.ndarray) -> np.ndarray:
    samples = pools.samples[rows]  # [c, K, D]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # unmeasured arms are all-NaN
        loc = np.nanmedian(samples, axis=2, keepdims=True)
    rel = samples / loc
    with np.errstate(invalid="ignore"):
        return np.nanmean(rel.reshape(-1, rel.shape[2]), axis=0)


def detect_transients(pools: Pools, *, min_segment: int = 2) -> pd.DataFrame:
    """One row per scenario: the switch point of its pooled relative-duration trace.

    Columns: the scenario keys, ``contexts``, ``tau``, ``mean_before``, ``mean_after``,
    ``delta_bic``, ``two_segments``. Used by the report and ``analyze pools``.
    """
    rows = []
    keys = pools.contexts[list(SCENARIO_COLUMNS)]
    for key, idx in keys.groupby(list(SCENARIO_COLUMNS), sort=True).groups.items():
        sp = bic_switch_point(_relative_trace(pools, np.asarray(idx)), min_segment=min_segment)
        rows.append({**dict(zip(SCENARIO_COLUMNS, key)), "contexts": len(idx), "tau": sp.tau,
                     "mean_before": sp.mean_before, "mean_after": sp.mean_after,
                     "delta_bic": sp.delta_bic, "two_segments": sp.two_segments})
    return pd.DataFrame(rows)
