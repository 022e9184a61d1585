"""Port mappings as nftables rules: read the portmap tables and delete one owner's rules.

Portmap tables are recognised by name: pycni's own (``inet pycni_portmap``) and the reference
plugin's nftables backend (``cni_hostport``). In pycni's table an attachment is DNAT map
elements (``dnat4``, ``dnat4h``, ``dnat6``, ``dnat6h``) whose comment names the owner, or,
with conditions or from an earlier pycni version, a chain of its own whose DNAT rules are
reached through verdict maps; the owner is then the chain (see ``owner_chain`` for both). In
the reference's table a DNAT rule's comment (the container ID) is its owner. Each DNAT map
element or DNAT rule becomes a ``PortMapping``.
"""

from __future__ import annotations

from typing import Any

from pycni.inspect.model import Masquerade, PortMapping
from pycni.net.netfilter import nft
from pycni.plugins.meta.portmap import nft_backend, nft_chains, nft_maps

REFERENCE_TABLE = "cni_hostport"
PYCNI_TABLE_PREFIX = "pycni"


def owner_chain(network: str, container_id: str, ifname: str) -> str:
    """The owner name pycni's portmap gives one attachment: its elements' comment, or its
    chain's name in the chain layout."""
    return nft_maps.owner_name(network, container_id, ifname)


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


def _parts(value: Any) -> list[Any]:
    if isinstance(value, dict) and isinstance(value.get("concat"), list):
        return list(value["concat"])
    return [value]


def parse_element(family: str, table: str, name: str, pair: Any) -> PortMapping | None:
    """A DNAT map element (``[key, addr . port]`` with the owner as the key's comment)."""
    if not isinstance(pair, list) or len(pair) != 2:
        return None
    key, data = pair
    owner = ""
    if isinstance(key, dict) and isinstance(key.get("elem"), dict):
        owner = str(key["elem"].get("comment", ""))
        key = key["elem"].get("val")
    parts, target = _parts(key), _parts(data)
    if len(parts) not in (2, 3) or len(target) != 2:
        return None
    proto, port = parts[-2], parts[-1]
    if not isinstance(port, int) or not isinstance(target[1], int):
        return None
    return PortMapping(
        family=family,
        table=table,
        chain=name,
        handle=0,
        protocol=str(proto),
        host_port=port,
        target_ip=str(target[0]),
        target_port=target[1],
        host_ip=str(parts[0]) if len(parts) == 3 else None,
        owner=owner,
    )


def read_mappings() -> tuple[list[PortMapping], list[str]]:
    """Every DNAT mapping in the portmap tables, with the handles of its owner's other rules."""
    try:
        tables = portmap_tables()
    except (nft.NftError, OSError) as exc:
        return [], [f"cannot read nftables: {exc}"]
    out: list[PortMapping] = []
    for family, name in tables:
        items = nft.query(f"list table {family} {name}")
        rules = [item["rule"] for item in items if isinstance(item.get("rule"), dict)]
        if name == nft_backend.TABLE:
            for item in items:
                found = item.get("map")
                if isinstance(found, dict) and found.get("name") in nft_maps.DNAT_MAPS:
                    for pair in found.get("elem") or []:
                        element = parse_element(family, name, str(found["name"]), pair)
                        if element is not None:
                            out.append(element)
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
    """Remove the mapping's owner: in pycni's table every element with the owner's comment,
    or the attachment chain and the map elements that jump to it; in the reference table
    every rule with the owner's comment."""
    if is_pycni(mapping) and mapping.chain in nft_maps.DNAT_MAPS:
        owner = mapping.owner
        if owner:
            nft_maps.remove_owned(lambda comment: comment == owner)
        return
    if is_pycni(mapping):
        items = nft.query(f"list table {mapping.family} {mapping.table}")
        pointing = [
            e for e, target in nft_chains.map_elements(items).items() if target == mapping.chain
        ]
        nft.apply(nft_chains.delete_script(mapping.chain, pointing))
        return
    handles = set(mapping.related_handles) | {(mapping.chain, mapping.handle)}
    script = "\n".join(
        f"delete rule {mapping.family} {mapping.table} {chain} handle {handle}"
        for chain, handle in sorted(handles)
    )
    nft.apply(script)


MASQ_TABLE = "cni_plugins_masquerade"  # pycni.net.netfilter.ipmasq.TABLE, the reference's name


