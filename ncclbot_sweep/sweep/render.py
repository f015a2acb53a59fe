"""Job scripts: render each planned job into ``jobs/<job>/job.sh`` and describe each step in ``step.json``.

Every value that comes from an inventory or a campaign reaches the script through one
quoting rule (architecture section 4.4): the Jinja environment's ``finalize`` shell-quotes every
``{{ expression }}``, so a template cannot forget to quote. The only unquoted values are
those wrapped in :class:`_Raw` here after validation: environment variable *names*
(identifiers only) and ``#SBATCH`` values, which are not shell syntax; those refuse line
breaks and quotes (a line break in a ``#`` line would start a new command).

The script contract (architecture section 4; read by the executors and the parsers):

* one job = one allocation; each step runs one nccl-tests binary through the launcher
  (``srun`` inside the allocation) under ``timeout``, with its own environment
  (``NCCL_ALGO``/``NCCL_PROTO`` for forced arms, the plugin variables for live ones),
  ``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING`` and ``NCCL_DEBUG_FILE`` into the
  step's ``nccl.log`` (rank 0 only: a small ``bash -c`` wrapper gives the other ranks
  ``NCCL_DEBUG=WARN`` without a file, so ranks never truncate one shared file), stdout into
  ``stdout.txt``;
* per-iteration measurement: nccl-tests >= 2.19 runs ``-n <iters> -I 1 -J result.json``,
  older versions ``-n 1 -N <iters>`` (one printed cycle per iteration);
* the step's exit code is written into ``exit`` last; a step whose ``exit`` says 0 is
  skipped when the script runs again, so resuming never re-runs a finished step;
* provenance (hosts, GPUs, driver, versions, effective environment, NCCL config files,
  plugin checksum) is captured once per job into ``provenance.json``.

A tuning job (:func:`render_tune_script`, ``analyze tune -i``) follows the same rules with
one ``srun`` of ``ncclbot-sweep analyze tune`` per node instead of steps.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path, PurePath
from typing import Any

import jinja2
import pydantic

from ncclbot_sweep import __version__, pluginbuild
from ncclbot_sweep.atomicfile import write_atomic
from ncclbot_sweep.errors import RenderError
from ncclbot_sweep.paths import CampaignPaths, StepFiles, TuneJobFiles, slurm_output_pattern
from ncclbot_sweep.resources import resource_dir
from ncclbot_sweep.stepmeta import StepMeta
from ncclbot_sweep.sweep.plan import Job, Plan, Step
from ncclbot_sweep.sweep.inventory import Inventory, NodeSet, sbatch_value_problem
from ncclbot_sweep.sweep.jobspec import job_tag
from ncclbot_sweep.sweep.workload import extractor_args

__all__ = ["DEBUG_ENV", "TUNE_TEMPLATE", "render_campaign", "render_job_script", "render_tune_script", "step_metadata",
           "template_name"]

log = logging.getLogger(__name__)

#: NCCL logging every step gets (the parsers read the TUNING tables and per-call choices).
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SBATCH_PLAIN = re.compile(r"^[A-Za-z0-9_.,:@%=+/\-\[\]^*|&!]+$")


class _Raw(str):
    """A string emitted verbatim; only this module creates them, after validation."""


def _finalize(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if value is None:
        raise RenderError("a template value is missing (None); the template must not print it")
    return shlex.quote(str(value))


def _env_name(name: str) -> _Raw:
    if not _NAME.match(name):
        raise RenderError(f"environment variable name {name!r} is not an identifier",
                          hint="use letters, digits and '_' only")
    return _Raw(name)


def _sbatch(value: Any, what: str) -> _Raw:
    """A value for an ``#SBATCH`` line: plain, double-quoted when it has spaces, else refused."""
    text = str(value)
    if _SBATCH_PLAIN.match(text):
        return _Raw(text)
    problem = sbatch_value_problem(text)
    if problem:
        raise RenderError(f"{what} {text!r} {problem}", hint=f"fix {what} in the inventory")
    return _Raw(f'"{text}"')


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


#: The template of a tuning job (``analyze tune -i``): one ``analyze tune`` per node.
TUNE_TEMPLATE = "job-tune.sh.j2"


def template_name(kind: str) -> str:
    """The template of a campaign kind: ``forced``, ``live``, ``stock``, ``overhead`` or ``workload``."""
    return f"job-{kind}.sh.j2"


