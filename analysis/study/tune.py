"""The tuning campaign: one Optuna study per learning family (paper appendix E, Table 16).

Each study runs ``trials`` complete trials (151 by default): trial 0 the family's educated
guess (enqueued), ``startup`` random start-up trials, then TPE, on the mean train TRLT of
the split's train partition (selection-priced by default, realized as an option, Table 53).
Supervised selectors (``GBM+cost`` ...) are tuned with the same budget on the mean
selection-priced TRLT of validation folds inside the train partition (Table 41).

Studies live in Optuna storage: a journal file ``studies.journal`` in the output folder by
default, or any Optuna storage URL (an RDB on a cluster). A study is *resumable*: killed at
any point (SIGKILL included), ``analyze tune`` again finishes it with exactly ``trials``
complete trials, and, because the k-th complete trial is always sampled by a sampler seeded
``seed + k`` from the k trials before it, with the same trials and champion as a run that was
never interrupted. A study is worked on by one process at a time (a lock file per study in
the output folder; the lock dies with its process), so trials left RUNNING by a killed
process are marked failed when the next process takes the study. ``workers`` processes on
one machine take studies in turn; on a cluster, start ``analyze tune`` on several nodes with
the same ``--out`` (shared) and ``--storage`` and they share the studies the same way
(``analyze tune -i INVENTORY --nodes N`` submits such a job). Each trial records the node
that ran it (user attribute ``host``: Slurm's node name inside a job, else the host name),
and every process rewrites the outputs when its work ends, one at a time (a lock in the
output folder), so the last one to end leaves the outputs of every finished study.

Optuna is imported inside the functions that use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import multiprocessing
import os
import queue
import socket
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from ncclbot_sweep.errors import AnalysisError

from ..policies import parse_policy
from ..replay import ReplayProblem, run_policy, split_labels
from .spaces import FAMILIES, SUPERVISED_FAMILIES, defaults, family, policy_spec, suggest

__all__ = ["TuneOptions", "JOURNAL", "open_storage", "train_partition", "run_study", "tune", "objective_value",
           "study_counts"]

log = logging.getLogger(__name__)

#: The journal file the studies live in when no ``--storage`` is given.
JOURNAL = "studies.journal"
_LOCKS = "locks"
_OUTPUTS_LOCK = "_outputs.lock"  # beside the per-study locks; no family starts with '_'

Progress = Callable[[str, int, int], None]


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """What a tuning campaign searches and how a trial is scored."""

    families: Sequence[str] = tuple(FAMILIES)
    trials: int = 151
    startup: int = 50
    seed: int = 42
    objective: str = "selection"
    horizon: int = 100
    seeds: int = 1
    split: str = "scale"
    split_seed: int = 42
    storage: str | None = None
    workers: int = 1
    study_prefix: str = ""
    #: Warm start pinned off in every study (Table 42's independently tuned cold champions).
    cold: bool = False

    def __post_init__(self) -> None:
        for name in self.families:
            family(name)
        if self.objective not in ("selection", "realized"):
            raise AnalysisError(f"objective must be selection or realized, but got {self.objective!r}",
                                hint="pass --objective selection (the paper's main study) or realized (Table 53)")
        if self.trials < 1 or self.workers < 1 or self.startup < 0:
            raise AnalysisError("--trials and --workers must be at least 1 and --startup-trials at least 0")

    @property
    def replay_seeds(self) -> list[int]:
        """Seeds of stochastic policies in a trial: ``seed, seed+1, ...`` (base seed 42, paper E)."""
        return list(range(self.seed, self.seed + self.seeds))

    def fingerprint(self) -> dict:
        """What a resumed study must share with the one it continues."""
        found = {"objective": self.objective, "horizon": self.horizon, "seeds": self.seeds, "split": self.split,
                 "split_seed": self.split_seed, "seed": self.seed, "startup": self.startup}
        return {**found, "cold": True} if self.cold else found


def open_storage(out: Path, url: str | None):
    """The Optuna storage of a campaign: ``url`` if given, else the journal file in ``out``.

    Raises :class:`AnalysisError` naming the URL and the fix when it cannot be opened.
    """
    import optuna

    if url is None:
        from optuna.storages.journal import JournalFileBackend

        out.mkdir(parents=True, exist_ok=True)
        _repair_journal(out / JOURNAL)
        return optuna.storages.JournalStorage(JournalFileBackend(str(out / JOURNAL)))
    try:
        storage = optuna.storages.RDBStorage(url)
        storage.get_all_studies()
        return storage
    except Exception as exc:  # noqa: BLE001 - any driver or connection failure is the user's URL
        raise AnalysisError(f"cannot open Optuna storage {url!r}: {type(exc).__name__}: {exc}",
                            hint="pass a reachable RDB URL (sqlite:///PATH/studies.db, "
                                 "postgresql://USER@HOST/DB with its driver installed), or leave --storage out "
                                 f"to use the journal file {JOURNAL} in --out") from exc


def _repair_journal(path: Path) -> None:
    """Cut a torn last line (a writer killed inside its one ``write``) so appends stay valid.

    Done under the journal's own lock, so a live writer's line is never cut.
    """
    from optuna.storages.journal import JournalFileSymlinkLock

    if not path.is_file() or path.stat().st_size == 0:
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with open(path, "rb+") as handle:
            data = handle.read()
            if not data.endswith(b"\n"):
                log.warning("%s: cutting a torn last line (%d bytes) left by a killed writer", path,
                            len(data) - data.rfind(b"\n") - 1)
                handle.truncate(data.rfind(b"\n") + 1)
    finally:
        lock.release()


def train_partition(problem: ReplayProblem, split: str, *, seed: int = 42) -> ReplayProblem:
    """The contexts a study may see: the split's train part (test contexts never enter a trial)."""
    labels = split_labels(problem.contexts, split, seed=seed)
    train = (labels["part"] == "train").to_numpy()
    if not train.any():
        raise AnalysisError(f"split {split!r} leaves no train contexts to tune on",
                            hint="use --split scale or random (loco holds every context out once)")
    return problem.subset(train)


