"""One simulated nccl-tests run: read the job, plan the calls, print what the real binary prints.

The call sequence follows nccl-tests: ``-w`` warm-up calls at the largest and then the
smallest size, then per size an out-of-place and an in-place pass of ``-n x -m`` timed
calls, each followed by ``-c`` check calls. Every call goes through one
:class:`~ncclbot_sweep.sim.process.SimProcess`, so lazy-connection transients and the NVLS
stall land where a real process would pay them. Nothing sleeps.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import TextIO

import numpy as np

from ncclbot_sweep import costmodel
from ncclbot_sweep.errors import NcclbotError
from ncclbot_sweep.names import (
    BINARY_COLLECTIVE,
    COLLECTIVES,
    NCCL_DATATYPES,
    PER_RANK_COUNT_COLLECTIVES,
    SIMULATOR,
    Arm,
    bus_factor,
    dtype_bytes,
    nccl_type_name,
)
from ncclbot_sweep.sim.fabric import SimFabric, fabric_for_env
from ncclbot_sweep.sim.fabrics import DEFAULT_FABRIC
from ncclbot_sweep.sim.nccltests import report
from ncclbot_sweep.sim.nccltests.calls import NVLS_CHANNELS, call_channels, call_table
from ncclbot_sweep.sim.nccltests.environment import (
    SUBSYSTEMS,
    EnvError,
    JobLayout,
    allowed_names,
    debug_config,
    job_layout,
)
from ncclbot_sweep.sim.nccltests.ncclog import NcclLog, tuning_table_lines
from ncclbot_sweep.sim.nccltests.options import REDOPS, Options, UsageError, parse_options
from ncclbot_sweep.sim.live import LiveFailure, RankPlace, live_player, open_host, rank_place, wants_plugin
from ncclbot_sweep.sim.pluginhost import HostError, PluginHost
from ncclbot_sweep.sim.process import SimProcess, derive_seed
from ncclbot_sweep.sim.sweep import Warmup, one_arm_player, run_sweep

__all__ = ["NCCL_TESTS_VERSION", "main"]

NCCL_TESTS_VERSION = "2.19.7"

_BUS_IDS = {
    8: ("0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00"),
    4: ("0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00"),
}


class TestFailure(Exception):
    """A failure nccl-tests reports as ``Test NCCL failure`` and exits non-zero on."""


@dataclasses.dataclass
class _Context:
    """Everything fixed for the run."""

    binary: str
    collective: str
    options: Options
    fabric: SimFabric
    layout: JobLayout
    ranks: int
    host: str
    pid: int
    out: TextIO
    log: NcclLog
    env: dict[str, str]
    dtype: str = "float"  # the datatype being run (``-d all`` loops)
    plugin: PluginHost | None = None  # live steps: the plugin loaded as NCCL loads it

    @property
    def per_process(self) -> int:
        return self.options.nthreads * self.options.ngpus


def _counts(collective: str, size: int, elt: int, ranks: int) -> tuple[int, int, int]:
    """(printed size, printed count, bytes per rank NCCL logs) for a requested size."""
    count = size // elt
    if collective in PER_RANK_COUNT_COLLECTIVES:
        per_rank = count // ranks
        return per_rank * ranks * elt, per_rank, per_rank * elt
    return count * elt, count, count * elt


def _op_and_root(collective: str, op: str, root: int) -> tuple[str, int]:
    """The ``redop`` and ``root`` columns: ``none`` without a reduction, -1 without a root."""
    name = "none" if collective in ("AllGather", "AlltoAll", "Broadcast") else op
    return name, root if collective in ("Broadcast", "Reduce") else -1


def _channels(ctx: _Context, arm: Arm, n_bytes: int) -> int:
    """Channels NCCL uses for one call after its per-size trimming (``enqueue.cc``)."""
    return call_channels(ctx.fabric, arm, nodes=ctx.layout.nodes, ranks=ctx.ranks, n_bytes=n_bytes)


def _cost_table(ctx: _Context, size: int) -> np.ndarray:
    """NCCL's cost table ``[algorithm, protocol]`` for this call, over what ``NCCL_ALGO``/``NCCL_PROTO`` allow."""
    return call_table(ctx.fabric, ctx.collective, nodes=ctx.layout.nodes, size=size, ranks=ctx.ranks, env=ctx.env)


