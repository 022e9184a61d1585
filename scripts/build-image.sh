#!/usr/bin/env bash
# Build pycni's OCI image with buildah (`make image`; docs/kubernetes.md). Prints the image name.
#   1. the Debian base: debootstrap's minbase (deploy/image/make-base.sh), cached as a tarball
#      in $PYCNI_IMAGE_CACHE keyed on that script's hash, imported as localhost/pycni-base:KEY;
#   2. the wheels: pycni's and its dependencies' (pip, from the package index), into
#      build/image/wheels, the build context's only input besides deploy/image;
#   3. `buildah build` of the Containerfile (its layers cached: apt runs once per base).
# Needs root, buildah, podman and debootstrap (scripts/setup-image.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CACHE=${PYCNI_IMAGE_CACHE:-/var/cache/pycni-image}
version=$("$PY" -c 'import pycni; print(pycni.__version__)')
IMAGE=${PYCNI_IMAGE:-localhost/pycni:$version}
key=$(sha256sum deploy/image/make-base.sh | cut -c1-12)
BASE=localhost/pycni-base:bookworm-$key
say() { echo "build-image: $*" >&2; }

# What the image is made of; an image already labelled with it is not built again.
source_key=$( { sha256sum deploy/image/make-base.sh; find Containerfile pyproject.toml \
  deploy/image src -type f -not -path '*/__pycache__/*' -not -name '*.pyc' | LC_ALL=C sort \
  | xargs sha256sum; } | sha256sum | cut -c1-16)
if [ -z "${PYCNI_IMAGE_REBUILD:-}" ] && [ "$(podman image inspect --format \
    '{{index .Labels "dev.pycni.source"}}' "$IMAGE" 2>/dev/null)" = "$source_key" ]; then
  say "$IMAGE is up to date (source $source_key)"
  echo "$IMAGE"
  exit 0
fi

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  mkdir -p "$CACHE"
  tarball=$CACHE/base-bookworm-$key.tar
  if [ ! -s "$tarball" ]; then
    say "debootstrap bookworm minbase (once per make-base.sh version; a few minutes)"
    bash deploy/image/make-base.sh "$tarball"
  fi
  say "importing $tarball as $BASE"
  podman import --quiet --change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' "$tarball" "$BASE" >/dev/null
fi

say "wheels: pycni $version and its dependencies"
rm -rf build/image/wheels
mkdir -p build/image/wheels
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000} "$PY" -m pip wheel -q --no-cache-dir \
  --wheel-dir build/image/wheels . >&2

say "buildah build $IMAGE"
buildah build --quiet --layers --network host --build-arg "BASE=$BASE" \
  --label "dev.pycni.source=$source_key" \
  --ignorefile deploy/image/containerignore -t "$IMAGE" -f Containerfile . >&2
echo "$IMAGE"
