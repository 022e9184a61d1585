"""Every plugin pycni ships, by CNI type, imported lazily so an entry point loads one module.

On the cold path (pycni.skel.cold_path).
"""

from __future__ import annotations

from pycni.spec.decode import shown
from pycni.spec.errors import InvalidConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.skel.base import Plugin

__all__ = ["PLUGIN_TYPES", "load", "names"]

PLUGIN_TYPES: dict[str, str] = {
    "loopback": "pycni.plugins.main.loopback.plugin:PLUGIN",
    "bridge": "pycni.plugins.main.bridge.plugin:PLUGIN",
    "host-local": "pycni.plugins.ipam.host_local.plugin:PLUGIN",
    "portmap": "pycni.plugins.meta.portmap.plugin:PLUGIN",
    "ptp": "pycni.plugins.main.ptp.plugin:PLUGIN",
    "macvlan": "pycni.plugins.main.macvlan.plugin:PLUGIN",
    "ipvlan": "pycni.plugins.main.ipvlan.plugin:PLUGIN",
    "vlan": "pycni.plugins.main.vlan.plugin:PLUGIN",
    "host-device": "pycni.plugins.main.host_device.plugin:PLUGIN",
    "tap": "pycni.plugins.main.tap.plugin:PLUGIN",
    "static": "pycni.plugins.ipam.static.plugin:PLUGIN",
    "dhcp": "pycni.plugins.ipam.dhcp.plugin:PLUGIN",
    "tuning": "pycni.plugins.meta.tuning.plugin:PLUGIN",
    "bandwidth": "pycni.plugins.meta.bandwidth.plugin:PLUGIN",
    "firewall": "pycni.plugins.meta.firewall.plugin:PLUGIN",
    "sbr": "pycni.plugins.meta.sbr.plugin:PLUGIN",
    "flannel": "pycni.plugins.meta.flannel.plugin:PLUGIN",
    "dnsname": "pycni.plugins.meta.dnsname.plugin:PLUGIN",
    "dummy": "pycni.plugins.main.dummy.plugin:PLUGIN",
    "vrf": "pycni.plugins.meta.vrf.plugin:PLUGIN",
}

_loaded: dict[str, Plugin] = {}


def names() -> list[str]:
    """The types whose module exists in this installation."""
    import importlib.util  # not on a call's path: only listing the plugins needs it

    out = []
    for name, target in PLUGIN_TYPES.items():
        module = target.split(":", 1)[0]
        if importlib.util.find_spec(module) is not None:
            out.append(name)
    return out


def load(plugin_type: str) -> Plugin:
    """The plugin object of ``plugin_type``; an unknown type is a config error (code 7)."""
    plugin = _loaded.get(plugin_type)
    if plugin is None:
        target = PLUGIN_TYPES.get(plugin_type)
        if target is None:
            raise InvalidConfig(
                f"unknown plugin type {shown(plugin_type)}: pycni has no such plugin "
                f"(it has: {', '.join(PLUGIN_TYPES)})"
            )
        module_name, attr = target.split(":", 1)
        # __import__ rather than importlib.import_module: the import statement's machinery,
        # which `-X importtime` reports (so the cold-path test sees the plugin's own modules)
        # and which needs no importlib package on the path
        plugin = getattr(__import__(module_name, fromlist=(attr,)), attr)
        _loaded[plugin_type] = plugin
    return plugin