def _choose_arm(ctx: _Context, size: int) -> Arm | None:
    """The arm NCCL runs for this call without a tuner: AUTO's first minimum of the cost table."""
    return costmodel.auto_arm(_cost_table(ctx, size))


def _no_arm_failure(ctx: _Context) -> TestFailure:
    algo_env, proto_env = ctx.env.get("NCCL_ALGO"), ctx.env.get("NCCL_PROTO")
    message = (
        f"Error : no algorithm/protocol available for function {ctx.collective} with datatype "
        f"{nccl_type_name(ctx.dtype)}."
        + (f" NCCL_ALGO was set to {algo_env}." if algo_env else "")
        + (f" NCCL_PROTO was set to {proto_env}." if proto_env else "")
    )
    ctx.log.warn("enqueue.cc:2052", message)
    status = "invalid usage (run with NCCL_DEBUG=WARN for details)" if (algo_env or proto_env) else "internal error"
    return TestFailure(f"'{status} / {message}'")


def _write_header(ctx: _Context, json_doc: dict | None) -> None:
    o, out = ctx.options, ctx.out
    code = ctx.fabric.spec.nccl_version_code
    out.write(f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={code} nccl-library={code} "
              f"simulator={SIMULATOR}\n")
    out.write(f"# Collective test starting: {ctx.binary}\n")
    step = f"{o.stepfactor}(factor)" if o.stepfactor > 1 else f"{o.stepbytes}(bytes)"
    out.write(
        f"# nThread {o.nthreads} nGpus {o.ngpus} minBytes {o.minbytes} maxBytes {o.maxbytes} step: {step} "
        f"warmup iters: {o.warmup_iters} iters: {o.iters} agg iters: {o.agg_iters} validation: {o.check} "
        f"graph: {o.cudagraph} unalign: {o.unalign}\n"
    )
    if o.blocking == 1:
        out.write("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n")
    elif o.blocking == 2:
        out.write("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n")
    elif o.blocking == 3:
        out.write("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n")
    if o.per_iter_timing:
        skip = f"; summary skips first {o.per_iter_skip} iterations" if o.per_iter_skip else ""
        out.write(f"# Per-Iteration Report: CUDA event timing; i_* uses max over process rows{skip} \n")
    if o.parallel_init:
        out.write("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n")
    out.write("#\n# Using devices\n")
    devices = []
    gpn = ctx.fabric.gpus_per_node
    bus_ids = _BUS_IDS.get(gpn, _BUS_IDS[8])
    lines = []
    for task in range(ctx.layout.tasks):
        host = ctx.layout.host_of_task(task)
        pid = ctx.pid + task
        for i in range(ctx.per_process):
            dev = ctx.layout.local_rank(task) * ctx.per_process + i
            rank = task * ctx.per_process + i
            line = (
                f"#  Rank {rank:2d} Group {0:2d} Pid {pid:6d} on {host:>10s} device {dev:2d} "
                f"[{bus_ids[dev % len(bus_ids)]}] {ctx.fabric.spec.gpu_name}"
            )
            lines.append(line)
            if i == 0:
                devices.append({"rank": rank, "group": 0, "pid": pid, "hostname": host, "device": dev,
                                "device_hex": bus_ids[dev % len(bus_ids)], "device_info": ctx.fabric.spec.gpu_name})
    out.write("\n".join(lines) + "\n")
    if json_doc is not None:
        config = {
            "nthreads": o.nthreads, "ngpus": o.ngpus, "minimum_bytes": o.minbytes, "maximum_bytes": o.maxbytes,
        }
        config.update({"step_factor": o.stepfactor} if o.stepfactor > 1 else {"step_bytes": o.stepbytes})
        config.update({
            "warmup_iters": o.warmup_iters, "iterations": o.iters, "aggregated_iterations": o.agg_iters,
            "validation": o.check, "graph": o.cudagraph, "blocking_collectives": bool(o.blocking),
            "per_iter_timing": bool(o.per_iter_timing), "per_iter_skip": o.per_iter_skip,
            "parallel_init": bool(o.parallel_init), "devices": devices,
        })
        json_doc["config"] = config


