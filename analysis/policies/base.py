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
           "offered_argmax", "total_n", "log_n", "unpulled_first", "unpulled_selectable", "held", "selectable",
           "safety_gate", "softmax_weights", "loss_of", "warm_losses"]

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
    # Column by column: numpy's reductions along a short row cost a call per row. The same
    # sums in the same order (``cumsum``'s), the same comparisons.
    cs = weights.astype(np.float64)
    for k in range(1, cs.shape[1]):
        cs[:, k] += cs[:, k - 1]
    thr = u * cs[:, -1]
    idx = (cs[:, 0] <= thr).astype(np.intp)
    for k in range(1, cs.shape[1]):
        idx += cs[:, k] <= thr
    over = idx >= weights.shape[1]
    if over.any():
        w = weights[over]
        idx[over] = w.shape[1] - 1 - np.argmax(w[:, ::-1] > 0, axis=1)
    return idx


def masked_argmax(score: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.argmax(np.where(mask, score, NEG), axis=1)


def offered_argmax(state: BanditState, score: np.ndarray) -> np.ndarray:
    """:func:`masked_argmax` with the offered arms as mask, from ``score`` given at the offered
    arms only (``[len(cells)]`` in :meth:`~.estimators.BanditState.offered_cells` order): the
    same arms for the same scores (ties and NaN alike), without a ``[B, K]`` mask pass.

    ``score`` may hold ``-inf`` for arms left out (held ones).
    """
    cells, _rows, scratch = state.offered_cells()
    scratch.reshape(-1)[cells] = score
    return scratch.argmax(axis=1)


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
    some CPUs (AVX-512), so ``math.log`` (libm) keeps every index equal to the plugin's. It is
    called once per distinct ``N`` (:func:`_libm_log`): the rows of a replay share a handful of
    values (``N`` grows by one per learned pull from the same warm start).
    """
    return _libm_log(np.maximum(total_n(state), 1.0))


#: Buckets of :func:`_libm_log` (a power of two) and the multiplier of its Fibonacci hash.
_LOG_BUCKETS_BITS = 10
_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)


def _libm_log(x: np.ndarray, *, rounds: int = 3) -> np.ndarray:
    """``math.log`` of every element of the float64 vector ``x``, called once per distinct value.

    Each value goes to a bucket by a hash of its bits; one value per bucket is taken as the
    bucket's, its log computed once and given to every element equal to it (``==``: the same
    float64, so the same log). Elements that lost their bucket to another value go round again
    (``rounds`` times at most); with many distinct values (a quarter of the elements or of the
    buckets) ``math.log`` is called on each. The result is ``math.log`` element by element
    whatever the values; only the number of calls depends on them.
    """
    size = x.size
    if size <= 32 or rounds <= 0:
        return np.fromiter(map(math.log, x.tolist()), dtype=np.float64, count=size)
    slot = x.view(np.uint64) * _FIBONACCI  # wraps modulo 2**64: the hash's top bits pick the bucket
    np.right_shift(slot, np.uint64(64 - _LOG_BUCKETS_BITS), out=slot)
    slot = slot.view(np.int64)
    used = np.zeros(1 << _LOG_BUCKETS_BITS, dtype=bool)
    used[slot] = True
    used = np.flatnonzero(used)
    if 4 * used.size > min(size, 1 << _LOG_BUCKETS_BITS):  # many distinct values: one call each
        return _libm_log(x, rounds=0)
    value = np.zeros(1 << _LOG_BUCKETS_BITS)
    value[slot] = x  # the bucket's value: the last one written
    logs = np.zeros(1 << _LOG_BUCKETS_BITS)
    logs[used] = list(map(math.log, value[used].tolist()))
    out = logs[slot]
    other = np.flatnonzero(value[slot] != x)  # (NaN never equals itself: it goes round too)
    if other.size:
        out[other] = _libm_log(x[other], rounds=rounds - 1)
    return out


def unpulled_selectable(state: BanditState) -> np.ndarray | None:
    """Selectable arms with ``n == 0`` (``[B, K]``), or None when no offered arm is unpulled.

    Counts never return to 0: once every offered arm has one, the check is skipped for good
    (held arms included, so a hold never ends the cold start early).
    """
    if state.extra.get("all_pulled"):
        return None
    unpulled = state.offered & (state.n == 0)
    if not unpulled.any():
        state.extra["all_pulled"] = True
        return None
    return unpulled if state.selectable is state.offered else unpulled & state.selectable


def unpulled_first(state: BanditState, chosen: np.ndarray) -> np.ndarray:
    unpulled = unpulled_selectable(state)
    if unpulled is None:
        return chosen
    return np.where(unpulled.any(axis=1), np.argmax(unpulled, axis=1), chosen)


def held(state: BanditState, probe: int) -> np.ndarray:
    """The hold rule (``[B, K]``): arms other than AUTO's with at least ``probe + 2 * resolved``
    pulls whose reward is not applied yet (``plugin/README.md``, "Hold"; the plugin's
    ``nb_held``); ``probe = 0`` holds nothing.

    A held arm is left out of the choice: a newly tried arm is played ``probe`` times and
    then waits for its rewards instead of being played blindly for the whole feedback delay;
    the pulls an arm may have in flight grow with the evidence applied. AUTO's arm, what NCCL
    plays without the plugin, is never held.
    """
    if probe <= 0:
        return np.zeros(state.pending.shape, dtype=bool)
    out = state.pending >= probe + 2 * state.resolved
    out.reshape(-1)[state.rows * out.shape[1] + state.auto] = False
    return out


def selectable(state: BanditState, probe: int) -> np.ndarray:
    """``offered`` less the held arms; a row whose every offered arm is held keeps them all.

    Called before every choice of a delayed replay while rewards are pending.
    """
    free = state.offered & ~held(state, probe)
    some = free[:, 0].copy()  # rows with a free arm, column by column (``any(axis=1)`` costs a call per row)
    for k in range(1, free.shape[1]):
        some |= free[:, k]
    if not some.all():
        free[~some] = state.offered[~some]
    return free


def safety_gate(state: BanditState, arms: np.ndarray, margin: float, min_learned: int) -> np.ndarray:
    """AUTO's arm where the chosen arm's mean is below ``(1 - margin)`` times AUTO's arm's, the
    chosen arm having ``min_learned`` learned rewards (past the first-use transient, whose
    inflated first samples must not condemn a good arm for good) and AUTO's arm one; the
    chosen arm elsewhere (the plugin's ``nb_gate``).

    Called after every choice, so only the rows whose choice is not AUTO's are looked at;
    returns ``arms`` itself where no row changes.
    """
    other = np.flatnonzero(arms != state.auto)
    if not other.size:
        return arms
    k = state.offered.shape[1]
    auto = state.auto[other]
    chosen, auto_cell = other * k + arms[other], other * k + auto
    learned, mu = state.learned.reshape(-1), state.mu.reshape(-1)
    worse = ((learned[chosen] >= min_learned) & (learned[auto_cell] >= 1)
             & (mu[chosen] < (1.0 - margin) * mu[auto_cell]))
    if not worse.any():
        return arms
    out = arms.copy()
    out[other[worse]] = auto[worse]
    return out


def softmax_weights(values: np.ndarray, mask: np.ndarray, tau: np.ndarray) -> np.ndarray:
    # exp(-inf) is exactly 0, so arms outside ``mask`` get weight 0 without a second mask.
    x = np.where(mask, values, NEG)
    top = x[:, 0].copy()  # the row maximum, column by column (``max(axis=1)`` costs a call per row)
    for k in range(1, x.shape[1]):
        np.maximum(top, x[:, k], out=top)
    x -= top[:, None]
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
    #: Safety gate (:func:`safety_gate`): play AUTO's arm where the choice is measured worse
    #: than it by ``gate_margin``. On for the families the plugin runs (their defaults).
    safety_gate: bool = False
    gate_margin: float = 0.1
    #: Learned rewards the chosen arm needs before the gate judges it: the transient window
    #: (an arm's first ten calls at a size, paper section 5).
    gate_min: int = 10
    #: Hold rule (:func:`held`): pulls an arm may have in flight before any reward is applied
    #: (0: no hold). On (1) for the deterministic index policies, which would otherwise play a
    #: newly tried arm for the whole feedback delay, and ETC; the randomised learners spread
    #: their exploration already and do better without it (the delayed replay, ``analyze
    #: ablate live-rules``).
    probe: int = 0

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


