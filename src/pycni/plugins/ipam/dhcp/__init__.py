"""The dhcp IPAM plugin and its daemon (see plugin.py, daemon.py, client.py)."""

from pycni.plugins.ipam.dhcp.plugin import PLUGIN

__all__ = ["PLUGIN"]
