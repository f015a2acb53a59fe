"""Supervised Day-1 selectors (paper section 5, Tables 5, 41, 46, 51): fit once, then argmin.

A regressor of log latency per (context, arm) is fit on the train contexts' measured steady
means; on every context it predicts each offered arm's latency and plays the argmin for the
whole horizon (a fixed arm, so zero seed variance). Models (scikit-learn, imported on use):

* ``Linear`` ridge regression (fixed setting: ``alpha=1e-6``, least squares in effect);
* ``RF`` random forest (fixed: 400 trees, leaf size 2);
* ``GBM`` gradient boosting (fixed: 300 depth-4 trees at rate 0.08);

each with ``+cost``, which adds the cost model's own prediction ``log mu_hat(a)`` as a
feature. Features: log2 message size, collective, algorithm and protocol (one-hot), log2
node count (``use_nodes``, which tuning may drop: trees cannot extrapolate it), [+cost].
Random states are fixed (0), so a fit is a function of its train rows.

Fitting sees only train contexts: :meth:`Supervised.prepare` takes the split's labels; with
a train part it fits once on it, and with none (leave-one-collective-out) it fits once per
fold on the other folds' contexts. ``labelled`` (mini-sweep, Table 51) adds extra target-scale
(context, arm) cells to the train rows.

Importing this module registers the six names with the policy registry
(:func:`~ncclbot_sweep.analysis.policies.register_selectors`), so ``--policies GBM+cost`` and
:func:`~ncclbot_sweep.analysis.policies.parse_policy` know them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.names import Arm

from ..policies import Policy, register_selectors
from ..replay import ReplayProblem

__all__ = ["MODELS", "SUPERVISED", "Supervised", "make_supervised", "features", "fit_choices", "selection_trlt",
           "validation_folds", "validation_trlt"]

MODELS = ("Linear", "RF", "GBM")
#: The six selectors of the paper's baselines, as ``--policies`` names.
SUPERVISED = tuple(f"{m}{c}" for m in MODELS for c in ("", "+cost"))


def features(problem: ReplayProblem, *, cost: bool, use_nodes: bool) -> np.ndarray:
    """``[C, K, F]`` features of every (context, arm) (see the module docstring)."""
    ctx = problem.contexts
    n_ctx, n_arms = problem.pools.depth.shape
    arms = [Arm.parse(a) for a in problem.pools.arms]
    algos = sorted({a.algorithm for a in arms})
    protos = sorted({a.protocol for a in arms})
    colls = sorted(ctx["collective"].unique())
    cols = [np.repeat(np.log2(ctx["size_bytes"].to_numpy(float))[:, None], n_arms, axis=1)]
    cols += [np.repeat((ctx["collective"].to_numpy() == c)[:, None], n_arms, axis=1).astype(float) for c in colls]
    cols += [np.tile([float(a.algorithm == g) for a in arms], (n_ctx, 1)) for g in algos]
    cols += [np.tile([float(a.protocol == p) for a in arms], (n_ctx, 1)) for p in protos]
    if use_nodes:
        cols.append(np.repeat(np.log2(ctx["nodes"].to_numpy(float))[:, None], n_arms, axis=1))
    if cost:
        with np.errstate(divide="ignore", invalid="ignore"):
            cols.append(np.log(problem.predicted))
    return np.stack(cols, axis=2)


@dataclasses.dataclass(frozen=True)
class Supervised(Policy):
    """A fit-once regressor of latency per arm, playing its argmin (a replay policy)."""

    name: ClassVar[str] = "Supervised"
    model: str = "GBM"
    cost: bool = False
    use_nodes: bool = True
    n_estimators: int = 300
    learning_rate: float = 0.08
    max_depth: int = 4
    min_samples_leaf: int = 1
    subsample: float = 1.0
    max_features: float = 1.0
    alpha: float = 1e-6
    choice: tuple | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def display_name(self) -> str:
        return self.label or f"{self.model}{'+cost' if self.cost else ''}"

    def regressor(self):
        """A fresh scikit-learn regressor with this selector's settings."""
        if self.model == "Linear":
            from sklearn.linear_model import Ridge

            return Ridge(alpha=self.alpha)
        if self.model == "RF":
            from sklearn.ensemble import RandomForestRegressor

            return RandomForestRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth or None,
                                         min_samples_leaf=self.min_samples_leaf, max_features=self.max_features,
                                         random_state=0, n_jobs=1)
        from sklearn.ensemble import GradientBoostingRegressor

        return GradientBoostingRegressor(n_estimators=self.n_estimators, learning_rate=self.learning_rate,
                                         max_depth=self.max_depth, min_samples_leaf=self.min_samples_leaf,
                                         subsample=self.subsample, max_features=self.max_features, random_state=0)

    @property
    def fitted(self) -> bool:
        """Whether :meth:`prepare` has fixed this selector's arms (the replay then leaves it be)."""
        return self.choice is not None

    def prepare(self, problem: ReplayProblem, labels: pd.DataFrame, *, labelled=None) -> Supervised:
        """This selector fitted on the split's train contexts: a copy whose ``choice`` is set."""
        return dataclasses.replace(self, choice=tuple(fit_choices(self, problem, labels, labelled=labelled)))

    def init(self, state) -> None:
        if self.choice is None:
            raise AnalysisError(f"{self.display_name} is a fit-once selector and has not been fitted",
                                hint="replay it through run_replay (which fits it on the split's train part)")

    def select(self, state, t, u, z):
        choice = np.asarray(self.choice, dtype=np.int64)
        return np.resize(choice, state.offered.shape[0])

    def update(self, state, rows, arms, reward):
        pass


