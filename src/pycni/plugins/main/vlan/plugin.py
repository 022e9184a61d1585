"""vlan: give the pod an 802.1Q sub-interface of a node interface (``master``), with IPAM.

Drop-in for the reference ``vlan``: ``master`` (required), ``vlanId``, ``mtu`` up to the
master's, ``linkInContainer``. See docs/plugins/vlan.md.
"""

from __future__ import annotations

from pycni.net import sublink
from pycni.net.addr import configure_iface
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.plugins.main.shared.conf import ipam_type
from pycni.plugins.main.shared.pod_iface import (
    check_ips_and_routes,
    ipam_add,
    ipam_passthrough,
    pod_result,
    prev_interface,
)
from pycni.plugins.main.shared.pod_link import delete_pod_link
from pycni.plugins.main.shared.sublink import add_in_pod, check_mac, master_kernel, prev_link
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.config import MTU
from pycni.skel.rollback import Rollback
from pycni.spec.decode import Bool, IfName, Int, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import Interface, Result

_VLAN_ID = "invalid VLAN ID {value} (must be between 0 and 4095 inclusive)"
_NO_MODULE = " (this kernel has no 802.1Q: module 8021q)"
_MTU = "invalid MTU {value}: mtu must be 0 or in [68, 65535]"
_NO_MASTER = (
    '"master" field is required. It specifies the host interface name to create the VLAN for.'
)


@record(frozen=True)
class VlanConf:
    """vlan's keys, declared for the decoder (the reference's message for a bad VLAN ID, whose
    range it states as 0..4095 but enforces as 0..4094)."""

    master: str = option("master", IfName(), "")
    vlan_id: int = option("vlanId", Int(0, 4094, _VLAN_ID), 0)
    mtu: int = option("mtu", MTU(_MTU), 0)
    link_in_container: bool = option("linkInContainer", Bool(), False)


def load_conf(req: Request) -> VlanConf:
    """The static part of the config (no kernel lookups)."""
    conf = decode(VlanConf, req.config)
    if not conf.master:
        raise InvalidConfig(_NO_MASTER)
    return conf


def master_of(kernel: Kernel, conf: VlanConf) -> int:
    """The master's index, once its MTU is known to allow ``mtu``."""
    try:
        index = index_of(kernel, conf.master)
    except LinkNotFound:
        raise InternalError(f'failed to lookup master "{conf.master}": Link not found') from None
    master_mtu = kernel.link(index).mtu
    if conf.mtu > master_mtu:
        raise InvalidConfig(f"invalid MTU {conf.mtu}, must be [0, master MTU({master_mtu})]")
    return index


class Vlan(Plugin):
    about = "pycni vlan: an 802.1Q sub-interface of a node link for the pod"

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        ipam = ipam_type(req)
        if not ipam:  # the reference creates the link first, fails in IPAM and leaves it
            raise InvalidConfig(
                "ipam.type is required: vlan always runs an IPAM plugin (no plugin name provided)"
            )
        with req.open_netns() as pod, Rollback(req.env) as rb:

            def create(kernel: Kernel) -> str:
                master = master_of(kernel, conf)
                rb.step("create")
                try:
                    return sublink.add_vlan(kernel, master, pod.fd, conf.vlan_id, conf.mtu)
                except NetlinkError as exc:
                    hint = _NO_MODULE if exc.not_supported else ""
                    raise InternalError(f"failed to create vlan: {exc}{hint}") from None

            index, mac = add_in_pod(req, pod, rb, "vlan", conf.link_in_container, create)
            iface = Interface(name=req.ifname, mac=mac, sandbox=req.netns)
            result = pod_result(req, iface, ipam_add(req, ipam, rb))
            rb.step("configure")
            with req.host.pod(pod) as pod_kernel:
                configure_iface(pod_kernel, req.host.sysctl(pod_kernel), req.ifname, index, result)
        return result

    def delete(self, req: Request) -> None:
        load_conf(req)
        ipam_passthrough(req, "DEL")
        delete_pod_link(req)

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        with req.open_netns() as pod:
            ipam_passthrough(req, "CHECK")
            if req.prev_result() is None:
                raise InternalError("vlan: Required prevResult missing")
            prev, intf = prev_interface(req)
            with master_kernel(req, pod, conf.link_in_container) as kernel:
                master_of(kernel, conf)
            with req.host.pod(pod) as pod_kernel:
                index = _check_link(pod_kernel, intf, conf)
                check_ips_and_routes(pod_kernel, req.ifname, index, prev)

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")

    def gc(self, req: Request) -> None:
        ipam_passthrough(req, "GC")


def _check_link(pod_kernel: Kernel, intf: Interface, conf: VlanConf) -> int:
    found = prev_link(
        pod_kernel, intf, "Container interface name missing in prevResult: ", "vlan: "
    )
    if found.kind != "vlan":
        raise InternalError(f"Error: Container interface {intf.name} not of type vlan")
    check_mac(intf, found, "vlan: ")
    if found.vlan_id != conf.vlan_id:
        raise InternalError(
            f"Error: link {intf.name} configured VLAN ID is {conf.vlan_id}, "
            f"current value is {found.vlan_id}"
        )
    if conf.mtu and conf.mtu != found.mtu:
        raise InternalError(
            f"Error: Tuning configured MTU of {intf.name} is {conf.mtu}, "
            f"current value is {found.mtu}"
        )
    return found.index


PLUGIN = Vlan()
