#!/bin/bash
#SBATCH --job-name=golden-live-AllReduce-16n
#SBATCH --comment=ncclbot:9ea449c6c056f786:19f709b1da4389bb
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --time=5
#SBATCH --output=/shared/campaigns/golden/jobs/19f709b1da4389bb/slurm-%j.out
#SBATCH --error=/shared/campaigns/golden/jobs/19f709b1da4389bb/slurm-%j.out
#SBATCH --partition=gb200
#SBATCH --account=perf
#SBATCH --segment=16
#SBATCH --exclusive
#SBATCH --distribution=block:block
# ncclbot-sweep job script (rendered by ncclbot-sweep; edit the campaign or inventory, not this file).
# Our own variables are NCCLSWEEP_*: the plugin refuses unknown NCCLBOT_* variables.
set -u
umask 022
JOB_DIR=/shared/campaigns/golden/jobs/19f709b1da4389bb
export NCCLSWEEP_CAMPAIGN=golden-live
export NCCLSWEEP_CAMPAIGN_KEY=9ea449c6c056f786
export NCCLSWEEP_JOB_KEY=19f709b1da4389bb
mkdir -p "$JOB_DIR/steps" || exit 1
exec >>"$JOB_DIR/job.log" 2>&1
echo "[ncclbot] job $NCCLSWEEP_JOB_KEY starting on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ) (Slurm job ${SLURM_JOB_ID:-none})"

# Fabric environment from the inventory.
export NVIDIA_IMEX_CHANNELS=0
export NCCL_MNNVL_ENABLE=1
export NCCL_CUMEM_ENABLE=1
export NCCL_NVLS_ENABLE=1
export NCCL_NET_GDR_C2C=1
export NCCL_SOCKET_IFNAME=eth0
export NCCL_IB_HCA=ibp

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

NCCLSWEEP_PROV_FABRIC=gb200-mnnvl-on \
NCCLSWEEP_PROV_NCCL_VERSION=2.30.4 \
NCCLSWEEP_PROV_NCCL_TESTS_VERSION=2.19.6 \
NCCLSWEEP_PROV_PLUGIN_PATH=/shared/ncclbot/lib/libnccl-ncclbot.so \
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
/shared/ncclbot/bin/ncclbot-coordinator --listen "$ncclbot_listen" >>"$ncclbot_coordinator_log" 2>&1 &
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
ncclbot_failed=0

# ---- step 1/2: 750adbbed61197e3
STEP_DIR=/shared/campaigns/golden/jobs/19f709b1da4389bb/steps/750adbbed61197e3
if ncclbot_step_done "$STEP_DIR" 750adbbed61197e3; then
    echo "[ncclbot] step "750adbbed61197e3" already finished, skipped"
else
    mkdir -p "$STEP_DIR"
    rm -f "$STEP_DIR/exit" "$STEP_DIR/result.json" "$STEP_DIR"/result.json.* "$STEP_DIR/nccl.log" "$STEP_DIR/stdout.txt" "$STEP_DIR/stderr.txt"
    echo "[ncclbot] step "750adbbed61197e3" ("'AllReduce 16n policy stock'") starting at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (
        unset NCCL_ALGO NCCL_PROTO NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
        export NCCL_DEBUG=INFO
        export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
        export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"
        export NCCLSWEEP_STEP_KEY=750adbbed61197e3
        exec timeout --kill-after=30 60 srun --nodes=16 --ntasks=64 --ntasks-per-node=4 --mpi=pmix --container-image=/shared/images/nccl-tests+ncclbot.sqsh --container-mounts=/shared/ncclbot:/shared/ncclbot --no-container-mount-home --cpu-bind=none --kill-on-bad-exit=1 bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank /opt/nccl-tests/build/all_reduce_perf -b 1048576 -e 1073741824 -f 2 -g 1 -d float -o sum -w 100 -n 100 -I 1 -c 0 -J "$STEP_DIR/result.json" >"$STEP_DIR/stdout.txt" 2>"$STEP_DIR/stderr.txt"
    )
    rc=$?
    echo "$rc" >"$STEP_DIR/exit.tmp" && mv -f "$STEP_DIR/exit.tmp" "$STEP_DIR/exit"
    echo "[ncclbot] step "750adbbed61197e3" finished with exit code $rc"
    [ "$rc" = 0 ] || ncclbot_failed=$((ncclbot_failed + 1))