def _fit_predict(policy: Supervised, x: np.ndarray, y: np.ndarray, train_cells: np.ndarray,
                 rows: np.ndarray, offered: np.ndarray) -> np.ndarray:
    """Fit on the ``train_cells`` mask of ``[C, K]`` and return the argmin arm of each row in ``rows``."""
    xs, ys = x[train_cells], y[train_cells]
    if len(ys) < 2:
        raise AnalysisError("a supervised selector needs at least two labelled (context, arm) cells to fit",
                            hint="use a split with train contexts (--split scale or random)")
    model = policy.regressor().fit(np.nan_to_num(xs, nan=0.0), ys)
    k = x.shape[1]
    pred = model.predict(np.nan_to_num(x[rows].reshape(-1, x.shape[2]), nan=0.0)).reshape(len(rows), k)
    return np.argmin(np.where(offered[rows], pred, np.inf), axis=1)


def fit_choices(policy: Supervised, problem: ReplayProblem, labels: pd.DataFrame, *, labelled=None) -> np.ndarray:
    """``[C]`` arm each context plays; fits never see a test context's labels.

    ``labelled`` is an optional ``(mask, values)`` pair of ``[C, K]`` arrays: extra labelled
    cells (a target-scale mini-sweep) and their measured latency (us), which join the train rows.
    """
    x = features(problem, cost=policy.cost, use_nodes=policy.use_nodes)
    with np.errstate(divide="ignore"):
        y = np.log(problem.pools.steady)
    measured = problem.pools.measured & np.isfinite(y)
    part, fold = labels["part"].to_numpy(), labels["fold"].to_numpy()
    choice = problem.auto.copy()
    extra = np.zeros_like(measured)
    if labelled is not None:
        extra = labelled[0] & measured
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(extra, np.log(labelled[1]), y)
    if (part == "train").any():
        cells = measured & (part == "train")[:, None] | extra
        return _fit_predict(policy, x, y, cells, np.arange(len(problem)), problem.offered)
    for name in pd.unique(fold):
        rows = np.flatnonzero(fold == name)
        cells = measured & (fold != name)[:, None] | extra
        choice[rows] = _fit_predict(policy, x, y, cells, rows, problem.offered)
    return choice


def selection_trlt(problem: ReplayProblem, choice: np.ndarray) -> np.ndarray:
    """Selection-priced TRLT of playing ``choice`` on every context (a fixed arm's steady excess)."""
    c = np.arange(len(problem))
    steady = problem.pools.steady
    return steady[c, choice] / steady[c, problem.pools.best] - 1.0


_FIXED = {"Linear": {}, "RF": {"n_estimators": 400, "min_samples_leaf": 2, "max_depth": 0},
          "GBM": {"n_estimators": 300, "max_depth": 4, "learning_rate": 0.08}}


def make_supervised(name: str, **params) -> Supervised:
    """``Linear``, ``RF``, ``GBM`` (``+cost``) with the paper's fixed settings, overridden by ``params``."""
    model, plus, tail = name.partition("+")
    key = {m.lower(): m for m in MODELS}.get(model.strip().lower())
    if key is None or (plus and tail.strip().lower() != "cost"):
        raise AnalysisError(f"supervised selector must be one of {', '.join(SUPERVISED)}, but got {name!r}")
    fields = {f.name for f in dataclasses.fields(Supervised)} - {"choice", "estimator"}
    unknown = set(params) - fields
    if unknown:
        raise AnalysisError(f"{name} has no parameter {sorted(unknown)}; it takes {sorted(fields)}")
    return Supervised(model=key, cost=bool(plus), **{**_FIXED[key], **params})


register_selectors(MODELS, make_supervised)


def validation_folds(contexts: pd.DataFrame, split: str, *, seed: int = 42) -> list[np.ndarray]:
    """Validation masks inside a train partition that copy the shift the split tests (Table 41).

    Leave one train node count out for the scale splits, one train collective out for
    leave-one-collective-out, 5 folds over contexts (``seed``) for random splits.
    """
    if split.startswith("loco"):
        key = contexts["collective"].to_numpy()
    elif split.startswith("random"):
        key = np.random.default_rng(seed).permutation(len(contexts)) % 5
    else:
        key = contexts["nodes"].to_numpy()
    values = pd.unique(key)
    if len(values) < 2:
        raise AnalysisError(f"the train partition of split {split!r} has one group ({values[0]}), so no validation fold",
                            hint="tune supervised selectors on a split whose train part spans two node counts or collectives")
    return [key == v for v in values]


def validation_trlt(policy: Supervised, train: ReplayProblem, split: str, *, seed: int = 42) -> float:
    """Mean selection-priced TRLT over every validation context of :func:`validation_folds`."""
    total, count = 0.0, 0
    for val in validation_folds(train.contexts, split, seed=seed):
        labels = pd.DataFrame({"part": np.where(val, "test", "train"), "fold": "val"})
        choice = fit_choices(policy, train, labels)
        trlt = selection_trlt(train, choice)[val]
        total, count = total + float(trlt.sum()), count + int(val.sum())
    return total / count
