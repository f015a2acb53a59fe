#!/bin/bash
#SBATCH --job-name=tune-h100
#SBATCH --comment=ncclbot:tune-2ff24f803974a02f:669b18e73c96ead6
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=240
#SBATCH --output=/shared/ncclbot/campaigns/tune-h100/slurm-%j.out
#SBATCH --error=/shared/ncclbot/campaigns/tune-h100/slurm-%j.out
#SBATCH --partition=h100
#SBATCH --account=perf
#SBATCH --exclusive
#SBATCH --wait-all-nodes=1
# ncclbot-sweep tuning job (rendered by 'ncclbot-sweep analyze tune -i'; change that command or the inventory,
# not this file). Our own variables are NCCLSWEEP_*.
set -u
umask 022
JOB_DIR=/shared/ncclbot/campaigns/tune-h100
export NCCLSWEEP_CAMPAIGN=tune-h100
export NCCLSWEEP_CAMPAIGN_KEY=tune-2ff24f803974a02f
export NCCLSWEEP_JOB_KEY=669b18e73c96ead6
mkdir -p "$JOB_DIR/workers" || exit 1
exec >>"$JOB_DIR/job.log" 2>&1
echo "[ncclbot] tuning job $NCCLSWEEP_JOB_KEY starting on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ) (Slurm job ${SLURM_JOB_ID:-none})"

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
NCCLSWEEP_PROV_NCCL_VERSION='' \
NCCLSWEEP_PROV_NCCL_TESTS_VERSION='' \
NCCLSWEEP_PROV_PLUGIN_PATH='' \
NCCLSWEEP_PROV_PLUGIN_VERSION='' \
NCCLSWEEP_PROV_WRITER='ncclbot-sweep 0.1.0' \
ncclbot_provenance || echo "[ncclbot] warning: provenance capture failed (python3 missing?)"

# One 'analyze tune' per node with 8 worker process(es) each; a task's output goes to
# workers/<job id>-<task>-<host>.log. A worker that dies leaves its study to the next run of the same command.
export PYTHONUNBUFFERED=1
NCCLSWEEP_TUNE=(/shared/ncclbot/venv/bin/ncclbot-sweep analyze tune -d /shared/ncclbot/campaigns/datasets/ds-d802cfc3590e74cc -o /shared/ncclbot/campaigns/tune-h100 --families UCB1,GBM+cost --trials 151 --workers 8)
echo "[ncclbot] starting "4" tuning task(s) at $(date -u +%Y-%m-%dT%H:%M:%SZ): ${NCCLSWEEP_TUNE[*]}"
srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --cpus-per-task=8 --output="$JOB_DIR/workers/%j-%t-%N.log" "${NCCLSWEEP_TUNE[@]}"
rc=$?
echo "[ncclbot] tuning job $NCCLSWEEP_JOB_KEY done at $(date -u +%Y-%m-%dT%H:%M:%SZ): the tuning tasks exited with $rc"
exit "$rc"
