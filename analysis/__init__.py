"""NCCL-BOT analysis of forced-arm datasets (importable as ``ncclbot_sweep.analysis``).

The analysis stage takes a dataset root (read by :mod:`.inputs` alone) and gives tables and
figures; its last stage (:mod:`.report`, ``export.py``) gives the HTML report and the plugin's
tables. The paper's method (sections 3-6, appendices B-D, I) on plain pandas/numpy data:

* :mod:`.pools` replay pools, steady means, measured-best arms; :mod:`.transient` the
  BIC switch point of the lazy-connection transient;
* :mod:`.prior` NCCL's predicted costs (``cost_tables``, or ``tuning_tables`` through
  :mod:`ncclbot_sweep.costmodel`);
* :mod:`.audit` AUTO against the measured best (error rate, margin gate, tail anatomy);
* :mod:`.policies` 16 bandit policies (vectorised), their estimators and
  :class:`.policies.StepPolicy`, the per-call reference of the plugin;
* :mod:`.replay` the pull-count replay engine and splits; :mod:`.summary` and
  :mod:`.stats` tables and tests; :mod:`.figures` and :mod:`.tables` the figures and table
  copies the studies and the report share; :mod:`.report` the HTML report (build steps, headline,
  page); :mod:`.inputs` reads a dataset root;
* :mod:`.live` the live campaigns (selection against a pooled oracle, learning curves,
  overhead ladder, setup toll, stock comparisons; :func:`.live.analyze_live`);
* :mod:`.study` tuning (Optuna), supervised baselines (scikit-learn), the robustness
  studies (splits, holdout, mini-sweep, replication), the ablations and the workload replay;
* ``export.py`` is where the export stage goes; ``live/`` and ``study/`` import the core and
  :mod:`.policies`, never each other. The supervised selectors (``--policies GBM+cost``)
  register with the policy registry when :mod:`.study` is imported.

Submodules are imported on use, so ``import ncclbot_sweep.analysis`` stays cheap.
"""

from __future__ import annotations

import importlib

__all__ = [
    "build_pools",
    "load_problem",
    "make_policy",
    "make_problem",
    "run_audit",
    "run_replay",
    "summarize",
    "build_report",
    "analyze_live",
    "StepPolicy",
]

_HOME = {
    "build_pools": "pools",
    "load_problem": "inputs",
    "make_policy": "policies",
    "StepPolicy": "policies",
    "make_problem": "replay",
    "run_replay": "replay",
    "run_audit": "audit",
    "summarize": "summary",
    "build_report": "report",
    "analyze_live": "live",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
