"""Shared machinery of the policies: sampling helpers and the :class:`Policy` base.

See the package docstring (:mod:`ncclbot_sweep.analysis.policies`) for the conventions (tie-breaks, reward, warm start) every policy keeps.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import ClassVar

import numpy as np

from .estimators import BanditState, Estimator

__all__ = ["NEG", "Policy", "pick_uniform", "sample_categorical", "iqr_trimmed_mean", "masked_argmax",
           "total_n", "log_n", "unpulled_first", "softmax_weights", "loss_of", "warm_losses"]

NEG = -np.inf


def pick_uniform(mask: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Pick, per row, the ``floor(u * count)``-th True position of ``mask`` (uniform choice)."""
    count = mask.sum(axis=1)
    j = np.minimum(np.floor(u * count), np.maximum(count - 1, 0))
    cs = np.cumsum(mask, axis=1)
    return np.argmax(cs > j[:, None], axis=1)


def sample_categorical(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw from unnormalised non-negative ``weights`` ``[B, K]`` with ``u`` ``[B]``.

    Returns the first arm whose cumulative weight exceeds ``u * total`` (such an arm has a
    positive weight); if rounding leaves none, the last arm with a positive weight.
    """
    cs = np.cumsum(weights, axis=1)
    thr = u * cs[:, -1]
    idx = np.count_nonzero(cs <= thr[:, None], axis=1)
    over = idx >= weights.shape[1]
    if over.any():
        w = weights[over]
        idx[over] = w.shape[1] - 1 - np.argmax(w[:, ::-1] > 0, axis=1)
    return idx


def masked_argmax(score: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.argmax(np.where(mask, score, NEG), axis=1)


def total_n(state: BanditState) -> np.ndarray:
    """``N = n_0 + n_1 + ...`` summed left to right in arm order (the one order: ``plugin/README.md``).

    A sequential sum (not numpy's pairwise one) so the plugin's loop over a context's arms
    (``nb_ucb_total`` in ``plugin/src/policy.c``) gets the same float64 value for any
    number of arms; arms not offered have count 0 and change nothing.
    """
    total = state.n[:, 0].copy()
    for k in range(1, state.n.shape[1]):
        total += state.n[:, k]
    return total


def log_n(state: BanditState) -> np.ndarray:
    """``ln(max(N, 1))`` with ``N`` from :func:`total_n`, by the C library's ``log``.

    The plugin calls libm's ``log``; numpy's SIMD ``log`` may round the last bit differently on
    some CPUs (AVX-512), so ``math.log`` (libm) keeps every index equal to the plugin's. One log per
    context row, so the cost is small next to the per-arm work.
    """
    n = np.maximum(total_n(state), 1.0)
    return np.fromiter(map(math.log, n.tolist()), dtype=np.float64, count=n.size)


def unpulled_first(state: BanditState, chosen: np.ndarray) -> np.ndarray:
    # Counts never return to 0: once every offered arm has one, skip the check for good.
    if state.extra.get("all_pulled"):
        return chosen
    unpulled = state.offered & (state.n == 0)
    cold = unpulled.any(axis=1)
    if not cold.any():
        state.extra["all_pulled"] = True
        return chosen
    return np.where(cold, np.argmax(unpulled, axis=1), chosen)


def softmax_weights(values: np.ndarray, mask: np.ndarray, tau: np.ndarray) -> np.ndarray:
    # exp(-inf) is exactly 0, so arms outside ``mask`` get weight 0 without a second mask.
    x = np.where(mask, values, NEG)
    top = x.max(axis=1, keepdims=True)
    x -= top
    x /= tau[:, None]
    return np.exp(x, out=x)


def iqr_trimmed_mean(values: np.ndarray) -> np.ndarray:
    """Tukey-trimmed mean over the last axis: drop points outside ``[Q1-1.5IQR, Q3+1.5IQR]``.

    Quartiles use linear interpolation (numpy's default); NaN entries are ignored.
    """
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: arms never explored
        q1, q3 = np.nanpercentile(values, [25, 75], axis=-1, keepdims=True)
    iqr = q3 - q1
    keep = (values >= q1 - 1.5 * iqr) & (values <= q3 + 1.5 * iqr)
    with np.errstate(invalid="ignore"):
        return np.where(keep, values, 0.0).sum(axis=-1) / keep.sum(axis=-1)


def loss_of(reward: np.ndarray, clip: bool) -> np.ndarray:
    loss = 1.0 - reward
    return np.clip(loss, 0.0, 1.0) if clip else loss


def warm_losses(state: BanditState, nu: float) -> np.ndarray:
    prior = np.where(np.isfinite(state.prior), state.prior, 1.0)
    return np.where(state.offered, nu * (1.0 - prior), 0.0)


@dataclasses.dataclass(frozen=True)
class Policy:
    """Base of all policies: name, estimator, warm start and the three engine hooks."""

    name: ClassVar[str] = "policy"
    deterministic: ClassVar[bool] = True
    estimator: Estimator = Estimator()
    pseudo_count: float = 0.0
    label: str | None = None

    @property
    def display_name(self) -> str:
        """The name in result tables: ``label`` if given, else the family name."""
        return self.label or self.name

    def draws(self, n_arms: int) -> tuple[int, int]:
        """Uniforms and normals this policy consumes per step (``n_arms`` = padded K)."""
        return (0, 0)

    @property
    def is_deterministic(self) -> bool:
        return self.deterministic

    def init(self, state: BanditState) -> None:
        state.warm_start(self.pseudo_count)

    def select(self, state: BanditState, t: int, u: np.ndarray | None, z: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def update(self, state: BanditState, rows: np.ndarray, arms: np.ndarray, reward: np.ndarray) -> None:
        state.update(rows, arms, reward, self.estimator)


