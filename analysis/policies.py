"""Bandit policies of NCCL-BOT (paper appendix C), vectorised over many bandits at once.

Every policy works on a :class:`~.estimators.BanditState` of ``B`` independent bandits
(one per context and seed) and has three hooks, called by the replay engine once per step
``t = 1..T``:

* ``init(state)`` once: warm start and policy arrays;
* ``select(state, t, u, z) -> arms[B]`` with ``u`` ``[B, n_uniform]`` uniforms in [0, 1) and
  ``z`` ``[B, n_normal]`` standard normals drawn by the engine (see :func:`draw_counts`);
* ``update(state, rows, arms, reward)`` with the learned pulls only (skip-first-k applied).

Shared conventions (the plugin must match them bit for bit in float64):

* Arms are on NCCL's scan order (algorithm index, then protocol index); every ``argmax`` or
  ``argmin`` tie goes to the **lowest arm index**, and "unpulled arms first" in
  deterministic policies also takes the lowest index (the paper draws them at random; a
  fixed order keeps UCB-family policies deterministic, so every rank agrees).
* Reward ``r = mu_hat_min / X`` with ``mu_hat_min`` the smallest prediction among measured
  arms; arm filter ``predicted <= rho_max * mu_hat_min`` (undefined predictions kept).
* Warm start: ``mu_a = mu_hat_min / mu_hat(a)`` with ``n_a = nu`` virtual pulls for
  mean-based policies; cumulative losses ``L_a = nu * (1 - r_a)`` for loss-based ones.

**UCB1** (featured policy; defaults are the paper's champion, Table 16), all float64:

* start: for every offered arm with a prediction ``mu_a = mu_hat_min / mu_hat(a)``,
  ``n_a = 2.89``; offered arms without a prediction ``mu_a = 0``, ``n_a = 0``;
* select: ``N = n_0 + n_1 + ...`` summed left to right in arm order (pseudo-counts
  included); if some offered arm has ``n_a == 0`` play the lowest-index one; else play the
  lowest index maximising ``mu_a + alpha * sqrt((2.0 * ln(max(N, 1.0))) / n_a)``, evaluated
  in that order (``alpha = 0.0928``);
* update with latency ``X`` (us): ``r = mu_hat_min / X``; ``n_a <- n_a + 1``;
  if the old ``n_a`` was 0 then ``mu_a = r``, else ``s = 0.468 * pow(n_a, -0.467)`` (new
  ``n_a``), ``d = min(max(r - mu_a, -0.389), 0.389)``, ``mu_a <- mu_a + s * d``.

``ln``/``pow`` are numpy's float64 ``log``/``power`` (libm-compatible for these inputs).
**Greedy** is ``EpsilonGreedy(eps=0)``: start as above with ``n_a = 0.892`` and the sample
mean ``mu_a <- mu_a + (r - mu_a) / n_a``; play the lowest index maximising ``mu_a``.

For a single bandit driven call by call (the C plugin's reference), use :class:`StepPolicy`.
Loss-based learners live in :mod:`.adversarial` and the shared helpers in
:mod:`.policy_base`; everything is re-exported here, with the registry :data:`POLICIES`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ncclbot_sweep.errors import AnalysisError

from .adversarial import EXP3, EXP3PP, FPL, Hierarchical, TsallisINF
from .estimators import BanditState, Estimator
from .policy_base import Policy, iqr_trimmed_mean, pick_uniform, sample_categorical
from .policy_base import log_n as _log_n
from .policy_base import masked_argmax as _masked_argmax
from .policy_base import softmax_weights as _softmax_weights
from .policy_base import unpulled_first as _unpulled_first

__all__ = [
    "Policy", "Auto", "RandomPolicy", "UCB1", "KLUCB", "Softmax", "GaussianThompson",
    "EpsilonGreedy", "ETC", "RoundRobinETC", "UCBV", "UCBTuned", "EXP3", "EXP3PP",
    "TsallisINF", "FPL", "Hierarchical", "POLICIES", "make_policy", "parse_policy", "split_policy_list",
    "draw_counts", "StepPolicy",
    "pick_uniform", "sample_categorical", "iqr_trimmed_mean",
]


@dataclasses.dataclass(frozen=True)
class Auto(Policy):
    """NCCL's cost model: always the argmin predicted arm (appendix C.1); never learns."""

    name: ClassVar[str] = "AUTO"

    def init(self, state: BanditState) -> None:
        pass

    def select(self, state, t, u, z):
        return state.auto

    def update(self, state, rows, arms, reward):
        pass


