"""The chain layout of the nftables backend: one chain per attachment, entered through
verdict maps.

Used for attachments whose config has ``conditionsV4``/``conditionsV6`` (their extra matches
need rules of their own), and to remove what an earlier pycni version made this way for every
attachment. Each attachment owns one chain, ``pm-<network hash>-<attachment hash>``, named
from the network name, container ID and ifname. It holds, per mapping and family, an optional
mark rule (hairpin from the pod's subnet and localhost, or everything with masqAll) and a
``dnat`` rule whose comment records the verdict-map element (``hostip4``, ``hostip6``,
``ports4``, ``ports6``) that jumps to the chain. DEL reads only that chain (a kernel-filtered
dump), then deletes its elements and the chain in one netlink batch.

Cost: adding the chain's rules goes through libnftables, which loads every chain and map
element of the namespace first, so this layout's ADD grows with the pod count; the map layout
(nft_maps.py) does not.
"""

from __future__ import annotations

import ipaddress

from pycni.net.netfilter import model, nft_records, rule_matches
from pycni.net.netfilter.nft_records import NftError
from pycni.plugins.meta.portmap.config import PROTOCOLS, IPInterface, PortMapConfig, PortMapping
from pycni.record import record
from pycni.spec.errors import InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pycni.net.netfilter.nft_seam import Nftables

FAMILY = "inet"
TABLE = "pycni_portmap"
T = f"{FAMILY} {TABLE}"
TABLE_OBJ = model.Table(FAMILY, TABLE)
CHAIN_PREFIX = "pm-"
KEY_COMMENT = "k "
MAPS = {
    "hostip4": "ipv4_addr . inet_proto . inet_service",
    "hostip6": "ipv6_addr . inet_proto . inet_service",
    "ports4": "inet_proto . inet_service",
    "ports6": "inet_proto . inet_service",
}
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _hash(text: str, length: int) -> str:
    import hashlib  # loads OpenSSL: only the conditioned mappings' chains are named by it

    return hashlib.sha512(text.encode()).hexdigest()[:length]


def network_prefix(network: str) -> str:
    """Chains of one network share this prefix, so GC touches only its own network."""
    return f"{CHAIN_PREFIX}{_hash(network, 8)}-"


def chain_name(network: str, container_id: str, ifname: str) -> str:
    return network_prefix(network) + _hash(f"{network}\0{container_id}\0{ifname}", 20)


@record(frozen=True)
class Element:
    """One verdict-map element: map name and key in nft syntax (``tcp . 8080``)."""

    map: str
    key: str

    @property
    def comment(self) -> str:
        return f"{KEY_COMMENT}{self.map} {self.key}"

    @classmethod
    def from_comment(cls, comment: str) -> Element | None:
        """The element a DNAT rule's comment records; None unless it is one we could write."""
        if not comment.startswith(KEY_COMMENT):
            return None
        parts = comment[len(KEY_COMMENT) :].split(" ", 1)
        if len(parts) != 2 or parts[0] not in MAPS:
            return None
        element = cls(parts[0], parts[1])
        return element if element.key_parts() is not None else None

    def key_parts(self) -> list[str | int] | None:
        """The key as libnftables JSON ``concat`` parts; None when it is not a key of ours."""
        parts = self.key.split(" . ")
        want = 3 if self.map.startswith("hostip") else 2
        if len(parts) != want:
            return None
        out: list[str | int] = []
        if want == 3:
            try:
                addr = ipaddress.ip_address(parts[0])
            except ValueError:
                return None
            if addr.version != int(self.map[-1]):
                return None
            out.append(str(addr))
        proto, port = parts[-2], parts[-1]
        if proto not in PROTOCOLS or not port.isdigit() or not 0 < int(port) <= 65535:
            return None
        return [*out, proto, int(port)]


def element_of(mapping: PortMapping, family: int) -> Element:
    host = mapping.host_match(family)
    if host is None:
        return Element(f"ports{family}", f"{mapping.protocol} . {mapping.host_port}")
    return Element(f"hostip{family}", f"{host} . {mapping.protocol} . {mapping.host_port}")


def _addr(family: int) -> str:
    return "ip" if family == 4 else "ip6"


def _prefix(net: IPNetwork) -> model.Value:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return model.Prefix(str(net.network_address), net.prefixlen)


_MARK = model.Meta("mark")


