"""Is a lease read from etcd safe to turn into routes on this node?

Whatever etcd holds is hostile until checked: anyone who can write the subnets prefix could
otherwise route the node's default route, its own pod subnet or its underlay somewhere else.
A lease is used only when its subnet is one of the cluster network's node subnets (right
prefix length, inside the configured bounds), overlaps neither this node's subnet nor the
underlay nor any route the kernel or an administrator put on a link here, and it names a
usable unicast PublicIP (not this node's, not a network, broadcast or anycast address of
its networks) and (for vxlan) a well-formed unicast VtepMAC and our VNI; a VtepMAC (a
WireGuard key) another, older lease already claims is refused. Only canonical spellings
pass (a MAC in lower case, matched whole; a key exactly as base64 encodes its bytes): a
claim compares decoded bytes, and no second spelling of one value can slip past it.
Everything else is reported (one line per lease version) and ignored.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable

from pycni.cluster import subnet as sn
from pycni.cluster import wgkey
from pycni.cluster.lease import LeaseInfo
from pycni.record import field, record

MAC_RE = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")  # canonical: lower case, fullmatch
MAX_REPORTS_PER_PASS = 20  # log lines about bad leases per pass (a flood is summarised)

IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network


def _overlap(a: IPNet, b: IPNet) -> bool:
    return a.version == b.version and a.overlaps(b)


def _within(a: IPNet, b: IPNet) -> bool:
    return a.version == b.version and a.subnet_of(b)  # type: ignore[arg-type]


def _mac_problem(mac: object) -> str | None:
    """Why ``mac`` cannot be a remote VTEP's address (None when it can)."""
    if not isinstance(mac, str) or not MAC_RE.fullmatch(mac):
        return f"VtepMAC {str(mac)[:40]!r} is not a MAC address (lower-case aa:bb:cc:dd:ee:ff)"
    first = int(mac[:2], 16)
    if first & 1:
        return f"VtepMAC {mac} is a multicast/broadcast address"
    if mac == "00:00:00:00:00:00":
        return "VtepMAC is all zeros"
    return None


def address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why ``address`` cannot be a node's underlay address (None when it can)."""
    if (
        address.is_unspecified
        or address.is_loopback
        or address.is_multicast
        or address.is_link_local
        or address.is_reserved
    ):
        return f"PublicIP {address} is not a unicast node address"
    return None


def _wireguard_problem(info: LeaseInfo) -> str | None:
    """Why a wireguard lease's BackendData cannot be used (None: it can)."""
    key = info.backend_data.get("PublicKey")
    try:
        if not isinstance(key, str):
            raise wgkey.WgKeyError("missing")
        wgkey.decode_canonical(key)
    except wgkey.WgKeyError:
        return f"PublicKey {str(key)[:60]!r} is not a WireGuard key (canonical base64 of 32 bytes)"
    port = info.backend_data.get("ListenPort", 1)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return f"ListenPort {str(port)[:20]!r} is not a UDP port"
    return None


@record(frozen=True)
class NodeView:
    """What a lease is checked against: this node's network facts."""

    network: sn.NetworkConfig
    own: sn.Net
    backend_type: str
    public_ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    underlay_networks: tuple[IPNet, ...] = ()  # the underlay link's connected prefixes
    foreign_routes: tuple[tuple[IPNet, str], ...] = ()  # (dst, what) of routes not ours
    vni: int | None = None  # vxlan: the VNI peers must use
    # from the kernel's local table: this node's own addresses (any link), and the
    # broadcast, anycast and multicast addresses it answers as such
    local_addresses: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()
    special_addresses: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()


def _underlay_address_problem(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, view: NodeView
) -> str | None:
    """Why ``address`` cannot be another node's address as seen from this node: one of
    its own, or a network, broadcast or anycast address of a network it is on (the kernel
    refuses such a next hop or VTEP, or it reaches every node at once)."""
    if address in view.local_addresses:
        return f"PublicIP {address} is an address of this node"
    if address in view.special_addresses:
        return f"PublicIP {address} is a broadcast/anycast address on this node"
    for under in view.underlay_networks:
        if address not in under or under.num_addresses <= 2:  # /31, /32, /127, /128
            continue
        if address == under.network_address:
            return f"PublicIP {address} is the network address of the underlay {under}"
        if under.version == 4 and address == under.broadcast_address:
            return f"PublicIP {address} is the broadcast address of the underlay {under}"
    return None


