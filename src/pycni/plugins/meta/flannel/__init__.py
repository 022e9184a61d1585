"""flannel: attach a pod to this node's cluster subnet by delegating to bridge + host-local.

The plugin is plugin.py (PLUGIN)."""