def pod_rules(cfg: PortMapConfig) -> tuple[list[model.Rule], list[Element]]:
    """The attachment chain's rules and the map elements that must jump to it."""
    chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
    rules: list[model.Rule] = []
    elements: list[Element] = []
    for family in (4, 6):
        cip = cfg.container_ips.get(family)
        if cip is None:
            continue
        conds = rule_matches.nft_statements(cfg.conditions(family), family)
        for m in cfg.mappings_for(family):
            host = m.host_match(family)
            if host is not None:
                dst = model.Match(model.Payload(_addr(family), "daddr"), str(host))
            else:
                dst = model.Match(model.Meta("nfproto"), f"ipv{family}")
            match: list[model.Statement] = [
                dst,
                model.Match(model.Payload(m.protocol, "dport"), m.host_port),
                *conds,
            ]
            if cfg.snat:
                mark = model.Mangle(_MARK, model.BitOr(_MARK, cfg.mark))
                rules += [
                    model.Rule(TABLE_OBJ, chain, [*src, *match, mark])
                    for src in _masq_sources(cip, family, cfg.masq_all)
                ]
            dnat = model.Dnat(_addr(family), str(cip.ip), m.container_port)
            element = element_of(m, family)
            rules.append(model.Rule(TABLE_OBJ, chain, [*match, dnat], element.comment))
            if element not in elements:
                elements.append(element)
    return rules, elements


def _masq_sources(cip: IPInterface, family: int, masq_all: bool) -> list[list[model.Statement]]:
    """Sources whose DNATed packets must be masqueraded: hairpin (the pod's subnet) and
    localhost for IPv4 (needs route_localnet); ``masqAll`` means every source. One rule per
    source rather than an anonymous set: every anonymous set is a kernel set object whose
    elements libnftables fetches on each transaction, which made the cost grow per pod."""
    if masq_all:
        return [[]]
    saddr = model.Payload(_addr(family), "saddr")
    out: list[list[model.Statement]] = [[model.Match(saddr, _prefix(cip.network))]]
    if family == 4:
        out.append([model.Match(saddr, "127.0.0.1")])
    return out


def _chain(name: str) -> model.Chain:
    return model.Chain(TABLE_OBJ, name)


def _element(e: Element, target: str = "") -> tuple[model.Set, list[model.Element]]:
    """The verdict map and its element (with the jump to ``target``) for ``e``."""
    parts = e.key_parts()
    if parts is None:
        raise ValueError(f"not a portmap map key: {e.key!r}")
    verdict = model.Verdict("jump", target) if target else None
    return model.Set(TABLE_OBJ, e.map), [model.Element(model.Concat(tuple(parts)), verdict)]


def add_commands(cfg: PortMapConfig) -> list[Any]:
    """One transaction: the attachment chain (rebuilt) and its map elements (the shared
    scaffolding must exist: nft_backend.ensure_scaffold)."""
    chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
    rules, elements = pod_rules(cfg)
    cmds: list[Any] = [model.add(_chain(chain)), model.flush(_chain(chain))]
    cmds += [model.add(rule) for rule in rules]
    cmds += [model.add(*_element(e, chain)) for e in elements]
    return cmds


def delete_commands(chain: str, elements: list[Element]) -> list[Any]:
    cmds = [model.delete(*_element(e)) for e in elements if e.key_parts() is not None]
    cmds += [model.flush(_chain(chain)), model.delete(_chain(chain))]
    return cmds


def _key_text(key: model.Value | bytes) -> str:
    if isinstance(key, model.Concat):
        return " . ".join(str(part) for part in key.parts)
    return str(key)


def map_elements(items: list[dict[str, Any]]) -> dict[Element, str]:
    """Every vmap element of our maps in a JSON listing, with the chain it jumps to."""
    out: dict[Element, str] = {}
    for found in model.parse(items).sets:
        if found.kind == "map" and found.name in MAPS:
            for e in found.elements:
                out[Element(found.name, _key_text(e.key))] = e.target()
    return out


def chain_rules(nft: Nftables, chain: str) -> list[model.Rule] | None:
    """The rules of one chain, None when it (or the table) does not exist."""
    try:
        items = nft.query(f"list chain {T} {chain}")
    except NftError:
        return None
    return model.parse(items).rules


def _comments(rules: list[model.Rule]) -> list[str]:
    return [r.comment for r in rules if r.comment]


def _all_elements(
    nft: Nftables,
) -> dict[Element, str]:
    out: dict[Element, str] = {}
    for name in MAPS:
        try:
            out.update(map_elements(nft.query(f"list map {T} {name}")))
        except NftError:
            continue
    return out


# ---------------------------------------------------------------------------------------------
# Verbs