fi

# ---- step 2/2: 74ce6a9fdb70c779
STEP_DIR=/shared/campaigns/golden/jobs/19f709b1da4389bb/steps/74ce6a9fdb70c779
if ncclbot_step_done "$STEP_DIR" 74ce6a9fdb70c779; then
    echo "[ncclbot] step "74ce6a9fdb70c779" already finished, skipped"
else
    mkdir -p "$STEP_DIR"
    rm -f "$STEP_DIR/exit" "$STEP_DIR/result.json" "$STEP_DIR"/result.json.* "$STEP_DIR/nccl.log" "$STEP_DIR/stdout.txt" "$STEP_DIR/stderr.txt"
    echo "[ncclbot] step "74ce6a9fdb70c779" ("'AllReduce 16n policy ucb1'") starting at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (
        unset NCCL_ALGO NCCL_PROTO NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
        if [ -n "$ncclbot_no_coordinator" ]; then echo "$ncclbot_no_coordinator" >"$STEP_DIR/stderr.txt"; exit 1; fi
        export NCCL_TUNER_PLUGIN=/shared/ncclbot/lib/libnccl-ncclbot.so
        export NCCL_PROFILER_PLUGIN=/shared/ncclbot/lib/libnccl-ncclbot.so
        export NCCLBOT_POLICY=ucb1
        rm -rf "$STEP_DIR/trace" && mkdir -p "$STEP_DIR/trace"
        export NCCLBOT_TRACE_DIR="$STEP_DIR/trace"
        export NCCL_DEBUG=INFO
        export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
        export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"
        export NCCLSWEEP_STEP_KEY=74ce6a9fdb70c779
        exec timeout --kill-after=30 78 srun --nodes=16 --ntasks=64 --ntasks-per-node=4 --mpi=pmix --container-image=/shared/images/nccl-tests+ncclbot.sqsh --container-mounts=/shared/ncclbot:/shared/ncclbot --no-container-mount-home --cpu-bind=none --kill-on-bad-exit=1 bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank /opt/nccl-tests/build/all_reduce_perf -b 1048576 -e 1073741824 -f 2 -g 1 -d float -o sum -w 100 -n 100 -I 1 -c 0 -J "$STEP_DIR/result.json" >"$STEP_DIR/stdout.txt" 2>"$STEP_DIR/stderr.txt"
    )
    rc=$?
    # Every rank must have played the same arm on every call.
    if [ "$rc" = 0 ]; then
        ncclbot_diverged="$(ncclbot_check_arms "$STEP_DIR/trace")" || {
            rc=3
            echo "[ncclbot] step "74ce6a9fdb70c779": $ncclbot_diverged"
            echo "$ncclbot_diverged" >>"$STEP_DIR/stderr.txt"
        }
    fi
    echo "$rc" >"$STEP_DIR/exit.tmp" && mv -f "$STEP_DIR/exit.tmp" "$STEP_DIR/exit"
    echo "[ncclbot] step "74ce6a9fdb70c779" finished with exit code $rc"
    [ "$rc" = 0 ] || ncclbot_failed=$((ncclbot_failed + 1))
fi

echo "[ncclbot] job $NCCLSWEEP_JOB_KEY done at $(date -u +%Y-%m-%dT%H:%M:%SZ): $ncclbot_failed step(s) failed"
[ "$ncclbot_failed" = 0 ]