def _output_lines(job_dir: PurePath) -> list[str]:
    """``--output``/``--error`` into the job's folder, so a script submitted by hand (``sbatch job.sh``
    after ``render``) logs there too; none, with a warning, when the folder's path cannot go on an
    ``#SBATCH`` line (the executor passes ``--output`` on sbatch's command line anyway)."""
    pattern = slurm_output_pattern(job_dir)
    if sbatch_value_problem(pattern):
        log.warning("%s cannot go on an #SBATCH line (quotes, '$', a line break): a hand-submitted job.sh logs "
                    "where sbatch runs", job_dir)
        return []
    value = _sbatch(pattern, "job folder")
    return [f"--output={value}", f"--error={value}"]


def _sbatch_lines(plan: Plan, job: Job, job_dir: PurePath) -> list[_Raw]:
    inv, sched = plan.inventory, plan.inventory.scheduler
    node_set = inv.node_set(job.node_set)
    tag = job_tag(plan.campaign_key, job.key)
    lines = [f"--job-name={_sbatch(plan.job_name(job.key), 'job name')}", f"--comment={_sbatch(tag, 'job tag')}",
             f"--nodes={job.nodes}", f"--ntasks-per-node={inv.gpus_per_node}"]
    if sched.request_gpus:
        lines.append(f"--gpus-per-node={inv.gpus_per_node}")
    lines.append(f"--time={job.time_limit_min}")
    lines += _output_lines(job_dir)
    lines += _placement_lines(inv, node_set)
    segment = node_set.segment(job.nodes)
    if segment:
        lines.append(f"--segment={segment}")
    for extra in sched.extra_sbatch:
        lines.append(str(_sbatch(extra, "scheduler.extra_sbatch")))
    return [_Raw(line) for line in lines]


def _placement_lines(inv: Inventory, node_set: NodeSet) -> list[str]:
    """Where a job may run: partition, account, QOS, reservation, constraints, exclusions, node list."""
    sched = inv.scheduler
    lines = []
    for option, value in (("partition", sched.partition), ("account", sched.account), ("qos", sched.qos),
                          ("reservation", sched.reservation)):
        if value:
            lines.append(f"--{option}={_sbatch(value, 'scheduler.' + option)}")
    constraints = [c for c in (sched.constraint, node_set.constraint) if c]
    if constraints:
        joined = "&".join(f"({c})" if "|" in c else c for c in constraints)
        lines.append(f"--constraint={_sbatch(joined, 'constraint')}")
    excluded = list(sched.exclude) + list(node_set.exclude)
    if excluded:
        lines.append(f"--exclude={_sbatch(','.join(excluded), 'exclude')}")
    if node_set.nodelist:
        lines.append(f"--nodelist={_sbatch(node_set.nodelist, 'node_sets.nodelist')}")
    return lines


def _launch_words(plan: Plan, job: Job, *, per_node: int | None = None) -> list[str]:
    """The launcher command before the binary (each word quoted by the template): ``per_node`` tasks
    per node (default one per GPU)."""
    inv, launcher = plan.inventory, plan.inventory.launcher
    per_node = per_node or inv.gpus_per_node
    ranks = job.nodes * per_node
    if launcher.kind == "mpirun":
        return ["mpirun", "-np", str(ranks), "--map-by", f"ppr:{per_node}:node",
                *launcher.mpirun_flags]
    words = ["srun", f"--nodes={job.nodes}", f"--ntasks={ranks}", f"--ntasks-per-node={per_node}"]
    if launcher.mpi:
        words.append(f"--mpi={launcher.mpi}")
    if launcher.container:
        words.append(f"--container-image={launcher.container.image}")
        if launcher.container.mounts:
            words.append(f"--container-mounts={','.join(launcher.container.mounts)}")
        words += launcher.container.flags
    return words + list(launcher.flags)


def _workload_fields(plan: Plan, job: Job, step: Step) -> dict[str, Any]:
    """A workload step's command in place of nccl-tests, its tasks per node, and how its step times are read."""
    spec = plan.campaign.workload
    if spec is None:
        return {}
    return {"binary": step.command[0], "args": list(step.command[1:]), "json": False,
            "launch": _launch_words(plan, job, per_node=spec.tasks_per_node),
            "extract": extractor_args(spec), "wall": spec.step_time.wall, "kineto": spec.step_time.kineto}