def _write_init_log(ctx: _Context) -> None:
    """What NCCL logs while the communicator initialises (rank 0)."""
    spec = ctx.fabric.spec
    log = ctx.log
    log.version(f"NCCL version {spec.nccl_version}+cuda{spec.cuda_version}")
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        if ctx.env.get(name):
            log.info("ENV", f"{name} set by environment to {ctx.env[name]}")
    tuned = ctx.fabric.tuned(ctx.layout.nodes, ctx.ranks)
    local = ctx.ranks // tuned.nodes
    comm = spec.model_spec(ctx.layout.nodes).comm_channels
    summary = [
        f"comm 0x5c1a0 rank 0 nRanks {ctx.ranks} nNodes {tuned.nodes} localRanks {local} localRank 0 MNNVL "
        f"{1 if spec.model_multi.nvls_domain_nodes > 1 else 0}",
        f"{comm} coll channels, 0 collnet channels, {NVLS_CHANNELS.get(spec.comp_cap, 16) if spec.model_multi.nvls else 0} "
        f"nvls channels, {2 * comm} p2p channels, {2 * comm} p2p channels per peer",
    ]
    if ctx.log.config.info("INIT"):
        log.info_many("INIT", summary)
    elif ctx.log.config.info("TUNING"):
        log.info_many("TUNING", summary)  # the cost formula needs these; keep them with the table
    for name in ("NCCL_ALGO", "NCCL_PROTO"):  # NCCL parses both at init and rejects bad tokens
        try:
            allowed_names(ctx.env.get(name), "algo" if name == "NCCL_ALGO" else "proto", ctx.collective)
        except EnvError as exc:
            log.warn("tuning.cc:55", str(exc))
            raise TestFailure(f"'invalid usage (run with NCCL_DEBUG=WARN for details) / {exc}'") from None
    log.info_many("TUNING", tuning_table_lines(tuned.table, tuned.max_threads))
    log.info("INIT", f"ncclCommInitRankConfig comm 0x5c1a0 rank 0 nranks {ctx.ranks} cudaDev 0 nvmlDev 0 "
                     f"busId 18000 commId 0x{derive_seed(ctx.host, ctx.pid) & 0xFFFFFFFFFFFF:x} - Init COMPLETE")
    log.flush()


def _arm_or_fail(ctx: _Context, size: int) -> Arm | None:
    if ctx.collective not in COLLECTIVES:
        return None
    arm = _choose_arm(ctx, size)
    if arm is None:
        raise _no_arm_failure(ctx)
    return arm


def _combinations(collective: str, options: Options) -> list[tuple[str, str]]:
    """(datatype, redop) pairs to run: ``-d all`` and ``-o all`` loop like nccl-tests does."""
    types = [name for name, _width in NCCL_DATATYPES] if options.datatype == "all" else [options.datatype]
    reducing = collective in ("AllReduce", "ReduceScatter", "Reduce", "SendRecv")
    ops = list(REDOPS) if options.op == "all" and reducing else [options.op if options.op != "all" else "sum"]
    return [(t, o) for t in types for o in ops]


def _benchmark(ctx: _Context, proc: SimProcess, json_doc: dict | None) -> float:
    """Run every (datatype, op) and size; print log lines and rows; return the average bus bandwidth."""
    busbws: list[float] = []
    results: list[dict] = []
    for dtype, op in _combinations(ctx.collective, ctx.options):
        ctx.dtype = dtype
        _benchmark_one(ctx, proc, dtype, op, busbws, results)
    if json_doc is not None:
        json_doc["results"] = results
    return float(np.mean(busbws)) if busbws else 0.0


