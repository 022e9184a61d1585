"""Where the container runtimes on this node look for CNI plugins and network configurations.

A network is healthy when the runtimes that read it find its plugins, not when some directory
pycni picked does. Read only, never raises:

- podman (CNI backend): ``[network] cni_plugin_dirs`` and ``network_config_dir`` of
  containers.conf: /usr/share/containers/containers.conf, then /etc/containers/containers.conf,
  then the drop-ins of /usr/share/containers/containers.conf.d and /etc/containers/containers.conf.d
  (``*.conf``, by name), each overriding the last; ``$CONTAINERS_CONF`` replaces them all.
  Defaults from containers/common: the five directories below, /etc/cni/net.d.
  ``network_backend = "netavark"`` means podman uses no CNI at all.
- containerd (CRI): /etc/containerd/config.toml, ``[plugins."io.containerd.grpc.v1.cri".cni]``
  (config version 2) or ``[plugins."io.containerd.cri.v1.runtime".cni]`` (version 3),
  ``bin_dir`` (or ``bin_dirs``) and ``conf_dir``; defaults /opt/cni/bin, /etc/cni/net.d.
- CRI-O: /etc/crio/crio.conf then /etc/crio/crio.conf.d/*.conf, ``[crio.network]``
  ``plugin_dirs`` and ``network_dir``; defaults /opt/cni/bin, /etc/cni/net.d.

A runtime counts when its program is on ``PATH`` (or its config file exists). ``root`` prefixes
every file read (a test's private copy); directories named inside the files are used as written.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from typing import Any

from pycni.record import record

PODMAN_PLUGIN_DIRS = (
    "/usr/local/libexec/cni",
    "/usr/libexec/cni",
    "/usr/local/lib/cni",
    "/usr/lib/cni",
    "/opt/cni/bin",
)
DEFAULT_BIN_DIR = "/opt/cni/bin"
DEFAULT_CONF_DIR = "/etc/cni/net.d"
_MAX_FILE = 1 << 20


@record(frozen=True)
class RuntimeView:
    """One runtime's CNI directories and the files they came from ("defaults" when none)."""

    runtime: str  # "podman", "containerd", "cri-o"
    plugin_dirs: tuple[str, ...]
    conf_dir: str
    source: str
    problem: str = ""  # a config file that could not be read or parsed


def _toml(path: str) -> tuple[dict[str, Any] | None, str]:
    """The parsed file, None when it does not exist; a problem text when it is unusable."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_FILE)
    except FileNotFoundError:
        return None, ""
    except OSError as err:
        return None, f"{path}: {err.strerror}"
    try:
        return tomllib.loads(data.decode()), ""
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        return None, f"{path}: not valid TOML ({err})"


def _table(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        value = data.get(key)
        if not isinstance(value, dict):
            return {}
        data = value
    return data


def _dirs(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v for v in value if v)
    return None


def _drop_ins(directory: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".conf"))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names]


def _installed(program: str, config: str) -> bool:
    return shutil.which(program) is not None or os.path.exists(config)


def podman(root: str = "") -> RuntimeView | None:
    override = os.environ.get("CONTAINERS_CONF", "")
    if override:
        files = [override]
    else:
        files = [
            root + "/usr/share/containers/containers.conf",
            root + "/etc/containers/containers.conf",
            *_drop_ins(root + "/usr/share/containers/containers.conf.d"),
            *_drop_ins(root + "/etc/containers/containers.conf.d"),
        ]
    if not _installed("podman", files[0] if override else root + "/etc/containers"):
        return None
    dirs: tuple[str, ...] = PODMAN_PLUGIN_DIRS
    conf_dir, backend = DEFAULT_CONF_DIR, ""
    used, problems = [], []
    for path in files:
        data, problem = _toml(path)
        if problem:
            problems.append(problem)
        if data is None:
            continue
        network = _table(data, "network")
        if not network:
            continue
        found = False
        if (value := _dirs(network.get("cni_plugin_dirs"))) is not None:
            dirs, found = value, True
        if isinstance(network.get("network_config_dir"), str) and network["network_config_dir"]:
            conf_dir, found = network["network_config_dir"], True
        if isinstance(network.get("network_backend"), str):
            backend = network["network_backend"]
        if found:
            used.append(path)
    if backend == "netavark":
        return None
    return RuntimeView(
        "podman",
        dirs,
        conf_dir.rstrip("/") or "/",
        ", ".join(used) or "containers.conf defaults",
        "; ".join(problems),
    )


def containerd(root: str = "") -> RuntimeView | None:
    path = root + "/etc/containerd/config.toml"
    if not _installed("containerd", path):
        return None
    data, problem = _toml(path)
    dirs: tuple[str, ...] = (DEFAULT_BIN_DIR,)
    conf_dir, source = DEFAULT_CONF_DIR, "containerd defaults"
    if data is not None:
        cni = _table(data, "plugins", "io.containerd.grpc.v1.cri", "cni") or _table(
            data, "plugins", "io.containerd.cri.v1.runtime", "cni"
        )
        value = _dirs(cni.get("bin_dirs")) or _dirs(cni.get("bin_dir"))
        if value:
            dirs, source = value, path
        if isinstance(cni.get("conf_dir"), str) and cni["conf_dir"]:
            conf_dir, source = cni["conf_dir"], path
    return RuntimeView("containerd", dirs, conf_dir.rstrip("/") or "/", source, problem)


def crio(root: str = "") -> RuntimeView | None:
    files = [root + "/etc/crio/crio.conf", *_drop_ins(root + "/etc/crio/crio.conf.d")]
    if not _installed("crio", files[0]):
        return None
    dirs: tuple[str, ...] = (DEFAULT_BIN_DIR,)
    conf_dir = DEFAULT_CONF_DIR
    used, problems = [], []
    for path in files:
        data, problem = _toml(path)
        if problem:
            problems.append(problem)
        network = _table(data or {}, "crio", "network")
        if (value := _dirs(network.get("plugin_dirs"))) is not None:
            dirs = value
            used.append(path)
        if isinstance(network.get("network_dir"), str) and network["network_dir"]:
            conf_dir = network["network_dir"]
            used.append(path)
    return RuntimeView(
        "cri-o",
        tuple(d.rstrip("/") or "/" for d in dirs),
        conf_dir.rstrip("/") or "/",
        ", ".join(dict.fromkeys(used)) or "CRI-O defaults",
        "; ".join(problems),
    )


def find(root: str = "") -> list[RuntimeView]:
    """Every runtime installed here that uses CNI, with its directories."""
    return [v for v in (podman(root), containerd(root), crio(root)) if v is not None]


def plugin_dirs(views: list[RuntimeView]) -> list[str]:
    """Every plugin directory some runtime searches, each once, in the runtimes' order."""
    return list(dict.fromkeys(d for v in views for d in v.plugin_dirs))