def add(nft: Nftables, cfg: PortMapConfig) -> None:
    """One transaction: it happens whole or not at all (the scaffolding must exist)."""
    try:
        nft.apply_json(add_commands(cfg))
    except NftError as exc:
        if "File exists" not in str(exc):
            raise InternalError(f"portmap: nftables ADD failed: {exc}") from None
        chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
        taken = [
            e
            for e, target in _all_elements(nft).items()
            if target != chain and e in pod_rules(cfg)[1]
        ]
        shown = ", ".join(f"{e.key} ({e.map})" for e in taken) or str(exc)
        raise InternalError(
            f"portmap: host port already mapped by another attachment: {shown}"
        ) from None


def _delete_fast(nft: Nftables, chain: str, comments: list[str]) -> bool:
    """DEL without libnftables: the chain's map elements (recorded in its rule comments) and
    the chain in one netlink batch. libnftables would first load every chain and map element
    of the namespace (O(pods)). False when this cannot be done so (no element recorded, or
    the kernel refused: drifted state), so the caller takes the slow path."""
    elements = [e for c in comments if (e := Element.from_comment(c)) is not None]
    if not elements:
        return False
    try:
        changes: list[nft_records.ElementChange | nft_records.ChainRemoval] = [
            model.Element(model.Concat(tuple(e.key.split(" . ")))).change(e.map, False)
            for e in dict.fromkeys(elements)
        ]
        nft.change_elements(FAMILY, TABLE, [*changes, model.chain_removal(_chain(chain))])
    except (OSError, ValueError):
        return False
    return True


def delete(nft: Nftables, network: str, container_id: str, ifname: str) -> bool:
    """Remove this attachment's chain and elements; False when there was nothing. The chain's
    rules are read by a kernel-filtered dump, so an attachment without a chain (every one
    in the map layout) costs one netlink round trip here."""
    chain = chain_name(network, container_id, ifname)
    try:
        comments: list[str] | None = [r.comment for r in nft.chain_rules(FAMILY, TABLE, chain)]
    except OSError:
        comments = None
    if comments == []:
        return False  # no such chain (an empty one is left to GC)
    if comments is not None and _delete_fast(nft, chain, comments):
        return True
    rules = chain_rules(nft, chain)
    if rules is None:
        return False
    elements = [e for c in _comments(rules) if (e := Element.from_comment(c)) is not None]
    try:
        nft.apply_json(delete_commands(chain, list(dict.fromkeys(elements))))
    except NftError:
        # Drifted state (an element already gone, or one we did not record): find the
        # elements that really jump to the chain and try once more.
        pointing = [e for e, target in _all_elements(nft).items() if target == chain]
        try:
            nft.apply_json(delete_commands(chain, pointing))
        except NftError as exc:
            raise InternalError(f"portmap: nftables DEL failed: {exc}") from None
    return True


def check(nft: Nftables, cfg: PortMapConfig) -> None:
    chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
    expected_rules, expected_elements = pod_rules(cfg)
    if not expected_rules:
        return
    rules = chain_rules(nft, chain)
    if rules is None:
        raise InternalError(f"portmap: nftables chain {chain} of this attachment is missing")
    if len(rules) < len(expected_rules):
        raise InternalError(
            f"portmap: chain {chain} has {len(rules)} rules, expected {len(expected_rules)}",
        )
    comments = set(_comments(rules))
    elements = _all_elements(nft)
    for element in expected_elements:
        if element.comment not in comments:
            raise InternalError(f"portmap: no DNAT rule for {element.key} in {chain}")
        if elements.get(element) != chain:
            raise InternalError(
                f"portmap: map {element.map} does not send {element.key} to {chain}"
            )


def gc(nft: Nftables, network: str, valid: list[tuple[str, str]]) -> list[str]:
    """Delete this network's attachment chains not in ``valid``; returns the chains removed."""
    try:
        items = nft.query(f"list table {T}")
    except NftError:
        return []
    keep = {chain_name(network, cid, ifname) for cid, ifname in valid}
    prefix = network_prefix(network)
    stale = [
        c.name
        for c in model.parse(items).chains
        if c.name.startswith(prefix) and c.name not in keep
    ]
    if not stale:
        return []
    elements = map_elements(items)
    cmds: list[Any] = []
    for chain in stale:
        pointing = [e for e, target in elements.items() if target == chain]
        cmds += delete_commands(chain, pointing)
    try:
        nft.apply_json(cmds)
    except NftError as exc:
        raise InternalError(f"portmap: nftables GC failed: {exc}") from None
    return stale
