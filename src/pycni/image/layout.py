"""Where things are: in the image, and on the host as the DaemonSet mounts it.

The runtime is built at ``/opt/pycni/current`` in the image (deploy/image/bundle.sh) and
copied to the same path on the host, so every absolute path baked into it (the entry points'
interpreter, the venv's) means the same file in both places.
"""

from __future__ import annotations

import os

IMAGE_RUNTIME = "/opt/pycni/current"  # in the image; on the host a link into releases/
RUNTIME_LINK = "current"
SOCKET = "/run/pycni/pycni.sock"
CONF_NAME = "10-pycni.conflist"
HOST_MOUNT_NS = "/proc/1/ns/mnt"  # hostPID: the host's init


class Paths:
    """The host's directories as the install container sees them (its hostPath mounts)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        self.cni_bin = env.get("CNI_BIN_DIR", "/host/opt/cni/bin")
        self.cni_net = env.get("CNI_NET_DIR", "/host/etc/cni/net.d")
        self.opt = env.get("PYCNI_HOST_OPT", "/host/opt/pycni")
        self.run = env.get("PYCNI_HOST_RUN", "/host/run")
        self.var_lib_cni = env.get("PYCNI_HOST_VAR_LIB_CNI", "/host/var/lib/cni")
        self.conf_source = env.get("CNI_CONF_SOURCE", "/etc/pycni/cni-conf.json")
        self.conf_name = env.get("CNI_CONF_NAME", CONF_NAME)
        self.image_runtime = env.get("PYCNI_IMAGE_RUNTIME", IMAGE_RUNTIME)

    @property
    def record(self) -> str:
        """What install-cni wrote, for uninstall (and for the next install's cleanup)."""
        return os.path.join(self.opt, "installed.json")


def release_of(runtime: str) -> str:
    """The runtime's release id (version and content digest, from its RELEASE file)."""
    with open(os.path.join(runtime, "RELEASE"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if len(lines) != 2 or not lines[1].isalnum():
        raise ValueError(f"{runtime}/RELEASE is not '<version>\\n<digest>'")
    return f"{lines[0].split()[-1]}-{lines[1]}"
