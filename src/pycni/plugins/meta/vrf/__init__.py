"""vrf: put the pod interface (and its routes) into a VRF of the pod namespace.

The plugin is plugin.py (PLUGIN)."""
