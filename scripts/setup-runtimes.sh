#!/usr/bin/env bash
# Install the container runtimes the interop tests drive (podman with its CNI backend, containerd's
# CRI, runc, and a static busybox to build images offline) and the Go dnsname plugin (the reference
# the dnsname tests compare with; it lands in /usr/lib/cni). Only missing packages are installed;
# running it again does nothing. The tests keep all runtime state in temp dirs and bring their own
# config files, so nothing here is configured system-wide.
set -euo pipefail
packages=(podman runc containerd busybox-static tar golang-github-containernetworking-plugin-dnsname)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-runtimes: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  # No recommends: crun refuses this machine's hybrid cgroups (runc is used), and slirp4netns,
  # fuse-overlayfs and buildah are not needed for rootful containers on the CNI backend.
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
