"""An ingested dataset's call times, for pricing a new campaign on the same fabric (``plan --from-dataset``).

NCCL's cost model errs by up to about 2x on some arms (the analysis measures by how much);
what an earlier campaign measured on the fabric does not. Each (collective, nodes, arm, size)
gets the median time of one call over every iteration the dataset holds of an ``ok`` run on
that fabric: a forced arm under its arm, NCCL's own choice (AUTO and stock runs, no arm)
without one. Learners' runs play changing arms and are left out. The median keeps the
first-use transients and outliers out of the price of the calls that follow them.
"""

from __future__ import annotations

from pathlib import Path

from ncclbot_sweep.errors import DatasetError
from ncclbot_sweep.ingest.datasets import read_table
from ncclbot_sweep.names import AUTO, STOCK
from ncclbot_sweep.outcomes import StepOutcome
from ncclbot_sweep.sweep.estimate import Measured

__all__ = ["measured_times"]

_KEY = ["collective", "nodes", "arm", "size_bytes"]


def measured_times(root: str | Path, fabric: str) -> Measured:
    """The median time per call of every context the dataset at ``root`` measured on ``fabric``.

    Raises DatasetError naming the fabrics the dataset holds when it has nothing of ``fabric``.
    """
    only = [("fabric", "=", fabric)]
    runs = read_table(root, "runs", filters=only)
    ok = runs.loc[runs["outcome"] == StepOutcome.OK.value, "run_id"]
    rows = read_table(root, "iterations", filters=only)
    rows = rows[rows["run_id"].isin(ok) & rows["collective"].notna() & rows["nodes"].notna()
                & (rows["arm"].notna() | rows["policy"].isin([AUTO, STOCK]))]
    if rows.empty:
        fabrics = sorted(set(read_table(root, "runs")["fabric"].dropna()))
        raise DatasetError(f"the dataset holds no call times of a finished run on fabric {fabric!r}",
                           path=root, hint=f"its fabrics: {', '.join(fabrics) or 'none'}; give a dataset ingested "
                                           "from a campaign that ran on this inventory")
    medians = rows.astype({"arm": object}).fillna({"arm": ""}).groupby(_KEY)["time_us"].median()
    times = {(str(c), int(n), str(a) or None, int(s)): float(us) for (c, n, a, s), us in medians.items()}
    return Measured(times=times, source=str(root))
