"""The shared spec-file loader: hostile YAML is refused fast with a clear error naming file and line."""

from __future__ import annotations

import os
import time
import typing
from pathlib import Path

import pytest
from click.testing import CliRunner

from orch_support import SMALL_CAMPAIGN, local_inventory_text
from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import CampaignError, InventoryError, PlanError
from ncclbot_sweep.specfile import MAX_BYTES
from ncclbot_sweep.sweep.campaign import load_campaign, parse_campaign_text, plan_campaign
from ncclbot_sweep.sweep.inventory import load_inventory, parse_inventory_text

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


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("nodes: [2, 4]", "nodes: [true, 4]", 'nodes.0: must be a whole number (true, 2.0 and "2" are not), not true'),
    ("nodes: [2, 4]", "nodes: [2, 100000000000000000000]", "nodes.1: 100000000000000000000 is out of range"),
    ("nodes: [2, 4]", "nodes: ['2', 4]", 'nodes.0: must be a whole number (true, 2.0 and "2" are not), not "2"'),
    ("timeout_s: 60", "timeout_s: 1.0e+20",
     "timeout_s: must be a whole number (true, 2.0 and \"2\" are not), not 1e+20"),
    ("timeout_s: 60", "timeout_s: 100000000000000000000", "timeout_s: 100000000000000000000 is out of range"),
    ("timeout_s: 60", "timeout_s: 1000000", "timeout_s: must be at most 604800, not 1000000"),
    ("iterations: 5", "iterations: 5.0", "iterations: must be a whole number"),
    ("warmup: 1", "warmup: false", "warmup: must be a whole number (true, 2.0 and \"2\" are not), not false"),
    ("sizes: {min: 1K, max: 64K}", "sizes: {min: true, max: 64K}", "sizes.min"),
    ("steps_per_job: 2", "steps_per_job: true", "packing.steps_per_job: must be a whole number"),
    ("timeout_s: 60", "timeout_s: 60\nbudget_node_hours: true", "budget_node_hours: must be a number, not true"),
    ("timeout_s: 60", "timeout_s: 60\nbaseline: 1", "baseline: must be true or false, not 1"),
])
def test_campaign_numbers_are_strict_and_in_range(old, new, needle):
    with pytest.raises(CampaignError) as info:
        parse_campaign_text(SMALL_CAMPAIGN.replace(old, new), "c.yaml")
    assert needle in str(info.value) and info.value.line is not None


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("gpus_per_node: 8", "gpus_per_node: true", "gpus_per_node: must be a whole number"),
    ("max_concurrent_jobs: 2", "max_concurrent_jobs: 2.0", "scheduler.max_concurrent_jobs: must be a whole number"),
    ("poll_interval_max_s: 0.2", "poll_interval_max_s: 1.0e+300", "scheduler.poll_interval_max_s: must be at most"),
    ("step_setup_s: 1", "step_setup_s: yes", "estimate.step_setup_s: must be a number, not true"),
])
def test_inventory_numbers_are_strict_and_in_range(old, new, needle):
    assert old in INVENTORY
    with pytest.raises(InventoryError) as info:
        parse_inventory_text(INVENTORY.replace(old, new), "i.yaml")
    assert needle in str(info.value) and info.value.line is not None


def _spec_models():
    import inspect

    from ncclbot_sweep.specfile import SpecModel
    from ncclbot_sweep.sweep import campaign, inventory

    return sorted({model for module in (campaign, inventory) for _, model in inspect.getmembers(module, inspect.isclass)
                   if issubclass(model, SpecModel) and model is not SpecModel}, key=lambda m: m.__name__)


@pytest.mark.parametrize("model", _spec_models(), ids=lambda m: m.__name__)
def test_every_number_field_of_every_spec_model_is_strict(model):
    """A lax ``int``, ``float`` or ``bool`` takes ``true`` for 1 and ``1.0e+20`` for an integer:
    every number field uses the strict types of :mod:`ncclbot_sweep.specfile`."""
    from pydantic import Strict

    def lax(annotation) -> list:
        args = typing.get_args(annotation)
        if annotation in (int, float, bool):
            return [annotation]
        if typing.get_origin(annotation) is typing.Annotated:
            return [] if any(isinstance(m, Strict) for m in args[1:]) else lax(args[0])
        return [t for arg in args for t in lax(arg)]

    for name, field in model.model_fields.items():  # pydantic moves a field's own Annotated parts to .metadata
        strict_here = any(isinstance(m, Strict) for m in field.metadata)
        assert not (lax(typing.get_args(field.annotation)) if strict_here else lax(field.annotation)), name


@pytest.mark.parametrize("sizes", ["{min: 1K, max: 9999999TiB}", "{list: [1K, 9999999TiB]}"])
def test_a_size_beyond_int64_is_a_validation_error_in_plan_render_and_submit(tmp_path, sizes):
    """Not a traceback from deep inside planning: every command names the file, the line and the fix."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    camp = tmp_path / "c.yaml"
    camp.write_text(SMALL_CAMPAIGN.replace("sizes: {min: 1K, max: 64K}", f"sizes: {sizes}"))
    for argv in (["plan", str(camp), "-i", str(inv)], ["render", str(camp), "-i", str(inv), "-o", str(tmp_path / "r")],
                 ["submit", str(camp), "-i", str(inv), "-w", str(tmp_path / "w")]):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 1, result.output
        assert result.output.startswith(f"Error: {camp}:5: invalid campaign: sizes."), result.output
        assert "'9999999TiB' is 10,995,115,178,248,372,224 bytes" in result.output
        assert "give a size such as '16GiB'" in result.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "w").exists()
