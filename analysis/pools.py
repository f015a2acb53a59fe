"""Replay pools: per context and arm, the measured latencies in iteration order.

A *pool* is what the offline replay serves a policy: the k-th pull of an arm gets that arm's
k-th measured sample (paper section 5), so the lazy-connection transient on an arm's first
iterations is part of the pool. Arms are ranked on their *steady-state* mean, by default
over iterations 11..99 (paper appendix B.2), which defines the measured-best arm ``a*``.

The paper's pool convention (appendix B.2, Table 9), the default here:

* iteration 0, the perf binary's warm-up, is dropped from the pools (the dataset keeps it;
  ``keep_warmup=True`` keeps it, and :attr:`Pools.convention` says which was used), so the
  replay never charges the multi-second first-use NVLS stall that lands there;
* a horizon longer than the pool wraps the *steady* part: after the last sample, pull ``k``
  is served from the positions ``wrap..depth-1`` again (``wrap`` = the first sample inside
  the steady window), so the lazy-init transient is replayed only on first exposure;
* contexts whose message is 0 elements per rank (nccl-tests prints size 0, e.g. AllGather of
  512 B over 256 ranks) have nothing to select; they are left out and listed in
  :attr:`Pools.excluded` with a note, as are contexts with fewer measured arms than asked
  (``min_arms``) and, later, contexts without a cost-model prediction
  (:func:`~.replay.make_problem`); :mod:`.degenerate` flags the ones kept with a caveat.

Everything here works on plain ``pandas``/``numpy`` data so it can be fed from the
``iterations`` table, from the simulator, or from a synthetic frame in a test.

Choices not fixed by the paper (documented here, kept on purpose):

* rows with ``arm`` null or ``AUTO`` (unforced runs) are not pools and are skipped;
* when the frame has ``in_place``, only out-of-place rows (``in_place == False``) are used,
  because nccl-tests prints both and the paper's pools are one time per iteration;
* rows with ``wrong > 0`` (nccl-tests data errors) are dropped, with a log line;
* several runs of one (context, arm) are concatenated in ``run_id`` order;
* averaged rows (null ``iteration``) are skipped, except one-iteration cycles (``-n 1 -N k``)
  whose ``cycle`` becomes the iteration index;
* an arm with no sample inside the steady window is ranked on all of its samples, and its
  pool wraps from its first sample.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.names import AUTO, Arm

__all__ = ["CONTEXT_COLUMNS", "EXCLUDED_WORDS", "SCENARIO_COLUMNS", "Pools", "build_pools", "arm_order", "exclude",
           "pool_position"]

log = logging.getLogger(__name__)

#: A context: one bandit instance (architecture section 3).
CONTEXT_COLUMNS: tuple[str, ...] = ("fabric", "collective", "nodes", "ranks", "size_bytes")
#: A scenario: the cluster unit of the statistics (paper section 6.1).
SCENARIO_COLUMNS: tuple[str, ...] = ("fabric", "collective", "nodes")

_REQUIRED = (*CONTEXT_COLUMNS, "arm", "iteration", "time_us")


def pool_position(pulls, depth, wrap):
    """Pool position of an arm's ``pulls``-th pull (0-based): in order, then cycling ``wrap..depth-1``.

    Works on scalars and arrays alike; ``0 <= wrap < depth`` for every measured arm.
    """
    over = pulls >= depth
    return np.where(over, wrap + (pulls - depth) % np.maximum(depth - wrap, 1), pulls)


def arm_order(arms) -> list[str]:
    """Sort arm strings in NCCL's cost-table scan order (algorithm index, then protocol)."""
    return [str(a) for a in sorted(Arm.parse(str(a)) for a in set(arms))]


