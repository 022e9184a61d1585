"""The dhcp IPAM plugin and its daemon (see plugin.py, daemon.py, client.py).

``PLUGIN`` is imported on first use so that ``pycni dhcp-daemon``'s argument parser can read
the defaults in protocol.py and store.py without loading the plugin (and the result model).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PLUGIN"]


def __getattr__(name: str) -> Any:
    if name == "PLUGIN":
        from pycni.plugins.ipam.dhcp.plugin import PLUGIN

        return PLUGIN
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
