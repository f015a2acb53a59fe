"""Adversarial and hierarchical policies (paper C.10-C.12, C.14, C.16): loss-based learners.

Losses are ``1 - r``; warm start seeds cumulative losses ``L_a = nu (1 - r_a)``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from .estimators import Estimator
from .base import NEG, Policy, loss_of, pick_uniform, sample_categorical, softmax_weights, warm_losses

__all__ = ["EXP3", "EXP3PP", "TsallisINF", "FPL", "Hierarchical"]


@dataclasses.dataclass(frozen=True)
class EXP3(Policy):
    """EXP3 (C.11): ``pi = (1-gamma) softmax(-eta L) + gamma/K``; ``L_A += loss / pi_A``."""

    name: ClassVar[str] = "EXP3"
    deterministic: ClassVar[bool] = False
    gamma: float = 0.0523
    eta: float = 1.51
    clip_loss: bool = False

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        state.extra["L"] = warm_losses(state, self.pseudo_count)

    def probabilities(self, state) -> np.ndarray:
        k_off = state.offered.sum(axis=1)[:, None]
        w = softmax_weights(-self.eta * state.extra["L"], state.offered, np.ones(state.offered.shape[0]))
        p = (1.0 - self.gamma) * w / w.sum(axis=1, keepdims=True) + self.gamma / k_off
        return np.where(state.offered, p, 0.0)

    def select(self, state, t, u, z):
        p = self.probabilities(state)
        state.extra["p"] = p
        return sample_categorical(p, u[:, 0])

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        p = state.extra["p"][rows, arms]
        state.extra["L"][rows, arms] += loss_of(reward, self.clip_loss) / p


@dataclasses.dataclass(frozen=True)
class EXP3PP(Policy):
    """EXP3++ (C.12; Seldin and Slivkins 2014), always cold.

    ``eta_t = beta sqrt(ln K / (t K))``; gap ``D_a = min(1, (L_a - min L) / t)``;
    ``xi_a = alpha ln(t)^2 / (t D_a^2)``; ``eps_a = min(1/(2K), eta_t, xi_a)``;
    ``pi = (1 - sum eps) softmax(-eta_t L) + eps``; ``L_A += loss / pi_A``.
    """

    name: ClassVar[str] = "EXP3++"
    deterministic: ClassVar[bool] = False
    alpha: float = 3.0
    beta: float = 0.5
    clip_loss: bool = False

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        state.extra["L"] = np.zeros(state.offered.shape)

    def select(self, state, t, u, z):
        k = state.offered.sum(axis=1).astype(float)
        big_l = state.extra["L"]
        eta = self.beta * np.sqrt(np.log(np.maximum(k, 2.0)) / (t * k))
        low = np.where(state.offered, big_l, np.inf).min(axis=1, keepdims=True)
        gap = np.minimum(1.0, (big_l - low) / t)
        with np.errstate(divide="ignore", invalid="ignore"):
            xi = np.where(gap > 0, self.alpha * np.log(t) ** 2 / (t * gap * gap), np.inf)
        eps = np.minimum(np.minimum(1.0 / (2.0 * k), eta)[:, None], xi)
        eps = np.where(state.offered, eps, 0.0)
        w = softmax_weights(-big_l, state.offered, 1.0 / eta)
        p = (1.0 - eps.sum(axis=1, keepdims=True)) * w / w.sum(axis=1, keepdims=True) + eps
        p = np.where(state.offered, p, 0.0)
        state.extra["p"] = p
        return sample_categorical(p, u[:, 0])

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        state.extra["L"][rows, arms] += loss_of(reward, self.clip_loss) / state.extra["p"][rows, arms]


@dataclasses.dataclass(frozen=True)
class TsallisINF(Policy):
    """1/2-Tsallis-INF (C.16; Zimmert and Seldin): ``w_a = 4 / (eta_t (L_a - x))^2``.

    ``eta_t = 2 alpha / sqrt(t)``; the normaliser ``x`` comes from ``newton_steps`` Newton
    steps from ``min L - 2 / eta_t`` (then ``w`` is renormalised). Loss estimators:
    ``iw`` (``L_A += loss / w_A``) or ``rv`` (reduced variance, ``L_a += 1[a=A] (loss -
    1/2) / w_a + 1/2``). Warm start ``L_a = nu (1 - r_a)``.
    """

    name: ClassVar[str] = "Tsallis-INF"
    deterministic: ClassVar[bool] = False
    pseudo_count: float = 1.0
    alpha: float = 0.883
    clip_loss: bool = True
    loss_estimator: str = "rv"
    newton_steps: int = 20

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        state.extra["L"] = warm_losses(state, self.pseudo_count)

    def weights(self, big_l: np.ndarray, mask: np.ndarray, t: int) -> np.ndarray:
        eta = 2.0 * self.alpha / np.sqrt(t)
        lm = np.where(mask, big_l, np.inf)
        x = lm.min(axis=1) - 2.0 / eta
        for _ in range(self.newton_steps):
            w = np.where(mask, 4.0 / (eta * (lm - x[:, None])) ** 2, 0.0)
            x = x - (w.sum(axis=1) - 1.0) / (eta * (w ** 1.5).sum(axis=1))
        w = np.where(mask, 4.0 / (eta * (lm - x[:, None])) ** 2, 0.0)
        return w / w.sum(axis=1, keepdims=True)

    def select(self, state, t, u, z):
        w = self.weights(state.extra["L"], state.offered, t)
        state.extra["p"] = w
        return sample_categorical(w, u[:, 0])

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        loss = loss_of(reward, self.clip_loss)
        p = state.extra["p"][rows, arms]
        big_l = state.extra["L"]
        if self.loss_estimator == "rv":
            big_l[rows] += np.where(state.offered[rows], 0.5, 0.0)
            big_l[rows, arms] += (loss - 0.5) / p
        else:
            big_l[rows, arms] += loss / p


@dataclasses.dataclass(frozen=True)
class FPL(Policy):
    """Follow the perturbed leader with Frechet(2) noise and geometric resampling (C.10).

    ``eta_t = eta / sqrt(t)``; play ``argmin L_a - f_a / eta_t`` with ``f_a = (-ln u_a)^(-1/2)``.
    The inverse probability of the played arm is estimated by up to ``resample`` fresh
    perturbations (the count until the argmin repeats, capped); ``L_A += loss * count``.
    """

    name: ClassVar[str] = "FPL"
    deterministic: ClassVar[bool] = False
    eta: float = 4.85
    resample: int = 16
    clip_loss: bool = False

    def draws(self, n_arms):
        return (n_arms * (1 + self.resample), 0)

    def init(self, state):
        state.extra["L"] = warm_losses(state, self.pseudo_count)

    def _leader(self, big_l, mask, u, eta):
        with np.errstate(divide="ignore"):
            f = np.power(-np.log(u), -0.5)
        return np.argmin(np.where(mask, big_l - f / eta, np.inf), axis=1)

    def select(self, state, t, u, z):
        k = state.offered.shape[1]
        eta = self.eta / np.sqrt(t)
        big_l = state.extra["L"]
        arms = self._leader(big_l, state.offered, u[:, :k], eta)
        count = np.full(arms.shape, self.resample)
        found = np.zeros(arms.shape, dtype=bool)
        for m in range(1, self.resample + 1):
            again = self._leader(big_l, state.offered, u[:, m * k:(m + 1) * k], eta) == arms
            hit = again & ~found
            count[hit] = m
            found |= again
        state.extra["count"] = count
        return arms

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        state.extra["L"][rows, arms] += loss_of(reward, self.clip_loss) * state.extra["count"][rows]


@dataclasses.dataclass(frozen=True)
class Hierarchical(Policy):
    """EXP3 parent over algorithm groups, Softmax children over each group's arms (C.14).

    Both levels get the same reward. Warm start: children ``mu_a = r_a`` with ``nu``;
    parent ``L_g = nu (1 - max_{a in g} r_a)``. Skip-first-k applies to both levels.
    Groups come from ``state.extra["group"]`` (``[K]`` group id per arm, set by the replay).
    """

    name: ClassVar[str] = "Hierarchical"
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(skip_first=3)
    pseudo_count: float = 2.0
    parent_gamma: float = 0.0523
    parent_eta: float = 1.51
    tau: float = 0.089
    decay: bool = True

    def draws(self, n_arms):
        return (2, 0)

    def init(self, state):
        super().init(state)
        b, k = state.offered.shape
        group = state.extra.get("group", np.zeros(k, dtype=np.int64))
        n_groups = int(group.max()) + 1
        member = group[None, :] == np.arange(n_groups)[:, None]  # [G, K]
        state.extra["member"] = member
        gmask = (state.offered[:, None, :] & member[None]).any(axis=2)  # [B, G]
        state.extra["gmask"] = gmask
        prior = np.where(state.offered & np.isfinite(state.prior), state.prior, NEG)
        gprior = np.where(member[None], prior[:, None, :], NEG).max(axis=2)
        gprior = np.where(np.isfinite(gprior), gprior, 1.0)
        state.extra["L"] = np.where(gmask, self.pseudo_count * (1.0 - gprior), 0.0)
        state.extra["selections"] = np.zeros((b, n_groups))

    def select(self, state, t, u, z):
        gmask = state.extra["gmask"]
        k_off = gmask.sum(axis=1)[:, None]
        w = softmax_weights(-self.parent_eta * state.extra["L"], gmask, np.ones(gmask.shape[0]))
        p = np.where(gmask, (1.0 - self.parent_gamma) * w / w.sum(axis=1, keepdims=True)
                     + self.parent_gamma / k_off, 0.0)
        g = sample_categorical(p, u[:, 0])
        state.extra["p"], state.extra["g"] = p, g
        inside = state.offered & state.extra["member"][g]
        unpulled = inside & (state.n == 0)
        cold = unpulled.any(axis=1)
        sel = state.extra["selections"]
        sel[state.rows, g] += ~cold
        tau = np.full(g.shape, self.tau)
        if self.decay:
            tau = self.tau / np.sqrt(np.maximum(sel[state.rows, g], 1.0))
        arms = sample_categorical(softmax_weights(state.mu, inside, tau), u[:, 1])
        if cold.any():
            arms = np.where(cold, pick_uniform(unpulled, u[:, 1]), arms)
        return arms

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        g = state.extra["g"][rows]
        state.extra["L"][rows, g] += loss_of(reward, False) / state.extra["p"][rows, g]


#: Policy name -> class (names as they appear in tables and on the command line).
