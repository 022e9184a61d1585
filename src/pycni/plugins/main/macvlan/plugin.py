"""macvlan: give the pod a macvlan of a node interface (``master``), L2 or with IPAM."""

from __future__ import annotations

from pycni.net import macvlan
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.plugins.main.shared.conf import checked_mac, ipam_type
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
from pycni.skel.mac import CNI_ARGS, CONFIG, RUNTIME_CONFIG
from pycni.skel.rollback import Rollback
from pycni.spec.decode import UINT32_MAX, Bool, IfName, Int, Str, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import Interface, Result

# macvlan.go loadConf: CNI_ARGS MAC, then runtimeConfig.mac override the config's "mac".
MAC_ORDER = (RUNTIME_CONFIG, CNI_ARGS, CONFIG)


@record(frozen=True)
class MacvlanKeys:
    """macvlan's own keys, declared for the decoder."""

    master: str = option("master", IfName(), "")
    mode: str = option("mode", Str(max_len=32), "")
    mtu: int = option("mtu", MTU("invalid MTU {value}, must be 0 or in [68, 65535]"), 0)
    bcqueuelen: int = option("bcqueuelen", Int(0, UINT32_MAX), 0)  # Go's uint32
    link_in_container: bool = option("linkInContainer", Bool(), False)


@record
class MacvlanConf:
    master: str
    mode: str
    mtu: int
    mac: str
    link_in_container: bool
    ipam: str
    bcqueuelen: int = 0


def load_conf(req: Request) -> MacvlanConf:
    """The static part of the config (no kernel lookups)."""
    keys = decode(MacvlanKeys, req.config)
    try:
        mode = macvlan.parse_mode(keys.mode)
    except ValueError as exc:
        raise InvalidConfig(f"{exc}; use bridge, private, vepa or passthru") from None
    return MacvlanConf(
        master=keys.master,
        mode=mode,
        mtu=keys.mtu,
        mac=checked_mac(req, MAC_ORDER),
        link_in_container=keys.link_in_container,
        ipam=ipam_type(req),
        bcqueuelen=keys.bcqueuelen,
    )


def resolve_master(kernel: Kernel, conf: MacvlanConf) -> tuple[int, int]:
    """(index, MTU) of the master; picks the default-route link when none is configured."""
    if not conf.master:
        conf.master = macvlan.default_route_interface(kernel)
    try:
        index = index_of(kernel, conf.master)
    except LinkNotFound:
        raise InternalError(f'failed to lookup master "{conf.master}": Link not found') from None
    return index, kernel.link(index).mtu


def _master_index(kernel: Kernel, conf: MacvlanConf) -> int:
    """The master's index, once its MTU is known to allow ``mtu``."""
    index, master_mtu = resolve_master(kernel, conf)
    if conf.mtu < 0 or conf.mtu > master_mtu:
        raise InvalidConfig(f"invalid MTU {conf.mtu}, must be [0, master MTU({master_mtu})]")
    return index


class Macvlan(Plugin):
    about = "pycni macvlan: a macvlan sub-interface of a node link for the pod"

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        with req.open_netns() as pod, Rollback(req.env) as rb:

            def create(kernel: Kernel) -> str:
                master_index = _master_index(kernel, conf)
                rb.step("create")
                try:
                    return macvlan.create_in_netns(
                        kernel,
                        master_index,
                        pod.fd,
                        conf.mode,
                        conf.mtu,
                        conf.mac,
                        conf.bcqueuelen,
                    )
                except (NetlinkError, ValueError) as exc:
                    raise InternalError(f"failed to create macvlan: {exc}") from None

            index, mac = add_in_pod(req, pod, rb, "macvlan", conf.link_in_container, create)
            iface = Interface(name=req.ifname, mac=mac, sandbox=req.netns)
            ipam = ipam_add(req, conf.ipam, rb) if conf.ipam else None
            result = pod_result(req, iface, ipam)
            rb.step("configure")
            with req.host.pod(pod) as pod_kernel:
                if ipam is not None:
                    configure_pod_iface(req, pod_kernel, index, result)
                else:
                    pod_kernel.set_link(index, up=True)
        return result

    def delete(self, req: Request) -> None:
        ipam_passthrough(req, "DEL")
        delete_pod_link(req)

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        with req.open_netns() as pod:
            with master_kernel(req, pod, conf.link_in_container) as kernel:
                _master_index(kernel, conf)
            ipam_passthrough(req, "CHECK")
            prev, intf = prev_interface(req)
            with req.host.pod(pod) as pod_kernel:
                index = _check_link(pod_kernel, intf, conf.mode)
                check_ips_and_routes(pod_kernel, req.ifname, index, prev)

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")

    def gc(self, req: Request) -> None:
        """The spec's duty (v1.9.1 leaves it undone): GC goes on to the IPAM plugin, which
        frees the reservations of attachments not in cni.dev/valid-attachments."""
        ipam_passthrough(req, "GC")


def _check_link(pod_kernel: Kernel, intf: Interface, mode: str) -> int:
    found = prev_link(pod_kernel, intf, "Container interface name missing in prevResult")
    current = macvlan.mode_of(found)
    if not current:
        raise InternalError(f"Error: Container interface {intf.name} not of type macvlan")
    if current != mode:
        raise InternalError(
            f"Container macvlan mode {current} does not match expected value: {mode}"
        )
    check_mac(intf, found)
    return found.index


PLUGIN = Macvlan()
