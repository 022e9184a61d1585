"""host-device: move an existing node link into the pod (renamed to CNI_IFNAME) and back on DEL.

The plugin is plugin.py (PLUGIN).
"""
