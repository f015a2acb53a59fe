#!/bin/bash
#SBATCH --job-name=golden-workload-workload-4n
#SBATCH --comment=ncclbot:6842708ec710c377:7756da48effbcc4f
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=122
#SBATCH --output=/shared/campaigns/golden/jobs/7756da48effbcc4f/slurm-%j.out
#SBATCH --error=/shared/campaigns/golden/jobs/7756da48effbcc4f/slurm-%j.out
#SBATCH --partition=h100
#SBATCH --account=perf
#SBATCH --exclusive
#SBATCH --wait-all-nodes=1
# ncclbot-sweep job script (rendered by ncclbot-sweep; edit the campaign or inventory, not this file).
# Our own variables are NCCLSWEEP_*: the plugin refuses unknown NCCLBOT_* variables.
set -u
umask 022
JOB_DIR=/shared/campaigns/golden/jobs/7756da48effbcc4f
export NCCLSWEEP_CAMPAIGN=golden-workload
export NCCLSWEEP_CAMPAIGN_KEY=6842708ec710c377
export NCCLSWEEP_JOB_KEY=7756da48effbcc4f
mkdir -p "$JOB_DIR/steps" || exit 1
exec >>"$JOB_DIR/job.log" 2>&1
echo "[ncclbot] job $NCCLSWEEP_JOB_KEY starting on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ) (Slurm job ${SLURM_JOB_ID:-none})"

# Fabric environment from the inventory.
export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1
export NCCL_IB_GID_INDEX=3
export NCCL_IB_ROCE_VERSION_NUM=2
export NCCL_IB_TC=106
export NCCL_IB_SL=3
export NCCL_IB_ADAPTIVE_ROUTING=1
export NCCL_IB_QPS_PER_CONNECTION=2
export NCCL_IB_SPLIT_DATA_ON_QPS=0
export NCCL_SOCKET_IFNAME=bond0
export NCCL_NET_GDR_LEVEL=PHB
export LD_LIBRARY_PATH=/opt/nccl/lib"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Rank 0 writes NCCL's INFO log into the step's nccl.log; the other ranks log warnings only, to
# their stderr, so that many ranks never truncate and interleave one shared file.
NCCLSWEEP_RANK_WRAPPER='if [ "${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}" != 0 ]; then export NCCL_DEBUG=WARN; unset NCCL_DEBUG_FILE; fi; exec "$@"'

# A step is done when its exit marker says 0, unless the runner asks for it again
# ($NCCLSWEEP_RERUN: step keys whose exit 0 came with no usable result).
ncclbot_step_done() {
    case ":${NCCLSWEEP_RERUN:-}:" in *":$2:"*) return 1 ;; esac
    [ -f "$1/exit" ] && [ "$(cat "$1/exit")" = 0 ]
}

