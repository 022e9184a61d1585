"""dummy: a dummy link named CNI_IFNAME in the pod, with the IPAM plugin's addresses on it.

The plugin is plugin.py (PLUGIN)."""
