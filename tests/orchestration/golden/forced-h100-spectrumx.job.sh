#!/bin/bash
#SBATCH --job-name=golden-forced-AllReduce-8n
#SBATCH --comment=ncclbot:76ee9938dde11764:e79513c2cf4e9d95
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=5
#SBATCH --output=/shared/campaigns/golden/jobs/e79513c2cf4e9d95/slurm-%j.out
#SBATCH --error=/shared/campaigns/golden/jobs/e79513c2cf4e9d95/slurm-%j.out
#SBATCH --partition=h100
#SBATCH --account=perf
#SBATCH --exclusive
#SBATCH --wait-all-nodes=1
# ncclbot-sweep job script (rendered by ncclbot-sweep; edit the campaign or inventory, not this file).
# Our own variables are NCCLSWEEP_*: the plugin refuses unknown NCCLBOT_* variables.
set -u
umask 022
JOB_DIR=/shared/campaigns/golden/jobs/e79513c2cf4e9d95
export NCCLSWEEP_CAMPAIGN=golden-forced
export NCCLSWEEP_CAMPAIGN_KEY=76ee9938dde11764
export NCCLSWEEP_JOB_KEY=e79513c2cf4e9d95
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

ncclbot_failed=0

# ---- step 1/2: c1e2bd449f32a07a
STEP_DIR=/shared/campaigns/golden/jobs/e79513c2cf4e9d95/steps/c1e2bd449f32a07a
if ncclbot_step_done "$STEP_DIR" c1e2bd449f32a07a; then
    echo "[ncclbot] step "c1e2bd449f32a07a" already finished, skipped"
else
    mkdir -p "$STEP_DIR"
    rm -f "$STEP_DIR/exit" "$STEP_DIR/result.json" "$STEP_DIR"/result.json.* "$STEP_DIR/nccl.log" "$STEP_DIR/stdout.txt" "$STEP_DIR/stderr.txt"
    echo "[ncclbot] step "c1e2bd449f32a07a" ("'AllReduce 8n Ring/LL128'") starting at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (
        unset NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
        export NCCL_ALGO=Ring
        export NCCL_PROTO=LL128
        export NCCL_DEBUG=INFO
        export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
        export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"
        export NCCLSWEEP_STEP_KEY=c1e2bd449f32a07a
        exec timeout --kill-after=30 100 srun --nodes=8 --ntasks=64 --ntasks-per-node=8 --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank /opt/nccl-tests/build/all_reduce_perf -b 512 -e 17179869184 -f 2 -g 1 -d float -o sum -w 0 -n 100 -I 1 -c 0 -J "$STEP_DIR/result.json" >"$STEP_DIR/stdout.txt" 2>"$STEP_DIR/stderr.txt"
    )
    rc=$?
    echo "$rc" >"$STEP_DIR/exit.tmp" && mv -f "$STEP_DIR/exit.tmp" "$STEP_DIR/exit"
    echo "[ncclbot] step "c1e2bd449f32a07a" finished with exit code $rc"
    [ "$rc" = 0 ] || ncclbot_failed=$((ncclbot_failed + 1))
fi

# ---- step 2/2: 108e16977c76d595
STEP_DIR=/shared/campaigns/golden/jobs/e79513c2cf4e9d95/steps/108e16977c76d595
if ncclbot_step_done "$STEP_DIR" 108e16977c76d595; then
    echo "[ncclbot] step "108e16977c76d595" already finished, skipped"
else
    mkdir -p "$STEP_DIR"
    rm -f "$STEP_DIR/exit" "$STEP_DIR/result.json" "$STEP_DIR"/result.json.* "$STEP_DIR/nccl.log" "$STEP_DIR/stdout.txt" "$STEP_DIR/stderr.txt"
    echo "[ncclbot] step "108e16977c76d595" ("'AllReduce 8n NVLSTree/Simple'") starting at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (
        unset NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
        export NCCL_ALGO=NVLSTree
        export NCCL_PROTO=Simple
        export NCCL_DEBUG=INFO
        export NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
        export NCCL_DEBUG_FILE="$STEP_DIR/nccl.log"
        export NCCLSWEEP_STEP_KEY=108e16977c76d595
        exec timeout --kill-after=30 96 srun --nodes=8 --ntasks=64 --ntasks-per-node=8 --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 bash -c "$NCCLSWEEP_RANK_WRAPPER" ncclbot-rank /opt/nccl-tests/build/all_reduce_perf -b 512 -e 17179869184 -f 2 -g 1 -d float -o sum -w 0 -n 100 -I 1 -c 0 -J "$STEP_DIR/result.json" >"$STEP_DIR/stdout.txt" 2>"$STEP_DIR/stderr.txt"
    )
    rc=$?
    echo "$rc" >"$STEP_DIR/exit.tmp" && mv -f "$STEP_DIR/exit.tmp" "$STEP_DIR/exit"
    echo "[ncclbot] step "108e16977c76d595" finished with exit code $rc"
    [ "$rc" = 0 ] || ncclbot_failed=$((ncclbot_failed + 1))
fi

echo "[ncclbot] job $NCCLSWEEP_JOB_KEY done at $(date -u +%Y-%m-%dT%H:%M:%SZ): $ncclbot_failed step(s) failed"
[ "$ncclbot_failed" = 0 ]
