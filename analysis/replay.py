"""Offline replay of bandit policies on forced-arm pools (paper section 5, algorithm 4).

One independent bandit per context. At step ``t`` the policy picks an arm; the k-th pull of
an arm is served that arm's k-th sample in iteration order (transient included; a pool
shorter than the horizon wraps its steady part, :func:`~.pools.pool_position`). Two prices
per context:

* realized TRLT  = sum_t X_t / sum_t X*_t - 1, against the measured-best arm ``a*`` replaying
  its own pool for the same ``T`` steps (so both pay the transient once);
* selection TRLT = sum_t mean(A_t) / (T mean(a*)) - 1 (paper eq. 3), steady means.

The engine is vectorised over contexts and seeds: all ``C x S`` bandits advance together,
one numpy operation per step per statistic.

Two switches serve the ablations (:mod:`.study`), both off by default:

* ``dilution=k`` and ``lag=A``: every bandit still selects at every step, but the rewards of
  each block of ``k`` steps are held and applied, each pull's own reward in pull order, ``A``
  blocks after the block ends (``A = 0``: at its end): the plugin's synchronisation rounds
  with ``NCCLBOT_SYNC_EVERY=k`` and ``NCCLBOT_SYNC_LAG=A`` (a round applies at the boundary
  that starts round ``r+1+A``). ``k = 1, A = 0`` is the plain replay. While rewards are held
  the policy's hold rule applies (:func:`~.policies.base.held`), as in the plugin;
* ``environment``: an object that serves each pull in place of the pull-count pools (e.g. a
  drifting pool map, :mod:`.study.drift`) and prices its own oracle; see :class:`Environment`.

Deterministic policies are run once per context and their result is copied to every seed (they have zero seed variance). Stochastic policies
draw from ``numpy.random.default_rng(seed)``, one generator per seed, in the order given by
:func:`~.policies.draw_counts`; draws therefore depend on the seed and the context order.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.names import Arm

from .policies import BanditState, Policy, draw_counts
from .policies.base import safety_gate, selectable
from .pools import CONTEXT_COLUMNS, SCENARIO_COLUMNS, Pools, exclude, pool_position

__all__ = ["Environment", "ReplayProblem", "ReplayRun", "Steps", "make_problem", "oracle_steps", "oracle_sums",
           "replay_with_trajectories", "run_policy", "run_replay", "split_labels", "trajectory_frame", "SPLITS"]

log = logging.getLogger(__name__)

SPLITS = ("scale", "reverse", "largest", "random", "loco")
#: Steps at the end of a replay over which ``best_last20`` is measured.
LAST_WINDOW = 20


@dataclasses.dataclass
class ReplayProblem:
    """Pools plus everything the cost model contributes, for the contexts that can be replayed.

    ``offered`` = measured arms kept by the filter ``predicted <= rho_max * mu_hat_min``
    (undefined predictions kept); ``prior`` = ``mu_hat_min / predicted``; ``auto`` = argmin
    of the predictions over offered arms (lowest index on ties).
    """

    pools: Pools
    predicted: np.ndarray
    offered: np.ndarray
    prior: np.ndarray
    auto: np.ndarray
    mu_min: np.ndarray
    rho_max: float
    lex_rank: np.ndarray
    group: np.ndarray

    @property
    def contexts(self) -> pd.DataFrame:
        return self.pools.contexts

    def __len__(self) -> int:
        return len(self.pools)

    def subset(self, rows) -> ReplayProblem:
        idx = np.arange(len(self))[rows]
        return dataclasses.replace(
            self, pools=self.pools.subset(idx), predicted=self.predicted[idx], offered=self.offered[idx],
            prior=self.prior[idx], auto=self.auto[idx], mu_min=self.mu_min[idx])


def make_problem(pools: Pools, predicted: np.ndarray, *, rho_max: float = 2.0) -> ReplayProblem:
    """Filter arms, compute priors and AUTO's arm; drop contexts without any prediction."""
    if predicted.shape != pools.depth.shape:
        raise AnalysisError(f"predictions must have shape {pools.depth.shape}, but got {predicted.shape}")
    pred = np.where(pools.measured, predicted, np.nan)
    usable = np.isfinite(pred).any(axis=1)
    if not usable.any():
        raise AnalysisError("no context has a cost-model prediction for a measured arm",
                            hint="ingest NCCL logs with NCCL_DEBUG_SUBSYS=TUNING (cost_tables or tuning_tables)")
    if not usable.all():
        log.warning("replay skips %d contexts without cost-model predictions", int((~usable).sum()))
        excluded = exclude(pools, ~usable, "no_prediction", "no cost-model prediction for a measured arm: no AUTO, "
                                                            "no warm start")
        pools, pred = dataclasses.replace(pools.subset(usable), excluded=excluded), pred[usable]
    mu_min = np.nanmin(pred, axis=1)
    offered = pools.measured & ~(pred > rho_max * mu_min[:, None])
    prior = mu_min[:, None] / pred
    auto = np.argmin(np.where(offered & np.isfinite(pred), pred, np.inf), axis=1)
    arms = [Arm.parse(a) for a in pools.arms]
    lex = np.argsort(np.argsort([str(a) for a in arms], kind="stable"), kind="stable")
    algos = sorted({a.algorithm_index for a in arms})
    group = np.array([algos.index(a.algorithm_index) for a in arms])
    return ReplayProblem(pools, pred, offered, prior, auto, mu_min, rho_max, lex, group)


