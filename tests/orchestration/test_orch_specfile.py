"""The shared spec-file loader: hostile YAML is refused fast with a clear error naming file and line."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from orch_support import SMALL_CAMPAIGN, local_inventory_text
from ncclbot_sweep.campaign import load_campaign, parse_campaign_text, plan_campaign
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import CampaignError, InventoryError, PlanError
from ncclbot_sweep.inventory import load_inventory, parse_inventory_text
from ncclbot_sweep.specfile import MAX_BYTES

INVENTORY = local_inventory_text(Path("/opt/nt"))
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))


def _fast(action, limit_s: float = 5.0):
    started = time.monotonic()
    try:
        return action()
    finally:
        assert time.monotonic() - started < limit_s, "refusing took too long"


@pytest.mark.parametrize(("text", "line", "needle"), [
    (SMALL_CAMPAIGN + "iterations: 7\n", 11, "key 'iterations' is given twice: on line 7 and on line 11"),
    (SMALL_CAMPAIGN + BILLION_LAUGHS, None, "the YAML expands to more than 200000 values"),
    (SMALL_CAMPAIGN + "loop: &l [1, *l]\n", 11, "an alias refers to the mapping or list that holds it"),
    (SMALL_CAMPAIGN + "deep: " + "[" * 5000 + "]" * 5000 + "\n", 11, "nest"),  # ours, or libyaml's limit
    (SMALL_CAMPAIGN + "deep: " + "[" * 50 + "]" * 50 + "\n", 11, "nested too deeply (more than 40 levels)"),
    (SMALL_CAMPAIGN + "".join(f"l{i}: &l{i} [[[[[[[[[[{f'*l{i - 1}' if i else 0}]]]]]]]]]]\n" for i in range(6)), None,
     "nested too deeply once aliases are expanded"),
    (SMALL_CAMPAIGN + "budget_node_hours: .nan\n", 11, "budget_node_hours: must be a finite number"),
    (SMALL_CAMPAIGN.replace("iterations: 5", "iterations: 1e999"), 7, "iterations"),
])
def test_hostile_campaign_yaml_is_refused(text, line, needle):
    with pytest.raises(CampaignError) as info:
        _fast(lambda: parse_campaign_text(text, "c.yaml"))
    assert needle in str(info.value) and info.value.path == "c.yaml"
    if line is not None:
        assert info.value.line == line


def test_huge_and_special_files_are_not_read(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(SMALL_CAMPAIGN + "#" * MAX_BYTES + "\n")
    with pytest.raises(CampaignError, match="larger than 1024 KiB"):
        _fast(lambda: load_campaign(big))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InventoryError, match="not a regular file"):
        _fast(lambda: load_inventory(fifo))  # opening a FIFO would block forever
    with pytest.raises(InventoryError, match="not a regular file"):
        _fast(lambda: load_inventory("/dev/zero"))


def test_expansion_size_is_checked_before_steps_are_built():
    inventory = parse_inventory_text(INVENTORY)
    campaign = parse_campaign_text(SMALL_CAMPAIGN.replace("iterations: 5", "iterations: 5\nrepeats: 100000000"))
    with pytest.raises(PlanError, match="would expand into up to 4,200,000,000 steps"):
        _fast(lambda: plan_campaign(campaign, inventory), 1.0)
    many = ", ".join(str(1024 + i) for i in range(20_000))
    with pytest.raises(CampaignError, match="sizes.list: Tuple should have at most 4096 items"):
        text = SMALL_CAMPAIGN.replace("sizes: {min: 1K, max: 64K}", f"sizes: {{list: [{many}]}}")
        _fast(lambda: parse_campaign_text(text))


@pytest.mark.parametrize(("extra", "line", "needle"), [
    ("  account: \"two words\"\n", 6, "scheduler.account: must be one word"),
    ("  extra_sbatch: [\"#SBATCH --exclusive\"]\n", 6, "each line is an sbatch option such as '--exclusive'"),
    ("  exclude: [\"node1 node2\"]\n", 6, "scheduler.exclude: must be one word"),
    ("  min_time_limit_min: 500\n", 4, "min_time_limit_min (500) must not exceed time_limit_min (240)"),
])
def test_scheduler_fields_are_checked_by_inventory_check_and_plan(tmp_path, extra, line, needle):
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY.replace("  kind: local\n", "  kind: local\n" + extra, 1))
    camp = tmp_path / "c.yaml"
    camp.write_text(SMALL_CAMPAIGN)
    for argv in (["inventory", "check", str(inv)], ["plan", str(camp), "-i", str(inv)]):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 1, result.output
        assert result.output.startswith(f"Error: {inv}:{line}: invalid inventory: ") and needle in result.output


def test_non_finite_scheduler_numbers_are_refused():
    with pytest.raises(InventoryError, match="scheduler.poll_interval_s: must be a finite number") as info:
        parse_inventory_text(INVENTORY.replace("poll_interval_s: 0.05", "poll_interval_s: .inf"))
    assert info.value.line == 7