def _binary_path(plan: Plan, step: Step) -> str:
    """The nccl-tests executable of a step (``sim`` resolves to the simulator's folder)."""
    return str(PurePath(plan.inventory.nccl_tests.resolved_bin_dir()) / step.binary)


def step_metadata(plan: Plan, job: Job, *, step: Step) -> dict[str, Any]:
    """What ``step.json`` says of a step, through the model ingest reads it with (:mod:`ncclbot_sweep.stepmeta`)."""
    inv = plan.inventory
    env = dict(inv.environment) | dict(step.env) | DEBUG_ENV
    fields = {
        "schema": 1, "writer": f"ncclbot-sweep {__version__}",
        "campaign": plan.campaign.name, "campaign_key": plan.campaign_key, "job_key": job.key,
        "step_key": step.key, "fabric": inv.name, "synthetic": inv.synthetic, "kind": step.kind,
        "collective": step.collective, "binary": step.binary, "nodes": step.nodes,
        "gpus_per_node": step.gpus_per_node, "ranks": step.ranks, "node_set": step.node_set,
        "arm": None if step.arm is None else str(step.arm), "policy": step.policy, "plugin": step.plugin,
        "variant": step.variant, "repeat": step.repeat, "sizes": step.sizes, "iterations": step.iterations or None,
        "warmup": step.warmup, "dtype": step.dtype, "op": step.op, "timeout_s": step.timeout_s, "env": env,
        "per_iteration": "json" if inv.nccl_tests.per_iteration_json else "cycles",
        "nccl_log_rank": 0,  # other ranks log NCCL warnings only, to their stderr
        "nccl_tests_version": inv.nccl_tests.version, "nccl_version": inv.nccl.version,
        "plugin_path": inv.plugin.resolved_path() if step.plugin else None,
        "plugin_version": inv.plugin.version if step.plugin else None,
        "command": list(step.command) or None,
    }
    if step.command:  # a workload run: no collective, binary, data type or nccl-tests version
        fields.update(collective=None, dtype=None, op=None, per_iteration=None, nccl_tests_version=None)
    try:
        return StepMeta.model_validate(fields).as_dict()
    except pydantic.ValidationError as exc:  # the plan was validated: a field out of step.json's range is a bug
        raise RenderError(f"step {step.key} ({step.label}) cannot be described in step.json: {exc}",
                          hint="report this as a bug, with the campaign and inventory") from exc


def _file_names() -> dict[str, _Raw]:
    """The step and job file names of :mod:`ncclbot_sweep.paths`, for the templates."""
    step = StepFiles(PurePath("."))
    job = CampaignPaths(PurePath("."))
    names = {"exit": step.exit_marker, "stdout": step.stdout, "stderr": step.stderr, "nccl_log": step.nccl_log,
             "result": step.result_json, "trace": step.trace_dir, "workload_steps": step.workload_steps,
             "kineto": step.kineto_dir, "job_log": job.job_log("j"),
             "provenance": job.provenance("j"), "coordinator_log": job.coordinator_log("j")}
    out = {}
    for key, path in names.items():
        if not re.match(r"^[A-Za-z0-9._-]+$", path.name):
            raise RenderError(f"file name {path.name!r} is not plain")
        out[key] = _Raw(path.name)
    return out


def _plugin_file(value: str | None, resolve, job: Job) -> str | None:
    """A plugin file the job script names; ``bundled`` becomes the built file's absolute path, resolved
    only for jobs that load the plugin (a forced sweep on a sim inventory must not need a C compiler)."""
    if value != pluginbuild.BUNDLED:
        return value
    return resolve() if any(step.plugin for step in job.steps) else None


