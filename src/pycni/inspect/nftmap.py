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

import shlex
import subprocess

from pycni.inspect.model import Masquerade, PortMapping
from pycni.net.netfilter import model, nft
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
    """A portmap table's name, and a plain identifier (letters, digits, ``_``): the name is
    read from the kernel and goes into a ``list table`` command, where anything else (a space,
    a ``;``) could start another command."""
    plain = name[:1].isalpha() and all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name)
    return plain and (name == REFERENCE_TABLE or name.startswith(PYCNI_TABLE_PREFIX))


_FAMILIES = ("ip", "ip6", "inet")  # where a portmap table can be


def portmap_tables() -> list[tuple[str, str]]:
    """(family, name) of every portmap table in this namespace."""
    tables = model.parse(nft.query("list tables")).tables
    return [
        (t.family, t.name) for t in tables if t.family in _FAMILIES and is_portmap_table(t.name)
    ]


def _match_field(statement: model.Statement) -> tuple[str, str, model.Value] | None:
    """(protocol, field, value) of an ``==`` payload match, or ("meta", key, value)."""
    if not isinstance(statement, model.Match) or statement.op not in ("==", "in"):
        return None
    if isinstance(statement.left, model.Payload):
        return statement.left.protocol, statement.left.field, statement.right
    if isinstance(statement.left, model.Meta):
        return "meta", statement.left.key, statement.right
    return None


def parse_rule(rule: model.Rule) -> PortMapping | None:
    """A DNAT rule as a mapping; anything else (masquerade, jumps) gives None."""
    protocol = ""
    port: int | None = None
    host_ip: str | None = None
    target: model.Dnat | None = None
    for statement in rule.statements:
        if isinstance(statement, model.Dnat):
            target = statement
            continue
        found = _match_field(statement)
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
    if target is None or port is None:
        return None
    return PortMapping(
        family=rule.table.family,
        table=rule.table.name,
        chain=rule.chain,
        handle=rule.handle,
        protocol=protocol or "tcp",
        host_port=port,
        target_ip=target.addr,
        target_port=target.port or port,
        host_ip=host_ip,
        owner=rule.comment,
    )


def _parts(value: model.Value | bytes | None) -> tuple[object, ...]:
    if isinstance(value, model.Concat):
        return value.parts
    return (value,)


def parse_element(family: str, table: str, name: str, element: model.Element) -> PortMapping | None:
    """A DNAT map element (``key : addr . port`` with the owner as the key's comment)."""
    parts, target = _parts(element.key), _parts(element.value)
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
        owner=element.comment,
    )


def read_mappings() -> tuple[list[PortMapping], list[str]]:
    """Every DNAT mapping in the portmap tables, with the handles of its owner's other rules."""
    try:
        tables = portmap_tables()
    except (nft.NftError, OSError) as exc:
        return [], [f"cannot read nftables: {exc}"]
    out: list[PortMapping] = []
    for family, name in tables:
        listed = model.parse(nft.query(f"list table {family} {name}"))
        if name == nft_backend.TABLE:
            for found in listed.sets:
                if found.kind == "map" and found.name in nft_maps.DNAT_MAPS:
                    for element in found.elements:
                        mapping = parse_element(family, name, found.name, element)
                        if mapping is not None:
                            out.append(mapping)
        by_owner: dict[str, list[tuple[str, int]]] = {}
        for rule in listed.rules:
            if rule.comment:
                by_owner.setdefault(rule.comment, []).append((rule.chain, rule.handle))
        for rule in listed.rules:
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
    every rule with the owner's comment (by handle, as JSON: no name read from the kernel
    becomes nft text)."""
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
        nft.apply_json(nft_chains.delete_commands(mapping.chain, pointing))
        return
    table = model.Table(mapping.family, mapping.table)
    handles = set(mapping.related_handles) | {(mapping.chain, mapping.handle)}
    nft.apply_json(
        [model.delete(model.Rule(table, chain, handle=handle)) for chain, handle in sorted(handles)]
    )


MASQ_TABLE = "cni_plugins_masquerade"  # pycni.net.netfilter.ipmasq.TABLE, the reference's name


def _net_of(comment: str) -> str:
    """The network of a masquerade comment: ``… net: NAME, if: …`` or ``pycni SUBNET net: NAME``."""
    _, found, rest = comment.partition("net: ")
    return rest.split(", if: ", 1)[0].strip() if found else ""


def _set_ref(rule: model.Rule) -> str:
    for statement in rule.statements:
        if isinstance(statement, model.Match) and isinstance(statement.right, model.SetRef):
            return statement.right.name
    return ""


def _saddr(rule: model.Rule) -> str:
    for statement in rule.statements:
        if (
            isinstance(statement, model.Match)
            and isinstance(statement.right, str)
            and isinstance(statement.left, model.Payload)
            and statement.left.field == "saddr"
        ):
            return statement.right
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
    listed = model.parse(items)
    found: dict[tuple[str, str], Masquerade] = {}
    by_set: dict[str, Masquerade] = {}
    for rule in listed.rules:
        network = _net_of(rule.comment)
        if not network:
            continue
        if rule.comment.startswith("pycni ") and (name := _set_ref(rule)):
            subnet = rule.comment[len("pycni ") :].split(" ", 1)[0]
            entry = found.setdefault((network, subnet), Masquerade(network, subnet))
            by_set[name] = entry
        elif address := _saddr(rule):
            entry = found.setdefault((network, ""), Masquerade(network, ""))
            entry.addresses.append(address)
    for nft_set in listed.sets:
        if nft_set.name not in by_set:
            continue
        entry = by_set[nft_set.name]
        entry.addresses += [e.key for e in nft_set.elements if isinstance(e.key, str)]
    return sorted(found.values(), key=lambda m: (m.network, m.subnet)), []


def read_iptables_masquerades() -> list[Masquerade]:
    """Masquerading by iptables: ``-A POSTROUTING -s ADDR -m comment --comment "name: \\"NET\\"
    id: …" -j CNI-…`` per attachment, the chain's ``-d SUBNET … -j ACCEPT`` giving the subnet.
    Nothing when the iptables tools are missing or fail (then nothing is shown, not an error)."""
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
