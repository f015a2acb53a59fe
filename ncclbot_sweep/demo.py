"""The demo: the paper's method end to end on the simulated H100 fabric, on this machine.

``make demo`` runs ``ncclbot-sweep demo --out DIR``, which calls :func:`run_demo`: the
forced-arm sweep of ``campaigns/demo.yaml`` on ``inventories/sim-h100.yaml`` through the
local executor and its ingest into a Parquet dataset; a small live campaign
(``campaigns/demo-live.yaml``: stock NCCL, AUTO through the real plugin and UCB1, four rank
processes sharing one coordinator), ingested into its own dataset so the sweep's pools see
only the sweep; the live analysis of both datasets (forced prices against stock, AUTO
through the plugin against the audit); a short workload A/B (``campaigns/demo-workload.yaml``:
the simulator's DDP step with and without the plugin, interleaved) in its own dataset; then
the AUTO audit, the bandit replay (AUTO, Random, UCB1, Softmax, KL-UCB, ETC), the HTML report
with the live campaign's and the workload's sections and the dataset's ``contexts`` table. Every stage is idempotent, so running the demo again
re-runs nothing it already did.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path

from ncclbot_sweep.resources import resource_path
from ncclbot_sweep.sweep.runner import Progress, submit

__all__ = ["DEMO_CAMPAIGN", "DEMO_INVENTORY", "DEMO_LIVE_CAMPAIGN", "DEMO_WORKLOAD_CAMPAIGN", "DemoResult", "run_demo"]

log = logging.getLogger(__name__)

DEMO_CAMPAIGN = "demo.yaml"
DEMO_INVENTORY = "sim-h100.yaml"
DEMO_LIVE_CAMPAIGN = "demo-live.yaml"
DEMO_WORKLOAD_CAMPAIGN = "demo-workload.yaml"


@dataclasses.dataclass(frozen=True)
class DemoResult:
    """Where each stage of the demo left its output."""

    campaign: Path
    dataset: Path
    report: Path
    live_campaign: Path
    live_dataset: Path
    live_analysis: Path
    workload_campaign: Path
    workload_dataset: Path

    def summary(self) -> list[str]:
        """The lines the demo ends with: what was analysed, AUTO over every context, what to set and
        the files that set it, whether live learning is worth running, where the outputs are.

        The sentences are the report's headline sentences, built from the numbers it keeps in
        ``results.json`` (``headline``) by the same function, so the lines and the page never disagree.
        """
        from ncclbot_sweep.analysis.report.headline import headline_sentences
        from ncclbot_sweep.analysis.report.results import RESULTS_FILE

        folder = self.report if self.report.is_dir() else self.report.parent
        results = json.loads((folder / RESULTS_FILE).read_text(encoding="utf-8"))
        headline = headline_sentences(results["headline"])
        fabrics = ", ".join(results["provenance"]["fabrics"])
        workload_headline = folder / "workload" / "headline.json"
        workload = (json.loads(workload_headline.read_text(encoding="utf-8")) if workload_headline.is_file()
                    else {"scenarios": []})
        return [
            f"demo: result on {fabrics} (synthetic: the simulated fabric)",
            f"demo:   {headline.auto}",
            f"demo:   {headline.action}",
            *(f"demo:   {line}" for line in headline.files),
            f"demo:   {headline.learning}",
            *(f"demo:   {scenario['sentence']}" for scenario in workload["scenarios"]),
            f"demo:   report {self.report} (data {self.dataset}, campaign {self.campaign})",
            f"demo:   live campaign analysis {self.live_analysis} (data {self.live_dataset}, "
            f"campaign {self.live_campaign})",
            *([f"demo:   workload comparison {folder / 'workload'} (data {self.workload_dataset}, "
               f"campaign {self.workload_campaign})"] if workload["scenarios"] else []),
        ]


def run_demo(out: Path | str, *, command: str | None = None, progress: Progress | None = None,
             on_stage: Callable[[str], None] | None = None) -> DemoResult:
    """Sweep and ingest into ``out/{campaign,dataset}``, run the live campaign into
    ``out/{live-campaign,live-dataset}``, analyse it with the sweep into ``out/live`` and write
    the report of both into ``out/report``; return the paths.

    ``command`` is the command line recorded in the report's provenance (the CLI passes its
    own); ``on_stage(name)`` is called as each stage starts (the CLI prints it).
    """
    from ncclbot_sweep.analysis.live import analyze_live
    from ncclbot_sweep.analysis.report import ReportOptions, build_report
    from ncclbot_sweep.ingest.walk import ingest

    out = Path(out)
    result = DemoResult(out / "campaign", out / "dataset", out / "report", out / "live-campaign",
                        out / "live-dataset", out / "live", out / "workload-campaign", out / "workload-dataset")
    _stage(on_stage, "sweep")
    summary = submit(resource_path("campaigns", DEMO_CAMPAIGN), resource_path("inventories", DEMO_INVENTORY),
                     workdir=result.campaign, wait=True, progress=progress)
    log.info("demo campaign in %s: %d/%d steps ok", result.campaign, summary.steps_ok, summary.total_steps)
    _stage(on_stage, "ingest")
    ingest([result.campaign], result.dataset)
    _stage(on_stage, "live campaign (the real plugin, 4 rank processes)")
    live = submit(resource_path("campaigns", DEMO_LIVE_CAMPAIGN), resource_path("inventories", DEMO_INVENTORY),
                  workdir=result.live_campaign, wait=True, progress=progress)
    log.info("demo live campaign in %s: %d/%d steps ok", result.live_campaign, live.steps_ok, live.total_steps)
    ingest([result.live_campaign], result.live_dataset)
    _stage(on_stage, "live analysis")
    analyze_live([result.live_dataset, result.dataset], out=result.live_analysis)
    _stage(on_stage, "workload comparison (the simulator's DDP step, with and without the plugin)")
    workload = submit(resource_path("campaigns", DEMO_WORKLOAD_CAMPAIGN), resource_path("inventories", DEMO_INVENTORY),
                      workdir=result.workload_campaign, wait=True, progress=progress)
    log.info("demo workload campaign in %s: %d/%d runs ok", result.workload_campaign, workload.steps_ok,
             workload.total_steps)
    ingest([result.workload_campaign], result.workload_dataset)
    _stage(on_stage, "audit, replay and report")
    options = ReportOptions(live_datasets=(result.live_dataset,), workload_datasets=(result.workload_dataset,),
                            command=command)
    index = build_report(result.dataset, result.report, options=options)
    return dataclasses.replace(result, report=index)


def _stage(on_stage: Callable[[str], None] | None, name: str) -> None:
    log.info("demo stage: %s", name)
    if on_stage is not None:
        on_stage(name)
