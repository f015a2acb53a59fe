"""Commands ``sim bin-dir``, ``sim cost-table``, ``sim tuning-table`` and ``sim workload`` (thin: parse, call, print)."""

from __future__ import annotations

from pathlib import Path

import click

from ncclbot_sweep.cli.jsonout import echo_json
from ncclbot_sweep.cli.options import json_option
from ncclbot_sweep.names import COLLECTIVES, parse_size

__all__ = ["sim_group"]


@click.group("sim")
def sim_group() -> None:
    """The simulated fabric: its nccl-tests stand-ins and its NCCL cost model.

    \b
    Example:
        ncclbot-sweep sim cost-table --collective AllGather --nodes 16 --size 512MiB
    """


@sim_group.command("bin-dir")
def bin_dir_command() -> None:
    """Print the folder holding the simulated all_reduce_perf & co. (installs them if needed).

    The folder is not on PATH, so the stand-ins never shadow a real nccl-tests build.

    \b
    Example:
        $(ncclbot-sweep sim bin-dir)/all_reduce_perf -b 8 -e 128M -f 2 -g 8
    """
    from ncclbot_sweep.sim import bin_dir

    click.echo(str(bin_dir()))


def _size(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _fabric(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A simulated fabric's name, checked by the simulator (its error has the did-you-mean)."""
    from ncclbot_sweep.sim.fabric import fabric

    try:
        fabric(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


_FABRIC = click.option("--fabric", "fabric_name", default="sim-h100", show_default=True, callback=_fabric,
                       help="Simulated fabric (the name of a sim-* inventory).")


@sim_group.command("cost-table")
@_FABRIC
@click.option("--collective", type=click.Choice(COLLECTIVES, case_sensitive=False), required=True,
              help="NCCL collective.")
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Number of nodes.")
@click.option("--size", "size_bytes", callback=_size, required=True,
              help="Message size as nccl-tests prints it (full buffer for AllGather/ReduceScatter), e.g. 1MiB.")
@json_option("fabric, collective, nodes, size_bytes; arms (one {arm, algorithm, protocol, predicted_us, true_us, "
             "auto, best} per valid arm); auto_arm, best_arm; auto_loss (AUTO's true time over the best's, minus 1) "
             "and runner_up_margin (second-cheapest prediction over the cheapest, minus 1), null when undefined.")
def cost_table_command(fabric_name: str, collective: str, nodes: int, size_bytes: int, as_json: bool) -> None:
    """Print AUTO's cost table for one context beside the simulator's true latencies.

    \b
    Example:
        ncclbot-sweep sim cost-table --collective AllReduce --nodes 16 --size 32MiB
    """
    from ncclbot_sweep.names import canonical_collective
    from ncclbot_sweep.sim.inspect import auto_loss_and_margin, cost_table_rows, format_cost_table

    collective = canonical_collective(collective)
    rows = cost_table_rows(fabric_name, collective, nodes, size_bytes)
    if not as_json:
        for line in format_cost_table(rows):
            click.echo(line)
        return
    loss, margin = auto_loss_and_margin(rows)
    echo_json({
        "fabric": fabric_name, "collective": collective, "nodes": nodes, "size_bytes": size_bytes,
        "arms": [{"arm": str(r.arm), "algorithm": r.arm.algorithm, "protocol": r.arm.protocol,
                  "predicted_us": r.predicted_us, "true_us": r.true_us, "auto": r.auto, "best": r.best}
                 for r in rows],
        "auto_arm": next((str(r.arm) for r in rows if r.auto), None),
        "best_arm": next((str(r.arm) for r in rows if r.best), None),
        "auto_loss": loss, "runner_up_margin": margin,
    })


@sim_group.command("tuning-table")
@_FABRIC
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Number of nodes.")
def tuning_table_command(fabric_name: str, nodes: int) -> None:
    """Print NCCL's init tuning table (latency us / bandwidth GB/s) as the simulator logs it.

    \b
    Example:
        ncclbot-sweep sim tuning-table --nodes 8
    """
    from ncclbot_sweep.sim.inspect import tuning_table_text

    for line in tuning_table_text(fabric_name, nodes):
        click.echo(line)


@sim_group.command("workload")
@click.argument("source")
@click.option("--steps", type=click.IntRange(min=1, max=100_000), default=30, show_default=True,
              help="Training steps to play.")
@click.option("--log-format", type=click.Choice(["megatron", "lightning", "hf"]), default="megatron",
              show_default=True, help="Print step lines as Megatron-LM, PyTorch Lightning or the Hugging Face "
                                      "Trainer does.")
@click.option("--profile-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar="NCCLSWEEP_KINETO_DIR", show_envvar=True,
              help="Also write a Kineto-style trace (one ProfilerStep#N span per step) into this folder (a workload "
                   "job sets it for step_time kineto).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Nodes of the job, every GPU a rank (default: the Slurm job's shape, one rank per task).")
def workload_command(source: str, steps: int, log_format: str, profile_dir: Path | None, nodes: int | None) -> None:
    """Replay a training step's collectives and compute, printing step lines as a training script does.

    SOURCE is a shipped workload (ddp-buckets, fsdp-layers), a spec file (YAML or JSON: name, dtype
    and a step of {gpu_us, host_us} compute gaps, {collective, size} calls and {repeat, items}) or a
    PyTorch/Kineto trace. Collectives go through the real plugin when NCCL_TUNER_PLUGIN /
    NCCL_PROFILER_PLUGIN name it, as in a live campaign; the fabric is NCCLBOT_SIM_FABRIC.

    \b
    Example:
        ncclbot-sweep sim workload ddp-buckets --nodes 8 --steps 20
    """
    import sys

    from ncclbot_sweep.sim.workload_run import run_workload

    code = run_workload(source, steps=steps, log_format=log_format, profile_dir=profile_dir, nodes=nodes,
                        out=sys.stdout, err=sys.stderr)
    if code:
        raise SystemExit(code)
