"""Job limits that fit the work: every call a step makes is priced, and jobs are sized from that.

The ground truth is the simulator's own: each step of a shipped forced campaign is played
through :class:`ncclbot_sweep.sim.SimProcess` exactly as the simulated ``*_perf`` binary plays
it (:func:`ncclbot_sweep.sim.sweep.run_sweep`: warm-up, both passes, check calls, first-use
transients, the NVLS stall), and the time of every call is summed. The target of issue 28:
every job's estimate within 0.67-1.5x of its steps' time, and its limit at least 1.2x.

NCCL's cost model meets it on sim-h100 and sim-gb200-mnnvl-off. On sim-gb200-mnnvl-on it
errs by up to 2x per arm (Tree/LL128 and Tree/Simple at 8+ nodes cost half what it says,
Tree/LL at 4 nodes 1.6x more), so no packing can keep every job in range there: that fabric is
priced from an earlier campaign's measured times (``--from-dataset``), as a site would after its
first sweep, and the cost model alone is held to the limit and to its 2x.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep import costmodel
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import PlanError
from ncclbot_sweep.names import Arm
from ncclbot_sweep.sim import SimProcess, fabric_for_env
from ncclbot_sweep.sim.nccltests.options import parse_options
from ncclbot_sweep.sim.process import derive_seed
from ncclbot_sweep.ingest.measured import measured_times
from ncclbot_sweep.resources import resource_path
from ncclbot_sweep.sim.sweep import Played, one_arm_player, run_sweep
from ncclbot_sweep.sweep import campaign_folder
from ncclbot_sweep.sweep.campaign import Plan, Step, parse_campaign_text, plan_campaign, shipped_campaigns
from ncclbot_sweep.sweep.estimate import Measured, call_counts
from ncclbot_sweep.sweep.inventory import load_inventory, parse_inventory_text, shipped_inventories

SIM_INVENTORIES = [name for name, inventory in shipped_inventories() if inventory.synthetic]
FORCED = [name for name, campaign in shipped_campaigns() if campaign.kind == "forced"]
#: (lowest, highest) estimate over the simulator's time, and the least limit over it.
TARGET = (0.67, 1.5)
LEAST_LIMIT = 1.2
#: The simulated fabric whose NCCL model errs beyond the target: priced from measured times.
MEASURED_ON = "sim-gb200-mnnvl-on"


def _played_seconds(plan: Plan, step: Step) -> tuple[float, dict[int, int]]:
    """Seconds of every call the simulated binary makes for ``step``, and the calls per size."""
    env = {**plan.inventory.environment, **step.env}
    fabric = fabric_for_env(env["NCCLBOT_SIM_FABRIC"], env)
    process = SimProcess(fabric, nodes=step.nodes, seed=derive_seed(step.key), ranks=step.ranks)
    options = parse_options(list(step.args))

    def choose(size: int) -> Arm | None:
        return step.arm or costmodel.auto_arm(fabric.cost_table(step.collective, step.nodes, size, ranks=step.ranks))

    inner = one_arm_player(process, step.collective, choose)
    seconds, calls = [0.0], {}

    def play(size: int, count: int) -> Played:
        played = inner(size, count)
        seconds[0] += float(played.times.sum()) / 1e6
        calls[size] = calls.get(size, 0) + count
        return played

    for _event in run_sweep(process, step.collective, options.sizes(), choose, iters=options.iters,
                            warmup=options.warmup_iters, agg=options.agg_iters, check=options.check,
                            cycles=options.run_cycles, play=play):
        pass
    return seconds[0], calls


def _ratios(plan: Plan) -> list[tuple[float, float]]:
    """(estimate / simulated time, limit / simulated time) per job."""
    out = []
    for job in plan.jobs:
        played = sum(_played_seconds(plan, step)[0] for step in job.steps)
        out.append((job.estimate_s / played, job.time_limit_min * 60 / played))
    return out


@pytest.mark.parametrize("flags", [[], ["-c", "0"], ["-m", "2", "-c", "2"], ["-w", "3"], ["-n", "1", "-N", "4"]])
def test_the_calls_counted_are_the_calls_the_binary_makes(flags):
    """Warm-up at the largest and smallest size, both passes, aggregation, checks and cycles."""
    inventory = load_inventory("sim-h100")
    extra = " ".join(flags)
    plan = plan_campaign(parse_campaign_text(f"""\
