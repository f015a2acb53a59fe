"""Campaign specs: expansion (matrix, zip, exclusions), pruning with reasons, keys, budget, plan CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import CampaignError, PlanError
from ncclbot_sweep.resources import resource_dir
from ncclbot_sweep.sweep.campaign import human_size, load_campaign, parse_campaign_text, parse_size, plan_campaign
from ncclbot_sweep.sweep.inventory import load_inventory, parse_inventory_text
from orch_support import local_inventory_text

INV = """\
name: sim-test
gpus_per_node: 8
nccl_tests: {bin_dir: /opt/nccl-tests}
plugin: {path: /opt/ncclbot/libncclbot.so}
algorithms: {families: [tree, ring, nvls]}
estimate: {model: sim-h100, step_setup_s: 10, step_setup_per_node_s: 0, job_setup_s: 20}
"""

BASE = """\
name: t
kind: forced
collectives: [AllReduce, AllGather]
nodes: [2, 4]
sizes: {min: 1K, max: 1M}
"""


def _plan(text: str, inv: str = INV):
    return plan_campaign(parse_campaign_text(text), parse_inventory_text(inv))


def test_human_size_round_trips():
    for text in ("512 B", "1 KiB", "16 GiB", "3 MiB", "1000 B"):
        assert human_size(parse_size(text.replace(" ", "").replace("iB", ""))) == text


def test_parse_size_units():
    assert parse_size("512B") == 512
    assert parse_size("16GiB") == 16 * 2**30
    assert parse_size("1M") == 2**20
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError, match="like '512B'"):
        parse_size("12 parsecs")


def test_paper_sweep_matches_the_paper():
    """forced-arm-h100: 3 collectives x 4 node counts, 26 sizes 512 B..16 GiB, every valid arm, 100 iterations."""
    campaign = load_campaign(resource_dir("campaigns") / "forced-arm-h100.yaml")
    sizes = campaign.sizes.values()
    assert len(sizes) == 26 and sizes[0] == 512 and sizes[-1] == 16 * 2**30
    assert campaign.iterations == 100
    plan = plan_campaign(campaign, load_inventory("h100-spectrumx"))
    arms = {(s.collective, str(s.arm)) for s in plan.steps}
    # Paper section 3: Ring x 3 protocols everywhere, plus Tree x 3 and NVLSTree/Simple on AllReduce.
    expected = {(c, f"Ring/{p}") for c in ("AllGather", "ReduceScatter", "AllReduce") for p in ("LL", "LL128", "Simple")}
    expected |= {("AllReduce", f"Tree/{p}") for p in ("LL", "LL128", "Simple")} | {("AllReduce", "NVLSTree/Simple")}
    assert arms == expected
    assert len(plan.steps) == 4 * (3 + 3 + 7)
    reasons = {(p.collective, p.arm): p.reason for p in plan.pruned}
    assert "collnet" in reasons[("AllReduce", "CollNetDirect/Simple")]
    assert "needs CollNet" in reasons[("AllGather", "NVLS/Simple")]
    assert "pat" in reasons[("ReduceScatter", "PAT/Simple")]
    # Structurally impossible arms (Tree on AllGather) are not listed as fabric prunes.
    assert ("AllGather", "Tree/LL") not in reasons


def test_nvls_families_pruned_when_fabric_has_no_nvls():
    plan = _plan(BASE, INV.replace("[tree, ring, nvls]", "[tree, ring]"))
    assert not any(s.arm.algorithm.startswith("NVLS") for s in plan.steps)
    assert any(p.arm == "NVLSTree/Simple" and "nvls" in p.reason for p in plan.pruned)


def test_planning_twice_gives_identical_keys():
    first, second = _plan(BASE), _plan(BASE)
    assert [s.key for s in first.steps] == [s.key for s in second.steps]
    assert [j.key for j in first.jobs] == [j.key for j in second.jobs]
    assert first.campaign_key == second.campaign_key
    assert len({s.key for s in first.steps}) == len(first.steps)
    changed = _plan(BASE.replace("max: 1M", "max: 2M"))
    assert not {s.key for s in changed.steps} & {s.key for s in first.steps}
    assert changed.campaign_key == first.campaign_key  # same campaign, grown


def test_arm_list_and_exclusions():
    plan = _plan(BASE + "arms: [Ring/LL, ring/simple, NVLS/Simple]\n")
    assert {str(s.arm) for s in plan.steps} == {"Ring/LL", "Ring/Simple"}
    assert {p.arm for p in plan.pruned} == {"NVLS/Simple"}
    plan = _plan(BASE + "arms: {exclude: [Tree/LL, Ring/LL]}\n")
    arms = {str(s.arm) for s in plan.steps}
    assert "Tree/LL" not in arms and "Ring/LL" not in arms and "Tree/LL128" in arms


def test_matrix_zip_and_exclude():
    matrix = _plan(BASE + "arms: [Ring/LL]\n")
    assert {(s.collective, s.nodes) for s in matrix.steps} == {
        ("AllReduce", 2), ("AllReduce", 4), ("AllGather", 2), ("AllGather", 4)}
    zipped = _plan(BASE + "arms: [Ring/LL]\nzip: [[collective, nodes]]\n")
    assert {(s.collective, s.nodes) for s in zipped.steps} == {("AllReduce", 2), ("AllGather", 4)}
    excluded = _plan(BASE + "exclude:\n  - {collective: AllGather, nodes: 4}\n  - {arm: [Tree/LL, Tree/LL128]}\n")
    pairs = {(s.collective, s.nodes, str(s.arm)) for s in excluded.steps}
    assert not any(c == "AllGather" and n == 4 for c, n, _ in pairs)
    assert not any(a.startswith("Tree/LL") for _, _, a in pairs)
    assert excluded.excluded == 3 + 2 * 2


def test_zip_needs_equal_lengths(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE.replace("nodes: [2, 4]", "nodes: [2, 4, 8]") + "zip: [[collective, nodes]]\n")
    with pytest.raises(CampaignError, match="same length"):
        load_campaign(path)


def test_live_campaign_policies_variants_and_plugin_env():
    plan = plan_campaign(load_campaign("live-h100"), load_inventory("h100-spectrumx"))
    labels = [(s.policy, s.variant) for s in plan.steps]
    assert ("stock", "default") in labels and ("AUTO", "default") in labels
    assert {p for p, _ in labels} == {"stock", "AUTO", "ucb1", "greedy", "etc"}
    assert {v for p, v in labels if p == "AUTO"} == {"default", "timed", "sync-4", "sync-16", "sync-64"}
    assert len(labels) == 9
    stock = next(s for s in plan.steps if s.policy == "stock")
    assert not stock.plugin and "NCCL_TUNER_PLUGIN" not in stock.env
    rung = next(s for s in plan.steps if s.policy == "AUTO" and s.variant == "sync-16")
    assert rung.plugin and rung.env["NCCLBOT_POLICY"] == "auto" and rung.env["NCCLBOT_SYNC_EVERY"] == "16"
    assert rung.env["NCCLBOT_MIN_BYTES"] == "0" and rung.env["NCCL_TUNER_PLUGIN"] == rung.env["NCCL_PROFILER_PLUGIN"]
    timed = next(s for s in plan.steps if s.variant == "timed")
    assert timed.env["NCCLBOT_SYNC_ADDR"] == "" and timed.env["NCCLBOT_MIN_BYTES"] == "0"
    assert all(s.arm is None for s in plan.steps)


def test_live_without_plugin_path_is_a_plan_error():
    inventory = parse_inventory_text(local_inventory_text(Path("/opt/nt")))
    with pytest.raises(PlanError, match="no plugin.path"):
        plan_campaign(load_campaign("live-h100"), inventory)


def test_sim_inventories_name_the_bundled_plugin():
    """'bundled' resolves to the absolute path of the shipped sources' build (in a checkout: plugin/build);
    building it when it is missing is tests/test_pluginbuild.py's."""
    from ncclbot_sweep import pluginbuild

    plan = plan_campaign(load_campaign("live-sim-h100"), load_inventory("sim-h100"))
    library = pluginbuild.build_dir() / pluginbuild.LIBRARY
    assert library.is_absolute() and library.is_file()
    assert {s.env["NCCL_TUNER_PLUGIN"] for s in plan.steps if s.plugin} == {str(library)}
    assert {(s.policy, s.variant) for s in plan.steps} >= {("stock", "default"), ("etc", "default")}
    assert plan.steps[0].sizes == {"min": 512, "max": 16 * 2**30, "factor": 2} and plan.steps[0].iterations >= 400


