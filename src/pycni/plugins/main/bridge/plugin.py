"""bridge: a veth per pod, its host end a port of a Linux bridge, optional gateway and masquerade.

Drop-in for the reference ``bridge`` plugin (same config, result shape, kernel state and
firewall names). ADD is a sequence of named steps, each registering its undo, so a failure
anywhere leaves nothing behind. See docs/plugins/bridge.md for the config and the few
deliberate differences.
"""

from __future__ import annotations

import ipaddress

from pycni.net import bridge as br
from pycni.net import link, sysctl
from pycni.net.addr import configure_iface, validate_ips
from pycni.net.netfilter import ipmasq
from pycni.net.netfilter.nft_records import NftError
from pycni.net.netlink.kernel import (
    IFF_PROMISC,
    IPAddress,
    IPInterface,
    Kernel,
    Link,
    NetlinkError,
)
from pycni.net.ns import NetNS
from pycni.net.route import validate_routes
from pycni.net.veth import VethNameTaken, create_pair
from pycni.plugins.main.bridge import macspoofchk
from pycni.plugins.main.shared.masquerade import masquerade
from pycni.plugins.main.shared.pod_link import delete_pod_link
from pycni.record import field, record
from pycni.skel.base import Plugin, Request
from pycni.skel.config import MTU, DNSConf, IPAMRef
from pycni.skel.mac import ARGS, CNI_ARGS, RUNTIME_CONFIG, requested_mac
from pycni.skel.rollback import Rollback
from pycni.spec.decode import Bool, IfName, Int, ListOf, Obj, Str, decode, option
from pycni.spec.errors import (
    UNSUPPORTED_FIELD,
    CNIError,
    InternalError,
    InvalidConfig,
)
from pycni.spec.result import DNS, Interface, Result, Route
from pycni.spec.validate import is_mac

DEFAULT_BRIDGE = "cni0"
IF_CONTAINER = 2  # index of the pod interface in the result
_BACKEND = Str(
    choices=ipmasq.BACKENDS,
    what='"nftables" or "iptables"',
    message='unknown ipmasq backend "{raw}" (use "nftables" or "iptables")',
)
_MTU_RANGE = "invalid MTU {value} (must be 0 or between 68 and 65535)"
_VLAN_RANGE = "invalid VLAN ID {value} (must be between 0 and 4094)"


@record(frozen=True)
class TrunkEntry:
    """One ``vlanTrunk`` entry: a range ``minID``..``maxID`` and/or a single ``id``."""

    min_id: int | None = option("minID", Int())
    max_id: int | None = option("maxID", Int())
    id: int | None = option("id", Int())


@record
class BridgeConf:
    """The bridge plugin's config, declared for the decoder; checks as the reference's
    loadNetConf. The fields after ``port_isolation`` are derived by :func:`load_conf`."""

    bridge: str = option("bridge", IfName(), DEFAULT_BRIDGE)
    is_gateway: bool = option("isGateway", Bool(), False)
    is_default_gateway: bool = option("isDefaultGateway", Bool(), False)
    force_address: bool = option("forceAddress", Bool(), False)
    ip_masq: bool = option("ipMasq", Bool(), False)
    ip_masq_backend: str = option("ipMasqBackend", _BACKEND, ipmasq.DEFAULT_BACKEND)
    mtu: int = option("mtu", MTU(_MTU_RANGE), 0)
    hairpin: bool = option("hairpinMode", Bool(), False)
    promisc: bool = option("promiscMode", Bool(), False)
    vlan: int = option("vlan", Int(0, 4094, _VLAN_RANGE), 0)
    trunk: list[TrunkEntry] | None = option("vlanTrunk", ListOf(Obj(TrunkEntry)))
    preserve_default_vlan: bool = option("preserveDefaultVlan", Bool(), False)
    macspoofchk: bool = option("macspoofchk", Bool(), False)
    enable_dad: bool = option("enabledad", Bool(), False)
    disable_container_interface: bool = option("disableContainerInterface", Bool(), False)
    port_isolation: bool = option("portIsolation", Bool(), False)
    host_veth_ipv6: bool = option("hostVethIPv6", Bool(), False)
    ipam: IPAMRef = option("ipam", Obj(IPAMRef), factory=IPAMRef)
    dns_conf: DNSConf = option("dns", Obj(DNSConf), factory=DNSConf)
    name: str = ""
    vlans: list[int] = field(default_factory=list)
    dns: DNS = field(default_factory=DNS)
    mac: str = ""

    @property
    def ipam_type(self) -> str:
        return self.ipam.type

    @property
    def vlan_trunk_set(self) -> bool:
        return self.trunk is not None

    @property
    def layer3(self) -> bool:
        return self.ipam_type != ""

    @property
    def vlan_filtering(self) -> bool:
        return self.vlan != 0 or self.vlan_trunk_set


