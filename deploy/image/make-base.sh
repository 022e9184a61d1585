#!/usr/bin/env bash
# Make the image's Debian base, offline but for Debian's mirror (no registry is reachable):
# debootstrap --variant=minbase bookworm into a scratch dir, packed as a tarball at $1.
# scripts/build-image.sh keys the cached tarball on this file's hash, so editing it rebuilds.
set -euo pipefail
out=$1
mirror=${PYCNI_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then  # the mirror apt already uses here
  mirror=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
           /etc/apt/sources.list.d/ 2>/dev/null | awk '{print $2}' | head -n1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi
root=$(mktemp -d "${out}.root.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror" >"${out}.log" 2>&1 \
  || { tail -n 20 "${out}.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar --numeric-owner --xattrs -C "$root" -cf "${out}.partial" .
mv "${out}.partial" "$out"