@dataclasses.dataclass
class Steps:
    """Per-step record of one policy's replay; arrays ``[B, C, T]`` over seed blocks.

    A deterministic policy run once has one block whose seed is None (it stands for every
    seed); otherwise block ``b`` is seed ``seeds[b]``. ``oracle_us`` ``[C, T]`` is what the
    measured-best arm serves at each step replaying its own pool; ``best_steady_us`` ``[C]``
    its steady mean (the selection-priced oracle per step).
    """

    seeds: list[int | None]
    arms: np.ndarray
    served_us: np.ndarray
    selection_us: np.ndarray
    oracle_us: np.ndarray
    best_steady_us: np.ndarray


@dataclasses.dataclass
class ReplayRun:
    """Per (seed, context) results of one policy; arrays are ``[S, C]``.

    ``oracle_us`` and ``oracle_selection_us`` are ``[C]`` (the measured-best arm replaying its
    pool) or, with an :class:`Environment`, ``[S, C]`` (its own oracle per seed). ``played`` is
    ``[S, C, K]``: which arms each bandit ever served.
    """

    policy: str
    deterministic: bool
    seeds: list[int]
    served_us: np.ndarray
    selection_us: np.ndarray
    oracle_us: np.ndarray
    oracle_selection_us: np.ndarray
    auto_share: np.ndarray
    distinct_arms: np.ndarray
    best_last: np.ndarray
    arms: np.ndarray | None = None
    steps: Steps | None = None
    played: np.ndarray | None = None

    @property
    def trlt_realized(self) -> np.ndarray:
        return self.served_us / np.broadcast_to(self.oracle_us, self.served_us.shape) - 1.0

    @property
    def trlt_selection(self) -> np.ndarray:
        return self.selection_us / np.broadcast_to(self.oracle_selection_us, self.selection_us.shape) - 1.0


