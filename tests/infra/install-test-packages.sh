#!/usr/bin/env bash
# Install the Debian packages the tests need: munge, slurmctld, slurmd and openssh-server (the
# Slurm and SSH tests), chromium and a font (the report rendered in a headless browser).
# Idempotent: does nothing when everything is already there. Needs root (as in CI).
# Set NCCLBOT_SKIP_INFRA_INSTALL=1 to skip (the tests then skip with a reason if missing).
set -euo pipefail

if [ "${NCCLBOT_SKIP_INFRA_INSTALL:-0}" = "1" ]; then
    exit 0
fi

need=()
command -v munged     >/dev/null 2>&1 || need+=(munge)
command -v slurmctld  >/dev/null 2>&1 || need+=(slurmctld)
command -v slurmd     >/dev/null 2>&1 || need+=(slurmd)
command -v sbatch     >/dev/null 2>&1 || need+=(slurm-client)
[ -x /usr/sbin/sshd ]                 || need+=(openssh-server)
command -v chromium   >/dev/null 2>&1 || need+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || need+=(fonts-dejavu-core)  # text in the rendered report

if [ "${#need[@]}" -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-packages: missing ${need[*]} and cannot apt-get install (not root or no apt);" \
         "the tests that need them will be skipped" >&2
    exit 0
fi
echo "install-test-packages: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps Debian from starting the packaged services: the tests start their own.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    created_policy=1
fi
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
if [ "$created_policy" = "1" ]; then
    rm -f "$policy"
fi
