"""What macvlan, ipvlan and vlan share: a sub-interface of a master link, made for the pod.

Their ADD is one shape: in the master's namespace (the node, or the pod with
``linkInContainer``) create the link straight into the pod under a temporary name (step
``create``), then in the pod rename it to CNI_IFNAME (step ``rename``); IPAM and the addresses
follow. Their CHECK finds the pod link named in prevResult the same way too.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from pycni.net.link import LinkNotFound, get
from pycni.net.netlink.kernel import Kernel, Link, NetlinkError
from pycni.net.ns import NetNS
from pycni.plugins.main.shared.pod_link import delete_in_pod
from pycni.skel.base import Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import InternalError
from pycni.spec.result import Interface


def master_kernel(req: Request, pod: NetNS, in_pod: bool) -> AbstractContextManager[Kernel]:
    """A Kernel where the master lives: the pod (linkInContainer) or the node."""
    return req.host.pod(pod) if in_pod else req.host.node()


def add_in_pod(
    req: Request,
    pod: NetNS,
    rb: Rollback,
    what: str,
    in_pod: bool,
    create: Callable[[Kernel], str],
) -> tuple[int, str]:
    """``create(kernel)`` (in the master's namespace) makes the link in the pod and returns
    its temporary name; it is then renamed to CNI_IFNAME. (index, MAC) in the pod."""
    with master_kernel(req, pod, in_pod) as kernel:
        tmp = create(kernel)
    with req.host.pod(pod) as pod_kernel:
        index = get(pod_kernel, tmp).index
        rb.push("create", lambda: delete_in_pod(req, pod, index))
        rb.step("rename")
        try:
            pod_kernel.set_link(index, name=req.ifname)
        except NetlinkError as exc:
            raise InternalError(f'failed to rename {what} to "{req.ifname}": {exc}') from None
        return index, pod_kernel.link(index).mac


def prev_link(pod_kernel: Kernel, intf: Interface, missing: str, prefix: str = "") -> Link:
    """CHECK: the pod link of prevResult's interface (``missing``: the error without a name;
    ``prefix``: what the reference puts before its messages)."""
    if not intf.name:
        raise InternalError(missing)
    try:
        return get(pod_kernel, intf.name)
    except LinkNotFound:
        raise InternalError(
            f"{prefix}Container Interface name in prevResult: {intf.name} not found"
        ) from None


def check_mac(intf: Interface, found: Link, prefix: str = "") -> None:
    if intf.mac and intf.mac != found.mac:
        raise InternalError(
            f"{prefix}Interface {intf.name} Mac {intf.mac} doesn't match container Mac: {found.mac}"
        )
