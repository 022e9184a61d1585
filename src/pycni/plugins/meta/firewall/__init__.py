"""firewall: allow forwarded traffic to and from the pod's IPs, optionally isolate bridges.

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