ncclbot_provenance() {
    # Captured once per job: hosts, GPUs and driver, versions, effective environment,
    # NCCL config files and the plugin checksum. Written atomically.
    local out="$JOB_DIR/provenance.json"
    [ -s "$out" ] && return 0
    local hosts="${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-$(hostname)}}"
    if command -v scontrol >/dev/null 2>&1 && [ -n "${SLURM_JOB_NODELIST:-}" ]; then
        hosts="$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | paste -sd, -)" || true
    fi
    local gpus=""
    if command -v nvidia-smi >/dev/null 2>&1; then
        gpus="$(nvidia-smi --query-gpu=index,name,driver_version,uuid,pci.bus_id --format=csv,noheader 2>/dev/null)" || true
    fi
    local plugin_sha=""
    if [ -n "$NCCLSWEEP_PROV_PLUGIN_PATH" ] && [ -f "$NCCLSWEEP_PROV_PLUGIN_PATH" ]; then
        plugin_sha="$(sha256sum "$NCCLSWEEP_PROV_PLUGIN_PATH" | cut -d' ' -f1)"
    fi
    NCCLSWEEP_PROV_HOSTS="$hosts" NCCLSWEEP_PROV_GPUS="$gpus" NCCLSWEEP_PROV_PLUGIN_SHA="$plugin_sha" \
    python3 - "$out.tmp" <<'PY' && mv -f "$out.tmp" "$out"
import datetime, json, os, platform, socket, sys
env = os.environ
prefixes = ("NCCL", "NCCLSWEEP_", "SLURM_", "UCX_", "FI_", "NVIDIA_", "CUDA_", "LD_LIBRARY_PATH", "PMIX_", "OMPI_")
conf = {}
for path in ["/etc/nccl.conf", os.path.expanduser("~/.nccl.conf"), env.get("NCCL_CONF_FILE", "")]:
    if path and os.path.isfile(path):
        try:
            conf[path] = open(path, encoding="utf-8", errors="replace").read()
        except OSError as exc:
            conf[path] = f"<unreadable: {exc}>"
data = {
    "campaign": env.get("NCCLSWEEP_CAMPAIGN"), "campaign_key": env.get("NCCLSWEEP_CAMPAIGN_KEY"),
    "job_key": env.get("NCCLSWEEP_JOB_KEY"), "fabric": env.get("NCCLSWEEP_PROV_FABRIC"),
    "captured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    "slurm_job_id": env.get("SLURM_JOB_ID"), "nodes": env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"),
    "batch_host": socket.gethostname(), "kernel": platform.release(),
    "hosts": [h for h in env.get("NCCLSWEEP_PROV_HOSTS", "").split(",") if h],
    "gpus": [line.strip() for line in env.get("NCCLSWEEP_PROV_GPUS", "").splitlines() if line.strip()],
    "nccl_version": env.get("NCCLSWEEP_PROV_NCCL_VERSION") or None,
    "nccl_tests_version": env.get("NCCLSWEEP_PROV_NCCL_TESTS_VERSION") or None,
    "plugin_path": env.get("NCCLSWEEP_PROV_PLUGIN_PATH") or None,
    "plugin_version": env.get("NCCLSWEEP_PROV_PLUGIN_VERSION") or None,
    "plugin_sha256": env.get("NCCLSWEEP_PROV_PLUGIN_SHA") or None,
    "nccl_config_files": conf,
    "environment": {k: v for k, v in sorted(env.items()) if k.startswith(prefixes) and not k.startswith("NCCLSWEEP_PROV_")},
    "writer": env.get("NCCLSWEEP_PROV_WRITER"),
}
with open(sys.argv[1], "w", encoding="utf-8") as fh:
    json.dump(data, fh, indent=2, sort_keys=True)
PY
}

NCCLSWEEP_PROV_FABRIC=h100-spectrumx \
NCCLSWEEP_PROV_NCCL_VERSION=2.30.4 \
NCCLSWEEP_PROV_NCCL_TESTS_VERSION=2.19.6 \
NCCLSWEEP_PROV_PLUGIN_PATH=/opt/ncclbot/lib/libnccl-ncclbot.so \
NCCLSWEEP_PROV_PLUGIN_VERSION=0.1.0 \
NCCLSWEEP_PROV_WRITER='ncclbot-sweep 0.1.0' \
ncclbot_provenance || echo "[ncclbot] warning: provenance capture failed (python3 missing?)"

