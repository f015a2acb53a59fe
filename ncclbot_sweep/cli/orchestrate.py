"""CLI commands of the orchestration area: inventory check, plan, render, submit, status, resume,
cancel and demo. Each command parses options, calls one library function and prints."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["COMMANDS"]

_INVENTORY = click.option("--inventory", "-i", "inventory_path", required=True,
                          help="Inventory YAML of the fabric (a path, or a shipped name such as sim-h100).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
_BUDGET = click.option("--ignore-budget", is_flag=True, help="Plan even when the estimate exceeds the budget.")


@click.group("inventory")
def inventory_group() -> None:
    """Inspect fabric inventories."""


@inventory_group.command("check")
@click.argument("path")
@_JSON
def inventory_check(path: str, as_json: bool) -> None:
    """Validate an inventory YAML and print a summary.

    Example: ncclbot-sweep inventory check inventories/h100-spectrumx.yaml
    """
    from ncclbot_sweep.inventory import describe_inventory, load_inventory

    inventory = load_inventory(path)
    if as_json:
        click.echo(json.dumps(inventory.model_dump(mode="json"), indent=2))
    else:
        click.echo(describe_inventory(inventory, path))


@click.command("plan")
@click.argument("campaign_path")
@_INVENTORY
@_JSON
@_BUDGET
def plan_cmd(campaign_path: str, inventory_path: str, as_json: bool, ignore_budget: bool) -> None:
    """Print the job matrix, the pruned arms and why, the step count and node-hours.

    Example: ncclbot-sweep plan campaigns/demo.yaml --inventory inventories/sim-h100.yaml
    """
    from ncclbot_sweep.campaign import describe_plan, load_campaign, plan_campaign
    from ncclbot_sweep.inventory import load_inventory

    plan = plan_campaign(load_campaign(campaign_path), load_inventory(inventory_path),
                         enforce_budget=not ignore_budget)
    click.echo(json.dumps(plan.summary(), indent=2) if as_json else describe_plan(plan))


COMMANDS = [inventory_group, plan_cmd]
