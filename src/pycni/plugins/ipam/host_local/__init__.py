"""host-local IPAM (see docs/plugins/host-local.md)."""

from pycni.plugins.ipam.host_local.plugin import PLUGIN

__all__ = ["PLUGIN"]
