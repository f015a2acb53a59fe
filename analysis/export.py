"""Put what a sweep measured into production: files NCCL's tuners read the next day.

Three consumers, one decision table (:func:`decisions`, built from the analysis core's
:class:`~ncclbot_sweep.analysis.replay.ReplayProblem`):

- ``nccl-tuner``: NVIDIA's example tuner CSV (``NCCL_TUNER_CONFIG_FILE``): lowercase names,
  ``-1`` wildcards, first matching line wins; adjacent swept sizes sharing the measured-best
  arm become one byte range per (collective, nodes, ranks);
- ``static``: the project plugin's ``NCCLBOT_STATIC_TABLE`` (largest ``size_bytes <= nBytes``);
- ``state``: the plugin's ``NCCLBOT_STATE_DIR`` files, one per communicator shape, whose
  per-arm means are the sweep's measured rewards ``mu_min / steady mean``, so a live bandit
  starts from measurements instead of the cost model alone.

A margin keeps only contexts where the measured best beats AUTO by at least that fraction;
the rest are left to NCCL. Every file starts with ``#`` provenance lines (dataset, fabric,
NCCL version), which all three consumers skip.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.names import Arm, log_algorithm_name

from .replay import ReplayProblem

__all__ = [
    "NCCL_TUNER_FIELDS",
    "STATE_HEADER",
    "arm_runs",
    "decisions",
    "nccl_tuner_text",
    "nccl_version",
    "provenance",
    "single_fabric",
    "state_file_name",
    "state_texts",
    "static_text",
    "write_export",
]

NCCL_TUNER_FIELDS = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"
STATE_HEADER = ("# ncclbot-state v1", "collective,size_bytes,mu_min,arm,n,mean")
_SHAPE = ["collective", "nodes", "ranks"]


def single_fabric(problem: ReplayProblem, dataset) -> str:
    """The one fabric of the problem: a tuner file for two fabrics would mix their contexts."""
    fabrics = sorted(problem.contexts["fabric"].astype(str).unique())
    if len(fabrics) != 1:
        raise AnalysisError(f"dataset holds {len(fabrics)} fabrics ({', '.join(fabrics)}); an export is for one",
                            path=dataset, hint="choose one with --fabric NAME")
    return fabrics[0]


def decisions(problem: ReplayProblem, *, margin: float | None = None) -> pd.DataFrame:
    """One row per context: shape, size, measured-best and AUTO's arm, AUTO's loss, and ``keep``.

    ``auto_loss = steady(AUTO) / steady(best) - 1``; ``keep`` is False where a margin is given
    and the loss is below it (NCCL's own choice is left to stand there).
    """
    pools = problem.pools
    rows = np.arange(len(problem))
    best_us = pools.steady[rows, pools.best]
    auto_us = pools.steady[rows, problem.auto]
    frame = problem.contexts[["fabric", *_SHAPE, "size_bytes"]].copy()
    frame["best"] = [pools.arms[k] for k in pools.best]
    frame["auto"] = [pools.arms[k] for k in problem.auto]
    frame["auto_loss"] = auto_us / best_us - 1.0
    frame["keep"] = True if margin is None else frame["auto_loss"] >= margin
    for col in ("nodes", "ranks", "size_bytes"):
        frame[col] = frame[col].astype("int64")
    return frame.sort_values([*_SHAPE, "size_bytes"], kind="stable").reset_index(drop=True)


def provenance(dataset, fabric: str, nccl_version: str, kind: str, margin: float | None = None) -> list[str]:
    """``#`` lines naming where a file came from (every consumer treats them as comments)."""
    lines = [f"# ncclbot-sweep export {kind}", f"# dataset: {dataset}", f"# fabric: {fabric}",
             f"# nccl version: {nccl_version}"]
    if margin is not None:
        lines.append(f"# margin: only contexts where the measured best beats AUTO by >= {margin:g}")
    return lines


def arm_runs(frame: pd.DataFrame, column: str):
    """Per (collective, nodes, ranks): maximal runs of adjacent sizes sharing ``column`` (a line
    of each file, and a row of the report's "what to set" table).

    Yields ``(collective, nodes, ranks, value, first_size, last_size, next_size)``,
    ``next_size`` the first swept size after the run (None after the largest).
    """
    for (coll, nodes, ranks), group in frame.groupby(_SHAPE, sort=True):
        sizes, values = group["size_bytes"].tolist(), group[column].tolist()
        start = 0
        for i in range(1, len(sizes) + 1):
            if i == len(sizes) or values[i] != values[start]:
                yield (coll, nodes, ranks, values[start], sizes[start], sizes[i - 1],
                       sizes[i] if i < len(sizes) else None)
                start = i


def _tuner_names(arm: str) -> tuple[str, str]:
    parsed = Arm.parse(arm)
    return log_algorithm_name(parsed.algorithm).lower(), parsed.protocol.lower()


def nccl_tuner_text(table: pd.DataFrame, header: list[str]) -> str:
    """The example tuner's config: one line per run of the measured-best arm.

    A run covers its first swept size up to one byte below the next swept size (the largest
    swept size ends the last range), so sizes between swept ones take the arm of the swept
    size below them, as the static table does. Contexts not kept are left out (NCCL decides).
    The column header is a comment: the tuner would read a bare one as a rule.
    """
    chosen = table.assign(arm=table["best"].where(table["keep"], ""))
    lines = [*header, f"# {NCCL_TUNER_FIELDS}"]
    for coll, nodes, ranks, arm, first, last, nxt in arm_runs(chosen, "arm"):
        if not arm:
            continue
        last = last if nxt is None else nxt - 1
        algo, proto = _tuner_names(arm)
        lines.append(f"{coll.lower()},{first},{last},{algo},{proto},-1,{nodes},{ranks}")
    return "\n".join(lines) + "\n"


def static_text(table: pd.DataFrame, header: list[str]) -> str:
    """The plugin's static table: a row wherever the arm changes (``AUTO`` where not kept)."""
    chosen = table.assign(arm=table["best"].where(table["keep"], "AUTO"))
    lines = [*header, "collective,nodes,ranks,size_bytes,arm"]
    for coll, nodes, ranks, arm, first, _, _ in arm_runs(chosen, "arm"):
        lines.append(f"{coll},{nodes},{ranks},{first},{arm}")
    return "\n".join(lines) + "\n"


def state_file_name(nodes: int, ranks: int) -> str:
    """The file the plugin loads for a communicator of this shape (plugin/src/persist.c)."""
    return f"ncclbot-state-n{int(nodes)}-r{int(ranks)}.csv"


def state_texts(problem: ReplayProblem, header: list[str]) -> dict[str, str]:
    """``NCCLBOT_STATE_DIR`` files: per shape, a row per (context, offered measured arm).

    ``mu_min`` is the cost model's cheapest offered prediction (the plugin's own), ``mean``
    the measured reward ``mu_min / steady mean`` (paper Eq. 1), ``n`` the arm's pool depth.
    Floats are written in Python's shortest round-trip form, which ``%lf`` reads exactly.
    """
    pools = problem.pools
    ctx = problem.contexts
    out: dict[str, list[str]] = {}
    order = np.lexsort((ctx["size_bytes"].to_numpy(), ctx["collective"].to_numpy(),
                        ctx["ranks"].to_numpy(), ctx["nodes"].to_numpy()))
    for c in order:
        name = state_file_name(ctx["nodes"].iat[c], ctx["ranks"].iat[c])
        lines = out.setdefault(name, [STATE_HEADER[0], *header, STATE_HEADER[1]])
        mu_min = float(problem.mu_min[c])
        for k, arm in enumerate(pools.arms):
            steady = pools.steady[c, k]
            if not (problem.offered[c, k] and np.isfinite(steady) and steady > 0):
                continue
            lines.append(f"{ctx['collective'].iat[c]},{int(ctx['size_bytes'].iat[c])},{mu_min!r},{arm},"
                         f"{int(pools.depth[c, k])},{mu_min / float(steady)!r}")
    return {name: "\n".join(lines) + "\n" for name, lines in out.items()}


def nccl_version(dataset, fabric: str) -> str:
    """The NCCL version(s) the dataset's runs name for this fabric, or ``unknown``."""
    from ncclbot_sweep.ingest.datasets import read_table

    runs = read_table(Path(dataset), "runs")
    if not runs.empty:
        runs = runs[runs["fabric"] == fabric]
    versions = sorted({str(v) for v in runs.get("nccl_version", pd.Series(dtype=str)).dropna() if str(v)})
    return ", ".join(versions) if versions else "unknown (the dataset's runs name none)"


def write_export(kind: str, dataset, out: Path, *, fabric: str | None = None, margin: float | None = None,
                 window: tuple[int, int] = (11, 99), rho_max: float = 2.0) -> list[Path]:
    """Write one export (``nccl-tuner`` or ``static`` to a file, ``state`` into a folder)."""
    from .inputs import load_problem

    problem = load_problem(dataset, fabric=fabric, window=window, rho_max=rho_max)
    fab = single_fabric(problem, dataset)
    header = provenance(Path(dataset).resolve(), fab, nccl_version(dataset, fab), kind, margin)
    if kind == "state":
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in state_texts(problem, header).items():
            (out / name).write_text(text)
            paths.append(out / name)
        return paths
    table = decisions(problem, margin=margin)
    text = nccl_tuner_text(table, header) if kind == "nccl-tuner" else static_text(table, header)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return [out]