@dataclasses.dataclass
class Pools:
    """Measured pools of every context on one global arm axis.

    ``arms`` is the union of measured arms in NCCL scan order; index ``k`` in every array
    refers to ``arms[k]``, so ``argmin``/``argmax`` ties resolve to the lowest NCCL index.

    Attributes:
        contexts: one row per context (``CONTEXT_COLUMNS`` plus ``synthetic``, ``n_arms``,
            ``best_arm``); ``synthetic`` is true when the simulator produced some of its rows.
        arms: global arm axis.
        samples: ``[C, K, D]`` latencies (us) in iteration order, NaN-padded.
        depth: ``[C, K]`` number of samples; 0 where the arm was not measured.
        steady: ``[C, K]`` steady-state mean (us), NaN where not measured.
        best: ``[C]`` index of the measured-best arm ``a*`` (lowest steady mean).
        window: inclusive iteration range of the steady-state mean.
        wrap: ``[C, K]`` pool position where a horizon beyond the pool starts over.
        keep_warmup: whether iteration 0 was kept in the pools.
        excluded: contexts left out, ``CONTEXT_COLUMNS`` plus ``flag`` and ``note`` (why).
        steady_n: ``[C, K]`` samples inside the steady window (0 where not measured, or
            where the pool ends before the window starts).
    """

    contexts: pd.DataFrame
    arms: tuple[str, ...]
    samples: np.ndarray
    depth: np.ndarray
    steady: np.ndarray
    best: np.ndarray
    window: tuple[int, int]
    wrap: np.ndarray
    keep_warmup: bool = False
    excluded: pd.DataFrame = dataclasses.field(default_factory=lambda: _excluded_frame([], "", ""))
    steady_n: np.ndarray | None = None

    @property
    def convention(self) -> str:
        """One sentence on how the pools were built, for reports and logs."""
        warm = ("iteration 0 (the perf binary's warm-up) kept in the pools" if self.keep_warmup
                else "iteration 0 (the perf binary's warm-up) dropped from the pools, as in the paper")
        counts = self.excluded["flag"].value_counts(sort=False) if len(self.excluded) else {}
        note = "".join(f"; {n} {EXCLUDED_WORDS.get(flag, flag)} contexts left out" for flag, n in counts.items())
        return (f"{warm}; arms ranked on iterations {self.window[0]}-{self.window[1]}; a horizon beyond "
                f"the pool wraps its steady part{note}")

    @property
    def measured(self) -> np.ndarray:
        """``[C, K]`` mask of measured arms."""
        return self.depth > 0

    def __len__(self) -> int:
        return len(self.contexts)

    def subset(self, rows) -> Pools:
        """Return the pools of the contexts selected by a boolean mask or index array."""
        idx = np.arange(len(self))[rows]
        return Pools(
            contexts=self.contexts.iloc[idx].reset_index(drop=True),
            arms=self.arms,
            samples=self.samples[idx],
            depth=self.depth[idx],
            steady=self.steady[idx],
            best=self.best[idx],
            window=self.window,
            wrap=self.wrap[idx],
            keep_warmup=self.keep_warmup,
            excluded=self.excluded,
            steady_n=None if self.steady_n is None else self.steady_n[idx],
        )

    def without_arms(self, drop) -> Pools:
        """These pools with the arms marked in ``drop`` (``[K]`` bool) unmeasured everywhere.

        The measured-best arm is re-ranked among the arms left; contexts left without any
        measured arm are left out. Used to take an arm out of every arm set (Table 23).
        """
        drop = np.asarray(drop, dtype=bool)
        depth = np.where(drop[None, :], 0, self.depth)
        steady = np.where(drop[None, :], np.nan, self.steady)
        best = np.argmin(np.where(depth > 0, steady, np.inf), axis=1)
        contexts = self.contexts.assign(n_arms=(depth > 0).sum(axis=1), best_arm=[self.arms[b] for b in best])
        out = dataclasses.replace(self, contexts=contexts, depth=depth, steady=steady, best=best)
        return out.subset((depth > 0).any(axis=1))

    def context_keys(self) -> list[tuple]:
        """The context tuples in row order."""
        return list(self.contexts[list(CONTEXT_COLUMNS)].itertuples(index=False, name=None))


