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

from pycni.net.netfilter import nft, nftnl, rule_matches
from pycni.plugins.meta.portmap.config import PROTOCOLS, IPInterface, PortMapConfig, PortMapping
from pycni.record import record
from pycni.spec import jsoncodec
from pycni.spec.errors import INTERNAL, CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FAMILY = "inet"
TABLE = "pycni_portmap"
T = f"{FAMILY} {TABLE}"
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


def _eq(left: dict[str, Any], right: Any) -> dict[str, Any]:
    return {"match": {"op": "==", "left": left, "right": right}}


def _payload(protocol: str, field: str) -> dict[str, Any]:
    return {"payload": {"protocol": protocol, "field": field}}


def _prefix(net: IPNetwork) -> Any:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


_MARK = {"meta": {"key": "mark"}}


@record
class PodRule:
    """One rule of an attachment chain: libnftables JSON expressions and an optional comment."""

    expr: list[dict[str, Any]]
    comment: str = ""

    def command(self, chain: str) -> dict[str, Any]:
        rule: dict[str, Any] = {"family": FAMILY, "table": TABLE, "chain": chain}
        rule["expr"] = self.expr
        if self.comment:
            rule["comment"] = self.comment
        return {"add": {"rule": rule}}


def pod_rules(cfg: PortMapConfig) -> tuple[list[PodRule], list[Element]]:
    """The attachment chain's rules and the map elements that must jump to it."""
    rules: list[PodRule] = []
    elements: list[Element] = []
    for family in (4, 6):
        cip = cfg.container_ips.get(family)
        if cip is None:
            continue
        conds = rule_matches.nft_exprs(cfg.conditions(family), family)
        for m in cfg.mappings_for(family):
            host = m.host_match(family)
            if host is not None:
                dst = _eq(_payload(_addr(family), "daddr"), str(host))
            else:
                dst = _eq({"meta": {"key": "nfproto"}}, f"ipv{family}")
            match = [dst, _eq(_payload(m.protocol, "dport"), m.host_port), *conds]
            if cfg.snat:
                mark = {"mangle": {"key": _MARK, "value": {"|": [_MARK, cfg.mark]}}}
                rules += [
                    PodRule([*src, *match, mark])
                    for src in _masq_sources(cip, family, cfg.masq_all)
                ]
            to = {"family": _addr(family), "addr": str(cip.ip), "port": m.container_port}
            dnat = {"dnat": to}
            element = element_of(m, family)
            rules.append(PodRule([*match, dnat], element.comment))
            if element not in elements:
                elements.append(element)
    return rules, elements


def _masq_sources(cip: IPInterface, family: int, masq_all: bool) -> list[list[dict[str, Any]]]:
    """Sources whose DNATed packets must be masqueraded: hairpin (the pod's subnet) and
    localhost for IPv4 (needs route_localnet); ``masqAll`` means every source. One rule per
    source rather than an anonymous set: every anonymous set is a kernel set object whose
    elements libnftables fetches on each transaction, which made the cost grow per pod."""
    if masq_all:
        return [[]]
    saddr = _payload(_addr(family), "saddr")
    out = [[_eq(saddr, _prefix(cip.network))]]
    if family == 4:
        out.append([_eq(saddr, "127.0.0.1")])
    return out


def _obj(kind: str, **fields: Any) -> dict[str, Any]:
    return {kind: {"family": FAMILY, "table": TABLE, **fields}}


def _flush(chain: str) -> dict[str, Any]:
    return {"flush": _obj("chain", name=chain)}


def _element(e: Element, verdict: dict[str, Any] | None = None) -> dict[str, Any]:
    parts = e.key_parts()
    if parts is None:
        raise ValueError(f"not a portmap map key: {e.key!r}")
    key: Any = {"concat": parts}
    return _obj("element", name=e.map, elem=[[key, verdict] if verdict else key])


