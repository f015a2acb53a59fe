"""Conditional search spaces of the 14 learning families (paper appendix E, Table 16).

Every family has an *educated guess* (trial 0, enqueued before any sampled trial) and a
``suggest`` function that asks an Optuna trial for its knobs. The spaces are conditional as
the paper describes, which TPE models directly:

* ``warm`` (cost-model warm start) on/off; ``pc`` (the pseudo-count nu) exists only when on;
  a cold campaign (``analyze tune --cold``, Table 42) pins it off;
* ``robust`` (clipped-SGD mean) on/off; ``clip``, ``lr`` and ``decay_exp`` exist only when on;
* ``skip_first`` (skip-first-k learning updates per arm);
* ``aom`` (the adaptive observed-max reward wrapper, ``estimator.observed_max``) on/off, for
  every learning family; off in every trial-0 guess;
* Hierarchical: parent (EXP3 over algorithm groups) and child (Softmax) subspaces,
  ``parent.*`` and ``child.*``;
* each family's own knobs (alpha, c, tau, prior variance, eps, m, gate, gamma, eta, ...).

EXP3++, ETC and RR-ETC expose no warm start (always cold).

The supervised selectors (``GBM+cost`` ...) have spaces over their scikit-learn settings and
the node-count feature (:data:`SUPERVISED_FAMILIES`, Table 41).

Parameters map to a policy spec in the ``--policies`` grammar (:func:`policy_spec`); every
field is written out, floats as ``repr`` so a spec replays bit for bit what its trial scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ncclbot_sweep.errors import AnalysisError

__all__ = ["FAMILIES", "SUPERVISED_FAMILIES", "Family", "family", "defaults", "suggest", "policy_spec", "changed_knobs"]

Params = dict[str, object]


def _warm(trial, params: Params) -> None:
    params["warm"] = trial.suggest_categorical("warm", [False, True])
    if params["warm"]:
        params["pc"] = trial.suggest_float("pc", 0.05, 10.0, log=True)


def _robust(trial, params: Params) -> None:
    params["robust"] = trial.suggest_categorical("robust", [False, True])
    if params["robust"]:
        params["clip"] = trial.suggest_float("clip", 0.01, 1.0, log=True)
        params["lr"] = trial.suggest_float("lr", 0.02, 1.0, log=True)
        params["decay_exp"] = trial.suggest_float("decay_exp", 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class Family:
    """One searched family: its policy name, trial-0 guess and own knobs."""

    name: str
    guess: Params
    own: Callable[[object], Params]
    warm: bool = True
    robust: bool = True
    aom: bool = True


def _ucb1(t):
    return {"alpha": t.suggest_float("alpha", 1e-3, 2.0, log=True)}


def _klucb(t):
    return {"c": t.suggest_float("c", 1e-3, 3.0, log=True)}


def _softmax(t):
    return {"tau": t.suggest_float("tau", 1e-3, 2.0, log=True), "decay": t.suggest_categorical("decay", [False, True])}


def _thompson(t):
    return {"prior_var": t.suggest_float("prior_var", 1e-5, 1e-1, log=True)}


def _greedy(t):
    eps = t.suggest_float("eps", 0.0, 0.3)
    return {"eps": eps, "eps_decay": t.suggest_categorical("eps_decay", [False, True])}


def _etc(t):
    return {"m": t.suggest_int("m", 1, 10)}


def _rretc(t):
    return {"m": t.suggest_int("m", 1, 10), "gate": t.suggest_float("gate", 1e-3, 0.5, log=True)}


def _hier(t):
    return {"parent.gamma": t.suggest_float("parent.gamma", 1e-3, 0.5, log=True),
            "parent.eta": t.suggest_float("parent.eta", 0.01, 10.0, log=True),
            "child.tau": t.suggest_float("child.tau", 1e-3, 2.0, log=True),
            "child.decay": t.suggest_categorical("child.decay", [False, True])}


def _none(t):
    return {}


def _tsallis(t):
    return {"alpha": t.suggest_float("alpha", 0.01, 5.0, log=True),
            "clip_loss": t.suggest_categorical("clip_loss", [False, True]),
            "loss_estimator": t.suggest_categorical("loss_estimator", ["iw", "rv"])}


def _exp3(t):
    return {"gamma": t.suggest_float("gamma", 1e-3, 0.5, log=True), "eta": t.suggest_float("eta", 0.01, 10.0, log=True),
            "clip_loss": t.suggest_categorical("clip_loss", [False, True])}


def _ucbv(t):
    return {"zeta": t.suggest_float("zeta", 0.05, 2.0, log=True), "c": t.suggest_float("c", 0.05, 5.0, log=True)}


def _fpl(t):
    return {"eta": t.suggest_float("eta", 0.1, 20.0, log=True), "clip_loss": t.suggest_categorical("clip_loss", [False, True])}


def _exp3pp(t):
    return {"alpha": t.suggest_float("alpha", 0.1, 10.0, log=True), "beta": t.suggest_float("beta", 0.05, 5.0, log=True),
            "clip_loss": t.suggest_categorical("clip_loss", [False, True])}


_COLD = {"warm": False, "robust": False, "skip_first": 0}

#: The 14 families of Table 16, in its order, with the trial-0 educated guesses ("init" column).
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("Softmax", {**_COLD, "tau": 1.0, "decay": False}, _softmax),
    Family("UCB1", {**_COLD, "alpha": 0.05}, _ucb1),
    Family("KL-UCB", {**_COLD, "c": 0.217}, _klucb),
    Family("GaussianTS", {**_COLD, "prior_var": 0.002}, _thompson),
    Family("eps-greedy", {**_COLD, "eps": 0.0, "eps_decay": False}, _greedy),
    Family("RR-ETC", {"skip_first": 0, "m": 10, "gate": 0.05}, _rretc, warm=False, robust=False),
    Family("ETC", {"skip_first": 0, "m": 10}, _etc, warm=False, robust=False),
    Family("Hierarchical", {"warm": True, "pc": 2.0, "robust": False, "skip_first": 0, "parent.gamma": 0.0523,
                            "parent.eta": 1.51, "child.tau": 0.089, "child.decay": True}, _hier),
    Family("UCB-tuned", {**_COLD}, _none),
    Family("Tsallis-INF", {"warm": False, "alpha": 0.85, "clip_loss": False, "loss_estimator": "iw"}, _tsallis,
           robust=False),
    Family("EXP3", {"warm": False, "gamma": 0.1, "eta": 0.1, "clip_loss": False}, _exp3, robust=False),
    Family("UCB-V", {**_COLD, "zeta": 1.0, "c": 3.0}, _ucbv),
    Family("FPL", {"warm": False, "eta": 1.0, "clip_loss": False}, _fpl, robust=False),
    Family("EXP3++", {"alpha": 3.0, "beta": 0.5, "clip_loss": False}, _exp3pp, warm=False, robust=False),
)}


def _gbm(t):
    return {"n_estimators": t.suggest_int("n_estimators", 50, 600, log=True),
            "learning_rate": t.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "max_depth": t.suggest_int("max_depth", 2, 6), "min_samples_leaf": t.suggest_int("min_samples_leaf", 1, 20),
            "subsample": t.suggest_float("subsample", 0.5, 1.0), "max_features": t.suggest_float("max_features", 0.3, 1.0),
            "use_nodes": t.suggest_categorical("use_nodes", [False, True])}


def _rf(t):
    return {"n_estimators": t.suggest_int("n_estimators", 50, 600, log=True),
            "max_depth": t.suggest_int("max_depth", 0, 16), "min_samples_leaf": t.suggest_int("min_samples_leaf", 1, 20),
            "max_features": t.suggest_float("max_features", 0.3, 1.0),
            "use_nodes": t.suggest_categorical("use_nodes", [False, True])}


def _linear(t):
    return {"alpha": t.suggest_float("alpha", 1e-6, 10.0, log=True),
            "use_nodes": t.suggest_categorical("use_nodes", [False, True])}


_GBM = {"n_estimators": 300, "learning_rate": 0.08, "max_depth": 4, "min_samples_leaf": 1, "subsample": 1.0,
        "max_features": 1.0, "use_nodes": True}
_RF = {"n_estimators": 400, "max_depth": 0, "min_samples_leaf": 2, "max_features": 1.0, "use_nodes": True}

#: The supervised selectors, tuned with the same budget on validation folds inside train (Table 41);
#: trial 0 is the paper's fixed setting (``max_depth=0`` is unlimited for RF).
SUPERVISED_FAMILIES: dict[str, Family] = {f.name: f for f in (
    *(Family(f"GBM{c}", dict(_GBM), _gbm, warm=False, robust=False, aom=False) for c in ("", "+cost")),
    *(Family(f"RF{c}", dict(_RF), _rf, warm=False, robust=False, aom=False) for c in ("", "+cost")),
    *(Family(f"Linear{c}", {"alpha": 1e-6, "use_nodes": True}, _linear, warm=False, robust=False, aom=False)
      for c in ("", "+cost")),
)}


def family(name: str) -> Family:
    """The family called ``name``; raises :class:`AnalysisError` listing the 14 names."""
    found = FAMILIES.get(name) or SUPERVISED_FAMILIES.get(name)
    if found is None:
        raise AnalysisError(f"unknown learning family {name!r}",
                            hint=f"use one of {', '.join(FAMILIES)}, or a supervised selector "
                                 f"{', '.join(SUPERVISED_FAMILIES)} (--families NAME,NAME)")
    return found


def defaults(name: str, *, cold: bool = False) -> Params:
    """Trial 0 of a study: the family's educated guess (observed-max wrapper off).

    ``cold`` (warm start pinned off, Table 42) leaves the warm-start knobs out: they are not searched.
    """
    fam = family(name)
    guess = {**fam.guess, "aom": False} if fam.aom else dict(fam.guess)
    if cold:
        guess.pop("warm", None)
        guess.pop("pc", None)
    return guess


def suggest(trial, name: str, *, cold: bool = False) -> Params:
    """Ask ``trial`` for one configuration of family ``name`` (conditional knobs only when active).

    ``cold`` pins the warm start off (``warm`` False, never asked), for Table 42's cold studies.
    """
    fam = family(name)
    params: Params = {}
    if fam.warm and cold:
        params["warm"] = False
    elif fam.warm:
        _warm(trial, params)
    if fam.robust:
        _robust(trial, params)
    if "skip_first" in fam.guess:
        params["skip_first"] = trial.suggest_int("skip_first", 0, 3)
    if fam.aom:
        params["aom"] = trial.suggest_categorical("aom", [False, True])
    params.update(fam.own(trial))
    return params


def _fmt(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


_RENAME = {"eps_decay": "decay", "parent.gamma": "parent_gamma", "parent.eta": "parent_eta",
           "child.tau": "tau", "child.decay": "decay", "skip_first": "estimator.skip_first",
           "clip": "estimator.clip", "aom": "estimator.observed_max", "lr": "estimator.lr", "decay_exp": "estimator.decay"}
_FLAGS = ("warm", "robust")


def policy_spec(name: str, params: Params, *, label: str | None = None) -> str:
    """The ``--policies`` spec of family ``name`` with searched ``params`` (every knob written out).

    Warm off writes ``pseudo_count=0.0`` (nu = 0 is the cold start exactly, paper C); robust
    off writes ``estimator.kind=mean``, on writes ``estimator.kind=sgd`` with its three knobs.
    """
    fam = family(name)
    items: dict[str, str] = {}
    if fam.warm:
        items["pseudo_count"] = _fmt(float(params["pc"]) if params.get("warm") else 0.0)
    if fam.robust:
        items["estimator.kind"] = "sgd" if params.get("robust") else "mean"
    for key, value in params.items():
        if key in _FLAGS or key == "pc":
            continue
        items[_RENAME.get(key, key)] = _fmt(value)
    items["label"] = label or name
    return f"{name}[" + ";".join(f"{k}={v}" for k, v in items.items()) + "]"


def changed_knobs(name: str, best: Params) -> str:
    """Table 16's "search changes": knobs whose value moved from trial 0 (``→v`` when newly active)."""
    guess = defaults(name)
    parts = []
    for key in sorted(set(guess) | set(best), key=lambda k: (list(best).index(k) if k in best else 99, k)):
        old, new = guess.get(key), best.get(key)
        if new is None or old == new:
            continue
        show = (lambda v: f"{v:.3g}" if isinstance(v, float) else ("T" if v is True else "F" if v is False else str(v)))
        parts.append(f"{key} {show(old)}→{show(new)}" if old is not None else f"{key} →{show(new)}")
    return "; ".join(parts) or "none"