def _clean(frame: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in _REQUIRED if c not in frame.columns]
    if missing:
        raise AnalysisError(
            f"iterations frame lacks columns {missing}",
            hint="build pools from the 'iterations' table (architecture section 5)",
        )
    df = frame[frame["arm"].notna() & (frame["arm"].astype(str) != AUTO)].copy()
    if "cycle" in df.columns:
        # nccl-tests < 2.19 measures one iteration per cycle (``-n 1 -N k``): the cycle is
        # then the iteration index.
        single = df["iteration"].isna() & df["cycle"].notna()
        if "n_iters" in df.columns:
            single &= df["n_iters"].fillna(1).astype(int) == 1
        df.loc[single, "iteration"] = df.loc[single, "cycle"]
    averaged = df["iteration"].isna()
    if averaged.any():
        log.warning("skipping %d averaged iteration rows (no per-iteration time)", int(averaged.sum()))
        df = df[~averaged]
    if "in_place" in df.columns and df["in_place"].notna().any():
        df = df[~df["in_place"].fillna(False).astype(bool)]
    if "wrong" in df.columns:
        bad = df["wrong"].fillna(0).astype(float) > 0
        if bad.any():
            log.warning("dropping %d iteration rows with nccl-tests data errors (wrong > 0)", int(bad.sum()))
            df = df[~bad]
    df = df[np.isfinite(df["time_us"].astype(float)) & (df["time_us"].astype(float) > 0)]
    return df


def _zero_elements(df: pd.DataFrame) -> pd.Series:
    """Rows of contexts whose message is 0 elements per rank (nccl-tests prints size 0)."""
    zero = df["size_bytes"].astype("int64") <= 0
    if "count" in df.columns:
        zero |= df["count"].fillna(1).astype("int64") <= 0
    return zero


#: Why a context was left out (``Pools.excluded.flag``), in the words the convention uses.
EXCLUDED_WORDS = {"zero_elements": "zero-element", "one_measured_arm": "single-arm",
                  "no_prediction": "unpredicted"}


def _excluded_frame(rows, flag: str, note: str) -> pd.DataFrame:
    """Left-out contexts (``CONTEXT_COLUMNS`` rows) with their ``flag`` and ``note``."""
    frame = pd.DataFrame(rows, columns=list(CONTEXT_COLUMNS))
    return frame.sort_values(list(CONTEXT_COLUMNS)).reset_index(drop=True).assign(flag=flag, note=note)


def exclude(pools: Pools, rows, flag: str, note: str) -> pd.DataFrame:
    """``pools.excluded`` with the contexts ``rows`` (a mask or index into ``pools.contexts``) added."""
    more = _excluded_frame(pools.contexts.iloc[np.arange(len(pools))[rows]][list(CONTEXT_COLUMNS)], flag, note)
    return pd.concat([pools.excluded, more], ignore_index=True) if len(pools.excluded) else more