@dataclasses.dataclass(frozen=True)
class RandomPolicy(Policy):
    """Uniform over the offered arms (C.2); a lower reference."""

    name: ClassVar[str] = "Random"
    deterministic: ClassVar[bool] = False

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        pass

    def select(self, state, t, u, z):
        return pick_uniform(state.offered, u[:, 0])

    def update(self, state, rows, arms, reward):
        pass


@dataclasses.dataclass(frozen=True)
class UCB1(Policy):
    """UCB1 with tuned alpha, warm start and clipped-SGD mean (C.3; champion defaults)."""

    name: ClassVar[str] = "UCB1"
    estimator: Estimator = Estimator(kind="sgd", clip=0.389, lr=0.468, decay=0.467)
    pseudo_count: float = 2.89
    alpha: float = 0.0928

    def select(self, state, t, u, z):
        log_n = _log_n(state)
        with np.errstate(divide="ignore", invalid="ignore"):
            bonus = 2.0 * log_n[:, None] / state.n
            np.sqrt(bonus, out=bonus)
            bonus *= self.alpha
            bonus += state.mu
        return _unpulled_first(state, _masked_argmax(bonus, state.offered))


@dataclasses.dataclass(frozen=True)
class KLUCB(Policy):
    """Bernoulli KL-UCB (C.6): largest ``q`` with ``n KL(mu, q) <= c ln N`` by bisection."""

    name: ClassVar[str] = "KL-UCB"
    pseudo_count: float = 1.56
    c: float = 0.0373
    iterations: int = 25

    def select(self, state, t, u, z):
        eps = 1e-12
        p = np.clip(state.mu, 0.0, 1.0)
        bound = self.c * _log_n(state)[:, None]
        lo, hi = p.copy(), np.ones_like(p)
        pc = np.clip(p, eps, 1 - eps)
        for _ in range(self.iterations):
            mid = 0.5 * (lo + hi)
            qc = np.clip(mid, eps, 1 - eps)
            kl = pc * np.log(pc / qc) + (1 - pc) * np.log((1 - pc) / (1 - qc))
            ok = state.n * kl <= bound
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid)
        return _unpulled_first(state, _masked_argmax(lo, state.offered))


@dataclasses.dataclass(frozen=True)
class Softmax(Policy):
    """Boltzmann exploration (C.13) with optional ``tau / sqrt(N_softmax)`` decay."""

    name: ClassVar[str] = "Softmax"
    deterministic: ClassVar[bool] = False
    pseudo_count: float = 1.24
    tau: float = 0.089
    decay: bool = True

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        super().init(state)
        state.extra["selections"] = np.zeros(state.offered.shape[0])

    def select(self, state, t, u, z):
        # Counts never return to 0, so once every offered arm is pulled the check is skipped.
        if state.extra.get("all_pulled"):
            unpulled, cold = None, np.zeros(state.offered.shape[0], dtype=bool)
        else:
            unpulled = state.offered & (state.n == 0)
            cold = unpulled.any(axis=1)
            state.extra["all_pulled"] = not cold.any()
        sel = state.extra["selections"]
        sel += ~cold
        tau = np.full(sel.shape, self.tau)
        if self.decay:
            tau = self.tau / np.sqrt(np.maximum(sel, 1.0))
        arms = sample_categorical(_softmax_weights(state.mu, state.offered, tau), u[:, 0])
        if cold.any():
            arms = np.where(cold, pick_uniform(unpulled, u[:, 0]), arms)
        return arms


