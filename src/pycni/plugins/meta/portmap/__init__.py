"""portmap: forward host ports to a pod's ports (a chained plugin after bridge/ptp).

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