class Environment:
    """What serves a pull instead of the pull-count pools (the drift replay's pool map).

    The engine calls :meth:`bind` once per policy with the context of every bandit row (rows
    are seed blocks of all contexts, one block per seed, in ``seeds`` order), then
    :meth:`serve` at every step, then :meth:`oracle`. An environment must be independent of
    the policy (its randomness keyed by seed and context only), so every policy faces the
    same world; deterministic policies are then run once per seed.
    """

    def bind(self, problem: ReplayProblem, ctx: np.ndarray, seeds: list[int], horizon: int) -> None:
        raise NotImplementedError

    def serve(self, t: int, arms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Latency served to every row's pull of ``arms`` at step ``t`` (1-based), and its selection price."""
        raise NotImplementedError

    def oracle(self) -> tuple[np.ndarray, np.ndarray]:
        """Realized and selection-priced totals ``[rows]`` of the (possibly moving) best arm."""
        raise NotImplementedError


def oracle_steps(problem: ReplayProblem, horizon: int) -> np.ndarray:
    """``[C, horizon]``: what the measured-best arm serves at each step, replaying its own pool."""
    pools = problem.pools
    c = np.arange(len(pools))
    depth, wrap = pools.depth[c, pools.best], pools.wrap[c, pools.best]
    idx = pool_position(np.arange(horizon)[None, :], depth[:, None], wrap[:, None])
    return pools.samples[c[:, None], pools.best[:, None], idx]


def oracle_sums(problem: ReplayProblem, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Realized and selection-priced totals of the measured-best arm over ``horizon`` steps."""
    pools = problem.pools
    c = np.arange(len(pools))
    return oracle_steps(problem, horizon).sum(axis=1), horizon * pools.steady[c, pools.best]


def _draws(rngs, n_ctx: int, nu: int, nz: int):
    u = np.concatenate([g.random((n_ctx, nu)) for g in rngs]) if nu else None
    z = np.concatenate([g.standard_normal((n_ctx, nz)) for g in rngs]) if nz else None
    return u, z


@dataclasses.dataclass
class _Batch:
    """All bandits of one replay on flat arrays: row ``i`` is context ``ctx[i]`` of one seed block."""

    policy: Policy
    state: BanditState
    n_blocks: int
    ctx: np.ndarray
    rows: np.ndarray
    cell_base: np.ndarray  # rows * K: flat index of a row's first arm
    cell_sample: np.ndarray  # flat [B * K]: flat index of the cell's first sample, (ctx * K + arm) * D
    samples: np.ndarray  # flat [C * K * D]
    depth: np.ndarray  # flat [B * K]
    wrap: np.ndarray  # flat [B * K]
    steady: np.ndarray  # flat [B * K]
    mu_min: np.ndarray
    rngs: list
    dilution: int = 1
    lag: int = 0
    environment: Environment | None = None
    #: held pulls of a delayed replay, oldest first: (step after which they apply, rows, arms, reward, learn)
    held: list = dataclasses.field(default_factory=list)

    @property
    def delayed(self) -> bool:
        return self.dilution > 1 or self.lag > 0


def _batch(problem: ReplayProblem, policy: Policy, seeds: list[int], share: bool, dilution: int, lag: int,
           environment: Environment | None, horizon: int) -> _Batch:
    pools = problem.pools
    n_ctx, n_arms, depth_max = pools.samples.shape
    n_blocks = 1 if (policy.is_deterministic and share and environment is None) else len(seeds)
    ctx = np.tile(np.arange(n_ctx), n_blocks)
    rows = np.arange(n_ctx * n_blocks)
    state = BanditState.empty(problem.offered[ctx], problem.prior[ctx], problem.auto[ctx])
    state.extra["lex_rank"], state.extra["group"] = problem.lex_rank, problem.group
    policy.init(state)
    if environment is not None:
        environment.bind(problem, ctx, seeds[:n_blocks], horizon)
    cell_sample = (ctx[:, None] * n_arms + np.arange(n_arms)[None, :]).reshape(-1) * depth_max
    return _Batch(
        policy=policy, state=state, n_blocks=n_blocks, ctx=ctx, rows=rows, cell_base=rows * n_arms,
        cell_sample=cell_sample,
        samples=np.ascontiguousarray(pools.samples).reshape(-1), depth=pools.depth[ctx].reshape(-1),
        wrap=pools.wrap[ctx].reshape(-1),
        steady=np.nan_to_num(pools.steady[ctx]).reshape(-1), mu_min=problem.mu_min[ctx],
        rngs=[np.random.default_rng(s) for s in seeds[:n_blocks]], dilution=dilution, lag=lag,
        environment=environment)


def _learn(b: _Batch, rows: np.ndarray, arms: np.ndarray, reward: np.ndarray) -> None:
    b.policy.update(b.state, rows, arms, b.state.renormalise(rows, reward, b.policy.estimator))


def _select(b: _Batch, t: int, u, z) -> np.ndarray:
    """The policy's arms, with the hold rule while rewards are held and the safety gate."""
    state, policy = b.state, b.policy
    if b.delayed and b.held:
        state.selectable = selectable(state, policy.probe)
    arms = policy.select(state, t, u, z)
    state.selectable = state.offered
    return safety_gate(state, arms, policy.gate_margin, policy.gate_min) if policy.safety_gate else arms


def _apply_held(b: _Batch, t: int) -> None:
    """Apply the held pulls due after step ``t``: each resolved, the learned ones learned."""
    state = b.state
    while b.held and b.held[0][0] <= t:
        _due, rows, arms, reward, learn = b.held.pop(0)
        cell = rows * state.pending.shape[1] + arms  # one pull per row: distinct cells
        state.pending.reshape(-1)[cell] -= 1
        state.resolved.reshape(-1)[cell] += 1
        if learn is None:
            _learn(b, rows, arms, reward)
        elif learn.any():
            _learn(b, rows[learn], arms[learn], reward[learn])


def _served(b: _Batch, cell: np.ndarray, pulls: np.ndarray) -> np.ndarray:
    """Flat sample index of each row's pull of the arm at ``cell``, its ``pulls``-th
    (:func:`~.pools.pool_position`; the wrap is worked out only for the pulls past a pool's end)."""
    depth = b.depth[cell]
    over = pulls >= depth
    position = pool_position(pulls, depth, b.wrap[cell]) if over.any() else pulls
    return b.cell_sample[cell] + position


def _step(b: _Batch, t: int, draws: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of every bandit: select, serve the pull-count sample, learn. Returns arms, X, mean."""
    u, z = _draws(b.rngs, len(b.rows) // b.n_blocks, *draws)
    arms = _select(b, t, u, z)
    cell = b.cell_base + arms
    pulls_flat = b.state.pulls.reshape(-1)
    pulls = pulls_flat[cell]
    if b.environment is None:
        x = b.samples[_served(b, cell, pulls)]
        price = b.steady[cell]
    else:
        x, price = b.environment.serve(t, arms)
    reward = b.mu_min / x
    skip = b.policy.estimator.skip_first
    learn = pulls >= skip if skip else None
    if not b.delayed:
        if learn is None:
            _learn(b, b.rows, arms, reward)
        elif learn.any():
            _learn(b, b.rows[learn], arms[learn], reward[learn])
    else:
        b.state.pending.reshape(-1)[cell] += 1
        due = ((t - 1) // b.dilution + 1 + b.lag) * b.dilution
        b.held.append((due, b.rows, arms, reward, learn))
        _apply_held(b, t)
    pulls += 1
    pulls_flat[cell] = pulls
    return arms, x, price


def run_policy(problem: ReplayProblem, policy: Policy, *, horizon: int = 100,
               seeds: Sequence[int] = tuple(range(20)), record_arms: bool = False,
               share_deterministic: bool = True, record_steps: bool = False, dilution: int = 1,
               lag: int = 0, environment: Environment | None = None) -> ReplayRun:
    """Replay one policy on every context for ``horizon`` steps and every seed.

    Deterministic policies run one batch and are copied across seeds (unless
    ``share_deterministic`` is False, which benchmarks use, or an ``environment`` serves the
    pulls). The "plays the measured-best arm at the end" share covers the last
    :data:`LAST_WINDOW` steps (paper section 6.1). ``record_arms`` keeps the arm of every step
    per seed (``ReplayRun.arms``); ``record_steps`` keeps arms and latencies per seed block
    (``ReplayRun.steps``; pool-served replays only). ``dilution``, ``lag`` and ``environment``:
    see the module docstring.
    """
    if int(dilution) < 1:
        raise AnalysisError(f"dilution must be a whole number of pulls >= 1, but got {dilution}")
    if int(lag) < 0:
        raise AnalysisError(f"lag must be a whole number of rounds >= 0, but got {lag}")
    seeds = list(seeds)
    b = _batch(problem, policy, seeds, share_deterministic, int(dilution), int(lag), environment, horizon)
    n_rows, n_arms = b.state.offered.shape
    served, selection = np.zeros(n_rows), np.zeros(n_rows)
    auto_hits, best_hits = np.zeros(n_rows, dtype=np.int64), np.zeros(n_rows, dtype=np.int64)
    # per-step records are written step by step (one contiguous row each) and turned to [rows, T] at the end
    trace = np.zeros((horizon, n_rows), dtype=np.int16) if (record_arms or record_steps) else None
    served_t, selection_t = (np.zeros((horizon, n_rows)) for _ in range(2)) if record_steps else (None, None)
    auto, best = problem.auto[b.ctx], problem.pools.best[b.ctx]
    draws = draw_counts(policy, n_arms)
    for t in range(1, horizon + 1):
        arms, x, mean = _step(b, t, draws)
        served += x
        selection += mean
        auto_hits += arms == auto
        if t > horizon - LAST_WINDOW:
            best_hits += arms == best
        if trace is not None:
            trace[t - 1] = arms
        if served_t is not None:
            served_t[t - 1], selection_t[t - 1] = x, mean
    played = b.state.pulls > 0  # the arms each bandit was served (every pull counts in ``pulls``)
    if trace is not None:
        trace = np.ascontiguousarray(trace.T)
    if served_t is not None:
        served_t, selection_t = np.ascontiguousarray(served_t.T), np.ascontiguousarray(selection_t.T)

    def per_seed(a: np.ndarray) -> np.ndarray:
        a = a.reshape(b.n_blocks, len(problem), *a.shape[1:])
        return np.repeat(a, len(seeds), axis=0) if b.n_blocks == 1 and len(seeds) > 1 else a

    if environment is None:
        oracle, oracle_sel = oracle_sums(problem, horizon)
    else:
        oracle, oracle_sel = (per_seed(a) for a in environment.oracle())
    steps = None
    if record_steps:
        def blocks(a: np.ndarray) -> np.ndarray:
            return a.reshape(b.n_blocks, len(problem), horizon)

        c = np.arange(len(problem))
        shared = policy.is_deterministic and share_deterministic and environment is None
        steps = Steps(seeds=[None] if shared else seeds, arms=blocks(trace), served_us=blocks(served_t),
                      selection_us=blocks(selection_t), oracle_us=oracle_steps(problem, horizon),
                      best_steady_us=problem.pools.steady[c, problem.pools.best])
    return ReplayRun(
        policy=policy.display_name, deterministic=policy.is_deterministic, seeds=seeds, served_us=per_seed(served),
        selection_us=per_seed(selection), oracle_us=oracle, oracle_selection_us=oracle_sel,
        auto_share=per_seed(auto_hits / horizon), distinct_arms=per_seed(played.sum(axis=1)),
        best_last=per_seed(best_hits / min(LAST_WINDOW, horizon)),
        arms=None if not record_arms else per_seed(trace), steps=steps, played=per_seed(played))


def _node_split(contexts: pd.DataFrame, split: str) -> np.ndarray:
    """Train mask of the node-count splits (``scale``, ``reverse``, ``largest``)."""
    nodes = sorted(contexts["nodes"].unique())
    if len(nodes) < 2:
        raise AnalysisError(f"the {split} split needs at least two node counts, but the data has only {nodes}",
                            hint="sweep more node counts (campaign 'nodes: [4, 8, 16, 32]') or pass --split random")
    if split == "largest":
        train = nodes[:-1]
    else:
        k = 2 if len(nodes) > 2 else 1
        train = nodes[:k] if split == "scale" else nodes[-k:]
    return contexts["nodes"].isin(set(train)).to_numpy()


def split_labels(contexts: pd.DataFrame, split: str = "scale", *, seed: int = 42) -> pd.DataFrame:
    """Label every context with ``part`` (train/test) and ``fold`` for a split.

    * ``scale`` (default, scale out-of-distribution): train on the two smallest node counts,
      test on the rest (paper section 5); ``reverse``: train on the two largest (Table 36);
      ``largest``: train on all but the largest node count, test on it (Table 46);
    * ``random``: same-scale random 50/50 split of contexts (``seed``);
    * ``loco``: leave-one-collective-out; every context is tested once, in the fold named
      after its collective; ``loco:<Collective>`` holds out that one collective and trains
      on the others (what a re-tuned leave-one-out study sees).

    Tuning sees only the train part (:mod:`.study`); summaries use the test part.
    """
    out = pd.DataFrame(index=contexts.index)
    kind, _, held = split.partition(":")
    if kind in ("scale", "reverse", "largest") and not held:
        out["part"] = np.where(_node_split(contexts, kind), "train", "test")
        out["fold"] = kind
    elif split == "random":
        rng = np.random.default_rng(seed)
        test = rng.permutation(len(contexts)) < (len(contexts) + 1) // 2
        out["part"] = np.where(test, "test", "train")
        out["fold"] = f"random-{seed}"
    elif split == "loco":
        out["part"] = "test"
        out["fold"] = contexts["collective"].astype(str).to_numpy()
    elif kind == "loco" and held:
        present = sorted(contexts["collective"].astype(str).unique())
        if held not in present:
            raise AnalysisError(f"split {split!r} holds out a collective the data lacks",
                                hint=f"use loco:<one of {', '.join(present)}>")
        out["part"] = np.where(contexts["collective"].astype(str) == held, "test", "train")
        out["fold"] = f"loco-{held}"
    else:
        raise AnalysisError(f"split must be one of {', '.join(SPLITS)} or loco:<Collective>, but got {split!r}")
    return out


def _frame(problem: ReplayProblem, run: ReplayRun, labels: pd.DataFrame) -> pd.DataFrame:
    n_seeds, n_ctx = run.served_us.shape
    ctx = problem.contexts
    arms = np.array(problem.pools.arms)
    frame = pd.DataFrame({col: np.tile(ctx[col].to_numpy(), n_seeds) for col in CONTEXT_COLUMNS})
    frame.insert(0, "seed", np.repeat(run.seeds, n_ctx))
    frame.insert(0, "policy", run.policy)
    frame["part"] = np.tile(labels["part"].to_numpy(), n_seeds)
    frame["fold"] = np.tile(labels["fold"].to_numpy(), n_seeds)
    frame["trlt_realized"] = run.trlt_realized.reshape(-1)
    frame["trlt_selection"] = run.trlt_selection.reshape(-1)
    frame["served_us"] = run.served_us.reshape(-1)
    frame["oracle_us"] = np.broadcast_to(run.oracle_us, run.served_us.shape).reshape(-1)
    frame["auto_arm"] = np.tile(arms[problem.auto], n_seeds)
    frame["best_arm"] = np.tile(arms[problem.pools.best], n_seeds)
    frame["n_offered"] = np.tile(problem.offered.sum(axis=1), n_seeds)
    frame["auto_share"] = run.auto_share.reshape(-1)
    frame["distinct_arms"] = run.distinct_arms.reshape(-1)
    frame["best_last20"] = run.best_last.reshape(-1)
    frame["deterministic"] = run.deterministic
    return frame


def trajectory_frame(problem: ReplayProblem, run: ReplayRun, labels: pd.DataFrame) -> pd.DataFrame:
    """Long rows of a run recorded with ``record_steps``: one per (seed block, context, step).

    Columns: ``policy``, ``seed`` (null for a deterministic policy run once: it stands for
    every seed), the context columns, ``part``, ``fold``, ``step`` (1..T), ``arm``,
    ``served_us`` (the latency the policy was served), ``oracle_us`` (what the measured-best
    arm serves at that step), ``selection_us`` (the chosen arm's steady mean),
    ``best_steady_us``, and the cumulative relative lost times ``crlt_realized`` and
    ``crlt_selection`` up to the step (their value at step T is the run's TRLT).
    """
    steps = run.steps
    if steps is None:
        raise AnalysisError(f"policy {run.policy} was replayed without per-step records",
                            hint="replay with record_steps=True (analyze replay --trajectories FILE)")
    n_blocks, n_ctx, horizon = steps.served_us.shape
    per_block = n_ctx * horizon

    def each_step(values: np.ndarray) -> np.ndarray:  # one value per context -> every block and step
        return np.tile(np.repeat(np.asarray(values), horizon), n_blocks)

    ctx = problem.contexts
    frame = pd.DataFrame({"policy": pd.Categorical([run.policy] * (n_blocks * per_block)),
                          "seed": pd.array(np.repeat(steps.seeds, per_block), dtype="Int64")})
    for col in CONTEXT_COLUMNS:
        numeric = pd.api.types.is_numeric_dtype(ctx[col])
        frame[col] = each_step(ctx[col].to_numpy(np.int64)) if numeric else pd.Categorical(each_step(ctx[col].to_numpy()))
    frame["part"] = pd.Categorical(each_step(labels["part"].to_numpy()))
    frame["fold"] = pd.Categorical(each_step(labels["fold"].to_numpy()))
    frame["step"] = np.tile(np.arange(1, horizon + 1, dtype=np.int32), n_blocks * n_ctx)
    frame["arm"] = pd.Categorical.from_codes(steps.arms.reshape(-1), categories=list(problem.pools.arms))
    frame["served_us"] = steps.served_us.reshape(-1)
    frame["oracle_us"] = np.tile(steps.oracle_us.reshape(-1), n_blocks)
    frame["selection_us"] = steps.selection_us.reshape(-1)
    frame["best_steady_us"] = each_step(steps.best_steady_us)
    frame["crlt_realized"] = (np.cumsum(steps.served_us, axis=2) / np.cumsum(steps.oracle_us, axis=1)[None]
                              - 1.0).reshape(-1)
    t = np.arange(1, horizon + 1)
    frame["crlt_selection"] = (np.cumsum(steps.selection_us, axis=2) / (t[None, :] * steps.best_steady_us[:, None])[None]
                               - 1.0).reshape(-1)
    return frame


def _replay(problem: ReplayProblem, policies: Sequence[Policy], *, horizon: int, seeds: Sequence[int], split: str,
            split_seed: int, trajectories: bool, dilution: int = 1, lag: int = 0,
            environment: Environment | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    labels = split_labels(problem.contexts, split, seed=split_seed)
    frames, steps = [], []
    for policy in policies:
        if hasattr(policy, "prepare") and not policy.fitted:  # fit-once selectors learn from the train part only
            policy = policy.prepare(problem, labels)
        run = run_policy(problem, policy, horizon=horizon, seeds=seeds, record_steps=trajectories, dilution=dilution,
                         lag=lag, environment=environment)
        frames.append(_frame(problem, run, labels))
        if trajectories:
            steps.append(trajectory_frame(problem, run, labels))
        log.info("replayed %s on %d contexts x %d seeds", policy.display_name, len(problem), len(list(seeds)))
    frame = pd.concat(frames, ignore_index=True)
    frame["horizon"] = horizon
    frame["split"] = split
    if not trajectories:
        return frame, None
    from pandas.api.types import union_categoricals

    policy = union_categoricals([s["policy"] for s in steps])
    steps_frame = pd.concat([s.drop(columns="policy") for s in steps], ignore_index=True)
    steps_frame.insert(0, "policy", policy)
    steps_frame["split"] = split
    return frame, steps_frame


def run_replay(problem: ReplayProblem, policies: Sequence[Policy], *, horizon: int = 100,
               seeds: Sequence[int] = tuple(range(20)), split: str = "scale", split_seed: int = 42,
               dilution: int = 1, lag: int = 0, environment: Environment | None = None) -> pd.DataFrame:
    """Replay every policy; one row per policy x context x seed, labelled with the split.

    ``dilution``, ``lag`` and ``environment`` are passed to :func:`run_policy`.
    """
    return _replay(problem, policies, horizon=horizon, seeds=seeds, split=split, split_seed=split_seed,
                   trajectories=False, dilution=dilution, lag=lag, environment=environment)[0]


def replay_with_trajectories(problem: ReplayProblem, policies: Sequence[Policy], *, horizon: int = 100,
                             seeds: Sequence[int] = tuple(range(20)), split: str = "scale",
                             split_seed: int = 42) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run_replay` plus every policy's per-step trajectories (:func:`trajectory_frame` rows)."""
    return _replay(problem, policies, horizon=horizon, seeds=seeds, split=split, split_seed=split_seed,
                   trajectories=True)


def scenario_of(frame: pd.DataFrame) -> pd.Series:
    """A string key per row for its (fabric, collective, nodes) scenario."""
    return frame[list(SCENARIO_COLUMNS)].astype(str).agg("/".join, axis=1)
