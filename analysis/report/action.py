"""What to set: where a measured arm beats NCCL's choice, and the files and lines that deploy it.

The report acts on its own dataset: it writes the two exports of :mod:`..export` (NVIDIA's
example tuner file and the plugin's static table) into ``out/export/<fabric>/``, from the same
decision table and margin, so the ranges the page lists are the rules those files hold. Each
range is a run of adjacent swept sizes of one (collective, node count) whose measured-best arm
is the same and beats AUTO by at least the margin (:func:`..export.arm_runs`, the runs the
files are written from). The page also gives the ``ncclbot-sweep export`` commands that write
the same files again, byte for byte, and the environment lines that load them.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pandas as pd

from ..export import arm_runs, decisions, nccl_tuner_text, nccl_version, provenance, static_text
from ..live.sizes import size_range

__all__ = ["DEFAULT_MARGIN", "EXPORT_FOLDER", "Deployment", "WhatToSet", "what_to_set"]

#: The margin of the report's exports: an arm replaces NCCL's choice where it is at least 5% faster
#: (the steady-mean noise of a forced sweep is a few percent; below that NCCL's choice stands).
DEFAULT_MARGIN = 0.05
#: The folder (under the report's ``out``) of the exported files, one subfolder per fabric.
EXPORT_FOLDER = "export"
#: File names inside ``export/<fabric>/``: what ``export nccl-tuner`` and ``export static`` write.
FILES = {"nccl-tuner": "nccl_tuner.conf", "static": "static.csv"}
#: The columns of the ranges table (``tables/what_to_set.csv``).
RANGE_COLUMNS = ["fabric", "collective", "nodes", "ranks", "sizes", "min_bytes", "max_bytes", "arm", "auto_arm",
                 "contexts", "loss_min_pct", "loss_max_pct"]


@dataclasses.dataclass(frozen=True)
class Deployment:
    """One fabric's exported files (absolute paths) and how to load and rewrite them."""

    fabric: str
    nccl_tuner: Path
    static: Path
    rules: int
    commands: list[str]
    state_command: str
    tuner_environment: list[str]
    static_environment: list[str]


@dataclasses.dataclass(frozen=True)
class WhatToSet:
    """The ranges (:data:`RANGE_COLUMNS`, one row per run of sizes) and the files that set them."""

    margin: float
    ranges: pd.DataFrame
    deployments: list[Deployment]
    scenarios: int


def _ranges(table: pd.DataFrame) -> pd.DataFrame:
    """One row per run of kept sizes sharing a best arm, with AUTO's arm(s) and loss over the run."""
    rows = []
    for fabric, part in table.groupby("fabric", sort=True):
        chosen = part.assign(arm=part["best"].where(part["keep"] & (part["best"] != part["auto"]), ""))
        for coll, nodes, ranks, arm, first, last, _next in arm_runs(chosen, "arm"):
            if not arm:
                continue
            run = chosen[(chosen["collective"] == coll) & (chosen["nodes"] == nodes) & (chosen["ranks"] == ranks)
                         & chosen["size_bytes"].between(first, last)]
            loss = 100 * run["auto_loss"]
            rows.append({"fabric": fabric, "collective": coll, "nodes": nodes, "ranks": ranks,
                         "sizes": size_range(first, last), "min_bytes": first, "max_bytes": last, "arm": arm,
                         "auto_arm": ", ".join(dict.fromkeys(run["auto"])), "contexts": len(run),
                         "loss_min_pct": float(loss.min()), "loss_max_pct": float(loss.max())})
    return pd.DataFrame(rows, columns=RANGE_COLUMNS)


def _command(kind: str, dataset: Path, path: Path, *, fabric: str | None, margin: float | None,
             window: tuple[int, int], rho_max: float) -> str:
    """The ``ncclbot-sweep export`` command that writes ``path`` (again), with every option the report used."""
    words = ["ncclbot-sweep", "export", kind, "-d", str(dataset), "-o", str(path)]
    if margin is not None:
        words += ["--margin", f"{margin:g}"]
    if fabric is not None:
        words += ["--fabric", fabric]
    return shlex.join([*words, "--window", str(window[0]), str(window[1]), "--rho-max", f"{rho_max:g}"])


def what_to_set(problem, dataset, out: Path, *, margin: float = DEFAULT_MARGIN, fabric: str | None = None,
                window: tuple[int, int] = (11, 99), rho_max: float = 2.0) -> WhatToSet:
    """Write ``out/export/<fabric>/{nccl_tuner.conf,static.csv}`` for every fabric of ``problem``
    (what ``export nccl-tuner`` and ``export static`` write for ``dataset`` with ``margin``) and
    return the ranges they set. ``fabric``, ``window`` and ``rho_max`` are the report's options,
    repeated in the commands so that they rewrite the same files. Idempotent."""
    dataset = Path(dataset).resolve()
    table = decisions(problem, margin=margin)
    deployments = []
    for fab, part in table.groupby("fabric", sort=True):
        folder = (Path(out) / EXPORT_FOLDER / str(fab)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        version = nccl_version(dataset, fab)
        texts = {"nccl-tuner": nccl_tuner_text(part, provenance(dataset, fab, version, "nccl-tuner", margin)),
                 "static": static_text(part, provenance(dataset, fab, version, "static", margin))}
        for kind, text in texts.items():
            (folder / FILES[kind]).write_text(text)
        tuner, static = folder / FILES["nccl-tuner"], folder / FILES["static"]
        named = str(fab) if fabric is not None or table["fabric"].nunique() > 1 else None
        deployments.append(Deployment(
            fabric=str(fab), nccl_tuner=tuner, static=static,
            rules=sum(1 for line in texts["nccl-tuner"].splitlines() if line and not line.startswith("#")),
            commands=[_command(kind, dataset, folder / FILES[kind], fabric=named,
                               margin=margin, window=window, rho_max=rho_max) for kind in FILES],
            state_command=_command("state", dataset, folder / "state", fabric=named, margin=None, window=window,
                                   rho_max=rho_max),
            tuner_environment=["export NCCL_TUNER_PLUGIN=example   # libnccl-tuner-example.so, NCCL's "
                               "plugins/tuner/example (2.27.5+), on LD_LIBRARY_PATH",
                               f"export NCCL_TUNER_CONFIG_FILE={shlex.quote(str(tuner))}"],
            static_environment=['export NCCL_TUNER_PLUGIN="$(ncclbot-sweep plugin path)"   # this project\'s plugin',
                                "export NCCLBOT_POLICY=static",
                                f"export NCCLBOT_STATIC_TABLE={shlex.quote(str(static))}"]))
    scenarios = int(table[["fabric", "collective", "nodes", "ranks"]].drop_duplicates().shape[0])
    return WhatToSet(margin, _ranges(table), deployments, scenarios)
