"""dummy: a dummy link named CNI_IFNAME in the pod, with the IPAM plugin's addresses on it.

As the reference: IPAM is required; the result is IPAM's (its routes and DNS included) with the
one dummy interface; DEL runs IPAM DEL, then removes the link (a link or namespace already gone
is fine).
"""

from __future__ import annotations

from pycni.net.addr import configure_iface
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.kernel import NetlinkError
from pycni.plugins.main.shared.conf import ipam_type
from pycni.plugins.main.shared.pod_iface import (
    check_ips_and_routes,
    ipam_add,
    ipam_passthrough,
    prev_interface,
)
from pycni.plugins.main.shared.pod_link import delete_in_pod, delete_pod_link
from pycni.record import replace
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import Interface, Result

IFF_UP = 0x1


def required_ipam(req: Request) -> str:
    kind = ipam_type(req)
    if not kind:
        raise InvalidConfig("dummy interface requires an IPAM configuration")
    return kind


class Dummy(Plugin):
    about = "pycni dummy: a dummy interface in the pod carrying the IPAM addresses"

    def add(self, req: Request) -> Result:
        kind = required_ipam(req)
        with req.open_netns() as pod, Rollback(req.env) as rb:
            with req.host.pod(pod) as pod_kernel:
                rb.step("create")
                try:
                    pod_kernel.add_dummy(req.ifname)
                except NetlinkError as exc:
                    raise InternalError(f"failed to create dummy: {exc}") from None
                try:
                    index = index_of(pod_kernel, req.ifname)
                except LinkNotFound:
                    raise InternalError(f'failed to fetch dummy "{req.ifname}"') from None
                rb.push("create", lambda: delete_in_pod(req, pod, index))
                mac = pod_kernel.link(index).mac
            ipam = ipam_add(req, kind, rb)
            result = replace(
                ipam,
                cni_version=req.cni_version,
                interfaces=[Interface(name=req.ifname, mac=mac, sandbox=req.netns)],
                ips=[replace(ip, interface=0) for ip in ipam.ips],
            )
            rb.step("configure")
            with req.host.pod(pod) as pod_kernel:
                # as the reference's ipam.ConfigureIface: no arp_notify, unlike macvlan
                configure_iface(pod_kernel, req.host.sysctl(pod_kernel), req.ifname, index, result)
        return result

    def delete(self, req: Request) -> None:
        ipam_passthrough(req, "DEL")
        delete_pod_link(req)

    def check(self, req: Request) -> None:
        required_ipam(req)
        with req.open_netns() as pod:
            ipam_passthrough(req, "CHECK")
            prev, intf = prev_interface(req)
            with req.host.pod(pod) as pod_kernel:
                if not intf.name:
                    raise InternalError("Container interface name missing in prevResult: ")
                try:
                    index = index_of(pod_kernel, intf.name)
                except LinkNotFound:
                    raise InternalError(
                        f"Container Interface name in prevResult: {intf.name} not found"
                    ) from None
                found = pod_kernel.link(index)
                if found.kind != "dummy":
                    raise InternalError(f"Error: Container interface {intf.name} not of type dummy")
                if intf.mac and intf.mac != found.mac:
                    raise InternalError(
                        f"Interface {intf.name} Mac {intf.mac} doesn't match container Mac: "
                        f"{found.mac}"
                    )
                if not found.flags & IFF_UP:
                    raise InternalError(f"Interface {intf.name} is down")
                check_ips_and_routes(pod_kernel, req.ifname, index, replace(prev, routes=[]))

    def gc(self, req: Request) -> None:
        ipam_passthrough(req, "GC")

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")


PLUGIN = Dummy()
