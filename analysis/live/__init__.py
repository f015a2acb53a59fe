"""Live campaigns: selection quality, learning curves, overhead, setup toll and stock comparisons.

The paper's live results (section 6.5, appendix F: Tables 17-21, Figures 2 and 11) from a
dataset's ``runs``, ``iterations`` and ``live_events`` of live, stock and overhead steps:

* :mod:`.inputs` reads them (the only reader) and names runs and ladder rungs;
* :mod:`.pulls` merges the per-rank traces; :mod:`.setup` finds the first-use stalls;
  :mod:`.oracle` pools profiler latency into the reconstructed oracle;
* :mod:`.selection` (TRLT per size), :mod:`.curves` (learning curves, timelines),
  :mod:`.sizes` (nccl-tests per size), :mod:`.overhead` (ladder), :mod:`.stock` (against
  stock), :mod:`.forced` (forced prices against stock, AUTO against the audit);
* :mod:`.run` is the command's list of steps; :mod:`.schema` fixes every table's columns
  (empty ones included); :mod:`.headline` gathers the numbers and :mod:`.verdict` says them
  in words; :mod:`.figures` draws the PNGs.

It imports the analysis core (``pools``, ``audit``, ``inputs``), never ``study``.
"""

from __future__ import annotations

from .headline import best_learner
from .run import TABLES, LiveResult, analyze_live, write_live
from .schema import TABLE_COLUMNS
from .verdict import ScenarioVerdict, campaign_lines, scenario_verdicts

__all__ = ["TABLES", "TABLE_COLUMNS", "LiveResult", "ScenarioVerdict", "analyze_live", "best_learner",
           "campaign_lines", "scenario_verdicts", "write_live"]
