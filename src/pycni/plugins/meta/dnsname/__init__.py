"""dnsname: containers on a network find each other by name through one dnsmasq per network.

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
