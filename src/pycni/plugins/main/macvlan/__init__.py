"""macvlan: give the pod a macvlan of a node interface (``master``), L2 or with IPAM.

The plugin is plugin.py (PLUGIN)."""
