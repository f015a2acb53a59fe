"""Campaign and inventory files for the end-to-end tests on the loopback cluster.

The benchmark binary is a small stand-in for nccl-tests (any command that writes output and
exits, as the issue allows): every rank prints where it runs; rank 0 prints one result row
(a step that exits 0 is ``ok`` only with a result), logs the step's start
in ``$NCCLBOT_E2E_LOG`` (to count runs), writes the ``-J`` file and, when asked, a large
file (``NCCLBOT_E2E_BIG_MB``); the step sleeps ``NCCLBOT_E2E_SLEEP`` seconds, or
``NCCLBOT_E2E_SLOW_SLEEP`` when its ``NCCL_ALGO`` is ``NCCLBOT_E2E_SLOW_ALGO``.
"""

from __future__ import annotations

from pathlib import Path

from ncclbot_sweep.names import COLLECTIVE_BINARY

FAKE = r"""#!/bin/bash
json=""
while [ $# -gt 0 ]; do
    case "$1" in -J) json="$2"; shift ;; esac
    shift
done
echo "# nccl-tests stand-in $(basename "$0") rank ${SLURM_PROCID:-?} of ${SLURM_NTASKS:-?} on ${SLURMD_NODENAME:-?} ${NCCL_ALGO:-}/${NCCL_PROTO:-}"
if [ "${SLURM_PROCID:-0}" = 0 ]; then
    [ -n "${NCCLBOT_E2E_LOG:-}" ] && echo "start $NCCLSWEEP_STEP_KEY" >>"$NCCLBOT_E2E_LOG"
    [ -n "$json" ] && echo '{"version": 3, "results": []}' >"$json"
    if [ -n "${NCCLBOT_E2E_BIG_MB:-}" ] && [ -n "$json" ]; then
        head -c $((NCCLBOT_E2E_BIG_MB * 1048576)) /dev/urandom >"$(dirname "$json")/big.bin"
    fi
fi
pause="${NCCLBOT_E2E_SLEEP:-0}"
[ -n "${NCCLBOT_E2E_SLOW_ALGO:-}" ] && [ "${NCCL_ALGO:-}" = "$NCCLBOT_E2E_SLOW_ALGO" ] && pause="${NCCLBOT_E2E_SLOW_SLEEP:-30}"
sleep "$pause"
if [ "${SLURM_PROCID:-0}" = 0 ]; then
    # One result row in nccl-tests' layout: a step that exits 0 is ok only when it holds a result.
    echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    echo "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
    echo "        1024           256     float     sum      -1    10.00    0.10    0.10      0    10.00    0.10    0.10      0"
fi
echo "# Avg bus bandwidth    : 1.0"
"""


def fake_bin(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for binary in COLLECTIVE_BINARY.values():
        path = folder / binary
        path.write_text(FAKE)
        path.chmod(0o755)
    return folder


def inventory(path: Path, *, bin_dir: Path | str, access: str, environment: dict[str, str],
              partition: str = "debug", scheduler_extra: str = "", extra: str = "") -> Path:
    """A loopback inventory; ``extra`` is appended as top-level YAML."""
    env = "\n".join(f'  {k}: "{v}"' for k, v in environment.items()) or "  {}"
    path.write_text(f"""\
name: loopback
gpus_per_node: 1
access: {access}
scheduler:
  kind: slurm
  partition: {partition}
  time_limit_min: 10
  min_time_limit_min: 2
  poll_interval_s: 0.3
  poll_interval_max_s: 1.0
{scheduler_extra}
launcher: {{kind: srun, mpi: null}}
environment:
{env}
nccl_tests:
  bin_dir: "{bin_dir}"
  version: "2.19.6"
algorithms: {{families: [tree, ring]}}
estimate: {{step_setup_s: 5, step_setup_per_node_s: 0, job_setup_s: 5, model: sim-h100}}
{extra}""")
    return path


def ssh_access(sshd, remote_workdir: Path) -> str:
    return ("{kind: ssh, host: 127.0.0.1, port: %d, user: %s, key_path: '%s', known_hosts_path: '%s', "
            "remote_workdir: '%s', connect_timeout_s: 10}"
            % (sshd.port, sshd.user, sshd.user_key, sshd.known_hosts, remote_workdir))


def campaign(path: Path, *, name: str, arms: list[str], nodes: list[int], steps_per_job: int,
             timeout_s: int = 60) -> Path:
    path.write_text(f"""\
name: {name}
kind: forced
collectives: [AllReduce]
nodes: {nodes}
sizes: {{list: [1024]}}
arms: {arms}
warmup: 0
iterations: 1
timeout_s: {timeout_s}
packing: {{steps_per_job: {steps_per_job}}}
""")
    return path