def objective_value(run, objective: str) -> float:
    """Mean over contexts of the seed-averaged train TRLT (the study's objective)."""
    values = run.trlt_selection if objective == "selection" else run.trlt_realized
    return float(values.mean(axis=0).mean())


def _sampler(options: TuneOptions, complete: int):
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=options.seed + complete, n_startup_trials=1 + options.startup,
                                          multivariate=True, group=True, constant_liar=False)


def _score(train: ReplayProblem, name: str, params: dict, options: TuneOptions) -> tuple[float, dict]:
    if name in SUPERVISED_FAMILIES:
        spec = policy_spec(name, params, label=f"{name}-tuned")  # beside the fixed-setting row of the same name
        from .supervised import validation_trlt

        value = validation_trlt(parse_policy(spec), train, options.split, seed=options.split_seed)
        return value, {"spec": spec, "selection": value, "realized": float("nan"), "params": params}
    spec = policy_spec(name, params)
    run = run_policy(train, parse_policy(spec), horizon=options.horizon, seeds=options.replay_seeds)
    attrs = {"spec": spec, "selection": objective_value(run, "selection"), "realized": objective_value(run, "realized"),
             "params": params}
    return attrs[options.objective], attrs


def _host() -> str:
    """Where a trial runs: Slurm's name of the node inside a job (several may share a host name), else the host's."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


@contextlib.contextmanager
def _outputs_lock(out: Path):
    """Wait for, then hold, the lock that lets one process at a time rewrite the outputs."""
    folder = out / _LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / _OUTPUTS_LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _study_lock(out: Path, name: str):
    """An exclusive, non-blocking lock on one study (None if another process holds it)."""
    folder = out / _LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name.replace('/', '_')}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_study(storage, name: str, options: TuneOptions, train: ReplayProblem):
    import optuna

    study = optuna.create_study(study_name=options.study_prefix + name, storage=storage, direction="minimize",
                                load_if_exists=True)
    wanted = {**options.fingerprint(), "train_contexts": len(train)}
    stored = study.user_attrs.get("options")
    if stored is None:
        study.set_user_attr("options", wanted)
        study.set_user_attr("family", name)
    elif stored != wanted:
        raise AnalysisError(f"study {study.study_name!r} was tuned with {stored}, not {wanted}",
                            hint="resume with the same dataset and options, or tune into a new --out (or --storage)")
    return study


def _complete(study) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def run_study(storage, train: ReplayProblem, name: str, options: TuneOptions, *,
              progress: Progress | None = None) -> int:
    """Run family ``name``'s study until it has ``options.trials`` complete trials; return that count.

    The caller holds the study's lock. Trials left RUNNING by a killed process are marked
    failed first; trial 0 (the educated guess) is enqueued until it has completed once.
    """
    from optuna.trial import TrialState

    study = _open_study(storage, name, options, train)
    for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        log.warning("study %s: trial %d was left running by a killed process; marking it failed", name, stale.number)
        study.tell(stale.number, state=TrialState.FAIL)
    complete = _complete(study)
    if complete == 0 and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        study.enqueue_trial(defaults(name, cold=options.cold))
    while complete < options.trials:
        study.sampler = _sampler(options, complete)
        trial = study.ask()
        value, attrs = _score(train, name, suggest(trial, name, cold=options.cold), options)
        for key, item in {**attrs, "host": _host()}.items():
            trial.set_user_attr(key, item)
        study.tell(trial, value)
        complete += 1
        if progress is not None:
            progress(name, complete, options.trials)
    return complete


def _work(out: Path, train: ReplayProblem, options: TuneOptions, offset: int, progress: Progress | None) -> None:
    """One worker: take each unfinished, unlocked study in turn (starting at ``offset``) and finish it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(out, options.storage)
    names = list(options.families)
    for name in names[offset:] + names[:offset]:
        with _study_lock(out, options.study_prefix + name) as lock:
            if lock is not None:
                run_study(storage, train, name, options, progress=progress)


