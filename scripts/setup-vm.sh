#!/usr/bin/env bash
# The full-kernel test lane's tools (tests/fullkernel, docs/full-kernel-lane.md): qemu, kmod
# (the guest runs this machine's modprobe/depmod), busybox (virtme-ng's initramfs), Debian's own
# kernel unpacked next to its modules in /lib/modules/<version>/ (never installed as a package:
# the guest shares this root, so its modules must be there), and virtme-ng in the project venv.
# Idempotent: does only what is missing. Usage: setup-vm.sh [path/to/venv/python]
set -euo pipefail
py=${1:-.venv/bin/python}

packages=(qemu-system-x86 kmod busybox-static)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
export DEBIAN_FRONTEND=noninteractive
updated=
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-vm: installing ${missing[*]}"
  apt-get update -q >/dev/null && updated=1
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# The kernel: the one Debian's linux-image-amd64 points at (PYCNI_VM_KVER overrides).
have=$(ls -d /lib/modules/*-amd64 2>/dev/null | while read -r d; do
  [ -f "$d/vmlinuz" ] && [ -f "$d/modules.dep" ] && basename "$d"; done | sort -V | tail -1 || true)
kver=${PYCNI_VM_KVER:-$have}
if [ -z "$kver" ] || [ ! -f "/lib/modules/$kver/vmlinuz" ] || [ ! -f "/lib/modules/$kver/modules.dep" ]; then
  if [ -z "$kver" ]; then
    [ -n "$updated" ] || apt-get update -q >/dev/null
    kver=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: linux-image-\([0-9][^ ]*\)$/\1/p' | head -1)
  fi
  [ -n "$kver" ] || { echo "setup-vm: cannot tell Debian's current kernel version" >&2; exit 1; }
  echo "setup-vm: fetching linux-image-$kver (unpacked, not installed)"
  work=$(mktemp -d /tmp/pycni-kernel.XXXXXX) && chmod 755 "$work"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -q "linux-image-$kver" >/dev/null)
  dpkg-deb -x "$work"/linux-image-"$kver"_*.deb "$work/root"
  mkdir -p /lib/modules
  mkdir -p "/lib/modules/$kver"
  cp -a "$work/root/lib/modules/$kver/." "/lib/modules/$kver/"
  cp "$work/root/boot/vmlinuz-$kver" "/lib/modules/$kver/vmlinuz"
  depmod "$kver"
fi

if ! "$py" -c 'import virtme_ng' >/dev/null 2>&1; then
  echo "setup-vm: installing virtme-ng into the venv"
  "$py" -m pip install -q virtme-ng
fi
echo "setup-vm: guest kernel /lib/modules/$kver/vmlinuz"
