"""Loading network configurations from a directory (libcni's conf.go file functions)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pycni.spec.conf import (
    ConfError,
    NetworkConfigList,
    PluginConfig,
    conf_list_from_bytes,
    conf_list_from_conf,
    plugin_conf_from_bytes,
)

__all__ = [
    "BrokenFileError",
    "NoConfigsFoundError",
    "NotFoundError",
    "conf_files",
    "conf_list_from_file",
    "find_network_conf",
    "list_network_confs",
    "load_conf",
    "load_network_conf",
]


class NoConfigsFoundError(ConfError):
    """The directory holds no configuration files at all."""

    def __init__(self, directory: str) -> None:
        super().__init__(f"no net configurations found in {directory}")
        self.directory = directory


class NotFoundError(ConfError):
    """No configuration in the directory has the requested network name."""

    def __init__(self, directory: str, name: str) -> None:
        super().__init__(f'no net configuration with name "{name}" in {directory}')
        self.directory = directory
        self.name = name


class BrokenFileError(ConfError):
    """A configuration file that cannot be read or parsed, named in the message."""

    def __init__(self, path: str, error: ConfError) -> None:
        super().__init__(f"{error} (in {path})")
        self.path = path
        self.error = error


def conf_files(directory: str, extensions: Sequence[str]) -> list[str] | None:
    """Non-directory entries of ``directory`` whose extension matches exactly, in listing order.

    A missing directory gives None (libcni's ``nil, nil``).
    """
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfError(f"failed to read {directory}: {err.strerror}") from None
    found: list[str] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            continue
        if os.path.splitext(entry.name)[1] in extensions:
            found.append(os.path.join(directory, entry.name))
    return found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise ConfError(f"error reading {path}: {err.strerror}") from None


def plugin_confs_from_dir(conf_dir: str, network_name: str) -> tuple[PluginConfig, ...]:
    """Plugins of a network from the sibling folder ``<conf_dir>/<network>/*.conf``."""
    folder = os.path.join(conf_dir, network_name)
    try:
        files = conf_files(folder, (".conf",)) or []
    except ConfError as err:
        raise ConfError(f"failed to read plugin config files in {folder}: {err}") from None
    plugins: list[PluginConfig] = []
    for path in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as err:
            raise ConfError(f"failed to read plugin config file {path}: {err.strerror}") from None
        plugins.append(plugin_conf_from_bytes(data))
    return tuple(plugins)


def conf_list_from_file(path: str) -> NetworkConfigList:
    """Read a conflist and, unless inline-only, append the sibling-folder plugins."""
    conf = conf_list_from_bytes(_read(path))
    if not conf.load_only_inlined_plugins:
        conf = conf.with_plugins(plugin_confs_from_dir(os.path.dirname(path), conf.name))
    if not conf.plugins:
        raise ConfError("no plugin configs found")
    return conf


def conf_from_file(path: str) -> PluginConfig:
    """Read a single-plugin ``.conf`` / ``.json`` file."""
    return plugin_conf_from_bytes(_read(path))


def load_conf(directory: str, name: str) -> PluginConfig:
    """The first single-plugin file (``.conf``, ``.json``, sorted) naming network ``name``."""
    files = conf_files(directory, (".conf", ".json"))
    if not files:
        raise NoConfigsFoundError(directory)
    for path in sorted(files):
        try:
            conf = conf_from_file(path)
        except ConfError as err:
            raise BrokenFileError(path, err) from None
        if conf.name == name:
            return conf
    raise NotFoundError(directory, name)


def load_network_conf(directory: str, name: str) -> NetworkConfigList:
    """Find network ``name`` in ``directory`` as libcni's ``LoadNetworkConf`` does.

    ``*.conflist`` files are read in lexical order and any one that fails to parse stops the
    search; then single-plugin files are tried and wrapped as a one-plugin list.
    """
    lists = conf_files(directory, (".conflist",)) or []
    for path in sorted(lists):
        try:
            conf = conf_list_from_file(path)
        except ConfError as err:
            raise BrokenFileError(path, err) from None
        if conf.name == name:
            return conf
    try:
        single = load_conf(directory, name)
    except NoConfigsFoundError:
        if lists:
            raise NotFoundError(directory, name) from None
        raise
    return conf_list_from_conf(single)


def find_network_conf(directory: str, name: str) -> tuple[NetworkConfigList, list[BrokenFileError]]:
    """Network ``name`` as :func:`load_network_conf` finds it, except that a file which fails
    to parse is skipped (and returned) instead of stopping the search: pycni's own commands
    keep working for every network that does not live in a broken file. Not found, with
    broken files present, is a :class:`NotFoundError` that names them."""
    broken: list[BrokenFileError] = []
    try:
        return load_network_conf(directory, name), broken
    except BrokenFileError:
        pass
    for path, conf in list_network_confs(directory):
        if isinstance(conf, ConfError):
            broken.append(BrokenFileError(path, conf))
        elif conf.name == name:
            return conf, broken
    missing = NotFoundError(directory, name)
    if not broken:
        raise missing
    names = ", ".join(os.path.basename(b.path) for b in broken)
    raise ConfError(f"{missing}; unreadable there: {names}") from None


def list_network_confs(directory: str) -> list[tuple[str, NetworkConfigList | ConfError]]:
    """Every configuration file in ``directory`` with its parsed list or its error (for listing)."""
    entries: list[tuple[str, NetworkConfigList | ConfError]] = []
    for path in conf_files(directory, (".conflist",)) or []:
        try:
            entries.append((path, conf_list_from_file(path)))
        except ConfError as err:
            entries.append((path, err))
    for path in conf_files(directory, (".conf", ".json")) or []:
        try:
            entries.append((path, conf_list_from_conf(conf_from_file(path))))
        except ConfError as err:
            entries.append((path, err))
    return entries
