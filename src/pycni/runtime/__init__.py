"""The runtime library (libcni equivalent): load configs, run plugin chains, cache results.

Typical use::

    from pycni.runtime import CNIConfig, RuntimeConf, load_network_conf

    conf = load_network_conf("/etc/cni/net.d", "mynet")
    cni = CNIConfig(["/opt/cni/bin"], cache_dir="/var/lib/cni")
    result = cni.add_network_list(conf, RuntimeConf("c1", "/run/netns/c1", "eth0"))
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # the names below are imported on first use: plugins import runtime.find and
    from typing import Any

    # runtime.exec on their hot path and must not pay for asyncio and the whole API.
    from pycni.spec.conf import (
        ConfError,
        NetworkConfigList,
        PluginConfig,
        conf_list_from_bytes,
        conf_list_from_conf,
        inject_conf,
        plugin_conf_from_bytes,
    )
    from pycni.spec.errors import CNIError
    from pycni.spec.result import Result

    from .aio import AsyncCNIConfig
    from .api import CNIConfig, GCError
    from .cache import CACHE_KIND, DEFAULT_CACHE_DIR
    from .confdir import (
        NoConfigsFoundError,
        NotFoundError,
        conf_files,
        conf_list_from_file,
        load_conf,
        load_network_conf,
    )
    from .exec import CallControl, Exec, PluginCancelled, PluginInfo, PluginTimeout, RawExec
    from .find import find_in_path
    from .trace import TraceContext
    from .types import GCArgs, GCAttachment, NetworkAttachment, RuntimeConf

_HOMES = {
    "pycni.spec.conf": (
        "ConfError NetworkConfigList PluginConfig conf_list_from_bytes conf_list_from_conf "
        "inject_conf plugin_conf_from_bytes"
    ),
    "pycni.spec.errors": "CNIError",
    "pycni.spec.result": "Result",
    "pycni.runtime.aio": "AsyncCNIConfig",
    "pycni.runtime.api": "CNIConfig GCError",
    "pycni.runtime.cache": "CACHE_KIND DEFAULT_CACHE_DIR",
    "pycni.runtime.confdir": (
        "NoConfigsFoundError NotFoundError conf_files conf_list_from_file load_conf "
        "load_network_conf"
    ),
    "pycni.runtime.exec": "CallControl Exec PluginCancelled PluginInfo PluginTimeout RawExec",
    "pycni.runtime.find": "find_in_path",
    "pycni.runtime.trace": "TraceContext",
    "pycni.runtime.types": "GCArgs GCAttachment NetworkAttachment RuntimeConf",
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pycni.runtime' has no attribute {name!r}")
    __import__(module)  # not importlib.import_module: importlib's package loads warnings
    value = getattr(sys.modules[module], name)
    globals()[name] = value
    return value


__all__ = [
    "CACHE_KIND",
    "DEFAULT_CACHE_DIR",
    "AsyncCNIConfig",
    "CNIConfig",
    "CNIError",
    "CallControl",
    "ConfError",
    "Exec",
    "GCArgs",
    "GCAttachment",
    "GCError",
    "NetworkAttachment",
    "NetworkConfigList",
    "NoConfigsFoundError",
    "NotFoundError",
    "PluginCancelled",
    "PluginConfig",
    "PluginInfo",
    "PluginTimeout",
    "RawExec",
    "Result",
    "RuntimeConf",
    "TraceContext",
    "conf_files",
    "conf_list_from_bytes",
    "conf_list_from_conf",
    "conf_list_from_file",
    "find_in_path",
    "inject_conf",
    "load_conf",
    "load_network_conf",
    "plugin_conf_from_bytes",
]
