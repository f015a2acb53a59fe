"""Commands ``sim bin-dir``, ``sim cost-table`` and ``sim tuning-table`` (thin: parse, call, print)."""

from __future__ import annotations

import click

from ncclbot_sweep.names import COLLECTIVES, parse_size

__all__ = ["sim_group"]

_FABRICS = ("sim-h100", "sim-gb200-mnnvl-on", "sim-gb200-mnnvl-off")


@click.group("sim")
def sim_group() -> None:
    """The simulated fabric: its nccl-tests stand-ins and its NCCL cost model.

    Example: ncclbot-sweep sim cost-table --collective AllGather --nodes 16 --size 512MiB
    """


@sim_group.command("bin-dir")
def bin_dir_command() -> None:
    """Print the folder holding the simulated all_reduce_perf & co. (installs them if needed).

    The folder is not on PATH, so the stand-ins never shadow a real nccl-tests build.

    Example: $(ncclbot-sweep sim bin-dir)/all_reduce_perf -b 8 -e 128M -f 2 -g 8
    """
    from ncclbot_sweep.sim import bin_dir

    click.echo(str(bin_dir()))


def _size(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@sim_group.command("cost-table")
@click.option("--fabric", "fabric_name", type=click.Choice(_FABRICS), default="sim-h100", show_default=True,
              help="Simulated fabric.")
@click.option("--collective", type=click.Choice(COLLECTIVES, case_sensitive=False), required=True,
              help="NCCL collective.")
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Number of nodes.")
@click.option("--size", "size_bytes", callback=_size, required=True,
              help="Message size as nccl-tests prints it (full buffer for AllGather/ReduceScatter), e.g. 1MiB.")
def cost_table_command(fabric_name: str, collective: str, nodes: int, size_bytes: int) -> None:
    """Print AUTO's cost table for one context beside the simulator's true latencies.

    Example: ncclbot-sweep sim cost-table --collective AllReduce --nodes 16 --size 32MiB
    """
    from ncclbot_sweep.names import canonical_collective
    from ncclbot_sweep.sim.inspect import cost_table_rows, format_cost_table

    rows = cost_table_rows(fabric_name, canonical_collective(collective), nodes, size_bytes)
    for line in format_cost_table(rows):
        click.echo(line)


@sim_group.command("tuning-table")
@click.option("--fabric", "fabric_name", type=click.Choice(_FABRICS), default="sim-h100", show_default=True,
              help="Simulated fabric.")
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Number of nodes.")
def tuning_table_command(fabric_name: str, nodes: int) -> None:
    """Print NCCL's init tuning table (latency us / bandwidth GB/s) as the simulator logs it.

    Example: ncclbot-sweep sim tuning-table --nodes 8
    """
    from ncclbot_sweep.sim.inspect import tuning_table_text

    for line in tuning_table_text(fabric_name, nodes):
        click.echo(line)
