#!/bin/sh
# Inside the image's build stage: lay out /opt/pycni/current, a pycni that runs on any x86-64
# Linux host without the image (install-cni copies it there). Debian's python3.11 is copied
# with its standard library and every shared library it, its extension modules and
# libnftables load, and re-linked (patchelf) to that loader and those libraries; a venv on it
# holds pycni and its dependencies; the C entry points are compiled here (no compiler on the
# host or in the final image) for that venv's Python and the socket /run/pycni/pycni.sock.
set -eu
WHEELS=$1
R=/opt/pycni/current
P=$R/python
LIBDIR=/usr/lib/x86_64-linux-gnu
mkdir -p "$P/bin" "$P/lib"
cp /usr/bin/python3.11 "$P/bin/python3.11"
cp -a /usr/lib/python3.11 "$P/lib/python3.11"
rm -rf "$P/lib/python3.11/test" "$P/lib/python3.11/idlelib" "$P/lib/python3.11/tkinter" \
       "$P/lib/python3.11/turtledemo" "$P/lib/python3.11/ensurepip" "$P/lib/python3.11/lib2to3"
libs=$( { ldd "$P/bin/python3.11"; for so in "$P"/lib/python3.11/lib-dynload/*.so \
          "$LIBDIR/libnftables.so.1"; do ldd "$so"; done; } | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
for lib in $libs "$LIBDIR/libnftables.so.1"; do cp -L "$lib" "$P/lib/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$P/lib/"
patchelf --set-interpreter "$P/lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$P/lib" \
  "$P/bin/python3.11"
ln -s python3.11 "$P/bin/python3"
# Nothing of the build stage may leak into the runtime: it must find no /usr/lib library.
if "$P/bin/python3.11" -c 'import sys; sys.exit(0)' && \
   ldd "$P/bin/python3.11" | grep -v "$P/lib" | grep -q '=> /'; then
  echo "bundle: python3.11 still loads a library from outside $P/lib" >&2; exit 1
fi
"$P/bin/python3.11" -m venv --without-pip "$R/venv"
python3 -m pip --python "$R/venv/bin/python" install -q --no-index --no-cache-dir \
  --find-links "$WHEELS" pycni
"$R/venv/bin/python" -m compileall -q "$P/lib/python3.11" >/dev/null || true
"$R/venv/bin/pycni" plugins install "$R/cni-bin" --socket /run/pycni/pycni.sock --no-autostart
"$R/venv/bin/pycni" --version > "$R/RELEASE"
find "$R" -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16 >> "$R/RELEASE"
"$R/venv/bin/python" -c 'import nftables, pycni; nftables.Nftables()'
