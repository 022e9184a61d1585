"""bandwidth: shape a pod's traffic with tbf on the node side of its veth.

The plugin is plugin.py (PLUGIN)."""
