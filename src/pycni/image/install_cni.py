"""install-cni and uninstall: the image's runtime, entry points and conflist onto the host.

Every file lands by a rename in its own directory (a runtime reading it sees the old file or
the new one), an unchanged file is not rewritten (a second run changes nothing), and a file
pycni did not write is never replaced: an operator's plugin of the same name stays unless
``replace`` names it, and then it is moved aside (``.pycni-saved/``) and put back by
uninstall. What was written is recorded in ``installed.json`` under the host's /opt/pycni.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil

from pycni.entrypoints.install import entry_config
from pycni.fsutil import write_atomic
from pycni.image.layout import RUNTIME_LINK, Paths, release_of

SAVED_DIR = ".pycni-saved"
KEEP_RELEASES = 2  # the current one and the one before (a daemon may still run from it)


class InstallError(Exception):
    """install-cni cannot go on (bad conflist, unreadable image runtime)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _load_record(paths: Paths) -> dict[str, object]:
    data = _read(paths.record)
    if data is None:
        return {}
    try:
        loaded = json.loads(data)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _copy_runtime(paths: Paths, log: list[str]) -> str:
    """Copy the image's runtime to ``<opt>/releases/<release>``; point ``current`` at it."""
    try:
        release = release_of(paths.image_runtime)
    except (OSError, ValueError) as exc:
        raise InstallError(f"the image's runtime is unusable: {exc}") from None
    releases = os.path.join(paths.opt, "releases")
    os.makedirs(releases, mode=0o755, exist_ok=True)
    target = os.path.join(releases, release)
    if not os.path.isdir(target):
        staging = os.path.join(releases, f".staging-{release}-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(paths.image_runtime, staging, symlinks=True)
        os.rename(staging, target)
        log.append(f"runtime {release} copied to {target}")
    link = os.path.join(paths.opt, RUNTIME_LINK)
    previous = os.readlink(link) if os.path.islink(link) else None
    wanted = os.path.join("releases", release)
    if previous != wanted:
        if os.path.exists(link) and not os.path.islink(link):
            raise InstallError(f"{link} is not a link pycni made: not replacing it")
        tmp = os.path.join(paths.opt, f".{RUNTIME_LINK}.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(wanted, tmp)
        os.replace(tmp, link)
        log.append(f"{link} -> {wanted}")
    keep = {release, os.path.basename(previous or "")}
    for name in sorted(os.listdir(releases)):
        if name not in keep and len(keep) >= KEEP_RELEASES:
            shutil.rmtree(os.path.join(releases, name), ignore_errors=True)
            log.append(f"old runtime {name} removed")
    return release


def _place(directory: str, name: str, data: bytes) -> bool:
    """Write ``directory/name`` by rename unless it already holds ``data``."""
    path = os.path.join(directory, name)
    if _read(path) == data:
        return False
    write_atomic(path, data, mode=0o755, fsync=True, make_dirs=False, prefix=f".{name}.pycni-")
    return True


def _install_entry_points(
    paths: Paths, replace: frozenset[str], record: dict[str, object], log: list[str]
) -> list[str]:
    source = os.path.join(paths.image_runtime, "cni-bin")
    os.makedirs(paths.cni_bin, mode=0o755, exist_ok=True)
    saved_dir = os.path.join(paths.cni_bin, SAVED_DIR)
    listed = record.get("saved")
    saved = [s for s in listed if isinstance(s, str)] if isinstance(listed, list) else []
    installed: list[str] = []
    for name in sorted(os.listdir(source)):
        data = _read(os.path.join(source, name))
        if data is None or name.startswith("."):
            continue
        dst = os.path.join(paths.cni_bin, name)
        if os.path.lexists(dst) and entry_config(dst) is None:
            if name not in replace and "all" not in replace:
                log.append(f"{dst}: not pycni's, left as it is (PYCNI_REPLACE_PLUGINS={name})")
                continue
            os.makedirs(saved_dir, mode=0o700, exist_ok=True)
            os.replace(dst, os.path.join(saved_dir, name))
            saved.append(name)
            log.append(f"{dst}: the operator's plugin moved to {saved_dir}/")
        if _place(paths.cni_bin, name, data):
            log.append(f"{dst} installed")
        installed.append(name)
    record["saved"] = sorted(set(saved))
    return installed


def _conflist(paths: Paths) -> bytes:
    data = _read(paths.conf_source)
    if data is None:
        raise InstallError(f"no CNI config at {paths.conf_source} (the ConfigMap's cni-conf.json)")
    try:
        conf = json.loads(data)
    except ValueError as exc:
        raise InstallError(f"{paths.conf_source}: not JSON: {exc}") from None
    if not isinstance(conf, dict) or not isinstance(conf.get("name"), str):
        raise InstallError(f"{paths.conf_source}: a conflist needs a string 'name'")
    plugins = conf.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise InstallError(f"{paths.conf_source}: a conflist needs a non-empty 'plugins' list")
    if not all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in plugins):
        raise InstallError(f"{paths.conf_source}: every entry of 'plugins' needs a 'type'")
    return (json.dumps(conf, indent=2) + "\n").encode()


def install(paths: Paths, replace: frozenset[str] = frozenset()) -> list[str]:
    """Install everything; returns what was done, one line each (empty: nothing to do)."""
    if not paths.conf_name.endswith(".conflist") or "/" in paths.conf_name:
        raise InstallError(f"CNI_CONF_NAME {paths.conf_name!r}: a file name ending .conflist")
    conf = _conflist(paths)  # checked before anything on the host changes
    log: list[str] = []
    os.makedirs(paths.opt, mode=0o755, exist_ok=True)
    record = _load_record(paths)
    record["release"] = _copy_runtime(paths, log)
    record["entry_points"] = _install_entry_points(paths, replace, record, log)
    os.makedirs(paths.cni_net, mode=0o755, exist_ok=True)
    if _place(paths.cni_net, paths.conf_name, conf):
        log.append(f"{os.path.join(paths.cni_net, paths.conf_name)} written")
    record["conflist"] = {"name": paths.conf_name, "sha256": _digest(conf)}
    data = (json.dumps(record, indent=2) + "\n").encode()
    if _read(paths.record) != data:
        write_atomic(paths.record, data, mode=0o644)
    return log


def _remove_if_empty(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _host_local_leftovers(directory: str) -> bool:
    """A host-local data dir holding no reservation (its lock and last_reserved_ip files)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    return all(n == "lock" or n.startswith("last_reserved_ip") for n in names)


def uninstall(paths: Paths, network: str | None = None) -> list[str]:
    """Remove what install wrote (and the node state pycni leaves once no pod is left)."""
    log: list[str] = []
    record = _load_record(paths)
    entries = record.get("entry_points")
    for name in entries if isinstance(entries, list) else []:
        path = os.path.join(paths.cni_bin, str(name))
        if os.path.basename(path) == str(name) and entry_config(path) is not None:
            os.unlink(path)
            log.append(f"{path} removed")
    saved_dir = os.path.join(paths.cni_bin, SAVED_DIR)
    saved = record.get("saved")
    for name in saved if isinstance(saved, list) else []:
        src = os.path.join(saved_dir, str(name))
        if os.path.basename(src) == str(name) and os.path.lexists(src):
            os.replace(src, os.path.join(paths.cni_bin, str(name)))
            log.append(f"{paths.cni_bin}/{name}: the operator's plugin put back")
    _remove_if_empty(saved_dir)
    conf = record.get("conflist")
    if isinstance(conf, dict) and isinstance(conf.get("name"), str):
        path = os.path.join(paths.cni_net, os.path.basename(conf["name"]))
        data = _read(path)
        if data is not None and _digest(data) == conf.get("sha256"):
            os.unlink(path)
            log.append(f"{path} removed")
            with contextlib.suppress(ValueError, AttributeError):
                network = network or str(json.loads(data)["name"])
    run_dir = os.path.join(paths.run, "pycni")  # the daemon's: socket, lock, log, state
    if os.path.isdir(run_dir) and not os.path.islink(run_dir):
        for name in sorted(os.listdir(run_dir)):
            path = os.path.join(run_dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            log.append(f"{path} removed")
    subnet_env = os.path.join(paths.run, "flannel/subnet.env")
    if os.path.lexists(subnet_env):
        os.unlink(subnet_env)
        log.append(f"{subnet_env} removed")
    for name in ("pycni", "flannel"):
        _remove_if_empty(os.path.join(paths.run, name))
    if network and "/" not in network:
        data_dir = os.path.join(paths.var_lib_cni, "networks", network)
        if _host_local_leftovers(data_dir):
            shutil.rmtree(data_dir, ignore_errors=True)
            log.append(f"{data_dir} removed (no reservation left)")
    if os.path.isdir(paths.opt):  # its contents: the directory may be a mount point
        for name in os.listdir(paths.opt):
            path = os.path.join(paths.opt, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        _remove_if_empty(paths.opt)
        log.append(f"{paths.opt} removed")
    return log
