"""Whether a table's ``# Avg bus bandwidth`` footer is the mean of the rows that are stored.

nccl-tests' footer is the mean bus bandwidth of every row it measured, both sides (in
``common.cu`` each timed pass adds its ``busBw`` to a sum that the footer divides by their
count). Outputs from the field often keep the footer of rows that are gone: an excerpt
pasted into an issue (``...`` where rows were, or rows simply skipped), a table cut by a
crash and another run's footer, or rows ingest could not store. The footer stays in
``runs.avg_busbw_gbs``; ``runs.avg_busbw_elided`` says whether the stored rows produce it,
so that nobody averages the rows and expects the footer.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

__all__ = ["FooterCheck", "ELISION_RE"]

#: A line that stands for rows left out (``...``, ``…``, ``[...]``, ``... 12 lines ...``).
ELISION_RE = re.compile(r"^[\[(]?(?:\.{3,}|…)")
#: Each stored bandwidth was printed with two decimals (off by up to 0.005), the footer
#: with six significant digits: a mean of the rows this close to the footer reproduces it.
_ABS_TOL = 0.0051
_REL_TOL = 1e-5


@dataclasses.dataclass
class FooterCheck:
    """The stored rows' bus bandwidths of one run, tallied as they are emitted."""

    total: float = 0.0
    count: int = 0
    #: A bus bandwidth that is not a finite number (ingest quarantines its row).
    broken: bool = False
    #: The first elision line inside the run's table, if any.
    elision_line: int | None = None

    def add(self, busbw: np.ndarray) -> None:
        """Tally one side's bus bandwidths (nulls, ``N/A``, are not rows of the mean)."""
        values = np.asarray(busbw, dtype=float)
        values = values[~np.isnan(values)] if values.size else values
        finite = np.isfinite(values)
        self.broken = self.broken or not finite.all()
        self.total += float(values[finite].sum())
        self.count += int(finite.sum())

    def elided(self, footer: float | None) -> bool | None:
        """True when ``footer`` averages rows that are not stored, False when the stored rows
        give it, None without a footer."""
        if footer is None or not math.isfinite(footer):
            return None
        if self.elision_line is not None or self.broken or not self.count:
            return True
        mean = self.total / self.count
        return not math.isclose(mean, footer, rel_tol=_REL_TOL, abs_tol=_ABS_TOL)
