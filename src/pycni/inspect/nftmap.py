"""Port mappings as nftables rules: read the portmap tables and delete one owner's rules.

Portmap tables are recognised by name: pycni's own (``inet pycni_portmap``, one chain per
attachment, entered through verdict maps) and the reference plugin's nftables backend
(``cni_hostport``). A DNAT rule becomes a ``PortMapping``. Its owner is the attachment chain
in pycni's table (see ``owner_chain``) and the rule comment (the container ID) in the
reference's.
"""

from __future__ import annotations

from typing import Any

from pycni.inspect.model import PortMapping
from pycni.net import nft
from pycni.plugins.meta.portmap import nft_backend

REFERENCE_TABLE = "cni_hostport"
PYCNI_TABLE_PREFIX = "pycni"


def owner_chain(network: str, container_id: str, ifname: str) -> str:
    """The chain pycni's portmap gives one attachment (what owns its mappings)."""
    return nft_backend.chain_name(network, container_id, ifname)


def is_pycni(mapping: PortMapping) -> bool:
    return mapping.table == nft_backend.TABLE


def is_portmap_table(name: str) -> bool:
    return name == REFERENCE_TABLE or name.startswith(PYCNI_TABLE_PREFIX)


def portmap_tables() -> list[tuple[str, str]]:
    """(family, name) of every portmap table in this namespace."""
    out = []
    for item in nft.query("list tables"):
        table = item.get("table")
        if isinstance(table, dict) and is_portmap_table(str(table.get("name", ""))):
            out.append((str(table["family"]), str(table["name"])))
    return out


def _match_field(expr: dict[str, Any]) -> tuple[str, str, Any] | None:
    """(protocol, field, value) of an ``==`` payload match, or ("meta", key, value)."""
    match = expr.get("match")
    if not isinstance(match, dict) or match.get("op") not in ("==", "in", None):
        return None
    left = match.get("left")
    if not isinstance(left, dict):
        return None
    if isinstance(left.get("payload"), dict):
        payload = left["payload"]
        return str(payload.get("protocol", "")), str(payload.get("field", "")), match.get("right")
    if isinstance(left.get("meta"), dict):
        return "meta", str(left["meta"].get("key", "")), match.get("right")
    return None


def parse_rule(rule: dict[str, Any]) -> PortMapping | None:
    """A DNAT rule as a mapping; anything else (masquerade, jumps) gives None."""
    protocol = ""
    port: int | None = None
    host_ip: str | None = None
    target: dict[str, Any] | None = None
    for expr in rule.get("expr") or []:
        if not isinstance(expr, dict):
            continue
        if isinstance(expr.get("dnat"), dict):
            target = expr["dnat"]
            continue
        found = _match_field(expr)
        if found is None:
            continue
        proto, field, value = found
        if field == "dport" and isinstance(value, int):
            port = value
            if proto in ("tcp", "udp", "sctp"):
                protocol = proto
        elif proto == "meta" and field == "l4proto" and isinstance(value, str):
            protocol = value
        elif proto in ("ip", "ip6") and field == "daddr" and isinstance(value, str):
            host_ip = value
    if target is None or port is None or not isinstance(target.get("addr"), str):
        return None
    return PortMapping(
        family=str(rule.get("family", "")),
        table=str(rule.get("table", "")),
        chain=str(rule.get("chain", "")),
        handle=int(rule.get("handle", 0)),
        protocol=protocol or "tcp",
        host_port=port,
        target_ip=str(target["addr"]),
        target_port=int(target.get("port") or port),
        host_ip=host_ip,
        owner=str(rule.get("comment", "")),
    )


def read_mappings() -> tuple[list[PortMapping], list[str]]:
    """Every DNAT mapping in the portmap tables, with the handles of its owner's other rules."""
    try:
        tables = portmap_tables()
    except (nft.NftError, OSError) as exc:
        return [], [f"cannot read nftables: {exc}"]
    out: list[PortMapping] = []
    for family, name in tables:
        rules = [
            item["rule"]
            for item in nft.query(f"list table {family} {name}")
            if isinstance(item.get("rule"), dict)
        ]
        by_owner: dict[str, list[tuple[str, int]]] = {}
        for rule in rules:
            owner = str(rule.get("comment", ""))
            if owner:
                by_owner.setdefault(owner, []).append((str(rule["chain"]), int(rule["handle"])))
        for rule in rules:
            mapping = parse_rule(rule)
            if mapping is None:
                continue
            if name == nft_backend.TABLE:
                mapping.owner = mapping.chain
            elif mapping.owner:
                mapping.related_handles = by_owner.get(mapping.owner, [])
            out.append(mapping)
    return out, []


def delete_mapping(mapping: PortMapping) -> None:
    """Remove the mapping's owner: pycni's attachment chain and the map elements that
    jump to it, or for the reference table every rule with the owner's comment."""
    if is_pycni(mapping):
        items = nft.query(f"list table {mapping.family} {mapping.table}")
        pointing = [
            e for e, target in nft_backend.map_elements(items).items() if target == mapping.chain
        ]
        nft.apply(nft_backend.delete_script(mapping.chain, pointing))
        return
    handles = set(mapping.related_handles) | {(mapping.chain, mapping.handle)}
    script = "\n".join(
        f"delete rule {mapping.family} {mapping.table} {chain} handle {handle}"
        for chain, handle in sorted(handles)
    )
    nft.apply(script)
