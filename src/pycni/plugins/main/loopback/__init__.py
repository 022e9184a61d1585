"""loopback: bring ``lo`` up in the pod (down on DEL); pass a prevResult through unchanged.

The plugin is plugin.py (PLUGIN)."""