@dataclasses.dataclass(frozen=True)
class GaussianThompson(Policy):
    """Gaussian Thompson sampling (C.15): ``mu~_a = mu_a + sqrt(v_a / n_a) z_a``.

    ``v_a`` is the prior variance while ``n_a < 2`` and the estimator's variance after;
    ``n_a = 0`` divides by 1. Champion: skip-first-1, prior variance 3.01e-4, nu 0.491.
    """

    name: ClassVar[str] = "GaussianTS"
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(skip_first=1)
    pseudo_count: float = 0.491
    prior_var: float = 0.000301

    def draws(self, n_arms):
        return (0, n_arms)

    def select(self, state, t, u, z):
        v = np.where(state.n < 2, self.prior_var, state.variance(self.estimator))
        scale = np.sqrt(v / np.where(state.n > 0, state.n, 1.0))
        return _masked_argmax(state.mu + scale * z, state.offered)


@dataclasses.dataclass(frozen=True)
class EpsilonGreedy(Policy):
    """Epsilon-greedy (C.7), ``eps_t = eps / sqrt(t)`` with decay; ``eps = 0`` is Greedy."""

    name: ClassVar[str] = "eps-greedy"
    deterministic: ClassVar[bool] = False
    pseudo_count: float = 0.892
    eps: float = 0.0
    decay: bool = False

    @property
    def is_deterministic(self) -> bool:
        return self.eps == 0.0

    def draws(self, n_arms):
        return (2, 0)

    def select(self, state, t, u, z):
        greedy = _masked_argmax(state.mu, state.offered)
        if self.eps == 0.0:
            return greedy
        eps = self.eps / np.sqrt(t) if self.decay else self.eps
        return np.where(u[:, 0] < eps, pick_uniform(state.offered, u[:, 1]), greedy)


@dataclasses.dataclass(frozen=True)
class ETC(Policy):
    """Explore-then-commit (C.8): ``m`` learned pulls per arm at random, then argmax mean."""

    name: ClassVar[str] = "ETC"
    deterministic: ClassVar[bool] = False
    estimator: Estimator = Estimator(skip_first=1)
    m: int = 1

    def draws(self, n_arms):
        return (1, 0)

    def init(self, state):
        state.extra["commit"] = np.full(state.offered.shape[0], -1)

    def select(self, state, t, u, z):
        eligible = state.offered & (state.learned < self.m)
        exploring = eligible.any(axis=1)
        commit = state.extra["commit"]
        fresh = ~exploring & (commit < 0)
        commit[fresh] = _masked_argmax(state.mu, state.offered)[fresh]
        return np.where(exploring, pick_uniform(eligible, u[:, 0]), commit)


@dataclasses.dataclass(frozen=True)
class RoundRobinETC(Policy):
    """Madan et al. round-robin ETC (C.9): lexicographic order, IQR-trimmed commit, AUTO gate.

    Costs are ``c = -r``. Taken literally from the paper, the gate's relative improvement
    ``iota = (c_auto - c_star) / c_auto`` is only used when ``c_auto > 0``; with positive
    rewards ``c_auto < 0``, so ``iota`` is ``+inf`` whenever another arm is strictly cheaper
    and the gate never overrides. Kept as specified.
    """

    name: ClassVar[str] = "RR-ETC"
    estimator: Estimator = Estimator(skip_first=1)
    m: int = 1
    gate: float = 0.0102

    def init(self, state):
        b, k = state.offered.shape
        # lex_rank: rank of each arm's string in lexicographic order, set by the replay
        # (paper C.9 sorts arms lexicographically); default is the arm axis order.
        rank = np.asarray(state.extra.get("lex_rank", np.arange(k)))
        key = np.where(state.offered, rank[None, :], k + 1)
        state.extra["order"] = np.argsort(key, axis=1, kind="stable")
        state.extra["costs"] = np.full((b, k, self.m), np.nan)
        state.extra["commit"] = np.full(b, -1)
        state.extra["inner"] = np.zeros(b, dtype=np.int64)

    def select(self, state, t, u, z):
        k_off = state.offered.sum(axis=1)
        inner = state.extra["inner"]
        exploring = inner < self.m * k_off
        pos = inner % np.maximum(k_off, 1)
        rr = state.extra["order"][state.rows, pos]
        commit = state.extra["commit"]
        fresh = ~exploring & (commit < 0)
        if fresh.any():
            commit[fresh] = self._commit(state, np.flatnonzero(fresh))
        return np.where(exploring, rr, commit)

    def _commit(self, state, rows):
        cbar = iqr_trimmed_mean(state.extra["costs"][rows])
        cbar = np.where(state.offered[rows], cbar, np.inf)
        star = np.argmin(np.nan_to_num(cbar, nan=np.inf), axis=1)
        auto = state.auto[rows]
        c_auto = cbar[np.arange(len(rows)), auto]
        c_star = cbar[np.arange(len(rows)), star]
        with np.errstate(divide="ignore", invalid="ignore"):
            iota = np.where(c_auto > 0, (c_auto - c_star) / c_auto, np.where(c_star < c_auto, np.inf, 0.0))
        return np.where(iota < self.gate, auto, star)

    def update(self, state, rows, arms, reward):
        super().update(state, rows, arms, reward)
        inner = state.extra["inner"]
        slot = state.learned[rows, arms] - 1
        keep = slot < self.m
        state.extra["costs"][rows[keep], arms[keep], slot[keep]] = -reward[keep]
        inner[rows] += 1