def add_commands(cfg: PortMapConfig) -> list[dict[str, Any]]:
    """One transaction: the attachment chain (rebuilt) and its map elements (the shared
    scaffolding must exist: nft_backend.ensure_scaffold)."""
    chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
    rules, elements = pod_rules(cfg)
    cmds: list[dict[str, Any]] = [{"add": _obj("chain", name=chain)}, _flush(chain)]
    cmds += [rule.command(chain) for rule in rules]
    cmds += [{"add": _element(e, {"jump": {"target": chain}})} for e in elements]
    return cmds


def add_script(cfg: PortMapConfig) -> str:
    """:func:`add_commands` as the JSON text libnftables reads."""
    return jsoncodec.dumps({"nftables": add_commands(cfg)})


def delete_commands(chain: str, elements: list[Element]) -> list[dict[str, Any]]:
    cmds = [{"delete": _element(e)} for e in elements if e.key_parts() is not None]
    cmds += [_flush(chain), {"delete": _obj("chain", name=chain)}]
    return cmds


def delete_script(chain: str, elements: list[Element]) -> str:
    """:func:`delete_commands` as JSON text (``nft.apply`` accepts it)."""
    return jsoncodec.dumps({"nftables": delete_commands(chain, elements)})


# ---------------------------------------------------------------------------------------------
# Reading the ruleset back


def _key_text(key: Any) -> str:
    if isinstance(key, dict) and "elem" in key:
        key = key["elem"].get("val")
    if isinstance(key, dict) and "concat" in key:
        return " . ".join(str(part) for part in key["concat"])
    return str(key)


def _jump_target(value: Any) -> str:
    if isinstance(value, dict):
        for verdict in ("jump", "goto"):
            if verdict in value:
                return str(value[verdict].get("target", ""))
    return ""


def map_elements(items: list[dict[str, Any]]) -> dict[Element, str]:
    """Every vmap element of our maps in a JSON listing, with the chain it jumps to."""
    out: dict[Element, str] = {}
    for item in items:
        m = item.get("map")
        if not m or m.get("name") not in MAPS:
            continue
        for pair in m.get("elem", []):
            if isinstance(pair, list) and len(pair) == 2:
                out[Element(m["name"], _key_text(pair[0]))] = _jump_target(pair[1])
    return out


def chain_rules(chain: str) -> list[dict[str, Any]] | None:
    """The rules of one chain, None when it (or the table) does not exist."""
    try:
        items = nft.query(f"list chain {T} {chain}")
    except nft.NftError:
        return None
    return [item["rule"] for item in items if "rule" in item]


def _comments(rules: list[dict[str, Any]]) -> list[str]:
    return [str(r["comment"]) for r in rules if "comment" in r]


def _all_elements() -> dict[Element, str]:
    out: dict[Element, str] = {}
    for name in MAPS:
        try:
            out.update(map_elements(nft.query(f"list map {T} {name}")))
        except nft.NftError:
            continue
    return out


# ---------------------------------------------------------------------------------------------
# Verbs


def add(cfg: PortMapConfig) -> None:
    """One transaction: it happens whole or not at all (the scaffolding must exist)."""
    try:
        nft.apply_json(add_commands(cfg))
    except nft.NftError as exc:
        if "File exists" not in str(exc):
            raise CNIError(INTERNAL, f"portmap: nftables ADD failed: {exc}") from None
        chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
        taken = [
            e for e, target in _all_elements().items() if target != chain and e in pod_rules(cfg)[1]
        ]
        shown = ", ".join(f"{e.key} ({e.map})" for e in taken) or str(exc)
        raise CNIError(
            INTERNAL, f"portmap: host port already mapped by another attachment: {shown}"
        ) from None