def _vlan_trunk(entries: list[TrunkEntry]) -> list[int]:
    """The reference's collectVlanTrunk: ranges and single IDs, deduplicated and sorted."""
    found: set[int] = set()
    for item in entries:
        lo, hi, one = item.min_id, item.max_id, item.id
        if lo is not None and hi is not None:
            if lo <= 0 or lo > 4094:
                raise InvalidConfig("incorrect trunk minID parameter")
            if hi <= 0 or hi > 4094:
                raise InvalidConfig("incorrect trunk maxID parameter")
            if hi < lo:
                raise InvalidConfig("minID is greater than maxID in trunk parameter")
            found.update(range(lo, hi + 1))
        elif lo is None and hi is not None:
            raise InvalidConfig(
                "minID and maxID should be configured simultaneously, minID is missing"
            )
        elif lo is not None and hi is None:
            raise InvalidConfig(
                "minID and maxID should be configured simultaneously, maxID is missing"
            )
        if one is not None:
            if one <= 0 or one > 4094:
                raise InvalidConfig("incorrect trunk id parameter")
            found.add(one)
    return sorted(found)


# bridge.go loadNetConf: CNI_ARGS MAC, then args.cni.mac, then runtimeConfig.mac override; the
# config's own "mac" key is never read (its Go field is unexported).
MAC_ORDER = (RUNTIME_CONFIG, ARGS, CNI_ARGS)


def load_conf(req: Request) -> BridgeConf:
    conf = decode(BridgeConf, req.config)
    conf.name = req.name
    conf.bridge = conf.bridge or DEFAULT_BRIDGE
    if conf.trunk is not None:
        conf.vlans = _vlan_trunk(conf.trunk)
    conf.dns = conf.dns_conf.to_dns()
    conf.mac = requested_mac(req, MAC_ORDER)
    if conf.mac and not is_mac(conf.mac, mixed_separators=True):
        raise InvalidConfig(f'invalid MAC address "{conf.mac}"')
    conf.mac = conf.mac.replace("-", ":").lower()
    if conf.is_default_gateway:
        conf.is_gateway = True
    return conf


def validate_for_add(conf: BridgeConf) -> None:
    if conf.layer3 and conf.disable_container_interface:
        raise InvalidConfig("cannot use IPAM when DisableContainerInterface flag is set")
    if conf.hairpin and conf.promisc:
        raise InvalidConfig("cannot set hairpin mode and promiscuous mode at the same time")
    if conf.vlan and conf.is_gateway and conf.layer3:
        gateway = br.vlan_gateway_name(conf.bridge, conf.vlan)
        if len(gateway.encode()) > 15:
            raise InvalidConfig(
                f'bridge "{conf.bridge}" is too long a name for vlan={conf.vlan}: the gateway '
                f'interface "{gateway}" would exceed 15 bytes; use a shorter bridge name'
            )


