"""The firewall plugin's nftables backend: pycni's own table ``inet pycni_firewall``, one
transaction per call, built from the nftables model (net/netfilter/model.py) as libnftables
JSON commands (no value is parsed as nft text)::

    chain forward        (filter hook forward, priority filter, policy accept; rebuilt by
                          every ADD) : jump isolation_stage1; jump admin; jump pods
    chain admin          the admin's own overrides; never touched by pycni after creation
    chain pods           one ``jump net-<hash(network)>`` per network
    chain net-<hash>     4 rules: ip/ip6 daddr @set ct state established,related accept,
                         ip/ip6 saddr @set accept (rebuilt by every ADD of the network)
    set net-<hash>-v4/-v6   the network's pod addresses, one element per address
    chain isolation_stage1/2   ingressPolicy: one jump per bridge to iso1-/iso2-<hash(bridge)>,
                         which hold that bridge's rules of the iptables stage chains

The rule count stays constant as pods come and go; only set elements change. Each element
carries a comment starting with ``<hash(network)>-<hash(ifname:containerID)>`` (the reference
ipmasq's instance hash), so DEL and GC find an attachment's elements without knowing its IPs.
Per-pod rules in ``pods`` left by older pycni versions are still found and removed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from pycni.net.netfilter import model, nft, rule_tokens
from pycni.net.netfilter.ipmasq import hash_for_instance, hash_for_network, hash_hex
from pycni.plugins.meta.firewall.backend import (
    DEFAULT_ADMIN_CHAIN,
    ISOLATION_COMMENT,
    Attachment,
    FirewallError,
    IPAddress,
)
from pycni.record import record
from pycni.skel.rollback import Rollback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pycni.net.netfilter.seam import Netfilter
    from pycni.plugins.meta.firewall.records import Records

TABLE = "pycni_firewall"
FAMILY = "inet"
TABLE_COMMENT = "CNI firewall plugin rules (pycni)"
COMMENT_MAX = 128
CHAINS = ("forward", "pods", "isolation_stage1", "isolation_stage2")
T = model.Table(FAMILY, TABLE, TABLE_COMMENT)


def comment(network: str, ifname: str, container_id: str) -> str:
    text = f"{hash_for_instance(network, ifname, container_id)}, net: {network}, "
    text += f"if: {ifname}, id: {container_id}"
    return rule_tokens.plain_text("comment", text[:COMMENT_MAX], COMMENT_MAX)


def _chain(name: str) -> model.Chain:
    return model.Chain(T, name)


def _rule(chain: str, statements: list[model.Statement], note: str = "") -> Any:
    return model.add(model.Rule(T, chain, statements, note))


def _jump(target: str) -> model.Verdict:
    return model.Verdict("jump", target)


def _skeleton(admin: str) -> list[Any]:
    forward = model.Chain(T, "forward", "filter", "forward", 0, "accept")
    return [
        model.add(T),
        model.add(forward),
        *[
            model.add(_chain(name))
            for name in (admin, "pods", "isolation_stage1", "isolation_stage2")
        ],
        model.flush(_chain("forward")),
        *[_rule("forward", [_jump(t)]) for t in ("isolation_stage1", admin, "pods")],
    ]


def admin_chain(name: str) -> str:
    """nft chain names are identifiers: the iptables default maps to ``admin``."""
    return "admin" if name in ("", DEFAULT_ADMIN_CHAIN) else name


def _rules(chain: str) -> list[model.Rule]:
    """The rules of one chain of our table ([] when the table does not exist)."""
    try:
        items = nft.query(f"list chain {FAMILY} {TABLE} {chain}")
    except nft.NftError:
        return []
    return model.parse(items).rules


def _deletes(chain: str, match: Iterable[model.Rule]) -> list[Any]:
    return [model.delete(model.Rule(T, chain, handle=r.handle)) for r in match]


def _with_prefix(rules: list[model.Rule], prefix: str) -> list[model.Rule]:
    return [r for r in rules if r.comment.startswith(prefix)]


def _isolation(
    bridge: str, policy: str
) -> tuple[list[list[model.Statement]], list[list[model.Statement]]]:
    iif, oif = model.Meta("iifname"), model.Meta("oifname")
    stage1: list[list[model.Statement]] = [
        [model.Match(iif, bridge), model.Match(oif, bridge, "!="), _jump("isolation_stage2")]
    ]
    if policy == "isolated":
        stage1.append([model.Match(iif, bridge), model.Match(oif, bridge), model.Verdict("drop")])
    return stage1, [[model.Match(oif, bridge), model.Verdict("drop")]]


def net_names(network: str) -> tuple[str, dict[int, str]]:
    """The network's chain and its address set per family, named from the network's hash."""
    base = f"net-{hash_for_network(network)}"
    return base, {4: f"{base}-v4", 6: f"{base}-v6"}


def iso_names(bridge: str) -> tuple[str, str]:
    """The bridge's chains under isolation_stage1 and isolation_stage2."""
    h = hash_hex(16, "", bridge)
    return f"iso1-{h}", f"iso2-{h}"