def _net_of(comment: str) -> str:
    """The network of a masquerade comment: ``… net: NAME, if: …`` or ``pycni SUBNET net: NAME``."""
    _, found, rest = comment.partition("net: ")
    return rest.split(", if: ", 1)[0].strip() if found else ""


def _set_ref(expr: Any) -> str:
    for item in expr if isinstance(expr, list) else []:
        right = item.get("match", {}).get("right") if isinstance(item, dict) else None
        if isinstance(right, str) and right.startswith("@"):
            return right[1:]
    return ""


def _saddr(expr: Any) -> str:
    for item in expr if isinstance(expr, list) else []:
        match = item.get("match") if isinstance(item, dict) else None
        if isinstance(match, dict) and isinstance(match.get("right"), str):
            left = match.get("left", {}).get("payload", {})
            if isinstance(left, dict) and left.get("field") == "saddr":
                return str(match["right"])
    return ""


def read_masquerades() -> tuple[list[Masquerade], list[str]]:
    """Which pod addresses of which network are masqueraded, from the masquerade table (pycni's
    per-network sets and the reference's per-address rules); none when there is no table."""
    try:
        items = nft.query(f"list table inet {MASQ_TABLE}")
    except nft.NftError:
        return [], []  # no such table: nothing is masqueraded by nftables here
    except OSError as exc:
        return [], [f"cannot read nftables: {exc}"]
    found: dict[tuple[str, str], Masquerade] = {}
    by_set: dict[str, Masquerade] = {}
    for item in items:
        rule = item.get("rule")
        if not isinstance(rule, dict):
            continue
        comment = str(rule.get("comment", ""))
        network = _net_of(comment)
        if not network:
            continue
        if comment.startswith("pycni ") and (name := _set_ref(rule.get("expr"))):
            subnet = comment[len("pycni ") :].split(" ", 1)[0]
            entry = found.setdefault((network, subnet), Masquerade(network, subnet))
            by_set[name] = entry
        elif address := _saddr(rule.get("expr")):
            entry = found.setdefault((network, ""), Masquerade(network, ""))
            entry.addresses.append(address)
    for item in items:
        nft_set = item.get("set")
        if not isinstance(nft_set, dict) or str(nft_set.get("name")) not in by_set:
            continue
        entry = by_set[str(nft_set["name"])]
        for elem in nft_set.get("elem") or []:
            inner = elem.get("elem") if isinstance(elem, dict) else None
            value = inner.get("val") if isinstance(inner, dict) else elem
            if isinstance(value, str):
                entry.addresses.append(value)
    return sorted(found.values(), key=lambda m: (m.network, m.subnet)), []


def read_iptables_masquerades() -> list[Masquerade]:
    """Masquerading by iptables: ``-A POSTROUTING -s ADDR -m comment --comment "name: \\"NET\\"
    id: …" -j CNI-…`` per attachment, the chain's ``-d SUBNET … -j ACCEPT`` giving the subnet.
    Nothing when the iptables tools are missing or fail (then nothing is shown, not an error)."""
    import shlex
    import subprocess

    found: dict[tuple[str, str], Masquerade] = {}
    for tool in ("iptables-save", "ip6tables-save"):
        try:
            proc = subprocess.run(
                [tool, "-t", "nat"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        subnets: dict[str, str] = {}
        members: list[tuple[str, str, str]] = []  # (chain, network, address)
        for line in proc.stdout.splitlines():
            if not line.startswith("-A "):
                continue
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            opts = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i][0] == "-"}
            target, chain = opts.get("-j", ""), opts.get("-A", "")
            if chain == "POSTROUTING" and target.startswith("CNI-") and "-s" in opts:
                name = opts.get("--comment", "").partition('name: "')[2].partition('"')[0]
                if name:
                    members.append((target, name, opts["-s"].removesuffix("/32")))
            elif chain.startswith("CNI-") and target == "ACCEPT" and "-d" in opts:
                subnets[chain] = opts["-d"]
        for chain, network, address in members:
            subnet = subnets.get(chain, "")
            entry = found.setdefault(
                (network, subnet), Masquerade(network, subnet, backend="iptables")
            )
            entry.addresses.append(address.removesuffix("/128"))
    return sorted(found.values(), key=lambda m: (m.network, m.subnet))
