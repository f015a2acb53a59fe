"""The replay harness the ablations share: options, the policies ablated, and scoring helpers.

Every ablation changes one design choice and replays it with the engine of :mod:`..replay`
on the split's test part (the paper's holdout harness, section 5), unless its table pools
every context (Tables 9 and 10). Policies come from a tuning study (``champions.yaml`` of
``analyze tune``) or, without one, from the families' default settings, which are the
paper's champions (Table 16), not tuned on the dataset at hand; the tables say which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from ..inputs import is_synthetic
from ..policies import Policy, parse_policy
from ..pools import CONTEXT_COLUMNS
from ..replay import ReplayProblem, run_replay, split_labels
from ..summary import describe

__all__ = ["AblateOptions", "PolicySet", "Harness", "Section", "by_context", "resolve_policies", "relabel",
           "LEARNER_FAMILIES"]

#: The champion families the paper's ablation tables feature (Table 2), in its order.
LEARNER_FAMILIES = ("UCB1", "Softmax", "KL-UCB")
_MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class AblateOptions:
    """The harness (horizon, seeds, split) and each ablation's grid, with the paper's defaults."""

    horizon: int = 100
    seeds: int = 20
    split: str = "scale"
    split_seed: int = 42
    threshold: float = 0.10
    #: One-time NVLS tolls priced besides none and the stall measured from iteration 0 (Table 22).
    tolls_s: Sequence[float] = (1.0, 3.0)
    #: Visits per context of the pooled, once-per-communicator toll (Table 23).
    visits: Sequence[int] = (100, 1000, 10000)
    #: Size-gate thresholds in bytes (Table 50): 0 is the learner everywhere, inf AUTO everywhere.
    gates: Sequence[float] = (0, 64 << 10, 256 << 10, _MiB, 4 * _MiB, 16 * _MiB, 32 * _MiB, float("inf"))
    #: Runner-up margin thresholds tau of the hybrid (Table 54): 0 is AUTO everywhere, inf the learner.
    margins: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, float("inf"))
    horizons: Sequence[int] = (25, 50, 100, 200, 400)
    dilutions: Sequence[int] = (1, 4, 16, 64)
    dilution_horizon: int = 200
    #: Discount grid searched on train for the drift replay, and the fixed constant gains (Tables 8, 52).
    discounts: Sequence[float] = (0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0)
    gains: Sequence[float] = (0.1, 0.2)
    drift_seeds: int = 10

    def __post_init__(self) -> None:
        if self.horizon < 1 or self.seeds < 1 or self.drift_seeds < 1:
            raise AnalysisError("--horizon and --seeds must be at least 1")


@dataclasses.dataclass(frozen=True)
class PolicySet:
    """The learners ablated (``--policies`` specs) and where their settings came from."""

    learners: tuple[str, ...]
    source: str
    cold_tuned: dict = dataclasses.field(default_factory=dict)
    cold_source: str | None = None

    @property
    def featured(self) -> str:
        """The learner of the single-policy tables (UCB1's spec when present, as in the paper)."""
        return next((s for s in self.learners if parse_policy(s).name == "UCB1"), self.learners[0])


def _champions(folder: Path, what: str) -> list[str]:
    from .outputs import CHAMPIONS, read_champions

    path = Path(folder) / CHAMPIONS
    if not path.is_file():
        raise AnalysisError(f"{what} has no {CHAMPIONS}", path=folder,
                            hint="pass the --out folder of 'ncclbot-sweep analyze tune'")
    specs = read_champions(path).get("policies") or []
    if not specs:
        raise AnalysisError(f"{CHAMPIONS} lists no policies", path=path, hint="run 'analyze tune' into it again")
    return list(specs)


def resolve_policies(*, study: str | Path | None = None, cold_study: str | Path | None = None,
                     specs: Sequence[str] | None = None) -> PolicySet:
    """The learners: ``specs`` if given, else the study's champions of :data:`LEARNER_FAMILIES`,
    else those families' defaults (the paper's champions), with a sentence saying which."""
    cold, cold_source = {}, None
    if cold_study is not None:
        for spec in _champions(Path(cold_study), "the cold study folder"):
            cold[parse_policy(spec).name] = spec
        cold_source = f"cold-tuned champions from {Path(cold_study).name}/champions.yaml ('analyze tune --cold')"
    if specs:
        return PolicySet(tuple(specs), "learners given with --policies", cold, cold_source)
    if study is not None:
        found = {parse_policy(s).name: s for s in _champions(Path(study), "the study folder")}
        chosen = tuple(found[f] for f in LEARNER_FAMILIES if f in found)
        if not chosen:
            raise AnalysisError(f"the study tuned none of {', '.join(LEARNER_FAMILIES)}", path=study,
                                hint="tune them: analyze tune --families UCB1,Softmax,KL-UCB, or pass --policies")
        return PolicySet(chosen, f"champions of the tuning study {Path(study).name}/champions.yaml", cold, cold_source)
    return PolicySet(LEARNER_FAMILIES, "no tuning study given: the families' default settings (the paper's "
                     "champions, Table 16), not tuned on this dataset; pass --study DIR of 'analyze tune'",
                     cold, cold_source)


def relabel(policy: Policy | str, label: str, **changes) -> Policy:
    """A copy of ``policy`` (or spec) named ``label`` in result tables, with field ``changes``."""
    policy = parse_policy(policy) if isinstance(policy, str) else policy
    return dataclasses.replace(policy, label=label, **changes)


@dataclasses.dataclass
class Section:
    """What one ablation (or workload replay) leaves: tables (the first is the paper's), the
    per-context rows behind them, figures already written, and notes on what was assumed."""

    name: str
    title: str
    caption: str
    tables: dict[str, pd.DataFrame]
    long: pd.DataFrame
    notes: list[str] = dataclasses.field(default_factory=list)
    figures: list[Path] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Harness:
    """One dataset's replay problem, the options and policies, and iteration 0 for the toll."""

    problem: ReplayProblem
    options: AblateOptions = AblateOptions()
    policies: PolicySet = dataclasses.field(default_factory=resolve_policies)
    first_calls: pd.DataFrame | None = None
    figures: Path | None = None

    @property
    def synthetic(self) -> bool:
        """Whether the contexts come from a simulated fabric (figures are stamped)."""
        return is_synthetic(self.problem.contexts)

    @property
    def seeds(self) -> list[int]:
        return list(range(self.options.seeds))

    def labels(self, problem: ReplayProblem | None = None) -> pd.DataFrame:
        """Train/test labels of the harness split for ``problem`` (default: the harness's)."""
        return split_labels((problem or self.problem).contexts, self.options.split, seed=self.options.split_seed)

    def test(self, problem: ReplayProblem | None = None) -> np.ndarray:
        return (self.labels(problem)["part"] == "test").to_numpy()

    def learners(self) -> list[Policy]:
        return [parse_policy(s) for s in self.policies.learners]

    def featured(self) -> Policy:
        return parse_policy(self.policies.featured)

    def prepared(self, policy: Policy, problem: ReplayProblem | None = None) -> Policy:
        """``policy``, fitted on the split's train part when it is a fit-once selector."""
        if hasattr(policy, "prepare") and not policy.fitted:
            problem = problem or self.problem
            return policy.prepare(problem, self.labels(problem))
        return policy

    def replay(self, policies: Sequence[Policy | str], *, problem: ReplayProblem | None = None,
               horizon: int | None = None, seeds: Sequence[int] | None = None, **engine) -> pd.DataFrame:
        """:func:`~..replay.run_replay` of ``policies`` with the harness split (``engine``: dilution, environment)."""
        chosen = [parse_policy(p) if isinstance(p, str) else p for p in policies]
        return run_replay(problem or self.problem, chosen, horizon=horizon or self.options.horizon,
                          seeds=self.seeds if seeds is None else seeds, split=self.options.split,
                          split_seed=self.options.split_seed, **engine)

    def stats(self, values: np.ndarray) -> dict:
        """Mean, SEM, p99 (%) and the count above the threshold of per-context TRLT ``values``."""
        found = describe(np.asarray(values, dtype=float), self.options.threshold, n_boot=0)
        return {"mean_pct": found["mean"], "sem_pct": found["sem"], "p99_pct": found["p99"], "above": found["above"]}


def by_context(frame: pd.DataFrame, policy: str, n_contexts: int) -> pd.DataFrame:
    """Seed-averaged realized and selection TRLT of ``policy``, one row per context in problem order."""
    rows = frame[frame["policy"] == policy]
    out = rows.groupby(list(CONTEXT_COLUMNS), sort=False)[["trlt_realized", "trlt_selection"]].mean().reset_index()
    if len(out) != n_contexts:
        raise AnalysisError(f"replay of {policy!r} covers {len(out)} of {n_contexts} contexts")
    return out
