#!/usr/bin/env bash
# Make the node base image without a registry: debootstrap a Debian root filesystem from the
# mirror apt already uses (/etc/apt/sources.list*), then `docker import` it.
# Usage: docker/build-base-image.sh [image-tag]   (default logquake-base:bookworm; needs root)
# Idempotent: an existing image with that tag is kept (pass FORCE=1 to rebuild).
set -euo pipefail
tag=${1:-logquake-base:bookworm}
suite=${SUITE:-bookworm}
if [ -z "${FORCE:-}" ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag exists"; exit 0
fi
mirror=${MIRROR:-$(grep -rshoE '(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
    | grep -oE 'https?://[^ ]+' | head -n1 || true)}
mirror=${mirror:-http://deb.debian.org/debian}
# What the node needs besides Python (the harness's own interpreter and venv are bind-mounted
# read-only; see docker/Dockerfile): the fault tools and the shared libraries CPython links to.
packages=iptables,procps,util-linux,faketime,iproute2,ca-certificates,libssl3,libffi8,zlib1g,libbz2-1.0,liblzma5,libsqlite3-0,libreadline8,libncursesw6,libuuid1,libgdbm6,libexpat1,python3
root=$(mktemp -d /tmp/logquake-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "debootstrap $suite from $mirror into $root"
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import --change 'CMD ["sleep", "infinity"]' - "$tag"
echo "imported $tag"
