"""The live-namespace scan the inspector and GC decide on; it lives in :mod:`pycni.net.nsscan`
(host-local's GC needs it too, and plugins may not import inspect/)."""

from __future__ import annotations

from pycni.net.nsscan import (
    LiveNamespace,
    NamespaceScan,
    linked_addresses,
    namespace_key,
    node_path_key,
    nsfs_device,
    nsfs_mount_points,
    opaque_note,
    open_namespace,
    proc_net_addresses,
    scan,
    view_notes,
    view_problems,
)

__all__ = [
    "LiveNamespace",
    "NamespaceScan",
    "linked_addresses",
    "namespace_key",
    "node_path_key",
    "nsfs_device",
    "nsfs_mount_points",
    "opaque_note",
    "open_namespace",
    "proc_net_addresses",
    "scan",
    "view_notes",
    "view_problems",
]