def lease_problem(subnet: sn.Net, info: LeaseInfo, view: NodeView) -> str | None:
    """Why the lease of ``subnet`` must not be used on this node (None when it may)."""
    net = view.network
    if subnet.version != net.version:
        return f"an IPv{subnet.version} subnet, and this node has no IPv{subnet.version} network"
    if subnet.prefixlen != net.subnet_len:
        return f"prefix length /{subnet.prefixlen} is not the cluster's /{net.subnet_len}"
    if not _within(subnet, net.network):
        return f"outside the cluster network {net.network}"
    if not net.contains(subnet):
        return f"outside the leasable range {net.first.network_address}-{net.last}"
    if _overlap(subnet, view.own):
        return f"overlaps this node's subnet {view.own}"
    for under in view.underlay_networks:
        if _overlap(subnet, under):
            return f"overlaps the underlay {under}"
    for dst, what in view.foreign_routes:
        if _overlap(subnet, dst):
            return f"overlaps the route {what}, which is not the agent's"
    problem = address_problem(info.public_ip)
    if problem:
        return problem
    if info.public_ip.version != view.public_ip.version:
        return f"PublicIP {info.public_ip} is not of this node's underlay family"
    if info.public_ip in net.network:
        return f"PublicIP {info.public_ip} is inside the cluster network"
    if info.public_ip == view.public_ip:
        return f"PublicIP {info.public_ip} is this node's own address"
    problem = _underlay_address_problem(info.public_ip, view)
    if problem:
        return problem
    if info.backend_type != view.backend_type:
        return f"backend {info.backend_type[:20]!r}, this node runs {view.backend_type}"
    if view.backend_type == "host-gw" and not any(
        info.public_ip in under for under in view.underlay_networks
    ):
        return f"PublicIP {info.public_ip} is not on this node's underlay (host-gw needs one L2)"
    if view.backend_type == "wireguard":
        problem = _wireguard_problem(info)
        if problem:
            return problem
    if view.backend_type == "vxlan":
        problem = _mac_problem(info.backend_data.get("VtepMAC"))
        if problem:
            return problem
        vni = info.backend_data.get("VNI", view.vni)
        if view.vni is not None and vni != view.vni:
            return f"VNI {str(vni)[:20]!r} is not this node's {view.vni}"
    return None


def exclusive(
    remotes: dict[sn.Net, LeaseInfo],
    created: dict[sn.Net, int],
    claims: Callable[[LeaseInfo], set[str]],
    own: set[str],
) -> tuple[dict[sn.Net, LeaseInfo], dict[sn.Net, str]]:
    """The leases whose exclusive claims (a VTEP MAC, a WireGuard key) no other lease
    makes, and the others with why: of two leases claiming one thing the older one (lower
    create revision) keeps it, and nothing this node itself claims goes to a remote."""
    holder: dict[str, sn.Net] = {}
    kept: dict[sn.Net, LeaseInfo] = {}
    refused: dict[sn.Net, str] = {}
    for subnet in sorted(remotes, key=lambda s: (created.get(s, 0), s.version, s)):
        info = remotes[subnet]
        mine = claims(info)
        taken = sorted(c for c in mine if c in own)
        if taken:
            refused[subnet] = f"{taken[0]} is this node's own"
            continue
        clash = sorted((c, holder[c]) for c in mine if c in holder)
        if clash:
            claim, older = clash[0]
            refused[subnet] = f"{claim} is already the older lease {older}'s"
            continue
        for claim in mine:
            holder[claim] = subnet
        kept[subnet] = info
    return kept, refused


@record
class Rejections:
    """Bad leases already reported, so each version of one is logged once."""

    seen: dict[str, int] = field(default_factory=dict)  # key -> mod_revision reported

    def fresh(self, reports: Iterable[tuple[str, int, str]], *, complete: bool = True) -> list[str]:
        """Log lines for the reports not yet logged (capped per pass). ``complete``: the
        reports are every bad lease there is (a full pass), so keys no longer reported are
        forgotten; else (a watch event's few keys) they are added to those seen."""
        lines: list[str] = []
        current: dict[str, int] = {} if complete else dict(self.seen)
        skipped = 0
        for key, revision, reason in reports:
            current[key] = revision
            if self.seen.get(key) == revision:
                continue
            if len(lines) < MAX_REPORTS_PER_PASS:
                lines.append(f"ignoring lease {safe_key(key)}: {reason}")
            else:
                skipped += 1
        if skipped:
            lines.append(f"ignoring {skipped} more bad leases")
        self.seen = current
        return lines

    def forget(self, key: str) -> None:
        """``key`` is gone: report it again should it come back bad."""
        self.seen.pop(key, None)


def safe_key(key: str) -> str:
    """A key as it may appear in a log line (printable, bounded)."""
    text = "".join(c if c.isprintable() else "?" for c in key[:120])
    return text + ("..." if len(key) > 120 else "")
