"""A busybox image built offline from the static busybox binary, as an OCI image archive.

Both runtimes load the same archive (``podman load``, ``ctr images import``), so no registry is
needed. PATH is set and the default command is absolute, as containerd's CRI expects of a sandbox
("pause") image.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
IMAGE_NAME = "localhost/pycni-busybox:latest"
DEFAULT_CMD = ["/bin/sleep", "86400"]
INDEX_HTML = b"pycni busybox httpd\n"


def _applets() -> list[str]:
    listed = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if name and "/" not in name]


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def rootfs_layer() -> bytes:
    """An uncompressed layer: /bin/busybox with every applet linked, and a page for httpd."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "www", "tmp", "proc", "sys", "dev", "root", "var", "run"):
            _add_dir(tar, d, 0o1777 if d == "tmp" else 0o755)
        _add_file(tar, "bin/busybox", BUSYBOX.read_bytes(), 0o755)
        for applet in _applets():
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        _add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        _add_file(tar, "etc/group", b"root:x:0:\n")
        _add_file(tar, "www/index.html", INDEX_HTML)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    _add_file(tar, f"blobs/sha256/{digest}", data)
    return f"sha256:{digest}"


def build_oci_archive(path: Path, name: str = IMAGE_NAME) -> Path:
    """Write an OCI image layout tar for ``name`` at ``path`` (once; reused when present)."""
    if path.exists():
        return path
    layer = rootfs_layer()
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": DEFAULT_CMD, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_bytes = json.dumps(config).encode()
    tmp = path.with_suffix(".partial")
    with tarfile.open(tmp, "w") as tar:
        _add_file(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(tar, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _blob(tar, layer),
                    "size": len(layer),
                }
            ],
        }
        manifest_bytes = json.dumps(manifest).encode()
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _blob(tar, manifest_bytes),
                    "size": len(manifest_bytes),
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name,
                    },
                }
            ],
        }
        _add_file(tar, "index.json", json.dumps(index).encode())
    shutil.move(tmp, path)
    return path