def test_forced_arms_set_nccl_algo_and_proto():
    plan = _plan(BASE + "arms: [Tree/LL128]\ncollectives: [AllReduce]\n".replace("collectives: [AllReduce]\n", ""))
    step = plan.steps[0]
    assert step.env["NCCL_ALGO"] == "Tree" and step.env["NCCL_PROTO"] == "LL128"


def test_packing_and_budget():
    plan = _plan(BASE + "packing: {steps_per_job: 2}\n")
    assert all(len(j.steps) <= 2 for j in plan.jobs)
    assert all(len({s.nodes for s in j.steps}) == 1 for j in plan.jobs)
    assert plan.node_hours > 0
    with pytest.raises(PlanError, match="over its budget") as info:
        _plan(BASE + "budget_node_hours: 0.001\n")
    assert info.value.hint


@pytest.mark.parametrize(
    ("extra", "needle", "line"),
    [
        ("kind: forced\npolicies: [ucb1]\n", "remove 'policies'", None),
        ("arms: [Ring/XX]\n", "protocol must be one of", None),
        ("iteratons: 10\n", "iteratons: unknown key; allowed keys here: name, kind", 6),
        ("packing: {steps: 3}\n", "packing.steps: unknown key; allowed keys here: steps_per_job", 6),
        ("zip: [[collective, arm]]\n", "'arm' cannot be zipped", None),
    ],
)
def test_bad_campaigns(tmp_path: Path, extra, needle, line):
    text = BASE + extra if not extra.startswith("kind") else BASE.replace("kind: forced\n", "") + extra
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert needle in str(info.value)
    assert info.value.path == str(path)
    if line is not None:
        assert info.value.line == line