def _split_excluded(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    zero = _zero_elements(df)
    excluded = _excluded_frame(df.loc[zero, list(CONTEXT_COLUMNS)].drop_duplicates(), "zero_elements",
                               "0 elements per rank: nothing to select")
    if len(excluded):
        log.warning("leaving out %d contexts whose message is 0 elements per rank", len(excluded))
    return df[~zero], excluded


def build_pools(iterations: pd.DataFrame, *, window: tuple[int, int] = (11, 99), min_arms: int = 1,
                keep_warmup: bool = False) -> Pools:
    """Group an ``iterations`` frame into pools, steady means and measured-best arms.

    Called once per analysis; deterministic (the same frame gives the same arrays). Iteration
    0 is dropped unless ``keep_warmup``; zero-element contexts are left out (see the module
    docstring). Contexts with fewer than ``min_arms`` measured arms are left out (the audit
    uses 2). Raises :class:`AnalysisError` when no context is left.
    """
    df = _clean(iterations)
    if not keep_warmup:
        df = df[df["iteration"].astype("int64") != 0]
    df, excluded = _split_excluded(df)
    if df.empty:
        raise AnalysisError("no forced-arm iterations to build pools from",
                            hint="ingest a forced-arm sweep (runs with NCCL_ALGO/NCCL_PROTO set)")
    canon = {a: str(Arm.parse(str(a))) for a in df["arm"].unique()}
    arms = tuple(arm_order(canon.values()))
    arm_idx = {a: k for k, a in enumerate(arms)}
    keys = list(CONTEXT_COLUMNS)
    frame = pd.DataFrame({
        "ctx": df.groupby(keys, sort=True).ngroup().to_numpy(),
        "arm": df["arm"].map(canon).map(arm_idx).to_numpy(np.int64),
        "run": df["run_id"].astype(str).to_numpy() if "run_id" in df.columns else "",
        "iteration": df["iteration"].to_numpy(np.int64),
        "time": df["time_us"].to_numpy(float),
    }).sort_values(["ctx", "arm", "run", "iteration"], kind="stable")
    ctx, arm = frame["ctx"].to_numpy(), frame["arm"].to_numpy()
    pos = frame.groupby(["ctx", "arm"], sort=False).cumcount().to_numpy()
    n_ctx, n_arm = int(ctx.max()) + 1, len(arms)
    samples = np.full((n_ctx, n_arm, int(pos.max()) + 1), np.nan)
    samples[ctx, arm, pos] = frame["time"].to_numpy()
    depth = np.zeros((n_ctx, n_arm), dtype=np.int64)
    np.add.at(depth, (ctx, arm), 1)
    steady, steady_n = _steady_means(frame, (n_ctx, n_arm), window)
    wrap = _wrap_positions(frame["iteration"].to_numpy(), ctx, arm, pos, (n_ctx, n_arm), window[0])
    contexts = df[keys].drop_duplicates().sort_values(keys).reset_index(drop=True)
    contexts = _synthetic_contexts(df, contexts, keys)
    keep = (depth > 0).sum(axis=1) >= min_arms
    if not keep.any():
        raise AnalysisError(f"no context has at least {min_arms} measured arms",
                            hint="sweep more arms per context, or lower min_arms")
    if not keep.all():
        log.warning("leaving out %d contexts with fewer than %d measured arms", int((~keep).sum()), min_arms)
        few = _excluded_frame(contexts.loc[~keep, keys], "one_measured_arm",
                              f"fewer than {min_arms} measured arms: nothing to compare")
        excluded = pd.concat([excluded, few], ignore_index=True) if len(excluded) else few
    samples, depth, steady, wrap, steady_n = samples[keep], depth[keep], steady[keep], wrap[keep], steady_n[keep]
    contexts = contexts[keep].reset_index(drop=True)
    best = np.argmin(np.where(depth > 0, steady, np.inf), axis=1)
    contexts["n_arms"] = (depth > 0).sum(axis=1)
    contexts["best_arm"] = [arms[b] for b in best]
    log.info("built pools: %d contexts, %d arms, depth up to %d", len(contexts), n_arm, samples.shape[2])
    return Pools(contexts, arms, samples, depth, steady, best, (window[0], window[1]), wrap,
                 keep_warmup=keep_warmup, excluded=excluded, steady_n=steady_n)


def _synthetic_contexts(df: pd.DataFrame, contexts: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``contexts`` with ``synthetic``: true when some row of the context says it is (a frame
    without the column, e.g. one built in a test, is not synthetic)."""
    if "synthetic" not in df.columns:
        return contexts.assign(synthetic=False)
    flags = df.assign(synthetic=df["synthetic"].fillna(False).astype(bool)).groupby(
        keys, as_index=False, sort=False, dropna=False)["synthetic"].any()
    return contexts.merge(flags, on=keys, how="left", validate="one_to_one").assign(
        synthetic=lambda f: f["synthetic"].fillna(False).astype(bool))


def _wrap_positions(iteration, ctx, arm, pos, shape, first_steady: int) -> np.ndarray:
    """Per (context, arm) the first pool position inside the steady window (0 if none)."""
    wrap = np.full(shape, np.iinfo(np.int64).max)
    inside = iteration >= first_steady
    np.minimum.at(wrap, (ctx[inside], arm[inside]), pos[inside])
    return np.where(wrap == np.iinfo(np.int64).max, 0, wrap)


def _steady_means(frame: pd.DataFrame, shape: tuple[int, int], window: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the window per (context, arm), all samples when the window holds none; and
    the number of samples inside the window."""
    lo, hi = window
    ctx, arm, it, t = (frame[c].to_numpy() for c in ("ctx", "arm", "iteration", "time"))
    inside = (it >= lo) & (it <= hi)
    total_in, count_in = np.zeros(shape), np.zeros(shape)
    total_all, count_all = np.zeros(shape), np.zeros(shape)
    np.add.at(total_in, (ctx[inside], arm[inside]), t[inside])
    np.add.at(count_in, (ctx[inside], arm[inside]), 1)
    np.add.at(total_all, (ctx, arm), t)
    np.add.at(count_all, (ctx, arm), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count_in > 0, total_in / count_in, total_all / count_all), count_in.astype(np.int64)
