"""dnsname meta plugin: per-network dnsmasq name resolution, a drop-in for dnsname 1.3.1."""

from pycni.plugins.meta.dnsname.plugin import PLUGIN, Dnsname

__all__ = ["PLUGIN", "Dnsname"]
