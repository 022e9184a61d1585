"""host-local: addresses from local ranges, one per range set, reserved as files on disk.

The plugin is plugin.py (PLUGIN); the other modules are its parts."""
