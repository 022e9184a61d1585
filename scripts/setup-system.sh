#!/usr/bin/env bash
# Install the Debian packages pycni's tests, demo and benchmarks need (only the missing ones).
set -euo pipefail
packages=(
  iproute2 iptables nftables libnftables1 conntrack iputils-ping util-linux procps
  containernetworking-plugins socat tcpdump time gcc libc6-dev dnsmasq-base libcap2-bin systemd
  librsvg2-bin
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
