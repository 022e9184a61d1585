#!/usr/bin/env bash
# Install what `make image` (scripts/build-image.sh) needs: buildah to build, debootstrap for
# the Debian base (no registry is reachable), podman to import the base and run the image.
# Only missing packages are installed; running it again does nothing.
set -euo pipefail
packages=(buildah debootstrap podman runc)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-image: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
