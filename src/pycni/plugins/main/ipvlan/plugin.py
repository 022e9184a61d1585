"""ipvlan: give the pod an ipvlan of a node interface (``master``), with IPAM or chained.

Drop-in for the reference ``ipvlan``: modes l2/l3/l3s, ``mtu``, ``linkInContainer``, and the
chained form: without an ``ipam`` type the addresses come from the prevResult, and without a
``master`` a prevResult's single interface is the master. ``flag`` (bridge/private/vepa,
IFLA_IPVLAN_FLAGS) is pycni's, as proposed upstream. See docs/plugins/ipvlan.md.
"""

from __future__ import annotations

from pycni.net import macvlan, sublink
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.plugins.main.shared.conf import ipam_type
from pycni.plugins.main.shared.pod_iface import (
    check_ips_and_routes,
    configure_pod_iface,
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
from pycni.spec.decode import Bool, IfName, Str, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import Interface, Result

_NO_MODULE = " (this kernel has no ipvlan: module ipvlan)"
_MTU = "invalid MTU {value}: mtu must be 0 or in [68, 65535]"


@record(frozen=True)
class IpvlanKeys:
    """ipvlan's own keys, declared for the decoder."""

    master: str = option("master", IfName(), "")
    mode: str = option("mode", Str(max_len=32), "")
    flag: str = option("flag", Str(max_len=32), "")
    mtu: int = option("mtu", MTU(_MTU), 0)
    link_in_container: bool = option("linkInContainer", Bool(), False)


@record
class IpvlanConf:
    master: str
    mode: int
    mode_name: str
    flag: int
    mtu: int
    link_in_container: bool
    ipam: str


def load_conf(req: Request) -> IpvlanConf:
    """The static part of the config (no kernel lookups)."""
    keys = decode(IpvlanKeys, req.config)
    try:
        mode = sublink.ipvlan_mode(keys.mode)
    except ValueError as exc:
        raise InvalidConfig(f"{exc}; use l2, l3 or l3s") from None
    try:
        flag = sublink.ipvlan_flag(keys.flag)
    except ValueError as exc:
        raise InvalidConfig(f"{exc}; use bridge, private or vepa") from None
    return IpvlanConf(
        master=keys.master,
        mode=mode,
        mode_name=keys.mode or "l2",
        flag=flag,
        mtu=keys.mtu,
        link_in_container=keys.link_in_container,
        ipam=ipam_type(req),
    )


def chained_master(req: Request, conf: IpvlanConf) -> None:
    """Without ``master``, a prevResult's single named interface is the master (the reference
    checks this before anything else, so it is an error even when a default route exists)."""
    if conf.master:
        return
    prev = req.prev_result()
    if prev is None:
        return
    if len(prev.interfaces) == 1 and prev.interfaces[0].name:
        conf.master = IfName().decode(prev.interfaces[0].name, "prevResult.interfaces[0].name")
        return
    raise InvalidConfig(
        "chained master failure. PrevResult lacks a single named interface: "
        "set master, or chain after a plugin that returns one interface"
    )


def resolve_master(kernel: Kernel, conf: IpvlanConf) -> tuple[int, int]:
    """(index, MTU) of the master; the default route's link when none is configured."""
    if not conf.master:
        conf.master = macvlan.default_route_interface(kernel)
    try:
        index = index_of(kernel, conf.master)
    except LinkNotFound:
        raise InternalError(f'failed to lookup master "{conf.master}": Link not found') from None
    return index, kernel.link(index).mtu


def _addresses(req: Request, conf: IpvlanConf, rb: Rollback) -> Result:
    """IPAM's result, or (no ``ipam`` type) the prevResult's when it has IPs."""
    if not conf.ipam:
        prev = req.prev_result()
        if prev is not None and prev.ips:
            return prev
    return ipam_add(req, conf.ipam, rb)


class Ipvlan(Plugin):
    about = "pycni ipvlan: an ipvlan sub-interface of a node link for the pod"

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        chained_master(req, conf)
        with req.open_netns() as pod, Rollback(req.env) as rb:

            def create(kernel: Kernel) -> str:
                master_index, master_mtu = resolve_master(kernel, conf)
                if conf.mtu > master_mtu:
                    raise InvalidConfig(
                        f"invalid MTU {conf.mtu}, must be [0, master MTU({master_mtu})]"
                    )
                rb.step("create")
                try:
                    return sublink.add_ipvlan(
                        kernel, master_index, pod.fd, conf.mode, conf.flag, conf.mtu
                    )
                except NetlinkError as exc:
                    hint = _NO_MODULE if exc.not_supported else ""
                    raise InternalError(f"failed to create ipvlan: {exc}{hint}") from None

            index, mac = add_in_pod(req, pod, rb, "ipvlan", conf.link_in_container, create)
            iface = Interface(name=req.ifname, mac=mac, sandbox=req.netns)
            found = _addresses(req, conf, rb)
            rb.step("configure")
            result = pod_result(req, iface, found)
            with req.host.pod(pod) as pod_kernel:
                configure_pod_iface(req, pod_kernel, index, result)
        return result

    def delete(self, req: Request) -> None:
        ipam_passthrough(req, "DEL")
        delete_pod_link(req)

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        with req.open_netns() as pod:
            ipam_passthrough(req, "CHECK")
            prev, intf = prev_interface(req)
            if conf.master:
                with master_kernel(req, pod, conf.link_in_container) as kernel:
                    resolve_master(kernel, conf)
            with req.host.pod(pod) as pod_kernel:
                index = _check_link(pod_kernel, intf, conf.mode_name)
                check_ips_and_routes(pod_kernel, req.ifname, index, prev)

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")

    def gc(self, req: Request) -> None:
        ipam_passthrough(req, "GC")


def _check_link(pod_kernel: Kernel, intf: Interface, mode: str) -> int:
    found = prev_link(pod_kernel, intf, "Container interface name missing in prevResult: ")
    current = sublink.ipvlan_mode_name(found)
    if not current:
        raise InternalError(f"Error: Container interface {intf.name} not of type ipvlan")
    if current != mode:
        raise InternalError(
            f"Container IPVlan mode {current} does not match expected value: {mode}"
        )
    check_mac(intf, found)
    return found.index


PLUGIN = Ipvlan()
