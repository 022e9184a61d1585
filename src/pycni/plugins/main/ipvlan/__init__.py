"""ipvlan: give the pod an ipvlan of a node interface (``master``), with IPAM or chained.

The plugin is plugin.py (PLUGIN)."""