@record
class _SubChain:
    """A chain of ours entered by one jump from ``parent`` and rebuilt by every ADD."""

    parent: str
    name: str
    rules: list[Any]

    def refill(self, create: bool) -> list[Any]:
        """Flush and refill; without ``create`` the flush fails (ENOENT) when the chain is
        missing, which is how an ADD learns that it must create it and its jump."""
        cmds: list[Any] = [model.add(_chain(self.name))] if create else []
        return [*cmds, model.flush(_chain(self.name)), *self.rules]


def _sub_chains(network: str, bridge: str, policy: str) -> list[_SubChain]:
    chain, sets = net_names(network)
    state = model.Match(model.Ct("state"), ["established", "related"], "in")
    rules: list[Any] = []
    for family, name in sets.items():
        fam = "ip" if family == 4 else "ip6"
        daddr = model.Match(model.Payload(fam, "daddr"), model.SetRef(name))
        saddr = model.Match(model.Payload(fam, "saddr"), model.SetRef(name))
        rules += [
            _rule(chain, [daddr, state, model.Verdict("accept")]),
            _rule(chain, [saddr, model.Verdict("accept")]),
        ]
    out = [_SubChain("pods", chain, rules)]
    if policy in ("same-bridge", "isolated"):
        iso1, iso2 = iso_names(bridge)
        tag = f"{ISOLATION_COMMENT}: {bridge}"
        stage1, stage2 = _isolation(bridge, policy)
        out.append(_SubChain("isolation_stage1", iso1, [_rule(iso1, s, tag) for s in stage1]))
        out.append(_SubChain("isolation_stage2", iso2, [_rule(iso2, s, tag) for s in stage2]))
    return out


def _set(name: str, family: int = 4) -> model.Set:
    return model.Set(T, name, "ipv4_addr" if family == 4 else "ipv6_addr")


def _jumps_to(rules: list[model.Rule], target: str) -> bool:
    return any(r.jumps_to(target) for r in rules)


def add(
    ips: Sequence[IPAddress],
    network: str,
    ifname: str,
    container_id: str,
    admin: str = DEFAULT_ADMIN_CHAIN,
    bridge: str = "",
    policy: str = "open",
) -> None:
    """The attachment's addresses in its network's sets, in one transaction.

    The rules are per network and family and match a set, so a chain's rule count does not
    grow with the pods; only set elements do. Each element carries the attachment's comment;
    ``add, delete, add`` makes a repeated ADD, or one reusing an address a stale attachment
    still claims, leave exactly this attachment's element. Nothing is read first (a read
    costs a fetch of every set element): the usual transaction assumes the network's (and
    bridge's) chains exist; only when it fails for that reason are the jumps to them looked
    up and added, in a second transaction."""
    note = comment(network, ifname, container_id)
    _chain_name, sets = net_names(network)
    subs = _sub_chains(network, bridge, policy)
    elements: list[Any] = []
    for ip in ips:
        found = _set(sets[ip.version])
        elements += [
            model.add(found, [model.Element(str(ip))]),
            model.delete(found, [model.Element(str(ip))]),
            model.add(found, [model.Element(str(ip), comment=note)]),
        ]
    head = _skeleton(admin_chain(admin))
    head += [model.add(_set(name, family)) for family, name in sets.items()]
    try:
        nft.apply_json(head + [c for sub in subs for c in sub.refill(False)] + elements)
        return
    except nft.NftError as exc:
        if "No such file or directory" not in str(exc):
            raise FirewallError(str(exc)) from None
    cmds = list(head)
    have: dict[str, list[model.Rule]] = {}
    for sub in subs:
        if sub.parent not in have:
            have[sub.parent] = _rules(sub.parent)
        cmds += sub.refill(True)
        if not _jumps_to(have[sub.parent], sub.name):
            cmds.append(_rule(sub.parent, [_jump(sub.name)]))
    _apply(cmds + elements)


