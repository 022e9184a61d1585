"""What macvlan, tap and host-device share: config bits, IPAM around one pod interface.

These plugins hand the pod exactly one interface (index 0 of the result); when an IPAM type
is configured its addresses all go on that interface, and the result's DNS is the config's
``dns`` (the IPAM plugin's DNS is dropped, as the reference does). bridge and ptp use the
pod link's DEL and the ipMasq step from here too.
"""

from __future__ import annotations

from pycni.net.addr import configure_iface, validate_ips
from pycni.net.link import LinkNotFound, delete_by_name, set_arp_notify
from pycni.net.netlink.kernel import IPInterface, Kernel
from pycni.net.ns import NetNS, NetNSNotFound
from pycni.net.route import validate_routes
from pycni.net.sysctl import try_write
from pycni.record import record, replace
from pycni.skel.base import Request
from pycni.skel.config import DNSConf, IPAMRef, MacArg
from pycni.skel.rollback import Rollback
from pycni.spec.args import load_args
from pycni.spec.decode import Obj, Str, decode, option
from pycni.spec.errors import INTERNAL, CNIError, InvalidConfig
from pycni.spec.result import DNS, Interface, Result
from pycni.spec.validate import is_mac


def internal(msg: str) -> CNIError:
    return CNIError(INTERNAL, msg)


@record(frozen=True)
class CommonConf:
    """The keys macvlan, tap and host-device read alike."""

    ipam: IPAMRef = option("ipam", Obj(IPAMRef), factory=IPAMRef)
    dns: DNSConf = option("dns", Obj(DNSConf), factory=DNSConf)
    mac: str = option("mac", Str(max_len=64), "")


def ipam_type(req: Request) -> str:
    return decode(CommonConf, req.config).ipam.type


def config_dns(req: Request) -> DNS:
    """The config's ``dns`` section."""
    return decode(CommonConf, req.config).dns.to_dns()


def requested_mac(req: Request) -> str:
    """runtimeConfig.mac wins, then CNI_ARGS MAC, then the config's ``mac``; validated."""
    mac = decode(CommonConf, req.config).mac
    env_mac = load_args(req.args, known=["MAC"]).get("MAC", "")
    if env_mac:
        mac = env_mac
    rt_mac = decode(MacArg, req.runtime_config, "runtimeConfig").mac
    if rt_mac:
        mac = rt_mac
    if mac and not is_mac(mac):
        raise InvalidConfig(
            f"invalid args {mac} for MAC addr: want six hex bytes (02:aa:bb:cc:dd:ee)"
        )
    return mac.replace("-", ":").lower()


def ipam_add(req: Request, kind: str, rollback: Rollback) -> Result:
    """Run IPAM ADD and register its DEL as the undo; at least one IP is required."""
    rollback.step("ipam")
    found = req.delegate(kind)
    rollback.push("ipam", lambda: req.delegate(kind, command="DEL"))
    if found is None or not found.ips:
        raise internal("IPAM plugin returned missing IP config")
    return found


def pod_result(req: Request, iface: Interface, ipam: Result | None) -> Result:
    """The plugin's result: the one interface, IPAM's IPs pinned to it, IPAM's routes."""
    result = Result(cni_version=req.cni_version, interfaces=[iface], dns=config_dns(req))
    if ipam is not None:
        result.ips = [replace(ip, interface=0) for ip in ipam.ips]
        result.routes = list(ipam.routes)
    return result


def configure_pod_iface(
    req: Request, kernel: Kernel, index: int, result: Result, ndisc_notify: bool = True
) -> None:
    """In the pod (``kernel``, inside ``req.host.pod``): announce the addresses (arp/ndisc
    notify), add them to CNI_IFNAME, up, routes."""
    sysctl = req.host.sysctl(kernel)
    set_arp_notify(kernel, index)
    if ndisc_notify:  # best effort: IPv6 may be disabled in the pod
        try_write(sysctl, f"net/ipv6/conf/{req.ifname}/ndisc_notify", "1")
    configure_iface(kernel, sysctl, req.ifname, index, result)


def check_ips_and_routes(kernel: Kernel, ifname: str, index: int, prev: Result) -> None:
    validate_ips(kernel, ifname, index, prev, 0)
    validate_routes(kernel, ifname, prev.routes)


def prev_interface(req: Request) -> tuple[Result, Interface]:
    """CHECK's prevResult and its entry for CNI_IFNAME in CNI_NETNS (as the reference finds it)."""
    prev = req.prev_result()
    if prev is None:
        raise internal("Required prevResult missing")
    match = Interface(name="")
    for intf in prev.interfaces:
        if intf.name == req.ifname and intf.sandbox == req.netns:
            match = intf
    if match.sandbox != req.netns:
        raise internal(
            f"Sandbox in prevResult {match.sandbox} doesn't match configured netns: {req.netns}"
        )
    return prev, match


def ipam_passthrough(req: Request, command: str) -> None:
    """IPAM DEL/CHECK/STATUS when an IPAM type is configured."""
    kind = ipam_type(req)
    if kind:
        req.delegate(kind, command=command)


def delete_in_pod(req: Request, pod: NetNS, index: int) -> None:
    """Rollback step: remove the link this ADD created in the pod."""
    with req.host.pod(pod) as kernel:
        kernel.delete_link(index)


def delete_pod_link(req: Request) -> list[IPInterface] | None:
    """DEL: delete CNI_IFNAME in the pod and return its global addresses.

    A link already gone gives ``[]``; no namespace (none given, or already deleted) gives
    None, so a caller can still clean what is keyed by the attachment rather than the link.
    """
    if not req.netns:
        return None
    try:
        with req.open_netns() as pod, req.host.pod(pod) as kernel:
            try:
                return delete_by_name(kernel, req.ifname)
            except LinkNotFound:
                return []
    except NetNSNotFound:
        return None


def masquerade(rb: Rollback, backend: str, result: Result, network: str, req: Request) -> None:
    """bridge's and ptp's ipMasq step: masquerade the result's addresses, undone on failure."""
    from pycni.net.netfilter import ipmasq
    from pycni.net.netfilter.nft import NftError

    rb.step("ipmasq")
    ipns = [ipc.address for ipc in result.ips]
    ifname, cid = req.ifname, req.container_id
    masq = ipmasq.backend(backend)
    rb.push("ipmasq", lambda: ipmasq.teardown(masq, ipns, network, ifname, cid))
    try:
        masq.setup(ipns, network, ifname, cid)
    except (ipmasq.IPMasqError, NftError) as exc:
        raise CNIError(INTERNAL, f"failed to set up IP masquerading: {exc}") from None