def render_job_script(plan: Plan, job: Job, *, run_root: PurePath) -> str:
    """The text of ``job.sh`` for ``job``, with the campaign folder at ``run_root`` where it runs."""
    inv = plan.inventory
    paths = CampaignPaths(run_root)
    steps = []
    for step in job.steps:
        steps.append({
            "key": step.key, "label": step.label, "dir": str(paths.step_dir(job.key, step.key)),
            "env": [(_env_name(k), v) for k, v in step.env.items()], "plugin": step.plugin,
            "forced": step.arm is not None,
            "timeout_s": step.timeout_s, "launch": _launch_words(plan, job),
            **(_workload_fields(plan, job, step) or {"binary": _binary_path(plan, step), "args": list(step.args),
                                                "json": inv.nccl_tests.per_iteration_json}),
        })
    context = {
        "campaign": plan.campaign.name, "campaign_key": plan.campaign_key, "job_key": job.key,
        "tag": job_tag(plan.campaign_key, job.key), "fabric": inv.name, "version": __version__,
        "sbatch": _sbatch_lines(plan, job, paths.job_dir(job.key)), "job_dir": str(paths.job_dir(job.key)),
        "fabric_env": [(_env_name(k), v) for k, v in inv.environment.items()],
        "debug_env": [(_env_name(k), v) for k, v in DEBUG_ENV.items()],
        "nccl_lib_dir": inv.nccl.lib_dir, "nccl_version": inv.nccl.version or "",
        "nccl_tests_version": inv.nccl_tests.version, "plugin_path": _plugin_file(inv.plugin.path, inv.plugin.resolved_path, job) or "",
        "plugin_version": inv.plugin.version or "", "coordinator": _plugin_file(inv.plugin.coordinator, inv.plugin.resolved_coordinator, job), "steps": steps, "nodes": job.nodes, "f": _file_names(),
    }
    try:
        return _environment().get_template(template_name(plan.campaign.kind)).render(context)
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {template_name(plan.campaign.kind)} failed: {exc}",
                          hint="the templates ship with the package; reinstall or report a bug") from exc


def render_tune_script(inventory: Inventory, *, name: str, campaign_key: str, job_key: str, run_dir: PurePath,
                       nodes: int, workers: int, command: list[str]) -> str:
    """The text of a tuning job's ``job.sh``: ``command`` once per node (``srun``), in ``run_dir``.

    The job asks for ``nodes`` nodes, one task each with ``workers`` CPUs, the inventory's
    time limit (its upper bound: tuning has no estimate) and placement (partition, account,
    QOS, reservation, the default node set, extra ``#SBATCH`` lines), and no GPUs. Every word
    of ``command`` is shell-quoted like any other value.
    """
    sched = inventory.scheduler
    tag = job_tag(campaign_key, job_key)
    lines = [f"--job-name={_sbatch(name, 'job name')}", f"--comment={_sbatch(tag, 'job tag')}", f"--nodes={nodes}",
             "--ntasks-per-node=1", f"--cpus-per-task={workers}", f"--time={sched.time_limit_min}",
             *_output_lines(run_dir), *_placement_lines(inventory, inventory.node_set(None)),
             *(str(_sbatch(extra, "scheduler.extra_sbatch")) for extra in sched.extra_sbatch)]
    files = TuneJobFiles(PurePath("."))
    names = {"job_log": files.job_log, "provenance": files.provenance, "workers": files.workers_dir}
    context = {
        "sbatch": [_Raw(line) for line in lines], "job_dir": str(run_dir), "name": name, "campaign_key": campaign_key,
        "job_key": job_key, "fabric": inventory.name, "version": __version__, "nodes": nodes, "workers": workers,
        "command": list(command), "nccl_version": "", "nccl_tests_version": "", "plugin_path": "", "plugin_version": "",
        "f": {key: _Raw(path.name) for key, path in names.items()},
    }
    try:
        return _environment().get_template(TUNE_TEMPLATE).render(context)
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {TUNE_TEMPLATE} failed: {exc}",
                          hint="the templates ship with the package; reinstall or report a bug") from exc


def _write_if_changed(path: Path, text: str, mode: int | None = None) -> bool:
    if path.is_file() and path.read_bytes() == text.encode("utf-8"):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=mode)
    return True


def render_campaign(plan: Plan, local_root: Path, *, run_root: PurePath | None = None) -> list[Path]:
    """Write every job's ``job.sh`` and every step's ``step.json`` under ``local_root``.

    ``run_root`` is where the folder lives when the jobs run (the cluster's shared file
    system); it defaults to ``local_root``. Idempotent: unchanged files are not rewritten.
    Returns the job script paths in plan order.
    """
    local = CampaignPaths.local(local_root)
    run_root = run_root if run_root is not None else Path(local_root).resolve()
    scripts = []
    for job in plan.jobs:
        script = Path(local.job_script(job.key))
        _write_if_changed(script, render_job_script(plan, job, run_root=run_root), 0o755)
        for step in job.steps:
            meta = json.dumps(step_metadata(plan, job, step=step), indent=2, sort_keys=True) + "\n"
            _write_if_changed(Path(local.step_files(job.key, step.key).meta), meta)
        scripts.append(script)
    log.info("rendered %d job scripts into %s", len(scripts), local_root)
    return scripts