# Exit 3 with one line naming the first call two ranks played differently (templates/trace_check.py).
ncclbot_check_arms() {
    python3 - "$1" <<'PY'
"""Fail a live step whose ranks played different arms on the same call (stdlib only).

The live job script runs this after every step that loads the plugin, on the node that ran
it (a cluster's compute node has python3 but maybe not ncclbot-sweep): ``python3 - TRACE_DIR``
with this file as the program. It reads every rank's plugin trace
(``ncclbot-<comm>-r<rank>.csv``, architecture section 8), keys each ``pull`` row by
(communicator, collective, size, pull index) and compares the arm across ranks. Different
ranks playing different arms would hang a real NCCL job (NVIDIA/nccl#1136); the simulator
would not hang, so this check is what catches it. Exit 0 when every shared call agrees (or
there is nothing to compare), 3 with one line naming the first divergent call otherwise.
"""

import csv
import os
import re
import sys

_NAME = re.compile(r"^ncclbot-([0-9a-fA-F]+)-r(\d+)\.csv$")
DIVERGED = 3


def read_pulls(path):
    """The ``pull`` rows of one trace, in file order: [((collective, size, pull), arm), ...]."""
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        lines = (line for line in fh if not line.startswith("#"))
        for row in csv.DictReader(lines):
            if row.get("kind") == "pull" and row.get("arm"):
                rows.append(((row["collective"], int(row["size_bytes"]), int(row["pull"])), row["arm"]))
    return rows


def first_divergence(trace_dir):
    """A message naming the first call two ranks played differently, or None."""
    comms = {}
    for name in sorted(os.listdir(trace_dir)):
        match = _NAME.match(name)
        if match:
            comms.setdefault(match.group(1), {})[int(match.group(2))] = os.path.join(trace_dir, name)
    for comm, files in sorted(comms.items()):
        ranks = sorted(files)
        if len(ranks) < 2:
            continue
        reference = read_pulls(files[ranks[0]])
        others = {rank: dict(read_pulls(files[rank])) for rank in ranks[1:]}
        for call, (key, arm) in enumerate(reference):
            for rank, played in others.items():
                theirs = played.get(key)
                if theirs is not None and theirs != arm:
                    collective, size, pull = key
                    return (f"ranks diverged on communicator {comm}: {collective} of {size} bytes, pull {pull} "
                            f"(call {call} of rank {ranks[0]}'s trace): rank {ranks[0]} played {arm}, "
                            f"rank {rank} played {theirs}")
    return None


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: trace_check.py TRACE_DIR\n")
        return 2
    if not os.path.isdir(argv[1]):
        return 0
    message = first_divergence(argv[1])
    if message is None:
        return 0
    print(message)
    return DIVERGED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
PY
}
# The plugin's coordinator keeps every rank's bandit state identical (plugin/README.md); the
# token comes from the environment. On Slurm it listens on 20000+jobid%20000 of the batch host,
# where the ranks find it ($SLURM_LAUNCH_NODE_IPADDR); the local executor has it on loopback, any
# free port, and tells the ranks which. No step starts before it listens: if it never does, each
# step that loads the plugin fails, saying why.
export NCCLBOT_SYNC_TOKEN="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
ncclbot_listen="${NCCLSWEEP_COORDINATOR_LISTEN:-0.0.0.0:$((20000 + ${SLURM_JOB_ID:-0} % 20000))}"
ncclbot_coordinator_log="$JOB_DIR/coordinator.log"
ncclbot_from=$(( $(stat -c %s "$ncclbot_coordinator_log" 2>/dev/null || echo 0) + 1 ))
/opt/ncclbot/bin/ncclbot-coordinator --listen "$ncclbot_listen" >>"$ncclbot_coordinator_log" 2>&1 &
ncclbot_coordinator=$!
trap 'kill "$ncclbot_coordinator" 2>/dev/null' EXIT
ncclbot_listening=""
for _ in $(seq 600); do
    ncclbot_listening="$(tail -c "+$ncclbot_from" "$ncclbot_coordinator_log" 2>/dev/null | sed -n 's/^listening on //p' | head -n 1)"
    if [ -n "$ncclbot_listening" ] || ! kill -0 "$ncclbot_coordinator" 2>/dev/null; then break; fi
    sleep 0.05
done
ncclbot_no_coordinator=""
if [ -n "$ncclbot_listening" ]; then
    echo "[ncclbot] coordinator listening on $ncclbot_listening"
    if [ -n "${NCCLSWEEP_COORDINATOR_LISTEN:-}" ]; then export NCCLBOT_SYNC_ADDR="$ncclbot_listening"; fi
else
    ncclbot_said="$(tail -c "+$ncclbot_from" "$ncclbot_coordinator_log" 2>/dev/null | tail -n 1)"
    ncclbot_no_coordinator="the ncclbot coordinator cannot listen on $ncclbot_listen: ${ncclbot_said:-it did not say it listens within 30 s} (see coordinator.log)"
    echo "[ncclbot] $ncclbot_no_coordinator; the steps that load the plugin fail"
