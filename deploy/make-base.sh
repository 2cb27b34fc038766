#!/usr/bin/env bash
# Make a Debian bookworm base image without any container registry: debootstrap a minimal root
# file system with Python, venv and tini, and import it into podman as localhost/daskpca-base.
#
#   sudo deploy/make-base.sh [IMAGE]          # default IMAGE: localhost/daskpca-base:bookworm
#
# Measured: 189-197 s on 2 busy shared cores (about 1 minute reported on an idle one), a 176 MB image
# (`podman image ls`). Needs root, debootstrap and podman (Debian's packages).
# Skips the work when the image exists; FORCE=1 remakes it.
# The Dockerfile builds on it with --build-arg PYTHON_IMAGE=localhost/daskpca-base:bookworm.
set -euo pipefail
IMAGE=${1:-localhost/daskpca-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

for tool in debootstrap podman; do
    command -v "$tool" >/dev/null || { echo "make-base: $tool is missing (apt-get install -y podman podman-compose runc debootstrap)" >&2; exit 3; }
done
if [ "${FORCE:-0}" != 1 ] && podman image exists "$IMAGE"; then
    echo "make-base: $IMAGE exists (FORCE=1 to remake it)"
    exit 0
fi

start=$(date +%s)
root=$(mktemp -d /var/tmp/daskpca-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
# minbase: only the essential packages, plus what the Dockerfile needs from Debian.
debootstrap --variant=minbase --include=python3,python3-venv,tini,ca-certificates \
    "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import --quiet \
    --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$IMAGE" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "make-base: $IMAGE made in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB"
