"""ptp: a veth pair per pod, routed (no bridge): the node end holds the gateway address.

ADD: IPAM ADD; forwarding on for each family; veth (``veth%08x`` on the node, CNI_IFNAME in
the pod); in the pod, the IPAM addresses and routes, then per address the automatic subnet
route is replaced by ``<gw>/32 scope link`` plus ``<subnet> via <gw>``; on the node,
``<gw>/32`` on the host end and ``<podIP>/32 dev <host end>``; optional masquerading. Every step
is undone if a later one fails. See docs/plugins/ptp.md.
"""

from __future__ import annotations

import contextlib
import ipaddress

from pycni.net import link, sysctl
from pycni.net.addr import configure_iface, validate_ips
from pycni.net.netfilter import ipmasq
from pycni.net.netfilter.nft_records import NftError
from pycni.net.netlink.kernel import IPAddress, IPInterface, Kernel, NetlinkError, Route
from pycni.net.ns import NetNS
from pycni.net.route import RTPROT_BOOT, RouteError, validate_routes
from pycni.net.veth import create_pair
from pycni.plugins.main.shared.masquerade import masquerade
from pycni.plugins.main.shared.pod_link import delete_pod_link
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.config import MTU, DNSConf, IPAMRef
from pycni.skel.rollback import Rollback
from pycni.spec.decode import Bool, Obj, Str, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import DNS, Interface, IPConfig, Result

SCOPE_LINK = 253
SCOPE_HOST = 254


_BACKEND = Str(
    choices=("", *ipmasq.BACKENDS),
    what='"nftables" or "iptables"',
    message='unknown ipmasq backend "{raw}" (use "nftables" or "iptables")',
)


@record
class PtpConf:
    """ptp's config, declared for the decoder (``name`` is set by :func:`load_conf`)."""

    ipam: IPAMRef = option("ipam", Obj(IPAMRef), factory=IPAMRef)
    ip_masq: bool = option("ipMasq", Bool(), False)
    ip_masq_backend: str = option("ipMasqBackend", _BACKEND, "")
    mtu: int = option("mtu", MTU(), 0)
    dns_conf: DNSConf = option("dns", Obj(DNSConf), factory=DNSConf)
    name: str = ""

    @property
    def ipam_type(self) -> str:
        return self.ipam.type

    @property
    def dns(self) -> DNS:
        return self.dns_conf.to_dns()


def load_conf(req: Request) -> PtpConf:
    conf = decode(PtpConf, req.config)
    if not conf.ipam_type:
        raise InvalidConfig("invalid config: ipam.type is required (ptp needs an IPAM plugin)")
    conf.ip_masq_backend = conf.ip_masq_backend or ipmasq.DEFAULT_BACKEND
    conf.name = req.name
    return conf