def _elements(network: str) -> list[tuple[str, str, str]]:
    """(set, address, comment) of every element of the network's sets."""
    out: list[tuple[str, str, str]] = []
    for name in net_names(network)[1].values():
        try:
            items = nft.query(f"list set {FAMILY} {TABLE} {name}")
        except nft.NftError:
            continue
        for found in model.parse(items).sets:
            out += [(name, str(e.key), e.comment) for e in found.elements]
    return out


def _delete_elements(elements: Iterable[tuple[str, str, str]]) -> list[Any]:
    return [
        model.delete(_set(name), [model.Element(str(ipaddress.ip_address(addr)))])
        for name, addr, _comment in elements
    ]


def delete(network: str, ifname: str, container_id: str) -> None:
    """Remove the attachment's elements (and older per-pod rules), found by comment."""
    prefix = hash_for_instance(network, ifname, container_id)
    cmds = _deletes("pods", _with_prefix(_rules("pods"), prefix))
    cmds += _delete_elements(e for e in _elements(network) if e[2].startswith(prefix))
    if cmds:
        _apply(cmds)


def gc(network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Remove the network's elements (and older per-pod rules) whose attachment is not in
    ``valid``; returns how many."""
    keep = {hash_for_instance(network, ifname, cid) for cid, ifname in valid}
    net_prefix = hash_for_network(network) + "-"
    width = len(net_prefix) + 16

    def stale(note: str) -> bool:
        return note.startswith(net_prefix) and note[:width] not in keep

    rules = [r for r in _rules("pods") if stale(r.comment)]
    elements = [e for e in _elements(network) if stale(e[2])]
    if rules or elements:
        _apply(_deletes("pods", rules) + _delete_elements(elements))
    return len(rules) + len(elements)


def check(ips: Sequence[IPAddress], network: str, ifname: str, container_id: str) -> None:
    prefix = hash_for_instance(network, ifname, container_id)
    chain, _sets = net_names(network)
    mine = {addr for _s, addr, note in _elements(network) if note.startswith(prefix)}
    missing = [str(ip) for ip in ips if str(ip) not in mine]
    if missing:
        raise FirewallError(
            f"nftables set elements of {container_id}/{ifname} missing: {', '.join(missing)}"
        )
    if not _jumps_to(_rules("pods"), chain):
        raise FirewallError(f"the pods chain of {FAMILY} {TABLE} does not jump to {chain}")
    if not _jumps_to(_rules("forward"), "pods"):
        raise FirewallError(f"the forward chain of {FAMILY} {TABLE} does not jump to pods")


def _apply(cmds: list[Any]) -> None:
    try:
        nft.apply_json(cmds)
    except nft.NftError as exc:
        raise FirewallError(str(exc)) from None


class NftablesBackend:
    """pycni's ``inet pycni_firewall`` table (see the module docstring)."""

    name = "nftables"
    unavailable = "nftables is not usable here"
    cleans_others = True

    def usable(self, nf: Netfilter) -> bool:
        return nft.available()

    def check_admin_chain(self, admin: str) -> None:
        if not admin[0].isalpha():
            raise rule_tokens.refuse(
                "iptablesAdminChainName",
                f'"{admin}" is not an nftables identifier',
                "with the nftables backend the name must start with a letter",
            )

    def add(self, nf: Netfilter, att: Attachment, rb: Rollback) -> None:
        rb.step("nftables")
        add(
            att.ips,
            att.network,
            att.ifname,
            att.container_id,
            att.admin_chain,
            att.bridge,
            att.policy,
        )

    def delete(self, nf: Netfilter, att: Attachment) -> None:
        delete(att.network, att.ifname, att.container_id)

    def check(self, nf: Netfilter, att: Attachment) -> None:
        check(att.ips, att.network, att.ifname, att.container_id)

    def gc(
        self, nf: Netfilter, network: str, records: Records, valid: list[tuple[str, str]]
    ) -> None:
        gc(network, valid)


BACKEND = NftablesBackend()