def _delete_fast(chain: str, comments: list[str]) -> bool:
    """DEL without libnftables: the chain's map elements (recorded in its rule comments) and
    the chain in one netlink batch. libnftables would first load every chain and map element
    of the namespace (O(pods)). False when this cannot be done so (no element recorded, or
    the kernel refused: drifted state), so the caller takes the slow path."""
    elements = [e for c in comments if (e := Element.from_comment(c)) is not None]
    if not elements:
        return False
    try:
        changes: list[nftnl.ElementChange | nftnl.ChainRemoval] = [
            nftnl.ElementChange(False, e.map, nftnl.concat_key(e.key.split(" . ")))
            for e in dict.fromkeys(elements)
        ]
        nftnl.change_elements(FAMILY, TABLE, [*changes, nftnl.ChainRemoval(chain)])
    except (OSError, ValueError):
        return False
    return True


def delete(network: str, container_id: str, ifname: str) -> bool:
    """Remove this attachment's chain and elements; False when there was nothing. The chain's
    rules are read by a kernel-filtered dump, so an attachment without a chain (every one
    in the map layout) costs one netlink round trip here."""
    chain = chain_name(network, container_id, ifname)
    try:
        comments: list[str] | None = [r.comment for r in nftnl.chain_rules(FAMILY, TABLE, chain)]
    except OSError:
        comments = None
    if comments == []:
        return False  # no such chain (an empty one is left to GC)
    if comments is not None and _delete_fast(chain, comments):
        return True
    rules = chain_rules(chain)
    if rules is None:
        return False
    elements = [e for c in _comments(rules) if (e := Element.from_comment(c)) is not None]
    try:
        nft.apply_json(delete_commands(chain, list(dict.fromkeys(elements))))
    except nft.NftError:
        # Drifted state (an element already gone, or one we did not record): find the
        # elements that really jump to the chain and try once more.
        pointing = [e for e, target in _all_elements().items() if target == chain]
        try:
            nft.apply_json(delete_commands(chain, pointing))
        except nft.NftError as exc:
            raise CNIError(INTERNAL, f"portmap: nftables DEL failed: {exc}") from None
    return True


def check(cfg: PortMapConfig) -> None:
    chain = chain_name(cfg.network, cfg.container_id, cfg.ifname)
    expected_rules, expected_elements = pod_rules(cfg)
    if not expected_rules:
        return
    rules = chain_rules(chain)
    if rules is None:
        raise CNIError(INTERNAL, f"portmap: nftables chain {chain} of this attachment is missing")
    if len(rules) < len(expected_rules):
        raise CNIError(
            INTERNAL,
            f"portmap: chain {chain} has {len(rules)} rules, expected {len(expected_rules)}",
        )
    comments = set(_comments(rules))
    elements = _all_elements()
    for element in expected_elements:
        if element.comment not in comments:
            raise CNIError(INTERNAL, f"portmap: no DNAT rule for {element.key} in {chain}")
        if elements.get(element) != chain:
            raise CNIError(
                INTERNAL, f"portmap: map {element.map} does not send {element.key} to {chain}"
            )


def gc(network: str, valid: list[tuple[str, str]]) -> list[str]:
    """Delete this network's attachment chains not in ``valid``; returns the chains removed."""
    try:
        items = nft.query(f"list table {T}")
    except nft.NftError:
        return []
    keep = {chain_name(network, cid, ifname) for cid, ifname in valid}
    prefix = network_prefix(network)
    stale = [
        str(item["chain"]["name"])
        for item in items
        if "chain" in item
        and str(item["chain"]["name"]).startswith(prefix)
        and item["chain"]["name"] not in keep
    ]
    if not stale:
        return []
    elements = map_elements(items)
    cmds: list[dict[str, Any]] = []
    for chain in stale:
        pointing = [e for e, target in elements.items() if target == chain]
        cmds += delete_commands(chain, pointing)
    try:
        nft.apply_json(cmds)
    except nft.NftError as exc:
        raise CNIError(INTERNAL, f"portmap: nftables GC failed: {exc}") from None
    return stale
