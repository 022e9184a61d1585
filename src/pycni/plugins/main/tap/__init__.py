"""tap: a tap device in the pod (for a VM monitor inside it), L2 only or with IPAM.

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