@dataclasses.dataclass(frozen=True)
class UCBV(Policy):
    """UCB-V (C.4): ``mu + sqrt(2 var zeta ln N / n) + c zeta ln N / n``."""

    name: ClassVar[str] = "UCB-V"
    pseudo_count: float = 1.73
    zeta: float = 0.501
    c: float = 1.02

    def select(self, state, t, u, z):
        log_n = _log_n(state)[:, None]
        var = state.variance(self.estimator)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = (state.mu + np.sqrt(2.0 * var * self.zeta * log_n / state.n)
                     + self.c * self.zeta * log_n / state.n)
        return _unpulled_first(state, _masked_argmax(score, state.offered))


@dataclasses.dataclass(frozen=True)
class UCBTuned(Policy):
    """UCB-tuned (C.5): ``mu + sqrt(ln N / n * min(1/4, var + sqrt(2 ln N / n)))``."""

    name: ClassVar[str] = "UCB-tuned"
    pseudo_count: float = 2.0

    def select(self, state, t, u, z):
        log_n = _log_n(state)[:, None]
        var = state.variance(self.estimator)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = var + np.sqrt(2.0 * log_n / state.n)
            score = state.mu + np.sqrt(log_n / state.n * np.minimum(0.25, v))
        return _unpulled_first(state, _masked_argmax(score, state.offered))


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (Auto, RandomPolicy, UCB1, KLUCB, Softmax, GaussianThompson, EpsilonGreedy, ETC,
                RoundRobinETC, UCBV, UCBTuned, EXP3, EXP3PP, TsallisINF, FPL, Hierarchical)
}
_ALIASES = {"auto": "AUTO", "random": "Random", "klucb": "KL-UCB", "kl-ucb": "KL-UCB", "ts": "GaussianTS",
            "thompson": "GaussianTS", "greedy": "eps-greedy", "epsilon-greedy": "eps-greedy",
            "rretc": "RR-ETC", "madan": "RR-ETC", "ucbv": "UCB-V", "ucb-tuned": "UCB-tuned",
            "ucbtuned": "UCB-tuned", "exp3pp": "EXP3++", "tsallis": "Tsallis-INF", "hier": "Hierarchical"}


def make_policy(name: str, **params) -> Policy:
    """Build a policy by name (case-insensitive, common aliases) with champion defaults.

    ``params`` override fields; ``estimator`` may be an :class:`Estimator` or a dict of its
    fields merged into the policy's default estimator. Raises :class:`AnalysisError` on an
    unknown name or parameter.
    """
    key = {k.lower(): k for k in POLICIES}.get(name.lower()) or _ALIASES.get(name.lower())
    if key is None:
        raise AnalysisError(f"policy must be one of {', '.join(POLICIES)}, but got {name!r}")
    cls = POLICIES[key]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(params) - fields
    if unknown:
        raise AnalysisError(f"{key} has no parameter {sorted(unknown)}; it takes {sorted(fields)}")
    est = params.get("estimator")
    if isinstance(est, dict):
        names = {f.name for f in dataclasses.fields(Estimator)}
        if set(est) - names:
            raise AnalysisError(f"estimator has no parameter {sorted(set(est) - names)}; it takes {sorted(names)}")
        params["estimator"] = dataclasses.replace(cls().estimator, **est)
    return cls(**params)


