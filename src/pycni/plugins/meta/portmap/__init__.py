"""portmap meta plugin (nftables by default, iptables compatible with the reference)."""

from pycni.plugins.meta.portmap.plugin import PLUGIN, PortMap

__all__ = ["PLUGIN", "PortMap"]
