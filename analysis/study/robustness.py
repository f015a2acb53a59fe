"""Robustness studies of the paper: splits (Tables 36, 41), largest-scale holdout (Table 46),
labelled target-scale mini-sweep (Table 51) and the frozen-champion replication (Table 3).

Each study is one function returning a long frame (one row per setting and policy) and a
wide table shaped like the paper's; :func:`write_study` writes both as CSV and Markdown.
Policies are given as ``--policies`` specs; supervised selectors are fitted by the replay
on each setting's train part.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..policies import parse_policy
from ..pools import SCENARIO_COLUMNS
from ..replay import ReplayProblem, run_replay, split_labels
from ..summary import compare, summarize
from .spaces import FAMILIES

__all__ = ["DEFAULT_SPLITS", "SPLIT_FAMILIES", "ReplayOptions", "split_study", "holdout_study", "minisweep_study", "replication_study",
           "minisweep_labels", "write_study"]

log = logging.getLogger(__name__)

#: Table 36's splits: scale (main), reverse scale, three random seeds, each collective held out.
DEFAULT_SPLITS = ("scale", "reverse", "random-42", "random-43", "random-44", "loco:AllGather", "loco:AllReduce",
                  "loco:ReduceScatter")
#: Table 36 re-tunes every learning family on every split, and Table 41 the supervised selector.
SPLIT_FAMILIES = (*FAMILIES, "GBM+cost")


@dataclasses.dataclass(frozen=True)
class ReplayOptions:
    """How every study scores its policies (the replay harness of section 5)."""

    horizon: int = 100
    seeds: int = 20
    threshold: float = 0.10


def _split(spec: str) -> tuple[str, int]:
    """``random-43`` -> (``random``, 43); other names keep the default seed."""
    if spec.startswith("random-"):
        return "random", int(spec.split("-", 1)[1])
    return spec, 42


def _scores(frame: pd.DataFrame, options: ReplayOptions, *, part: str = "test") -> pd.DataFrame:
    table = summarize(frame, part=part, threshold=options.threshold, order=list(dict.fromkeys(frame["policy"])))
    return table[["policy", "contexts", "selection_mean_pct", "realized_mean_pct", "realized_p99_pct",
                  "realized_above"]]


def _replay(problem: ReplayProblem, specs: Sequence[str], split: str, seed: int, options: ReplayOptions):
    policies = [parse_policy(s) for s in specs]
    return run_replay(problem, policies, horizon=options.horizon, seeds=range(options.seeds), split=split,
                      split_seed=seed)


def _cell(row, *, above: bool = False) -> str:
    text = f"{row.realized_mean_pct:.2f} / {row.realized_p99_pct:.1f}"
    return text + (f" / {int(row.realized_above)}" if above else "")


def _wide(long: pd.DataFrame, index: str, *, above: bool = False) -> pd.DataFrame:
    long = long.assign(cell=[_cell(r, above=above) for r in long.itertuples()])
    wide = long.pivot_table(index=index, columns="policy", values="cell", aggfunc="first", sort=False)
    n = long.groupby(index, sort=False)["contexts"].max()
    wide.insert(0, "n_test", n)
    return wide.reset_index()


def split_study(problem: ReplayProblem, out: str | Path, *, splits: Sequence[str] = DEFAULT_SPLITS,
                tune_options=None, fixed: Sequence[str] = ("AUTO", "GBM+cost"),
                options: ReplayOptions = ReplayOptions(), progress: Callable | None = None):
    """Tables 36 and 41: every family re-tuned on each split's train part, replayed once on its test part.

    ``tune_options`` (a :class:`~.tune.TuneOptions`) names the families to re-tune (learners
    and supervised ones, e.g. ``GBM+cost``) and the budget; each split's studies live in
    ``out/<split>/``. ``fixed`` policies are replayed with their fixed settings. Returns
    (long, table36, table41) frames.
    """
    from .outputs import read_champions
    from .tune import TuneOptions, tune

    tune_options = tune_options or TuneOptions(families=SPLIT_FAMILIES)
    rows = []
    for spec in splits:
        split, seed = _split(spec)
        opts = dataclasses.replace(tune_options, split=split, split_seed=seed)
        path = tune(problem, Path(out) / spec.replace(":", "-"), options=opts, progress=progress)
        champions = read_champions(path)["policies"]
        frame = _replay(problem, [*fixed, *champions], split, seed, options)
        table = _scores(frame, options)
        rows.append(table.assign(split=spec))
        tuned = [p for p in dict.fromkeys(frame["policy"]) if p.endswith("-tuned")]
        if tuned and "UCB1" in set(frame["policy"]):  # Table 41's last column: tuned selector against UCB1
            test = compare(frame, (tuned[0], "UCB1"), threshold=options.threshold)
            rows[-1] = rows[-1].assign(p_mean=test["p_signflip_mean"], p_above=test["p_signflip_above"])
        log.info("split %s: %d test contexts", spec, int(table["contexts"].max()))
    long = pd.concat(rows, ignore_index=True)
    supervised = long[long["policy"].str.startswith(("GBM", "RF", "Linear")) | long["policy"].isin(["UCB1"])]
    table41 = _wide(supervised, "split", above=True)
    if "p_mean" in long:
        p = long.groupby("split", sort=False)[["p_mean", "p_above"]].first().reset_index()
        table41 = table41.merge(p, on="split", how="left")
    return long, _wide(long, "split"), table41


def holdout_study(problem: ReplayProblem, specs: Sequence[str], *, options: ReplayOptions = ReplayOptions()):
    """Table 46: supervised selectors fit on all but the largest node count; everyone scored there.

    Online policies keep their (frozen) hyperparameters. Returns (long, table46).
    """
    frame = _replay(problem, specs, "largest", 42, options)
    long = _scores(frame, options)
    return long, long.rename(columns={"realized_above": "n_above"})


def minisweep_labels(problem: ReplayProblem, labels: pd.DataFrame, *, every: int = 4, offset: int = 0,
                     samples: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Table 51's labelled mini-sweep: every ``every``-th size of each test scenario, every measured arm.

    Returns ``(mask, values)`` ``[C, K]``: the labelled cells and their label, the mean of the
    first ``samples`` samples inside the steady window (iterations 11..10+k of a sweep).
    """
    pools = problem.pools
    test = (labels["part"] == "test").to_numpy()
    ctx = problem.contexts.assign(_row=np.arange(len(problem)))
    rank = ctx.sort_values("size_bytes").groupby(list(SCENARIO_COLUMNS)).cumcount().sort_index().to_numpy()
    chosen = test & (rank % every == offset)
    mask = chosen[:, None] & pools.measured
    c, k = np.nonzero(mask)
    values = np.full(pools.depth.shape, np.nan)
    for i, j in zip(c, k):
        start = pools.wrap[i, j]
        values[i, j] = float(np.mean(pools.samples[i, j, start:min(start + samples, pools.depth[i, j])]))
    return mask, values