def _vlan_error(conf: BridgeConf) -> CNIError:
    what = f"vlan={conf.vlan}" if conf.vlan else f"vlanTrunk={conf.vlans}"
    return CNIError(
        UNSUPPORTED_FIELD,
        f"{what} needs bridge VLAN filtering, which this kernel does not support "
        "(CONFIG_BRIDGE_VLAN_FILTERING); remove vlan/vlanTrunk from the config",
    )


def _gateway_for(address: IPInterface) -> IPAddress:
    return address.network.network_address + 1


def calc_gateways(result: Result, conf: BridgeConf) -> dict[int, list[IPInterface]]:
    """The reference's calcGateways: IPs point at the pod interface, default gateways are
    network+1, a default route per family is added (unless IPAM gave one with a gw), and
    the gateway addresses (with the pod's prefix) to put on the bridge are collected."""
    gws: dict[int, list[IPInterface]] = {4: [], 6: []}
    default_found = {4: False, 6: False}
    for ipc in result.ips:
        fam = ipc.address.version
        default_net = ipaddress.ip_network("0.0.0.0/0" if fam == 4 else "::/0")
        ipc.interface = IF_CONTAINER
        if ipc.gateway is None and conf.is_gateway:
            ipc.gateway = _gateway_for(ipc.address)
        if conf.is_default_gateway:
            if not default_found[fam]:
                default_found[fam] = any(
                    r.gw is not None and r.dst == default_net for r in result.routes
                )
            if not default_found[fam]:
                result.routes.append(Route(dst=default_net, gw=ipc.gateway))
                default_found[fam] = True
        if conf.is_gateway and ipc.gateway is not None:
            gws[fam].append(
                ipaddress.ip_interface(f"{ipc.gateway}/{ipc.address.network.prefixlen}")
            )
    return gws


