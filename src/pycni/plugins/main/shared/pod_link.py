"""The pod link's DEL: the rollback step and the DEL every main plugin uses."""

from __future__ import annotations

from pycni.net.link import LinkNotFound, delete_by_name
from pycni.net.netlink.kernel import IPInterface
from pycni.net.ns import NetNS, NetNSNotFound
from pycni.skel.base import Request


def delete_in_pod(req: Request, pod: NetNS, index: int) -> None:
    """Rollback step: remove the link this ADD created in the pod."""
    with req.host.pod(pod) as pod_kernel:
        pod_kernel.delete_link(index)


def delete_pod_link(req: Request) -> list[IPInterface] | None:
    """DEL: delete CNI_IFNAME in the pod and return its global addresses.

    A link already gone gives ``[]``; no namespace (none given, or already deleted) gives
    None, so a caller can still clean what is keyed by the attachment rather than the link.
    """
    if not req.netns:
        return None
    try:
        with req.open_netns() as pod, req.host.pod(pod) as pod_kernel:
            try:
                return delete_by_name(pod_kernel, req.ifname)
            except LinkNotFound:
                return []
    except NetNSNotFound:
        return None
