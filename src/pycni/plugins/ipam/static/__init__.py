"""static IPAM: hand back the addresses, routes and DNS the config (or the runtime) names.

The plugin is plugin.py (PLUGIN)."""