class Bridge(Plugin):
    about = "pycni bridge: veth pairs on a Linux bridge"

    # ---------------------------------------------------------------- ADD

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        validate_for_add(conf)
        # the undos use the node socket, so the rollback must run before it closes
        with req.host.node() as node_kernel, req.open_netns() as pod, Rollback(req.env) as rb:
            result = self._add(req, conf, rb, node_kernel, pod)
            if timings := rb.timings():
                req.log(f"bridge ADD {req.container_id} steps(ms): {timings}")
            return result

    def _add(
        self, req: Request, conf: BridgeConf, rb: Rollback, node_kernel: Kernel, pod: NetNS
    ) -> Result:
        ifname = req.ifname
        rb.step("bridge")
        try:
            info = br.ensure_bridge(
                node_kernel,
                req.host.sysctl(node_kernel),
                conf.bridge,
                conf.mtu,
                conf.promisc,
                conf.vlan_filtering,
            )
        except br.VlanFilteringUnsupported:
            raise _vlan_error(conf) from None
        except br.NotABridge as exc:
            raise InvalidConfig(f'failed to create bridge "{conf.bridge}": {exc}') from None
        if info.created:
            rb.push("bridge", lambda: br.delete_if_unused(node_kernel, conf.bridge))

        rb.step("veth")
        # enslaved at creation, IPv6 off before up unless asked (docs/plugins/bridge.md)
        pair = create_pair(
            node_kernel,
            req.host.sysctl(node_kernel),
            pod.fd,
            ifname,
            conf.mtu,
            conf.mac,
            info.index,
            conf.host_veth_ipv6,
        )
        rb.push("veth", lambda: _delete_index(node_kernel, pair.host_index))

        rb.step("port")
        br.set_port_flags(node_kernel, pair.host_index, conf.hairpin, conf.port_isolation)
        if conf.vlan_filtering:
            try:
                br.port_vlans(
                    node_kernel, pair.host_index, conf.vlan, conf.vlans, conf.preserve_default_vlan
                )
            except br.VlanFilteringUnsupported:
                raise _vlan_error(conf) from None

        with req.host.pod(pod) as pod_kernel:
            cont_link = link.get(pod_kernel, ifname)
        cont_index = cont_link.index
        result = Result(
            cni_version=req.cni_version,
            interfaces=[
                Interface(name=conf.bridge, mac=""),
                Interface(name=pair.host_name, mac=""),
                Interface(name=ifname, mac=cont_link.mac, sandbox=req.netns),
            ],
        )

        if conf.macspoofchk:
            rb.step("macspoofchk")
            ref = macspoofchk.ref_id(req.container_id, ifname)
            nft = req.host.netfilter(node_kernel).nft
            macspoofchk.setup(nft, pair.host_name, cont_link.mac, ref)
            rb.push("macspoofchk", lambda: macspoofchk.teardown(nft, ref))

        if conf.layer3:
            self._add_layer3(
                req, conf, rb, node_kernel, pod, cont_index, result, info.mac, info.index
            )
        elif not conf.disable_container_interface:
            rb.step("container-up")
            with req.host.pod(pod) as pod_kernel:
                pod_kernel.set_link(cont_index, up=True)

        host_link: Link | None = None
        if not conf.disable_container_interface:
            rb.step("port-up")
            host_link, state = link.wait_oper_up(node_kernel, pair.host_index)
            if host_link is None:
                raise InternalError(f"bridge port in error state: {state}")
        if host_link is None:  # no wait, so no fresh look at the port yet
            host_link = node_kernel.link(pair.host_index)

        # the port's MAC as the up check just read it: one RTM_GETLINK fewer per ADD
        result.interfaces[1].mac = host_link.mac
        result.interfaces[0].mac = link.get(node_kernel, conf.bridge).mac
        rb.step("done")
        if not conf.dns.is_empty():
            result.dns = conf.dns
        return result

    def _add_layer3(
        self,
        req: Request,
        conf: BridgeConf,
        rb: Rollback,
        node_kernel: Kernel,
        pod: NetNS,
        cont_index: int,
        result: Result,
        bridge_mac: str,
        bridge_index: int,
    ) -> None:
        ifname = req.ifname
        rb.step("ipam")
        ipam_result = req.delegate(conf.ipam_type, "ADD")
        rb.push("ipam", lambda: req.delegate(conf.ipam_type, "DEL"))
        rb.step("post-ipam")
        assert ipam_result is not None
        if not ipam_result.ips:
            raise InternalError("IPAM plugin returned missing IP config")
        result.ips = ipam_result.ips
        result.routes = ipam_result.routes
        result.dns = ipam_result.dns
        gateways = calc_gateways(result, conf)

        rb.step("container-config")
        with req.host.pod(pod) as pod_kernel:
            pod_sysctl = req.host.sysctl(pod_kernel)
            if conf.enable_dad:
                sysctl.try_write(pod_sysctl, f"net/ipv6/conf/{ifname}/enhanced_dad", "1")
                sysctl.try_write(pod_sysctl, f"net/ipv6/conf/{ifname}/accept_dad", "1")
            else:
                sysctl.try_write(pod_sysctl, f"net/ipv6/conf/{ifname}/accept_dad", "0")
            link.set_arp_notify(pod_kernel, cont_index)
            configure_iface(pod_kernel, pod_sysctl, ifname, cont_index, result)

        if conf.is_gateway:
            rb.step("gateway")
            target, target_mac, target_index = conf.bridge, bridge_mac, bridge_index
            if conf.vlan and (gateways[4] or gateways[6]):
                # the reference pins the gateway veth's MAC to its own, read on creation
                target, target_mac, target_index = self._vlan_gateway(
                    req, conf, rb, node_kernel, result, bridge_index
                )
            for fam in (4, 6):
                for gw in gateways[fam]:
                    try:
                        added = br.ensure_addr(
                            node_kernel, target, gw, conf.force_address, target_mac, target_index
                        )
                    except br.AddressConflict as exc:
                        what = "vlan interface for bridge with" if conf.vlan else "bridge"
                        raise InternalError(f"failed to set {what} addr: {exc}") from None
                    if added:
                        rb.push(
                            f"gateway {gw}",
                            lambda gw=gw: br.remove_addr(node_kernel, target, gw),  # type: ignore[misc]
                        )
                if gateways[fam]:
                    rb.step("forwarding")
                    sysctl.enable_forwarding(node_kernel, req.host.sysctl(node_kernel), fam)

        if conf.ip_masq:
            nf = req.host.netfilter(node_kernel)
            masquerade(nf, rb, conf.ip_masq_backend, result, conf.name, req)

    def _vlan_gateway(
        self,
        req: Request,
        conf: BridgeConf,
        rb: Rollback,
        node_kernel: Kernel,
        result: Result,
        bridge_index: int,
    ) -> tuple[str, str, int]:
        """With ``vlan`` the gateway addresses go on ``<bridge>.<vlan>`` (a veth whose peer
        is a port of the bridge in that VLAN), listed after the pod interface in the result,
        as the reference does; the bridge itself gets none. Its name, MAC and index."""
        try:
            with req.host.node_netns() as here:
                gateway = br.ensure_vlan_gateway(
                    node_kernel,
                    req.host.sysctl(node_kernel),
                    here.fd,
                    bridge_index,
                    conf.bridge,
                    conf.vlan,
                    conf.preserve_default_vlan,
                    conf.host_veth_ipv6,
                )
        except br.VlanFilteringUnsupported:
            raise _vlan_error(conf) from None
        except (NetlinkError, VethNameTaken, RuntimeError) as exc:
            raise InternalError(f"failed to create vlan interface: {exc}") from None
        if gateway.created:
            rb.push("vlan-gateway", lambda: _delete_index(node_kernel, gateway.index))
        result.interfaces.append(Interface(name=gateway.name, mac=gateway.mac))
        return gateway.name, gateway.mac, gateway.index

    # ---------------------------------------------------------------- DEL

    def delete(self, req: Request) -> None:
        conf = load_conf(req)
        # Without a namespace (none given, or already deleted) there is no link to remove,
        # but unlike the reference we still remove the firewall rules: they are keyed by
        # the attachment, not by anything inside the namespace.
        found = delete_pod_link(req)
        netns_gone = found is None
        ipnets: list[IPInterface] = found or []
        self._ipam_del(req, conf)
        errors: list[str] = []
        masq = conf.layer3 and conf.ip_masq
        if not (conf.macspoofchk or netns_gone or masq):
            return
        with req.host.node() as node_kernel:
            nf = req.host.netfilter(node_kernel)
            if conf.macspoofchk or netns_gone:
                try:
                    macspoofchk.teardown(nf.nft, macspoofchk.ref_id(req.container_id, req.ifname))
                except (NftError, OSError) as exc:
                    req.log(f"macspoofchk teardown: {exc}")
            if masq:
                errors += ipmasq.teardown(
                    nf,
                    ipmasq.backend(conf.ip_masq_backend),
                    ipnets,
                    conf.name,
                    req.ifname,
                    req.container_id,
                )
        if errors:
            raise InternalError("; ".join(errors))

    def _ipam_del(self, req: Request, conf: BridgeConf) -> None:
        if conf.layer3:
            req.delegate(conf.ipam_type, "DEL")

    # ---------------------------------------------------------------- CHECK

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        with req.open_netns() as pod:
            req.delegate(conf.ipam_type, "CHECK")
            prev = req.prev_result()
            if prev is None:
                raise InternalError("Required prevResult missing")
            result = prev.as_version("1.1.0")
            self._check(req, conf, pod, result)

    def _check(self, req: Request, conf: BridgeConf, pod: NetNS, result: Result) -> None:
        br_if = next((i for i in result.interfaces if i.name == conf.bridge), None)
        cont_if = next(
            (i for i in result.interfaces if i.name == req.ifname and i.sandbox == req.netns),
            None,
        )
        with req.host.node() as node_kernel:
            if br_if is None:
                raise InternalError("Interface name missing ")
            try:
                br_link = link.get(node_kernel, br_if.name)
            except link.LinkNotFound:
                raise InternalError(f"Interface name {br_if.name} not found") from None
            if br_if.sandbox:
                raise InternalError(f"Interface {br_if.name} should not be in sandbox")
            if br_link.kind != "bridge":
                raise InternalError(f"Interface {br_if.name} does not have link type of bridge")
            if br_if.mac and br_if.mac != br_link.mac:
                raise InternalError(f"Bridge interface {br_if.name} Mac doesn't match: {br_if.mac}")
            promisc = bool(br_link.flags & IFF_PROMISC)
            if promisc != conf.promisc:
                raise InternalError(
                    f"Bridge interface {br_if.name} configured Promisc Mode "
                    f"{str(conf.promisc).lower()} doesn't match current state: "
                    f"{str(promisc).lower()} ",
                )
            br_index = br_link.index
            if cont_if is None:
                sandbox = ""
                raise InternalError(
                    f"Sandbox in prevResult {sandbox} doesn't match configured netns: {req.netns}",
                )
            with req.host.pod(pod) as pod_kernel:
                try:
                    cont_link = link.get(pod_kernel, cont_if.name)
                except link.LinkNotFound:
                    raise InternalError(f"Interface name {cont_if.name} not found") from None
                if cont_link.kind != "veth":
                    raise InternalError(
                        f"Error: Container interface {cont_if.name} not of type veth"
                    )
                if cont_if.mac and cont_if.mac != cont_link.mac:
                    raise InternalError(
                        f"Interface {cont_if.name} Mac {cont_if.mac} doesn't match container "
                        f"Mac: {cont_link.mac}",
                    )
            cont_index = cont_link.index
            peer = cont_link.peer_index
            found_veth = False
            for intf in result.interfaces:
                if intf.name in (br_if.name, cont_if.name):
                    continue
                try:
                    host_link = link.get(node_kernel, intf.name)
                except link.LinkNotFound:
                    raise InternalError(f"Interface name {intf.name} not found") from None
                if host_link.kind != "veth":
                    continue
                if host_link.index != peer or host_link.peer_index != cont_index:
                    continue
                if host_link.master != br_index:
                    continue
                if intf.mac and intf.mac != host_link.mac:
                    raise InternalError(
                        f"Interface {intf.name} Mac doesn't match: {intf.mac} not found"
                    )
                found_veth = True
                break
            if not found_veth:
                raise InternalError(f"CNI veth created for bridge {conf.bridge} was not found")
        with req.host.pod(pod) as pod_kernel:
            validate_ips(pod_kernel, req.ifname, cont_index, result, IF_CONTAINER)
            validate_routes(pod_kernel, req.ifname, result.routes)

    # ---------------------------------------------------------------- GC / STATUS

    def gc(self, req: Request) -> None:
        conf = load_conf(req)
        if conf.layer3:
            req.delegate(conf.ipam_type, "GC")
        valid = req.valid_attachments() or []
        with req.host.node() as node_kernel:
            nf = req.host.netfilter(node_kernel)
            try:
                ipmasq.gc(nf, conf.name, valid)
            except (NftError, OSError) as exc:
                if nf.nft.available():
                    raise InternalError(
                        f"failed to garbage-collect masquerade rules: {exc}"
                    ) from None

    def status(self, req: Request) -> None:
        conf = load_conf(req)
        if conf.layer3:
            req.delegate(conf.ipam_type, "STATUS")


def _delete_index(kernel: Kernel, index: int) -> None:
    try:
        kernel.delete_link(index)
    except NetlinkError as exc:
        if not exc.no_such_link:
            raise


PLUGIN = Bridge()
