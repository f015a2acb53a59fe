"""Per-arm statistics shared by every policy: counts, reward means, variances.

One :class:`BanditState` holds a batch of independent bandits (rows = contexts x seeds) on a
padded arm axis, so the replay engine can update thousands of bandits with a few numpy
operations per step. The reward of a pull is ``r = mu_hat_min / X`` (paper eq. 1).

Estimators (paper appendix C, E and section 7), applied to the arm ``a`` just pulled when
the update is *learned* (see skip-first-k below):

* ``mean`` (sample mean, Welford; discounting ``gamma``)::

      n_a <- gamma * n_a + 1 ;  d = r - mu_a ;  mu_a <- mu_a + d / n_a
      m2_a <- gamma * m2_a + d * (r - mu_a) ;  var_a = m2_a / n_a

* ``sgd`` (clipped-SGD robust mean; ``lr``, exponent ``decay``, ``clip``, ``n_max``)::

      n_a <- gamma * n_a + 1 ;  s = lr * min(n_a, n_max) ** (-decay) ;  d = clip(r - mu_a, -clip, clip)
      mu_a <- mu_a + s * d ;  var_a <- var_a + s * (d * d - var_a)

  The step stops decaying at ``n_max`` (the plugin's ``NCCLBOT_SGD_NMAX``), so a mean kept
  for a long job still follows a latency that drifts.

* ``gain`` (constant gain ``gain``)::

      n_a <- gamma * n_a + 1 ;  d = r - mu_a ;  mu_a <- mu_a + gain * d
      var_a <- var_a + gain * (d * d - var_a)

For ``sgd`` and ``gain`` the first observation of an arm with ``n_a == 0`` initialises it
(``mu_a = r``, ``var_a = 0``); a warm-start prior counts as that observation (paper I.13).
``n_a`` includes the warm-start pseudo-count ``nu``. Discounting follows the paper's
"discount each arm's statistics by gamma per update": the effective count of an arm then
saturates at ``1 / (1 - gamma)``.

Skip-first-k: the first ``k`` pulls of each arm are served and paid for but not learned
from (the lazy-initialisation transient, paper B.2); ``n_a`` and ``mu_a`` stay unchanged.

Adaptive observed max (``observed_max``, paper D.8 and Table 16's "AOM"): a wrapper around
every estimator that divides each learned reward by the bandit's running maximum ``M`` and,
when a reward exceeds ``M``, first rescales the bandit's statistics to the new maximum::

      if r > M:  q = M / r ;  mu_a <- q * mu_a ;  s2_a <- (q * q) * s2_a  (every arm) ;  M <- r
      r <- r / M

``M`` starts at 1, the reward scale of the cost-model prior (AUTO's own arm has prior
``mu_hat_min / mu_hat_min = 1``), so a warm start and the renormalised rewards share one
scale. Only the estimator's ``mu`` and ``s2`` are rescaled; policy-specific accumulators
(the adversarial families' cumulative losses) see renormalised rewards from then on.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ncclbot_sweep.errors import AnalysisError

__all__ = ["Estimator", "BanditState"]

_KINDS = ("mean", "sgd", "gain")


@dataclasses.dataclass(frozen=True)
class Estimator:
    """How a policy turns rewards into per-arm means (see the module docstring)."""

    kind: str = "mean"
    clip: float = 0.389
    lr: float = 0.468
    decay: float = 0.467
    n_max: float = 1024.0
    gain: float = 0.1
    discount: float = 1.0
    skip_first: int = 0
    observed_max: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise AnalysisError(f"estimator kind must be one of {', '.join(_KINDS)}, but got {self.kind!r}")
        if not 0.0 < self.discount <= 1.0:
            raise AnalysisError(f"discount must be in (0, 1], but got {self.discount}")
        if not self.n_max >= 1.0:
            raise AnalysisError(f"n_max must be at least 1, but got {self.n_max}")


@dataclasses.dataclass
class BanditState:
    """Statistics of ``B`` bandits over ``K`` padded arms.

    Attributes:
        offered: ``[B, K]`` arms each bandit may play (measured and kept by the filter).
        prior: ``[B, K]`` cost-model reward guess ``mu_hat_min / mu_hat(a)``, NaN if undefined.
        auto: ``[B]`` the cost model's arm (argmin predicted cost among offered arms).
        n, mu, s2: effective counts, reward means, and ``m2`` (``mean``) or variance.
        pulls: ``[B, K]`` times each arm was served (drives the pull-count replay).
        learned: ``[B, K]`` learned updates per arm.
        pending, resolved: ``[B, K]`` pulls whose reward is not applied yet (a delayed replay,
            the plugin's synchronisation rounds), and pulls whose reward (or its absence) was.
        selectable: ``[B, K]`` the arms a ``select`` may choose: ``offered`` less the arms the
            hold rule holds (:func:`.base.hold`); ``offered`` itself when nothing is held.
        peak: ``[B]`` running maximum of the learned rewards (adaptive observed max), from 1.
        extra: policy-specific arrays.

    ``offered`` is fixed once the bandits start (:meth:`offered_cells` keeps its layout).
    """

    offered: np.ndarray
    prior: np.ndarray
    auto: np.ndarray
    n: np.ndarray
    mu: np.ndarray
    s2: np.ndarray
    pulls: np.ndarray
    learned: np.ndarray
    pending: np.ndarray
    resolved: np.ndarray
    peak: np.ndarray
    extra: dict
    selectable: np.ndarray | None = None
    _cells: tuple | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.selectable is None:
            self.selectable = self.offered

    def offered_cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where the offered arms are, for work on them alone: ``(cells, rows, scratch)``.

        ``cells`` are the flat positions ``row * K + arm`` of the offered arms, row by row in
        arm order, ``rows`` the row of each; ``scratch`` is a ``[B, K]`` array that is ``-inf``
        at every arm not offered, for :func:`.base.offered_argmax` to fill at the offered ones.
        Built on first use and kept while ``offered`` is the same array.
        """
        if self._cells is None or self._cells[0] is not self.offered:
            rows, arms = np.nonzero(self.offered)
            scratch = np.full(self.offered.shape, -np.inf)
            self._cells = (self.offered, rows * self.offered.shape[1] + arms, rows, scratch)
        return self._cells[1:]

    @classmethod
    def empty(cls, offered: np.ndarray, prior: np.ndarray, auto: np.ndarray) -> BanditState:
        shape = offered.shape
        return cls(
            offered=offered.copy(), prior=prior.copy(), auto=auto.copy(),
            n=np.zeros(shape), mu=np.zeros(shape), s2=np.zeros(shape),
            pulls=np.zeros(shape, dtype=np.int64), learned=np.zeros(shape, dtype=np.int64),
            pending=np.zeros(shape, dtype=np.int64), resolved=np.zeros(shape, dtype=np.int64),
            peak=np.ones(shape[0]), extra={},
        )

    @property
    def rows(self) -> np.ndarray:
        return np.arange(self.offered.shape[0])

    def warm_start(self, pseudo_count: float) -> None:
        """Seed ``mu_a = prior_a`` backed by ``nu`` virtual pulls (arms with a prediction)."""
        if pseudo_count <= 0:
            return
        has = self.offered & np.isfinite(self.prior)
        self.mu = np.where(has, self.prior, 0.0)
        self.n = np.where(has, float(pseudo_count), 0.0)

    def variance(self, est: Estimator) -> np.ndarray:
        """Per-arm reward variance (0 where nothing is known)."""
        if est.kind == "mean":
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(self.n > 0, self.s2 / np.where(self.n > 0, self.n, 1.0), 0.0)
        return self.s2

    def learn_mask(self, rows: np.ndarray, arms: np.ndarray, est: Estimator) -> np.ndarray:
        """Which of these pulls are learned from (skip-first-k), before ``pulls`` advances."""
        return self.pulls[rows, arms] >= est.skip_first

    def renormalise(self, rows: np.ndarray, reward: np.ndarray, est: Estimator) -> np.ndarray:
        """The reward a policy learns from: ``reward`` itself, or with ``observed_max`` divided by
        the running maximum (statistics rescaled first when it grows; module docstring).

        Called by the engines (replay, :class:`StepPolicy`) once per learned pull, before the
        policy's update; ``rows`` are distinct.
        """
        if not est.observed_max:
            return reward
        peak = self.peak[rows]
        grows = reward > peak
        if grows.any():
            up = rows[grows]
            q = peak[grows] / reward[grows]
            self.mu[up] *= q[:, None]
            self.s2[up] *= (q * q)[:, None]
            peak = np.where(grows, reward, peak)
            self.peak[rows] = peak
        return reward / peak

    def update(self, rows: np.ndarray, arms: np.ndarray, reward: np.ndarray, est: Estimator) -> None:
        """Apply one learned reward per row (``rows`` already filtered by :meth:`learn_mask`).

        Called by the replay once per step with every learning bandit, so it works on flat
        positions and skips what cannot change a value: the multiplication by a discount of 1
        (``1.0 * n`` is ``n``) and the first-observation case once no arm is at ``n == 0``.
        """
        flat = rows * self.n.shape[1] + arms
        n, mu, s2 = self.n.reshape(-1), self.mu.reshape(-1), self.s2.reshape(-1)
        n_old, mu_old, s2_old = n[flat], mu[flat], s2[flat]
        n_new = n_old + 1.0 if est.discount == 1.0 else est.discount * n_old + 1.0
        d = reward - mu_old
        if est.kind == "mean":
            mu_new = d / n_new
            mu_new += mu_old
            s2_new = reward - mu_new
            s2_new *= d
            s2_new += s2_old if est.discount == 1.0 else est.discount * s2_old
        else:
            if est.kind == "sgd":
                step = np.power(np.minimum(n_new, est.n_max), -est.decay)
                step *= est.lr
                np.clip(d, -est.clip, est.clip, out=d)
            else:
                step = est.gain
            mu_new = step * d
            mu_new += mu_old
            s2_new = d * d
            s2_new -= s2_old
            s2_new *= step
            s2_new += s2_old
            first = n_old == 0
            if first.any():
                mu_new[first] = reward[first]
                s2_new[first] = 0.0
        n[flat] = n_new
        mu[flat] = mu_new
        s2[flat] = s2_new
        self.learned.reshape(-1)[flat] += 1
