"""The entry-point marker, for the installer and the forwarder build (owned by plugin/)."""

from __future__ import annotations

from pycni.skel.entry_point import ENTRY_MARKER, is_entry_point

__all__ = ["ENTRY_MARKER", "is_entry_point"]
