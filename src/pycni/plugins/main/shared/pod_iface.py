"""IPAM around the one pod interface of macvlan, ipvlan, vlan, dummy, tap and host-device.

These plugins hand the pod exactly one interface (index 0 of the result); when an IPAM type
is configured its addresses all go on that interface, and the result's DNS is the config's
``dns`` (the IPAM plugin's DNS is dropped, as the reference does).
"""

from __future__ import annotations

from pycni.net.addr import configure_iface, validate_ips
from pycni.net.link import set_arp_notify
from pycni.net.netlink.kernel import Kernel
from pycni.net.route import validate_routes
from pycni.net.sysctl import try_write
from pycni.plugins.main.shared.conf import config_dns, ipam_type
from pycni.record import replace
from pycni.skel.base import Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import InternalError
from pycni.spec.result import Interface, Result


def ipam_add(req: Request, kind: str, rollback: Rollback) -> Result:
    """Run IPAM ADD and register its DEL as the undo; at least one IP is required."""
    rollback.step("ipam")
    found = req.delegate(kind)
    rollback.push("ipam", lambda: req.delegate(kind, command="DEL"))
    if found is None or not found.ips:
        raise InternalError("IPAM plugin returned missing IP config")
    return found


def pod_result(req: Request, iface: Interface, ipam: Result | None) -> Result:
    """The plugin's result: the one interface, IPAM's IPs pinned to it, IPAM's routes."""
    result = Result(cni_version=req.cni_version, interfaces=[iface], dns=config_dns(req))
    if ipam is not None:
        result.ips = [replace(ip, interface=0) for ip in ipam.ips]
        result.routes = list(ipam.routes)
    return result


def configure_pod_iface(
    req: Request, pod_kernel: Kernel, index: int, result: Result, ndisc_notify: bool = True
) -> None:
    """In the pod (``pod_kernel``, inside ``req.host.pod``): announce the addresses (arp/ndisc
    notify), add them to CNI_IFNAME, up, routes."""
    sysctl = req.host.sysctl(pod_kernel)
    set_arp_notify(pod_kernel, index)
    if ndisc_notify:  # best effort: IPv6 may be disabled in the pod
        try_write(sysctl, f"net/ipv6/conf/{req.ifname}/ndisc_notify", "1")
    configure_iface(pod_kernel, sysctl, req.ifname, index, result)


def check_ips_and_routes(pod_kernel: Kernel, ifname: str, index: int, prev: Result) -> None:
    validate_ips(pod_kernel, ifname, index, prev, 0)
    validate_routes(pod_kernel, ifname, prev.routes)


def prev_interface(req: Request) -> tuple[Result, Interface]:
    """CHECK's prevResult and its entry for CNI_IFNAME in CNI_NETNS (as the reference finds it)."""
    prev = req.prev_result()
    if prev is None:
        raise InternalError("Required prevResult missing")
    match = Interface(name="")
    for intf in prev.interfaces:
        if intf.name == req.ifname and intf.sandbox == req.netns:
            match = intf
    if match.sandbox != req.netns:
        raise InternalError(
            f"Sandbox in prevResult {match.sandbox} doesn't match configured netns: {req.netns}"
        )
    return prev, match


def ipam_passthrough(req: Request, command: str) -> None:
    """IPAM DEL/CHECK/STATUS when an IPAM type is configured."""
    kind = ipam_type(req)
    if kind:
        req.delegate(kind, command=command)