def minisweep_study(problem: ReplayProblem, specs: Sequence[str], *, every: int = 4, samples: int = 1,
                    options: ReplayOptions = ReplayOptions()):
    """Table 51: supervised fits given a labelled target-scale mini-sweep, scored on the unlabelled
    target contexts beside the frozen online policies; values average the ``every`` offsets.

    Returns (long, table51) with one row per offset and policy in ``long``.
    """
    labels = split_labels(problem.contexts, "scale")
    rows = []
    for offset in range(every):
        labelled = minisweep_labels(problem, labels, every=every, offset=offset, samples=samples)
        policies = []
        for spec in specs:
            policy = parse_policy(spec)
            if hasattr(policy, "prepare"):
                policy = policy.prepare(problem, labels, labelled=labelled)
            policies.append(policy)
        frame = run_replay(problem, policies, horizon=options.horizon, seeds=range(options.seeds), split="scale")
        hidden = np.tile(labelled[0].any(axis=1), len(frame) // len(problem))
        frame.loc[hidden, "part"] = "labelled"
        rows.append(_scores(frame, options).assign(offset=offset, labelled_cells=int(labelled[0].sum())))
    long = pd.concat(rows, ignore_index=True)
    table = long.groupby("policy", sort=False)[["realized_mean_pct", "realized_p99_pct", "realized_above"]].mean()
    return long, table.reset_index().assign(setting=f"1/{every}, k={samples}")


def replication_study(problems: dict[str, ReplayProblem], specs: Sequence[str], *,
                      options: ReplayOptions = ReplayOptions()):
    """Table 3: frozen champions replayed on other fabrics (scale split), with scenario-level tests.

    Returns (long, table3): selection and realized mean, realized p99 and contexts above the
    threshold per fabric and policy, plus the exact sign-flip p of AUTO against each learner.
    """
    rows = []
    for name, problem in problems.items():
        frame = _replay(problem, specs, "scale", 42, options)
        table = _scores(frame, options).assign(fabric=name)
        if "AUTO" in set(frame["policy"]):
            p = {pol: compare(frame, ("AUTO", pol), threshold=options.threshold)
                 for pol in table["policy"] if pol not in ("AUTO", "Random")}
            table["p_mean"] = table["policy"].map({k: v["p_signflip_mean"] for k, v in p.items()})
            table["p_above"] = table["policy"].map({k: v["p_signflip_above"] for k, v in p.items()})
        rows.append(table)
    long = pd.concat(rows, ignore_index=True)
    wide = long.pivot_table(index="policy", columns="fabric",
                            values=["selection_mean_pct", "realized_mean_pct", "realized_p99_pct", "realized_above"],
                            aggfunc="first", sort=False)
    wide.columns = [f"{fabric} {metric.replace('_pct', '').replace('_', ' ')}" for metric, fabric in wide.columns]
    return long, wide.reset_index()


def write_study(out: str | Path, name: str, long: pd.DataFrame, table: pd.DataFrame) -> Path:
    """Write ``<name>.csv``/``.md`` (the paper-shaped table) and ``<name>_long.csv`` into ``out/tables``."""
    from ..tables import write_table

    out = Path(out)
    write_table(table, out, name=name)
    long.to_csv(out / "tables" / f"{name}_long.csv", index=False)
    return out / "tables" / f"{name}.md"
