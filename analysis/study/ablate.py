"""``analyze ablate``: the paper's ablations on one dataset, each a table (and a figure where
the paper has one) replayed with the engine of :mod:`..replay` (appendix D.4, I.10-I.14).

=================  ============================================================  ==============
name               what changes                                                  paper
=================  ============================================================  ==============
``warm-cold``      cost-model warm start off, at the warm knobs and cold-tuned   Tables 2, 42
``nvls-toll``      NVLS first-use stall charged per context or per communicator  Tables 22, 23
``nvls-excluded``  NVLS-family arms removed from every arm set                   Table 23
``size-gate``      AUTO below a size threshold chosen on train                   Table 50
``hybrid``         AUTO where its runner-up margin is at least tau               Table 54, Fig. 13
``filter``         cost-model arm filter on and off                              Table 13
``horizon``        horizon T from 25 to 400                                      Table 11
``mis-ranked``     TRLT on the contexts AUTO mis-ranks                           Table 10
``drift``          best/worst pool swap and gradual drift; discount, gain        Tables 8, 12, 52, Fig. 8
``dilution``       updates applied every k pulls (the plugin's sync period)      Table 9
``live-rules``     the plugin's safety gate and hold rule on and off, delayed    (the plugin)
=================  ============================================================  ==============
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from ncclbot_sweep.errors import AnalysisError

from ..replay import ReplayProblem
from .ablations import arm_filter, dilution, horizon, live_rules, mis_ranked, warm_cold
from .drift import drift
from .gates import hybrid, size_gate
from .harness import AblateOptions, Harness, PolicySet, Section, resolve_policies
from .nvls import nvls_excluded, nvls_toll
from .sections import write_section

__all__ = ["ABLATIONS", "select_ablations", "run_ablations"]

log = logging.getLogger(__name__)

ABLATIONS: dict[str, Callable[[Harness], Section]] = {
    "warm-cold": warm_cold, "nvls-toll": nvls_toll, "nvls-excluded": nvls_excluded, "size-gate": size_gate,
    "hybrid": hybrid, "filter": arm_filter, "horizon": horizon, "mis-ranked": mis_ranked, "drift": drift,
    "dilution": dilution, "live-rules": live_rules,
}


def select_ablations(only: str | Sequence[str] | None) -> list[str]:
    """The ablations to run, in :data:`ABLATIONS` order; raises naming an unknown one and the valid names."""
    if only is None:
        return list(ABLATIONS)
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown or not names:
        raise AnalysisError(f"unknown ablation {', '.join(map(repr, unknown)) or '(none given)'} in --only",
                            hint=f"choose from {', '.join(ABLATIONS)}")
    return [n for n in ABLATIONS if n in names]


def run_ablations(problem: ReplayProblem, out: str | Path, *, only: str | Sequence[str] | None = None,
                  options: AblateOptions = AblateOptions(), policies: PolicySet | None = None,
                  first_calls: pd.DataFrame | None = None,
                  progress: Callable[[Section], None] | None = None) -> list[Section]:
    """Run the chosen ablations, write each one's tables, figures and ``sections.json`` entry into ``out``.

    ``first_calls`` are the dataset's iteration-0 rows (:func:`~..inputs.load_first_calls`) from
    which ``nvls-toll`` measures the stall.
    """
    names = select_ablations(only)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    h = Harness(problem, options, policies or resolve_policies(), first_calls, figures=out / "figures")
    about = (f"Ablations of {len(problem)} contexts: split {options.split}, T={options.horizon}, "
             f"{options.seeds} seeds; {problem.pools.convention}. Policies: {h.policies.source}.")
    done = []
    for name in names:
        log.info("ablation %s", name)
        section = ABLATIONS[name](h)
        write_section(out, section, about=about)
        done.append(section)
        if progress is not None:
            progress(section)
    return done
