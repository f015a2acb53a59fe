"""Helpers the orchestration tests import: the fake nccl-tests script, a local inventory, a
small campaign and the fake binaries' start/end log reader.

They live here, not in ``conftest.py``: a module named ``conftest`` is ambiguous when pytest
collects several test folders that each have one.
"""

from __future__ import annotations

from pathlib import Path

FAKE = r"""#!/bin/bash
# Fake nccl-tests binary for ncclbot-sweep orchestration tests.
name="$(basename "$0")"
json=""
args=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        -J) json="$2"; shift ;;
    esac
    shift
done
log="${NCCLSWEEP_FAKE_LOG:-/dev/null}"
echo "start $NCCLSWEEP_STEP_KEY $name ${NCCL_ALGO:-}/${NCCL_PROTO:-}" >>"$log"
echo "# nccl-tests fake: $name ${args[*]}"
echo "# ranks ${SLURM_NTASKS:-?} nodes ${SLURM_NNODES:-?} procid ${SLURM_PROCID:-?}"
if [ -n "${NCCL_DEBUG_FILE:-}" ]; then
    echo "host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to ${NCCL_ALGO:-unset}" >"$NCCL_DEBUG_FILE"
fi
if [ -n "${NCCLSWEEP_FAKE_INVALID_ALGO:-}" ] && [ "${NCCL_ALGO:-}" = "$NCCLSWEEP_FAKE_INVALID_ALGO" ]; then
    echo "host:1:1 [0] NCCL WARN No algorithm/protocol available for function AllReduce with datatype ncclFloat32. NCCL_ALGO was set to $NCCL_ALGO." >>"$NCCL_DEBUG_FILE"
    echo "test.cu:100 NCCL failure 'invalid usage'" >&2
    exit 3
fi
sleep "${NCCLSWEEP_FAKE_SLEEP:-0}"
if [ -n "${NCCLSWEEP_FAKE_FAIL_ALGO:-}" ] && [ "${NCCL_ALGO:-}" = "$NCCLSWEEP_FAKE_FAIL_ALGO" ]; then
    echo "fake failure" >&2
    exit 7
fi
if [ -n "${NCCLSWEEP_FAKE_GARBAGE_ALGO:-}" ] && [ "${NCCL_ALGO:-}" = "$NCCLSWEEP_FAKE_GARBAGE_ALGO" ]; then
    echo "garbage, no table"
    echo "end $NCCLSWEEP_STEP_KEY" >>"$log"
    exit 0
fi
[ -n "$json" ] && echo '{"version": 3, "results": []}' >"$json"
# One result row in nccl-tests' layout: a step is ok only when its output holds a result.
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
echo "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
echo "        1024           256     float     sum      -1    10.00    0.10    0.10      0    10.00    0.10    0.10      0"
echo "# Avg bus bandwidth    : 1.0"
echo "end $NCCLSWEEP_STEP_KEY" >>"$log"
"""


def local_inventory_text(bin_dir: Path, *, name: str = "sim-local", concurrent: int = 2, extra: str = "") -> str:
    return f"""\
name: {name}
gpus_per_node: 8
access: {{kind: local}}
scheduler:
  kind: local
  max_concurrent_jobs: {concurrent}
  poll_interval_s: 0.05
  poll_interval_max_s: 0.2
launcher: {{kind: srun, mpi: null}}
nccl_tests:
  bin_dir: "{bin_dir}"
  version: "2.19.6"
algorithms: {{families: [tree, ring, nvls]}}
estimate: {{step_setup_s: 1, step_setup_per_node_s: 0, job_setup_s: 1, model: sim-h100}}
{extra}"""


SMALL_CAMPAIGN = """\
name: small
kind: forced
collectives: [AllReduce]
nodes: [2, 4]
sizes: {min: 1K, max: 64K}
arms: [Ring/LL, Ring/LL128, Ring/Simple, Tree/LL]
iterations: 5
warmup: 1
timeout_s: 60
packing: {steps_per_job: 2}
"""


def starts_and_ends(log: Path) -> tuple[dict[str, int], dict[str, int]]:
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    if not log.exists():
        return starts, ends
    for line in log.read_text().splitlines():
        kind, key = line.split()[:2]
        bucket = starts if kind == "start" else ends
        bucket[key] = bucket.get(key, 0) + 1
    return starts, ends