def test_cli_plan_text_json_and_budget(tmp_path: Path):
    runner = CliRunner()
    inv = tmp_path / "inv.yaml"
    inv.write_text(INV)
    camp = tmp_path / "c.yaml"
    camp.write_text(BASE)
    result = runner.invoke(main, ["plan", str(camp), "--inventory", str(inv)])
    assert result.exit_code == 0, result.output
    assert "pruned arms:" in result.output and "NVLS/Simple" in result.output
    assert "total: 20 steps" in result.output
    result = runner.invoke(main, ["plan", str(camp), "--inventory", str(inv), "--json"])
    data = json.loads(result.output)
    assert data["steps"] == 20 and data["fabric"] == "sim-test"
    assert sum(len(j["steps"]) for j in data["jobs"]) == 20
    camp.write_text(BASE + "budget_node_hours: 0.0001\n")
    result = runner.invoke(main, ["plan", str(camp), "--inventory", str(inv)])
    assert result.exit_code == 1 and "over its budget of 0.0001" in result.output
    result = runner.invoke(main, ["plan", str(camp), "--inventory", str(inv), "--ignore-budget"])
    assert result.exit_code == 0


def test_repeats_and_size_lists():
    plan = _plan(BASE + "arms: [Ring/LL]\nrepeats: 3\n")
    assert len(plan.steps) == 2 * 2 * 3 and len({s.key for s in plan.steps}) == 12
    assert sorted({s.repeat for s in plan.steps}) == [0, 1, 2]
    assert all(len({s.repeat for s in job.steps}) == 1 for job in plan.jobs)  # one repeat per job
    together = _plan(BASE + "arms: [Ring/LL]\nrepeats: 3\npacking: {steps_per_job: 8, separate_repeats: false}\n")
    assert any(len({s.repeat for s in job.steps}) > 1 for job in together.jobs)
    listed = _plan(BASE.replace("sizes: {min: 1K, max: 1M}", "sizes: {list: [4K, 1K, 1M]}") + "arms: [Ring/LL]\n")
    assert sorted({s.sizes["min"] for s in listed.steps}) == [1024, 4096, 2**20]
    assert all(s.sizes["min"] == s.sizes["max"] for s in listed.steps)  # one nccl-tests run per listed size


def test_stock_and_overhead_kinds():
    stock = _plan(BASE.replace("kind: forced", "kind: stock"))
    assert {(s.policy, s.plugin, s.arm) for s in stock.steps} == {("stock", False, None)}
    assert all("NCCL_ALGO" not in s.env for s in stock.steps)
    overhead = _plan(BASE.replace("kind: forced", "kind: overhead") + "policies: [AUTO]\nvariants:\n"
                     "  - {name: sync-4, env: {NCCLBOT_SYNC_EVERY: '4'}}\n  - {name: sync-64, env: {NCCLBOT_SYNC_EVERY: '64'}}\n")
    assert {s.variant for s in overhead.steps} == {"sync-4", "sync-64"}
    assert all(s.plugin and s.env["NCCLBOT_POLICY"] == "auto" for s in overhead.steps)


def test_forced_campaign_with_a_paired_auto_baseline():
    plan = _plan(BASE + "arms: [Ring/LL, Tree/LL]\nbaseline: true\n")
    for collective, nodes in [("AllReduce", 2), ("AllGather", 4)]:
        steps = [s for s in plan.steps if (s.collective, s.nodes) == (collective, nodes)]
        base = [s for s in steps if s.arm is None]
        assert len(base) == 1 and base[0].policy == "AUTO" and not base[0].plugin
        assert "NCCL_ALGO" not in base[0].env and "NCCLBOT_POLICY" not in base[0].env
        job = next(j for j in plan.jobs if base[0] in j.steps)
        assert any(s.arm is not None for s in job.steps)  # paired: same allocation as forced arms
    with pytest.raises(CampaignError, match="apply to forced campaigns only"):
        parse_campaign_text(BASE.replace("kind: forced", "kind: stock") + "baseline: true\n")
