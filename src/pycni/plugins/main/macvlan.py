"""macvlan: give the pod a macvlan of a node interface (``master``), L2 or with IPAM."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from pycni.net import macvlan
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.net.ns import NetNS
from pycni.plugin.base import Plugin, Request
from pycni.plugin.config import MTU
from pycni.plugin.rollback import Rollback
from pycni.plugins.main._attach import (
    check_ips_and_routes,
    configure_pod_iface,
    delete_in_pod,
    delete_pod_link,
    internal,
    ipam_add,
    ipam_passthrough,
    ipam_type,
    pod_result,
    prev_interface,
    requested_mac,
)
from pycni.record import record
from pycni.spec.decode import UINT32_MAX, Bool, IfName, Int, Str, decode, option
from pycni.spec.errors import InvalidConfig, UnsupportedField
from pycni.spec.result import Interface, Result


@record(frozen=True)
class MacvlanKeys:
    """macvlan's own keys, declared for the decoder."""

    master: str = option("master", IfName(), "")
    mode: str = option("mode", Str(max_len=32), "")
    mtu: int = option("mtu", MTU("invalid MTU {value}, must be 0 or in [68, 65535]"), 0)
    bcqueuelen: int = option("bcqueuelen", Int(0, UINT32_MAX), 0)
    link_in_container: bool = option("linkInContainer", Bool(), False)


@record
class MacvlanConf:
    master: str
    mode: str
    mtu: int
    mac: str
    link_in_container: bool
    ipam: str


def load_conf(req: Request) -> MacvlanConf:
    """The static part of the config (no kernel lookups)."""
    keys = decode(MacvlanKeys, req.config)
    try:
        mode = macvlan.parse_mode(keys.mode)
    except ValueError as exc:
        raise InvalidConfig(f"{exc}; use bridge, private, vepa or passthru") from None
    if keys.bcqueuelen:
        raise UnsupportedField("bcqueuelen is not supported by pycni's macvlan")
    return MacvlanConf(
        master=keys.master,
        mode=mode,
        mtu=keys.mtu,
        mac=requested_mac(req),
        link_in_container=keys.link_in_container,
        ipam=ipam_type(req),
    )


def _master_ns(conf: MacvlanConf, pod: NetNS) -> AbstractContextManager[object]:
    """Where the master lives: the pod (linkInContainer) or here, the node."""
    return pod.entered() if conf.link_in_container else nullcontext()


def resolve_master(kernel: Kernel, conf: MacvlanConf) -> tuple[int, int]:
    """(index, MTU) of the master; picks the default-route link when none is configured."""
    if not conf.master:
        conf.master = macvlan.default_route_interface(kernel)
    try:
        index = index_of(kernel, conf.master)
    except LinkNotFound:
        raise internal(f'failed to lookup master "{conf.master}": Link not found') from None
    return index, kernel.link(index).mtu


class Macvlan(Plugin):
    about = "pycni macvlan: a macvlan sub-interface of a node link for the pod"

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        with req.open_netns() as pod, Rollback(req.env) as rb:
            with _master_ns(conf, pod), rtnl() as kernel:
                master_index, master_mtu = resolve_master(kernel, conf)
                if conf.mtu < 0 or conf.mtu > master_mtu:
                    raise InvalidConfig(
                        f"invalid MTU {conf.mtu}, must be [0, master MTU({master_mtu})]"
                    )
                rb.step("create")
                try:
                    tmp = macvlan.create_in_netns(
                        kernel, master_index, pod.fd, conf.mode, conf.mtu, conf.mac
                    )
                except (NetlinkError, ValueError) as exc:
                    raise internal(f"failed to create macvlan: {exc}") from None
            with pod.entered(), rtnl() as kernel:
                index = index_of(kernel, tmp)
                rb.push("create", lambda: delete_in_pod(pod, index))
                rb.step("rename")
                try:
                    kernel.set_link(index, name=req.ifname)
                except NetlinkError as exc:
                    raise internal(f'failed to rename macvlan to "{req.ifname}": {exc}') from None
                mac = kernel.link(index).mac
            iface = Interface(name=req.ifname, mac=mac, sandbox=req.netns)
            ipam = ipam_add(req, conf.ipam, rb) if conf.ipam else None
            result = pod_result(req, iface, ipam)
            rb.step("configure")
            with pod.entered(), rtnl() as kernel:
                if ipam is not None:
                    configure_pod_iface(kernel, req.ifname, index, result)
                else:
                    kernel.set_link(index, up=True)
        return result

    def delete(self, req: Request) -> None:
        ipam_passthrough(req, "DEL")
        delete_pod_link(req)

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        with req.open_netns() as pod:
            with _master_ns(conf, pod), rtnl() as kernel:
                _, master_mtu = resolve_master(kernel, conf)
                if conf.mtu < 0 or conf.mtu > master_mtu:
                    raise InvalidConfig(
                        f"invalid MTU {conf.mtu}, must be [0, master MTU({master_mtu})]"
                    )
            ipam_passthrough(req, "CHECK")
            prev, intf = prev_interface(req)
            with pod.entered(), rtnl() as kernel:
                index = _check_link(kernel, intf, conf.mode)
                check_ips_and_routes(kernel, req.ifname, index, prev)

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")


def _check_link(kernel: Kernel, intf: Interface, mode: str) -> int:
    if not intf.name:
        raise internal("Container interface name missing in prevResult")
    try:
        index = index_of(kernel, intf.name)
    except LinkNotFound:
        raise internal(f"Container Interface name in prevResult: {intf.name} not found") from None
    found = kernel.link(index)
    current = macvlan.mode_of(found)
    if not current:
        raise internal(f"Error: Container interface {intf.name} not of type macvlan")
    if current != mode:
        raise internal(f"Container macvlan mode {current} does not match expected value: {mode}")
    if intf.mac and intf.mac != found.mac:
        raise internal(
            f"Interface {intf.name} Mac {intf.mac} doesn't match container Mac: {found.mac}"
        )
    return index


PLUGIN = Macvlan()
