"""vlan: give the pod an 802.1Q sub-interface of a node interface (``master``), with IPAM.

The plugin is plugin.py (PLUGIN)."""