name: counts
kind: forced
collectives: [AllReduce]
nodes: [2]
sizes: {{min: 1K, max: 1M, factor: 4}}
arms: [Ring/LL]
iterations: 5
extra_flags: [{", ".join(repr(f) for f in flags)}]
"""), inventory)
    (step,) = plan.steps
    _seconds, played = _played_seconds(plan, step)
    assert dict(call_counts(step.args).per_size) == played, extra


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    """A dataset of an earlier, short campaign on MEASURED_ON: the paper sweep's steps at 3 iterations,
    run by ``submit`` on the simulated fabric and ingested."""
    tmp = tmp_path_factory.mktemp("calibrate")
    text = resource_path("campaigns", "forced-arm-h100.yaml").read_text()
    (tmp / "calibrate.yaml").write_text(text.replace("name: forced-arm-h100", "name: calibrate")
                                        .replace("iterations: 100", "iterations: 3")
                                        .replace("packing: {steps_per_job: 4}", "packing: {steps_per_job: 13}"))
    done = CliRunner().invoke(main, ["submit", str(tmp / "calibrate.yaml"), "-i", MEASURED_ON, "-w", str(tmp / "run")])
    assert done.exit_code == 0, done.output
    ingested = CliRunner().invoke(main, ["ingest", str(tmp / "run"), "-d", str(tmp / "data")])
    assert ingested.exit_code == 0, ingested.output
    return tmp / "data"


@pytest.mark.parametrize("inventory_name", SIM_INVENTORIES)
@pytest.mark.parametrize("campaign_name", FORCED)
def test_job_limits_fit_the_simulated_work(campaign_name, inventory_name, calibrated):
    measured = measured_times(calibrated, MEASURED_ON) if inventory_name == MEASURED_ON else None
    plan = plan_campaign(dict(shipped_campaigns())[campaign_name], load_inventory(inventory_name), measured=measured)
    ratios = _ratios(plan)
    limits = [limit for _estimate, limit in ratios]
    assert min(limits) >= LEAST_LIMIT, (campaign_name, inventory_name, limits)
    estimates = [estimate for estimate, _limit in ratios]
    low, high = TARGET
    assert low <= min(estimates) and max(estimates) <= high, (campaign_name, inventory_name, estimates)


def test_the_cost_model_alone_keeps_the_limit_where_it_errs():
    """On MEASURED_ON without measured times: NCCL's model within 2x per job, the limits still above 1.2x."""
    plan = plan_campaign(dict(shipped_campaigns())["forced-arm-h100"], load_inventory(MEASURED_ON))
    ratios = _ratios(plan)
    assert min(limit for _e, limit in ratios) >= LEAST_LIMIT
    estimates = [estimate for estimate, _l in ratios]
    assert 0.5 <= min(estimates) and max(estimates) <= 2.0, estimates


