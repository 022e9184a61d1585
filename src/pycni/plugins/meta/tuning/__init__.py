"""tuning: change sysctls and link attributes of the pod's interface, and put them back on DEL.

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
