"""ptp: a veth pair per pod, routed (no bridge): the node end holds the gateway address.

The plugin is plugin.py (PLUGIN)."""