def _benchmark_one(ctx: _Context, proc: SimProcess, dtype: str, op: str, busbws: list, results: list) -> None:
    """One size sweep (with cycles) for one datatype and reduction."""
    o = ctx.options
    elt = dtype_bytes(dtype)
    printed: dict[int, tuple[int, int]] = {}
    sizes = []
    for requested in o.sizes():
        size, count, log_bytes = _counts(ctx.collective, requested, elt, ctx.ranks)
        printed.setdefault(size, (count, log_bytes))
        sizes.append(size)
    op_name, root = _op_and_root(ctx.collective, op, o.root)
    if ctx.plugin is not None and ctx.collective in COLLECTIVES:
        play = live_player(ctx.plugin, proc, ctx.collective, table=lambda size: _cost_table(ctx, size),
                           channels=lambda arm, size: _channels(ctx, arm, size), elt=elt, dtype=nccl_type_name(dtype),
                           blocking=o.blocking, agg=o.agg_iters, graph=o.cudagraph)
    else:  # NCCL alone: its host runs ahead of the GPU, or (-z) waits for each call in series
        play = one_arm_player(proc, ctx.collective, lambda size: _arm_or_fail(ctx, size),
                              host_us=ctx.fabric.spec.host.enqueue_us if o.blocking else 0.0)
    events = run_sweep(proc, ctx.collective, sizes, lambda size: _arm_or_fail(ctx, size), iters=o.iters,
                       warmup=o.warmup_iters, agg=o.agg_iters, check=o.check, cycles=o.run_cycles, play=play)
    for event in events:
        count, log_bytes = printed[event.size]
        if event.size > 0:
            for arm, calls in event.played:  # NCCL's per-call choice lines: the arm each call played
                if arm is not None:
                    ctx.log.collective(ctx.collective, log_bytes, arm, _channels(ctx, arm, event.size), repeat=calls)
        _relay_plugin_log(ctx)
        if isinstance(event, Warmup):
            continue
        if event.idle_us is not None:
            busy = float(event.out_of_place.sum() + event.in_place.sum()) * o.agg_iters - event.idle_us
            ctx.log.info("INIT", f"NCCLBOT-SIM: {ctx.collective} {event.size} bytes: the stream waited "
                                 f"{event.idle_us:.1f} us for the host over {busy:.1f} us of kernels")
        ctx.log.flush()
        line, record = _row(ctx, event, count, dtype, op_name, root, busbws)
        ctx.out.write(line + "\n")
        results.append(record)


def _row(ctx: _Context, event, count: int, dtype: str, op_name: str, root: int, busbws: list) -> tuple[str, dict]:
    """The text row and the JSON record of one size."""
    o = ctx.options
    factor = bus_factor(ctx.collective, ctx.ranks)
    line = report.row_prefix(event.size, count, dtype, op_name, root)
    record: dict = {"size": event.size, "count": count, "type": dtype, "redop": op_name, "root": f"{root:6d}"}
    for name, times in (("out_of_place", event.out_of_place), ("in_place", event.in_place)):
        time_us = float(times.mean())
        algbw = event.size / time_us / 1000.0 if time_us > 0 else 0.0
        busbw = algbw * factor
        busbws.append(busbw)
        wrong = 0 if o.check else None
        line += report.row_body(time_us, algbw, busbw, wrong)
        record[name] = {"cpu_time" if o.report_cputime else "time": time_us, "alg_bw": algbw, "bus_bw": busbw,
                        "nwrong": None if wrong is None else float(wrong)}
        if o.per_iter_timing:
            kept = times[o.per_iter_skip:] if o.per_iter_skip < o.iters else times
            stats = report.iter_stats(kept)
            line += report.per_iter_str(stats)
            record[f"{name}_per_iter"] = _per_iter_json(stats, times, o.per_iter_skip)
    if o.report_timestamps and not o.per_iter_timing:
        line += f"{time.strftime(report.TIME_FORMAT, time.localtime()):>21s}"
    record["actual_iterations"] = o.iters
    record["experiment_name"] = ""
    return line, _reorder(record)


def _per_iter_json(stats: report.IterStats, times: np.ndarray, skip: int) -> dict:
    return {
        "skipped_iterations": skip, "min_us": stats.min, "max_us": stats.max, "avg_us": stats.avg,
        "p50_us": stats.p50, "p95_us": stats.p95, "p99_us": stats.p99, "stdev_us": stats.stdev,
        "cv_pct": stats.cv_pct, "times_us": [float(t) for t in times],
    }


def _reorder(record: dict) -> dict:
    """Key order of the real file: out-of-place, its per-iteration block, then in-place."""
    keys = ["size", "count", "type", "redop", "root", "out_of_place", "out_of_place_per_iter",
            "in_place", "in_place_per_iter", "actual_iterations", "experiment_name"]
    return {k: record[k] for k in keys if k in record}


def _open_json(path: str, out: TextIO) -> tuple[TextIO | None, str | None]:
    """``fopen(path, "wx")``, trying ``path.0``, ``path.1``, ... when it exists (as nccl-tests does)."""
    candidate, attempt = path, 0
    while True:
        try:
            handle = open(candidate, "x", encoding="ascii")  # noqa: SIM115 - closed by the caller
        except FileExistsError:
            candidate, attempt = f"{path}.{attempt}", attempt + 1
            continue
        except OSError:
            out.write(f"# skipping json output; {candidate} not accessible\n")
            return None, None
        out.write(f"# Writing JSON output to {candidate}\n")
        return handle, candidate