def split_policy_list(text: str) -> list[str]:
    """Split ``"AUTO,UCB1[alpha=0.2;pseudo_count=0],Softmax"`` on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return [p for p in parts if p]


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_policy(spec: str) -> Policy:
    """Build a policy from ``NAME`` or ``NAME[key=value;...]`` (the CLI's ``--policies`` items).

    Keys are policy fields; ``estimator.<field>`` sets the estimator; ``label`` names the
    row in result tables, e.g. ``UCB1[estimator.kind=gain;estimator.gain=0.1;label=UCB1-gain]``.
    """
    name, _, rest = spec.strip().partition("[")
    params: dict = {}
    if rest:
        if not rest.endswith("]"):
            raise AnalysisError(f"policy spec must look like NAME[key=value;...], but got {spec!r}")
        for item in filter(None, (p.strip() for p in rest[:-1].split(";"))):
            key, eq, value = item.partition("=")
            if not eq:
                raise AnalysisError(f"policy parameter must be key=value, but got {item!r} in {spec!r}")
            key = key.strip()
            if key.startswith("estimator."):
                params.setdefault("estimator", {})[key.split(".", 1)[1]] = _value(value)
            else:
                params[key] = _value(value) if key != "label" else value.strip()
    try:
        return make_policy(name.strip(), **params)
    except TypeError as exc:
        raise AnalysisError(f"bad parameters in policy spec {spec!r}: {exc}") from exc


def draw_counts(policy: Policy, n_arms: int) -> tuple[int, int]:
    """Uniforms and normals per bandit per step, in the order the engine draws them.

    The engine draws, at every step and for every seed block, ``rng.random((rows, nu))``
    then ``rng.standard_normal((rows, nz))`` (skipping empty ones) from
    ``numpy.random.default_rng(seed)``.
    """
    return policy.draws(n_arms)


class StepPolicy:
    """One bandit driven call by call: the Python reference for the C plugin.

    ``predicted_us`` lists the cost model's prediction per arm (None or NaN = undefined) on
    the caller's arm order, which must be NCCL's scan order for ties to match. The filter
    ``rho_max`` and the reward ``mu_hat_min / latency`` are applied here.

    >>> p = StepPolicy(make_policy("UCB1"), [10.0, 12.0, 30.0])
    >>> arm = p.select(); p.update(arm, 11.0)
    """

    def __init__(self, policy: Policy, predicted_us, *, rho_max: float = 2.0, seed: int = 0) -> None:
        pred = np.array([np.nan if v is None else float(v) for v in predicted_us], dtype=float)
        if not np.isfinite(pred).any():
            raise AnalysisError("StepPolicy needs at least one defined prediction")
        self.policy = policy
        self.mu_hat_min = float(np.nanmin(pred))
        offered = ~(pred > rho_max * self.mu_hat_min)
        auto = int(np.nanargmin(np.where(offered, pred, np.nan)))
        self.state = BanditState.empty(offered[None, :], (self.mu_hat_min / pred)[None, :], np.array([auto]))
        policy.init(self.state)
        self._rng = np.random.default_rng(seed)
        self.t = 0
        self._last: int | None = None

    @property
    def offered(self) -> list[bool]:
        return [bool(v) for v in self.state.offered[0]]

    def select(self) -> int:
        """Choose the arm index for the next call."""
        self.t += 1
        nu, nz = draw_counts(self.policy, self.state.offered.shape[1])
        u = self._rng.random((1, nu)) if nu else None
        z = self._rng.standard_normal((1, nz)) if nz else None
        self._last = int(self.policy.select(self.state, self.t, u, z)[0])
        return self._last

    def update(self, arm: int, latency_us: float) -> float:
        """Feed the measured latency of the arm just played; returns the reward used."""
        reward = np.array([self.mu_hat_min / float(latency_us)])
        rows, arms = np.array([0]), np.array([int(arm)])
        if self.state.learn_mask(rows, arms, self.policy.estimator)[0]:
            self.policy.update(self.state, rows, arms, reward)
        self.state.pulls[0, arm] += 1
        return float(reward[0])

    def means(self) -> list[float]:
        """Current per-arm reward means (for cross-checking the plugin's state)."""
        return [float(v) for v in self.state.mu[0]]