class Ptp(Plugin):
    about = "pycni ptp: a routed veth pair per pod"

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        with req.host.node() as node_kernel, req.open_netns() as pod, Rollback(req.env) as rb:
            return self._add(req, conf, rb, node_kernel, pod)

    def _add(
        self, req: Request, conf: PtpConf, rb: Rollback, node_kernel: Kernel, pod: NetNS
    ) -> Result:
        ifname = req.ifname
        rb.step("ipam")
        ipam_result = req.delegate(conf.ipam_type, "ADD")
        rb.push("ipam", lambda: req.delegate(conf.ipam_type, "DEL"))
        assert ipam_result is not None
        if not ipam_result.ips:
            raise InternalError("IPAM plugin returned missing IP config")
        for ipc in ipam_result.ips:
            if ipc.gateway is None:
                raise InternalError(
                    f"IPAM result for {ipc.address} has no gateway (ptp routes via it)"
                )

        rb.step("forwarding")
        for fam in sorted({ipc.address.version for ipc in ipam_result.ips}):
            sysctl.enable_forwarding(node_kernel, req.host.sysctl(node_kernel), fam)

        rb.step("veth")
        pair = create_pair(node_kernel, req.host.sysctl(node_kernel), pod.fd, ifname, conf.mtu)
        rb.push("veth", lambda: _delete_index(node_kernel, pair.host_index))

        with req.host.pod(pod) as pod_kernel:
            cont_link = link.get(pod_kernel, ifname)
        cont_index = cont_link.index
        result = Result(
            cni_version=req.cni_version,
            interfaces=[
                Interface(name=pair.host_name, mac=node_kernel.link(pair.host_index).mac),
                Interface(name=ifname, mac=cont_link.mac, sandbox=req.netns),
            ],
            ips=[IPConfig(ipc.address, ipc.gateway, interface=1) for ipc in ipam_result.ips],
            routes=ipam_result.routes,
            dns=ipam_result.dns,
        )

        rb.step("container-config")
        with req.host.pod(pod) as pod_kernel:
            configure_iface(pod_kernel, req.host.sysctl(pod_kernel), ifname, cont_index, result)
            _pod_routes(pod_kernel, cont_index, result)

        rb.step("host-config")
        try:
            _host_side(node_kernel, pair.host_index, result)
        except NetlinkError as exc:
            raise InternalError(f"failed to configure the host veth: {exc}") from None

        if conf.ip_masq:
            nf = req.host.netfilter(node_kernel)
            masquerade(nf, rb, conf.ip_masq_backend, result, conf.name, req)

        rb.step("done")
        if not conf.dns.is_empty():
            result.dns = conf.dns
        return result

    def delete(self, req: Request) -> None:
        conf = load_conf(req)
        req.delegate(conf.ipam_type, "DEL")  # first, as the reference
        ipnets: list[IPInterface] = delete_pod_link(req) or []
        if conf.ip_masq:
            # unlike the reference, also when the link was already gone (no IPs known): the
            # nftables rules are found by their comment, so they do not leak
            with req.host.node() as node_kernel:
                errors = ipmasq.teardown(
                    req.host.netfilter(node_kernel),
                    ipmasq.backend(conf.ip_masq_backend),
                    ipnets,
                    conf.name,
                    req.ifname,
                    req.container_id,
                )
            if errors:
                raise InternalError("; ".join(errors))

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        req.delegate(conf.ipam_type, "CHECK")
        prev = req.prev_result()
        if prev is None:
            raise InternalError("Required prevResult missing")
        result = prev.as_version("1.1.0")
        with req.open_netns() as pod, req.host.pod(pod) as pod_kernel:
            try:
                found = link.get(pod_kernel, req.ifname)
            except link.LinkNotFound:
                raise InternalError(f"Cannot find container link {req.ifname}") from None
            if found.kind != "veth":
                raise InternalError(f"Error: Container interface {req.ifname} not of type veth")
            for intf in result.interfaces:
                if (
                    intf.name == req.ifname
                    and intf.sandbox
                    and intf.mac
                    and intf.mac.lower() != found.mac.lower()
                ):
                    raise InternalError(
                        f"Interface {req.ifname} Mac {intf.mac} doesn't match container "
                        f"Mac: {found.mac}",
                    )
            idx = next(
                (i for i, f in enumerate(result.interfaces) if f.name == req.ifname and f.sandbox),
                1,
            )
            validate_ips(pod_kernel, req.ifname, found.index, result, idx)
            validate_routes(pod_kernel, req.ifname, result.routes)

    def gc(self, req: Request) -> None:
        conf = load_conf(req)
        req.delegate(conf.ipam_type, "GC")
        if conf.ip_masq:
            with contextlib.suppress(NftError, OSError), req.host.node() as node_kernel:
                ipmasq.gc(req.host.netfilter(node_kernel), conf.name, req.valid_attachments() or [])

    def status(self, req: Request) -> None:
        conf = load_conf(req)
        req.delegate(conf.ipam_type, "STATUS")


def _pod_routes(pod_kernel: Kernel, index: int, result: Result) -> None:
    """Replace each address's automatic subnet route by ``gw/32 scope link`` + ``subnet via gw``."""
    for ipc in result.ips:
        gw = ipc.gateway
        assert gw is not None
        subnet = ipc.address.network
        src = ipc.address.ip
        try:
            pod_kernel.delete_route(Route(dst=subnet, oif=index, scope=SCOPE_LINK))
        except NetlinkError as exc:
            raise RouteError(f"failed to delete route {subnet}: {exc}") from None
        for route in (
            Route(dst=_host_net(gw), oif=index, scope=SCOPE_LINK, prefsrc=src, proto=RTPROT_BOOT),
            Route(dst=subnet, oif=index, gateway=gw, prefsrc=src, proto=RTPROT_BOOT),
        ):
            try:
                pod_kernel.add_route(route)
            except (NetlinkError, ValueError) as exc:
                if not (isinstance(exc, NetlinkError) and exc.exists):
                    raise RouteError(f"failed to add route {route.dst}: {exc}") from None


def _host_side(node_kernel: Kernel, host_index: int, result: Result) -> None:
    """The gateway address on the host end and a host route to each pod address."""
    for ipc in result.ips:
        gw = ipc.gateway
        assert gw is not None
        try:
            node_kernel.add_address(host_index, ipaddress.ip_interface(gw))
        except NetlinkError as exc:
            if not exc.exists:
                raise
        try:
            node_kernel.add_route(
                Route(
                    dst=_host_net(ipc.address.ip),
                    oif=host_index,
                    scope=SCOPE_HOST,
                    proto=RTPROT_BOOT,  # as Go's netlink library: `ip route` shows no "proto"
                )
            )
        except NetlinkError as exc:
            if not exc.exists:
                raise


def _host_net(ip: IPAddress) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``ip/32`` (or ``/128``)."""
    return ipaddress.ip_network(ip)


def _delete_index(kernel: Kernel, index: int) -> None:
    with contextlib.suppress(NetlinkError):
        kernel.delete_link(index)


PLUGIN = Ptp()