def test_plan_and_submit_price_from_a_dataset_and_the_folder_keeps_it(calibrated, tmp_path):
    """``--from-dataset`` on plan and submit; ``status``'s re-plan uses the folder's copy, without the dataset."""
    result = CliRunner().invoke(main, ["plan", "forced-arm-h100", "-i", MEASURED_ON, "--from-dataset", str(calibrated),
                                       "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["priced_by"] == f"NCCL's cost model of {MEASURED_ON}, and times measured in {calibrated}"
    (tmp_path / "small.yaml").write_text(_SMALL_FORCED)
    done = CliRunner().invoke(main, ["submit", str(tmp_path / "small.yaml"), "-i", MEASURED_ON, "-w",
                                     str(tmp_path / "run"), "--from-dataset", str(calibrated)])
    assert done.exit_code == 0, done.output
    copy = Measured.from_json((tmp_path / "run" / "measured-times.json").read_text())
    assert copy.times == measured_times(calibrated, MEASURED_ON).times
    folder = campaign_folder.open_existing(tmp_path / "run", writable=False)
    try:
        assert folder.plan.priced_by.endswith(f"times measured in {calibrated}")
        with_times = plan_campaign(parse_campaign_text(_SMALL_FORCED), load_inventory(MEASURED_ON), measured=copy)
        assert [s.timeout_s for s in folder.plan.steps] == [s.timeout_s for s in with_times.steps]
    finally:
        folder.close()


def test_a_dataset_of_another_fabric_is_refused(calibrated):
    result = CliRunner().invoke(main, ["plan", "forced-arm-h100", "-i", "sim-h100", "--from-dataset", str(calibrated)])
    assert result.exit_code == 1
    assert "the dataset holds no call times of a finished run on fabric 'sim-h100'" in result.output
    assert f"its fabrics: {MEASURED_ON}" in result.output


def test_estimates_depend_on_the_arm_and_the_node_count():
    """The issue's first symptom: every 4-step job of the paper sweep got the same estimate."""
    plan = plan_campaign(dict(shipped_campaigns())["forced-arm-h100"], load_inventory("h100-spectrumx"))
    by_step = {(s.collective, s.nodes, str(s.arm)): s for s in plan.steps}
    ll, ll128 = by_step[("AllReduce", 32, "Tree/LL")], by_step[("AllReduce", 32, "Tree/LL128")]
    assert ll.estimate_s > 5 * ll128.estimate_s and ll.timeout_s > ll128.timeout_s
    assert by_step[("AllGather", 32, "Ring/Simple")].estimate_s != by_step[("AllGather", 4, "Ring/Simple")].estimate_s
    assert len({round(job.estimate_s) for job in plan.jobs}) == len(plan.jobs)
    # Set-up grows with the node count: a 32-node job's exceeds a 4-node job's of as many steps.
    setups = {job.nodes: job.setup_s / len(job.steps) for job in plan.jobs}
    assert setups[32] > setups[4]


def test_a_step_that_cannot_fit_the_partition_is_refused_naming_the_limit():
    inventory = parse_inventory_text(_SMALL_PARTITION)
    campaign = parse_campaign_text(_LONG_CAMPAIGN)
    with pytest.raises(PlanError) as info:
        plan_campaign(campaign, inventory)
    message = str(info.value)
    assert "need more than the 30 min (partition short's scheduler.time_limit_min) a job may run" in message
    assert "AllReduce 8n Tree/LL:" in message and "x margin 1.5" in message
    assert "split the sizes" in message and "raise scheduler.time_limit_min" in message


def test_jobs_are_split_to_fit_the_partition():
    """Steps that fit alone but not together go into more jobs, each within the partition's limit."""
    campaign = parse_campaign_text(_LONG_CAMPAIGN.replace("arms: [Tree/LL, Ring/LL128]",
                                                          "arms: [Ring/LL, Ring/LL128, Ring/Simple]")
                                   .replace("iterations: 200", "iterations: 100"))
    roomy = plan_campaign(campaign, parse_inventory_text(_SMALL_PARTITION.replace("30", "240")))
    (together,) = roomy.jobs
    alone = max(plan_campaign(campaign.model_copy(update={"arms": [str(s.arm)]}),
                              parse_inventory_text(_SMALL_PARTITION.replace("30", "240"))).jobs[0].time_limit_min
                for s in together.steps)
    limit = (alone + together.time_limit_min) // 2
    assert alone <= limit < together.time_limit_min  # the premise: each fits alone, not all three together
    plan = plan_campaign(campaign, parse_inventory_text(_SMALL_PARTITION.replace("30", str(limit))))
    assert len(plan.jobs) == 2 and all(job.time_limit_min <= limit for job in plan.jobs)


def test_plan_shows_each_jobs_estimate_and_the_total():
    result = CliRunner().invoke(main, ["plan", "forced-arm-h100", "-i", "h100-spectrumx"])
    assert result.exit_code == 0, result.output
    assert "calls priced by NCCL's cost model of sim-h100; limits allow 1.5x the calls plus set-up" in result.output
    assert "step timeouts from the estimate" in result.output
    jobs = [line for line in result.output.splitlines() if " nodes " in line and "set-up (limit" in line]
    assert len(jobs) == 16
    assert "total: 52 steps in 16 jobs, ~2.6 h of calls" in result.output


_SMALL_PARTITION = """\
name: short-partition
gpus_per_node: 8
access: {kind: local}
scheduler: {kind: slurm, partition: short, time_limit_min: 30}
nccl_tests: {bin_dir: /opt/nccl-tests}
algorithms: {families: [tree, ring]}
estimate: {model: sim-h100}
"""

_LONG_CAMPAIGN = """\
name: long
kind: forced
collectives: [AllReduce]
nodes: [8]
sizes: {min: 1M, max: 16GiB}
arms: [Tree/LL, Ring/LL128]
iterations: 200
packing: {steps_per_job: 4}
"""

_SMALL_FORCED = """\
name: small-forced
kind: forced
collectives: [AllReduce]
nodes: [4]
sizes: {min: 1MiB, max: 4MiB}
arms: [Tree/LL128, Ring/Simple]
iterations: 3
"""


def test_an_explicit_step_timeout_below_the_estimate_is_named():
    inventory = parse_inventory_text(_SMALL_PARTITION.replace("30", "240"))
    plan = plan_campaign(parse_campaign_text(_LONG_CAMPAIGN + "timeout_s: 600\n"), inventory)
    assert all(s.timeout_s == 600 for s in plan.steps)  # the campaign's word stands
    (warning,) = [w for w in plan.warnings if "timeout_s" in w]
    assert warning.startswith("1 step(s) may need more than the campaign's timeout_s (600 s): AllReduce 8n Tree/LL")
    assert not [w for w in plan_campaign(parse_campaign_text(_LONG_CAMPAIGN), inventory).warnings if "timeout_s" in w]


def test_a_flag_nccl_tests_2_19_does_not_know_is_left_out_of_the_estimate_with_a_warning():
    inventory = parse_inventory_text(_SMALL_PARTITION.replace("30", "240"))
    known = plan_campaign(parse_campaign_text(_LONG_CAMPAIGN), inventory)
    newer = plan_campaign(parse_campaign_text(_LONG_CAMPAIGN + "extra_flags: [--future-flag, '1']\n"), inventory)
    assert [s.estimate_s for s in newer.steps] == [s.estimate_s for s in known.steps]
    (warning,) = [w for w in newer.warnings if "--future-flag" in w]
    assert warning.startswith("the estimate leaves out nccl-tests flags it does not know (--future-flag 1:")
    assert newer.steps[0].args[-2:] == ("--future-flag", "1")  # the job still passes them on