fi
# Write the run's step times into $STEP_DIR/workload_steps.csv, or exit 4 saying why there are none.
ncclbot_step_times() {
    python3 - "$@" <<'PY'
"""Read a workload run's step times and write them as ``workload_steps.csv`` (stdlib only).

The workload job script runs this on the node right after the user's command exited 0
(``python3 - ARGS`` with this file as the program; a compute node has python3 but maybe not
ncclbot-sweep), with one source of step times (``ncclbot_sweep/sweep/workload.py``):

* ``--regex R --stdout FILE``: every line of the command's stdout (``\\r``-separated progress
  bar updates too) that ``R`` matches is a step; its time is the named group ``us``, ``ms`` or
  ``s``, or ``per_s`` (a rate); a group ``step`` numbers steps (a number seen again replaces
  the earlier line: progress bars redraw);
* ``--kineto DIR``: the ``ProfilerStep#N`` spans of every Kineto trace under DIR (``*.json``,
  ``*.json.gz``), per step the longest over the traces (the slowest rank);
* ``--wall-ns N``: the command's wall time, one step.

The CSV (``# ncclbot-workload-steps v1``, then ``source,step,step_time_s,warmup,line,text``)
has one row per step, the first ``--warmup`` flagged; ingest turns it into the
``workload_steps`` table. Exit 0; 4 with one ``error: no step time`` line on stderr naming what
was looked for and what was seen (the first lines of stdout) when no step is left after the
warm-up; 2 on bad arguments.
"""

import argparse
import csv
import gzip
import json
import math
import os
import re
import sys

NO_STEP_TIME = 4
HEADER = "# ncclbot-workload-steps v1"
COLUMNS = ("source", "step", "step_time_s", "warmup", "line", "text")
UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_SHOWN = 5  # lines of stdout a failure quotes


class NoStepTime(Exception):
    """The run printed no usable step time; the message says what was seen."""


def _seconds(match):
    """The step time (s) a match captured, or None when its time group is empty."""
    groups = match.groupdict()
    for name, unit in UNITS.items():
        if groups.get(name) is not None:
            return float(groups[name]) * unit
    if groups.get("per_s") is not None:
        rate = float(groups["per_s"])
        return 1.0 / rate if rate else math.inf
    return None


def from_regex(text, regex):
    """[(step key, seconds, line number, text)] in the order steps first appear; a step number seen
    again keeps its place and takes the later line (a progress bar redrawn)."""
    pattern = re.compile(regex)
    found = {}
    for number, physical in enumerate(text.split("\n"), 1):
        for piece in physical.split("\r"):
            match = pattern.search(piece)
            seconds = _seconds(match) if match else None
            if seconds is None:
                continue
            step = match.groupdict().get("step")
            key = int(step) if step is not None and step.isdigit() else ("match", len(found))
            found[key] = (key, seconds, number, piece.strip()[:500])
    return list(found.values())


def _trace_files(folder):
    for root, _dirs, names in sorted(os.walk(folder)):
        for name in sorted(names):
            if name.endswith((".json", ".json.gz")):
                yield os.path.join(root, name)


def from_kineto(folder):
    """[(step number, seconds, None, text)]: per ProfilerStep#N the longest span over the traces."""
    longest = {}
    for path in _trace_files(folder):
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        except (ValueError, OSError, EOFError) as exc:
            sys.stderr.write(f"step_times: {path}: not a readable trace ({exc}); skipped\n")
            continue
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        for event in events if isinstance(events, list) else []:
            name = str(event.get("name", "")) if isinstance(event, dict) else ""
            if not name.startswith("ProfilerStep#") or not name[13:].isdigit():
                continue
            try:
                seconds = float(event.get("dur")) * 1e-6
            except (TypeError, ValueError):
                continue
            step = int(name[13:])
            if step not in longest or seconds > longest[step][1]:
                longest[step] = (step, seconds, None, f"{os.path.basename(path)}: {name}")
    return [longest[step] for step in sorted(longest)]


def _first_lines(text):
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    shown = " | ".join(repr(line[:80]) for line in lines[:_SHOWN])
    return f"{len(lines)} non-empty line(s); the first: {shown}" if lines else "stdout was empty"


def read_steps(args):
    """The rows of the CSV; raises NoStepTime with the reason."""
    if args.wall_ns is not None:
        return [(0, args.wall_ns * 1e-9, None, "wall time of the command")]
    if args.kineto is not None:
        rows = from_kineto(args.kineto) if os.path.isdir(args.kineto) else []
        if not rows:
            count = len(list(_trace_files(args.kineto))) if os.path.isdir(args.kineto) else 0
            raise NoStepTime(f"no ProfilerStep#N span in the {count} Kineto trace(s) under {args.kineto} (the "
                             "command must write its torch.profiler traces into $NCCLSWEEP_KINETO_DIR)")
        return rows
    with open(args.stdout, "rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    rows = from_regex(text, args.regex)
    if not rows:
        raise NoStepTime(f"step-time pattern {args.source} matched no line of {os.path.basename(args.stdout)} "
                         f"({_first_lines(text)})")
    return rows


def write_csv(path, source, rows, warmup):
    measured = 0
    with open(path + ".tmp", "w", newline="", encoding="utf-8") as fh:
        fh.write(HEADER + "\n")
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for index, (_key, seconds, line, text) in enumerate(rows):
            is_warmup = index < warmup
            measured += not is_warmup and math.isfinite(seconds) and seconds > 0
            writer.writerow((source, index, repr(seconds), int(is_warmup), "" if line is None else line, text))
    os.replace(path + ".tmp", path)
    return measured


def main(argv):
    parser = argparse.ArgumentParser(prog="step_times.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--regex")
    parser.add_argument("--stdout")
    parser.add_argument("--kineto")
    parser.add_argument("--wall-ns", type=int)
    args = parser.parse_args(argv[1:])
    if sum(x is not None for x in (args.regex, args.kineto, args.wall_ns)) != 1 or (args.regex and not args.stdout):
        parser.error("give one of --regex R --stdout FILE, --kineto DIR, --wall-ns N")
    try:
        rows = read_steps(args)
    except NoStepTime as exc:
        sys.stderr.write(f"error: no step time: {exc}\n")
        return NO_STEP_TIME
    measured = write_csv(args.out, args.source, rows, args.warmup)
    if not measured:
        sys.stderr.write(f"error: no step time: the run printed {len(rows)} step(s), none after the "
                         f"{args.warmup} warm-up step(s) with a time above 0 (raise the command's steps or lower "
                         "workload.warmup_steps)\n")
        return NO_STEP_TIME
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
PY
}
ncclbot_failed=0

# ---- step 1/2: 287f226de159266b
STEP_DIR=/shared/campaigns/golden/jobs/7756da48effbcc4f/steps/287f226de159266b
if ncclbot_step_done "$STEP_DIR" 287f226de159266b; then
    echo "[ncclbot] step "287f226de159266b" already finished, skipped"
else
    mkdir -p "$STEP_DIR"
    rm -f "$STEP_DIR/exit" "$STEP_DIR/result.json" "$STEP_DIR"/result.json.* "$STEP_DIR/nccl.log" "$STEP_DIR/stdout.txt" "$STEP_DIR/stderr.txt"
    echo "[ncclbot] step "287f226de159266b" ("'workload 4n policy stock'") starting at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    rm -rf "$STEP_DIR/workload_steps.csv" "$STEP_DIR/kineto"
    ncclbot_started_ns="$(date +%s%N)"
    (
        unset NCCL_ALGO NCCL_PROTO NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
        mkdir -p "$STEP_DIR/kineto"
        export NCCLSWEEP_KINETO_DIR="$STEP_DIR/kineto"
        export NCCL_DEBUG=INFO
        export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
        export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"
        export NCCLSWEEP_STEP_KEY=287f226de159266b
        exec timeout --kill-after=30 3600 srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank torchrun --nproc-per-node=8 train.py --log-interval 1 >"$STEP_DIR/stdout.txt" 2>"$STEP_DIR/stderr.txt"
    )
    rc=$?
    if [ "$rc" = 0 ]; then
        ncclbot_step_times --out "$STEP_DIR/workload_steps.csv" --source megatron --warmup 10 --regex 'iteration\s+(?P<step>\d+)/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*(?P<ms>[0-9]*\.?[0-9]+)' --stdout "$STEP_DIR/stdout.txt" 2>>"$STEP_DIR/stderr.txt" || {
            rc=$?
            echo "[ncclbot] step "287f226de159266b": $(tail -n 1 "$STEP_DIR/stderr.txt")"
        }
    fi
    echo "$rc" >"$STEP_DIR/exit.tmp" && mv -f "$STEP_DIR/exit.tmp" "$STEP_DIR/exit"
    echo "[ncclbot] step "287f226de159266b" finished with exit code $rc"
    [ "$rc" = 0 ] || ncclbot_failed=$((ncclbot_failed + 1))
fi

# ---- step 2/2: c4d0c1efc2e12f6d
STEP_DIR=/shared/campaigns/golden/jobs/7756da48effbcc4f/steps/c4d0c1efc2e12f6d
if ncclbot_step_done "$STEP_DIR" c4d0c1efc2e12f6d; then
    echo "[ncclbot] step "c4d0c1efc2e12f6d" already finished, skipped"
else
    mkdir -p "$STEP_DIR"
    rm -f "$STEP_DIR/exit" "$STEP_DIR/result.json" "$STEP_DIR"/result.json.* "$STEP_DIR/nccl.log" "$STEP_DIR/stdout.txt" "$STEP_DIR/stderr.txt"
    echo "[ncclbot] step "c4d0c1efc2e12f6d" ("'workload 4n policy ucb1'") starting at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    rm -rf "$STEP_DIR/workload_steps.csv" "$STEP_DIR/kineto"
    ncclbot_started_ns="$(date +%s%N)"
    (
        unset NCCL_ALGO NCCL_PROTO NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
        if [ -n "$ncclbot_no_coordinator" ]; then echo "$ncclbot_no_coordinator" >"$STEP_DIR/stderr.txt"; exit 1; fi
        export NCCL_TUNER_PLUGIN=/opt/ncclbot/lib/libnccl-ncclbot.so
        export NCCL_PROFILER_PLUGIN=/opt/ncclbot/lib/libnccl-ncclbot.so
        export NCCLBOT_POLICY=ucb1
        rm -rf "$STEP_DIR/trace" && mkdir -p "$STEP_DIR/trace"
        export NCCLBOT_TRACE_DIR="$STEP_DIR/trace"
        mkdir -p "$STEP_DIR/kineto"
        export NCCLSWEEP_KINETO_DIR="$STEP_DIR/kineto"
        export NCCL_DEBUG=INFO
        export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
        export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"
        export NCCLSWEEP_STEP_KEY=c4d0c1efc2e12f6d
        exec timeout --kill-after=30 3600 srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank torchrun --nproc-per-node=8 train.py --log-interval 1 >"$STEP_DIR/stdout.txt" 2>"$STEP_DIR/stderr.txt"
    )
    rc=$?
    # Every rank must have played the same arm on every call.
    if [ "$rc" = 0 ]; then
        ncclbot_diverged="$(ncclbot_check_arms "$STEP_DIR/trace")" || {
            rc=3
            echo "[ncclbot] step "c4d0c1efc2e12f6d": $ncclbot_diverged"
            echo "$ncclbot_diverged" >>"$STEP_DIR/stderr.txt"
        }
    fi
    if [ "$rc" = 0 ]; then
        ncclbot_step_times --out "$STEP_DIR/workload_steps.csv" --source megatron --warmup 10 --regex 'iteration\s+(?P<step>\d+)/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*(?P<ms>[0-9]*\.?[0-9]+)' --stdout "$STEP_DIR/stdout.txt" 2>>"$STEP_DIR/stderr.txt" || {
            rc=$?
            echo "[ncclbot] step "c4d0c1efc2e12f6d": $(tail -n 1 "$STEP_DIR/stderr.txt")"
        }
    fi
    echo "$rc" >"$STEP_DIR/exit.tmp" && mv -f "$STEP_DIR/exit.tmp" "$STEP_DIR/exit"
    echo "[ncclbot] step "c4d0c1efc2e12f6d" finished with exit code $rc"
    [ "$rc" = 0 ] || ncclbot_failed=$((ncclbot_failed + 1))
fi

echo "[ncclbot] job $NCCLSWEEP_JOB_KEY done at $(date -u +%Y-%m-%dT%H:%M:%SZ): $ncclbot_failed step(s) failed"
[ "$ncclbot_failed" = 0 ]