def _worker_main(out, dataset_args, options, offset, messages) -> None:
    from .. import pools
    from ..inputs import load_problem

    # The parent loaded this dataset first and said what it leaves out; the command says it once.
    logging.getLogger(pools.__name__).setLevel(logging.ERROR)
    train = train_partition(load_problem(**dataset_args), options.split, seed=options.split_seed)
    _work(Path(out), train, options, offset, lambda name, done, total: messages.put((name, done, total)))


def tune(problem: ReplayProblem, out: str | Path, *, options: TuneOptions = TuneOptions(),
         dataset_args: dict | None = None, progress: Progress | None = None) -> Path:
    """Run (or resume) every study of ``options.families`` into ``out``; write champions and tables.

    With ``workers > 1`` the worker processes reload the dataset from ``dataset_args`` (the
    keyword arguments of :func:`~..inputs.load_problem`). Returns the path of
    ``champions.yaml``. Idempotent: a finished campaign only rewrites its outputs.
    """
    from .outputs import write_outputs

    out = Path(out)
    train = train_partition(problem, options.split, seed=options.split_seed)
    storage = open_storage(out, options.storage)
    if options.workers == 1:
        _work(out, train, options, 0, progress)
    else:
        if dataset_args is None:
            raise AnalysisError("workers > 1 needs dataset_args to reload the dataset in each worker")
        _run_workers(out, dataset_args, options, progress)
    with _outputs_lock(out):
        return write_outputs(storage, out, options)


def _run_workers(out: Path, dataset_args: dict, options: TuneOptions, progress: Progress | None) -> None:
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    procs = [ctx.Process(target=_worker_main, args=(str(out), dataset_args, options, i, messages), daemon=True)
             for i in range(options.workers)]
    for proc in procs:
        proc.start()
    try:
        while any(p.is_alive() for p in procs) or not messages.empty():
            with contextlib.suppress(queue.Empty):
                name, done, total = messages.get(timeout=0.2)
                if progress is not None:
                    progress(name, done, total)
    finally:
        for proc in procs:
            proc.join(timeout=5)
    failed = [p.exitcode for p in procs if p.exitcode]
    if failed:
        raise AnalysisError(f"{len(failed)} tuning worker(s) failed (exit codes {failed})",
                            hint="see the log above; run 'analyze tune' again to resume the unfinished studies")


def study_counts(out: str | Path, options: TuneOptions) -> dict[str, int]:
    """Complete trials per family in the campaign's storage (0 for studies not started)."""
    import optuna

    storage = open_storage(Path(out), options.storage)
    names = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    counts = {}
    for name in options.families:
        key = options.study_prefix + name
        counts[name] = _complete(optuna.load_study(study_name=key, storage=storage)) if key in names else 0
    return counts
