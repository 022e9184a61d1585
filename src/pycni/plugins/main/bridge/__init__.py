"""bridge: a veth per pod, its host end a port of a Linux bridge, optional gateway and masquerade.

The plugin is plugin.py (PLUGIN); the other modules are its parts.
"""
