#!/usr/bin/env bash
# The container smoke run, in one command (as root, from anywhere in a clone):
#
#     deploy/smoke.sh                  # base image if missing, build, cluster, every check; exit 0 = all passed
#     deploy/smoke.sh --no-notebook    # skip the notebook image (about 2 minutes less)
#
# Builds the image from deploy/docker/Dockerfile on a Debian base made here (deploy/make-base.sh),
# starts deploy/compose.yaml's scheduler and workers as podman containers, runs its fit job and
# the nightly update, and prints each check (deploy/smoke.py says what is checked and why).
# Needs podman, runc and debootstrap (`apt-get install -y podman podman-compose runc debootstrap`)
# and python3; exits 3 with a one-line reason when one is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for tool in podman runc debootstrap python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "smoke: $tool is missing: apt-get install -y podman podman-compose runc debootstrap" >&2
        exit 3
    fi
done
if [ "$(id -u)" != 0 ]; then
    echo "smoke: run as root (debootstrap and rootful podman with --network=host need it)" >&2
    exit 3
fi
"$here/make-base.sh"
exec python3 "$here/smoke.py" "$@"