def _seed(env: dict[str, str], name: str, binary: str, layout: JobLayout, ranks: int, argv: list[str]) -> int:
    if env.get("NCCLBOT_SIM_SEED", "").strip():
        return derive_seed(env["NCCLBOT_SIM_SEED"].strip(), binary, layout.nodes, ranks, env.get("NCCL_ALGO"),
                           env.get("NCCL_PROTO"), *_seed_args(argv))
    return derive_seed(name, binary, layout.nodes, ranks, env.get("NCCL_ALGO"), env.get("NCCL_PROTO"), *_seed_args(argv))


def _seed_args(argv: list[str]) -> list[str]:
    """Arguments that define the measurement: not the program's path (where the launchers are
    installed) nor output file names, so a rerun from another folder draws the same noise."""
    kept, skip = [], False
    for word in argv[1:]:
        if skip:
            skip = False
            continue
        if word in ("-J", "-F", "--json_file", "--output_file"):
            skip = True
            continue
        if word.startswith(("-J", "-F", "--json_file=", "--output_file=")):
            continue
        kept.append(word)
    return kept


def main(argv: list[str], *, env: dict[str, str] | None = None, stdout: TextIO | None = None) -> int:
    """Run one simulated nccl-tests binary. ``argv[0]`` names it (``.../all_reduce_perf``)."""
    env = dict(os.environ) if env is None else env
    out = stdout or sys.stdout
    binary = os.path.basename(argv[0])
    base = binary.removesuffix("_mpi")
    if base not in BINARY_COLLECTIVE:
        sys.stderr.write(f"{binary}: not a simulated nccl-tests binary (one of {', '.join(BINARY_COLLECTIVE)})\n")
        return 2
    try:
        options = parse_options(argv[1:])
    except UsageError as exc:
        sys.stderr.write(f"{binary}: {exc}\nUSAGE: {binary} [-t nthreads] [-g ngpus] [-b minbytes] [-e maxbytes] "
                         "[-f stepfactor | -i stepbytes] [-n iters] [-w warmup] [-c check] [-I 0/1] [-J file] ...\n")
        return 2
    name = env.get("NCCLBOT_SIM_FABRIC", "").strip() or DEFAULT_FABRIC
    try:
        sim = fabric_for_env(name, env)
    except ValueError as exc:
        sys.stderr.write(f"{binary}: NCCLBOT_SIM_FABRIC: {exc}\n")
        return 1
    layout = job_layout(env, sim.name)
    live = wants_plugin(env)
    if layout.procid != 0 and not live:
        return 0  # only rank 0 prints; without a plugin the other tasks have nothing to do
    place = rank_place(env, layout.tasks, layout.procid) if live else None
    if place is not None and place.rank != 0:  # a live rank process: it runs every call, silently
        with open(os.devnull, "w", encoding="ascii") as quiet:
            return _run(binary, BINARY_COLLECTIVE[base], dataclasses.replace(options, json_path=None), sim, layout,
                        env, quiet, argv, place=place)
    return _run(binary, BINARY_COLLECTIVE[base], options, sim, layout, env, out, argv, place=place)


