"""Studies on top of the replay: tuning (Optuna), supervised baselines (scikit-learn), splits.

* :mod:`.spaces` the conditional search spaces of the 14 learning families (Table 16);
* :mod:`.tune` the resumable study runner (journal or RDB storage, workers);
* :mod:`.outputs` champions, the Table-16 summary and the search-progress figure;
* :mod:`.robustness` splits, holdout, mini-sweep and replication (Tables 3, 36, 41, 46, 51);
* :mod:`.ablate` the ablations (:mod:`.harness`, :mod:`.ablations`, :mod:`.gates`,
  :mod:`.nvls`, :mod:`.drift`) and :mod:`.workload` the trace replay, both writing report
  sections (:mod:`.sections`).

Optuna and scikit-learn are imported inside the functions that use them; this package
imports the core and :mod:`..policies`, never ``live/``. Importing it registers the supervised
selectors of :mod:`.supervised` with the policy registry (``--policies GBM+cost``).
"""

from __future__ import annotations

from . import supervised
from .outputs import CHAMPIONS, read_champions, table16
from .spaces import FAMILIES, defaults, policy_spec, suggest
from .tune import JOURNAL, TuneOptions, open_storage, run_study, study_counts, train_partition, tune

__all__ = ["CHAMPIONS", "FAMILIES", "JOURNAL", "TuneOptions", "defaults", "open_storage", "policy_spec",
           "read_champions", "run_study", "study_counts", "suggest", "supervised", "table16", "train_partition",
           "tune"]
