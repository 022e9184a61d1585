"""The dhcp IPAM plugin: ADD/CHECK/DEL/STATUS are calls to the DHCP daemon.

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