def _run(binary, collective, options, sim, layout, env, out, argv, *, place: RankPlace | None) -> int:
    ranks = layout.tasks * options.nthreads * options.ngpus
    host, pid = layout.hosts[0], os.getpid()
    per_node = -(-layout.tasks // layout.nodes) * options.nthreads * options.ngpus
    if per_node > sim.gpus_per_node:
        sys.stderr.write(f"Invalid number of GPUs: {per_node} requested but only {sim.gpus_per_node} were found.\n"
                         "Please check the number of processes and GPUs per process.\n")
        return 1
    quiet_rank = place is not None and place.rank != 0
    log = NcclLog(debug_config(env, host=host, pid=pid), host=host, pid=pid, stdout=sys.stderr if quiet_rank else out)
    ctx = _Context(binary, collective, options, sim, layout, ranks, host, pid, out, log, env)
    json_handle = json_doc = None
    if options.json_path:
        json_handle, _path = _open_json(options.json_path, out)
        if json_handle is not None:
            json_doc = {"version": 3, "start_time": _now(), "args": list(argv), "env": [f"{k}={v}" for k, v in env.items()],
                        "nccl_version": sim.spec.nccl_version_code, "simulator": SIMULATOR}
    seed = _seed(env, sim.name, binary, layout, ranks, argv)
    if place is not None and place.rank != 0:
        # Every rank process has its own noise; rank 0 keeps the step's, so steps that differ
        # only in plugin settings are served the same GPU times where they play the same arms.
        seed = derive_seed(seed, "rank", place.rank)
    proc = SimProcess(sim, nodes=layout.nodes, ranks=ranks, seed=seed)
    status = 0
    try:
        _write_header(ctx, json_doc)
        _write_init_log(ctx)
        if place is not None:
            ctx.plugin = _open_plugin(ctx, place, argv)
            _relay_plugin_log(ctx)
        header = report.column_header(per_iter=bool(options.per_iter_timing), cputime=bool(options.report_cputime),
                                      timestamps=bool(options.report_timestamps))
        out.writelines(line + "\n" for line in header)
        avg = _benchmark(ctx, proc, json_doc)
        out.writelines(line + "\n" for line in report.footer_lines(errors=0, avg_busbw=avg, program=binary))
        if json_doc is not None:
            json_doc["out_of_bounds"] = {"count": 0, "okay": True}
            json_doc["average_bus_bandwidth"] = {"bandwidth": avg, "okay": "unchecked"}
            json_doc["errors"] = [""]
    except LiveFailure as exc:
        status = _fail(ctx, TestFailure(f"'unhandled system error (run with NCCL_DEBUG=INFO for details) / {exc}'"))
    except TestFailure as exc:
        status = _fail(ctx, exc)
    finally:
        _close_plugin(ctx)
        log.close()
        out.flush()
        if json_handle is not None and json_doc is not None:
            json_doc["end_time"] = _now()
            json_handle.write(report.json_dumps(json_doc))
            json_handle.close()
    return status


def _fail(ctx: _Context, exc: TestFailure) -> int:
    """nccl-tests' failure lines; returns the exit status."""
    ctx.log.flush()
    ctx.out.write(f"{ctx.host}: Test NCCL failure common.cu:1279 {exc}\n")
    ctx.out.write(f" .. {ctx.host} pid {ctx.pid}: Test failure common.cu:1458\n")
    return 1


def _open_plugin(ctx: _Context, place: RankPlace, argv: list[str]) -> PluginHost:
    """This rank's communicator with the plugin; a failing init fails the test as NCCL's would."""
    env = ctx.env
    parts = (env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", ""), env.get("NCCLSWEEP_STEP_KEY", ""),
             ctx.binary, ctx.layout.nodes, ctx.ranks, *_seed_args(argv))
    try:
        host = open_host(env, ctx.fabric, nodes=ctx.layout.nodes, ranks=ctx.ranks, place=place, seed_parts=parts)
    except (HostError, NcclbotError) as exc:
        ctx.log.warn("init.cc:1641", str(exc))
        raise TestFailure(f"'internal error - please report this issue to the NCCL developers / {exc}'") from None
    return host


def _relay_plugin_log(ctx: _Context) -> None:
    """Move what the plugin logged into NCCL's log (INFO by subsystem flag, WARN as WARN)."""
    if ctx.plugin is None:
        return
    for record in ctx.plugin.take_log():
        if record.level <= 2:
            ctx.log.warn(record.where, record.message)
            continue
        subsystem = next((name for bit, name in enumerate(SUBSYSTEMS) if record.flags & (1 << bit)
                          and ctx.log.config.info(name)), None)
        if subsystem is not None:
            ctx.log.info(subsystem, record.message)


def _close_plugin(ctx: _Context) -> None:
    """Finalize the plugin in NCCL's order (tuner, then profiler) and keep its last words."""
    if ctx.plugin is None:
        return
    ctx.plugin.close()
    _relay_plugin_log(ctx)
    stats = ctx.plugin.stats()
    ctx.log.info("INIT", f"NCCLBOT-SIM: plugin host time {stats['host_ns'] / 1000.0:.1f} us in {stats['calls']} "
                         f"getCollInfo calls and {stats['collectives']} collectives' events (proxy thread "
                         f"{stats['proxy_ns'] / 1000.0:.1f} us, {stats['kernel_events']} kernel-channel events)")
    ctx.plugin = None


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
