"""The firewall plugin's rules: the reference's iptables chains, and an nftables equivalent.

iptables (filter table, per family): ``FORWARD`` jumps to ``CNI-FORWARD`` (inserted first),
which jumps to the admin chain (``CNI-ADMIN`` by default, first rule) and then accepts, per pod
IP, ``-d IP/32 … RELATED,ESTABLISHED`` and ``-s IP/32``. ingressPolicy same-bridge/isolated
adds ``CNI-ISOLATION-STAGE-1/2``. Rule texts are byte-for-byte the reference's, so rules made
by either implementation are found and removed by the other. Each call reads the table once
(iptables-save) and writes its whole change with one iptables-restore; a change that lost a
race with another writer fails as a whole and is recomputed.

nftables: our own table ``inet pycni_firewall``, one transaction per call, built as libnftables
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
from typing import Any

from pycni.net.errors import NetfilterError
from pycni.net.netfilter import iptables, nft, rule_tokens
from pycni.net.netfilter.ipmasq import hash_for_instance, hash_for_network, hash_hex
from pycni.record import field, record

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

FORWARD = "FORWARD"
PRIV_CHAIN = "CNI-FORWARD"
DEFAULT_ADMIN_CHAIN = "CNI-ADMIN"
STAGE1 = "CNI-ISOLATION-STAGE-1"
STAGE2 = "CNI-ISOLATION-STAGE-2"
FILTER_COMMENT = "CNI firewall plugin rules"
ADMIN_COMMENT = "CNI firewall plugin admin overrides"
ISOLATION_COMMENT = "CNI firewall plugin rules (ingressPolicy: same-bridge)"
POLICIES = ("open", "same-bridge", "isolated")
RETRIES = 3


class FirewallError(NetfilterError, RuntimeError):
    """A firewall tool refused a change; the message is the tool's."""


def host_cidr(ip: IPAddress) -> str:
    return f"{ip}/{32 if ip.version == 4 else 128}"


# --- iptables --------------------------------------------------------------------------------


def _line(chain: str, args: Sequence[str]) -> str:
    """A rule as iptables-save prints it (``-A CHAIN …``)."""
    return iptables.rule_line("-A", chain, args)


def forward_jump() -> list[str]:
    return ["-m", "comment", "--comment", FILTER_COMMENT, "-j", PRIV_CHAIN]


def admin_jump(admin_chain: str) -> list[str]:
    return ["-m", "comment", "--comment", ADMIN_COMMENT, "-j", admin_chain]


def ip_rules(ip: IPAddress) -> list[list[str]]:
    """The two per-IP rules of CNI-FORWARD, in the reference's order."""
    cidr = host_cidr(ip)
    return [
        ["-d", cidr, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"],
        ["-s", cidr, "-j", "ACCEPT"],
    ]


def _isolation(bridge: str, policy: str) -> tuple[list[list[str]], list[list[str]]]:
    """(stage-1 rules to insert first, stage-2 rules to insert first) for one bridge."""
    comment = ["-m", "comment", "--comment", ISOLATION_COMMENT]
    stage1 = [["-i", bridge, "!", "-o", bridge, *comment, "-j", STAGE2]]
    if policy == "isolated":
        stage1.append(["-i", bridge, "-o", bridge, *comment, "-j", "DROP"])
    stage2 = [["-o", bridge, *comment, "-j", "DROP"]]
    return stage1, stage2


def _return_rule() -> list[str]:
    return ["-m", "comment", "--comment", ISOLATION_COMMENT, "-j", "RETURN"]


@record
class _Plan:
    """Lines of one restore script, built against one saved table."""

    saved: iptables.SavedTable
    lines: list[str]
    undo_rules: list[str] = field(default_factory=list)
    undo_chains: list[str] = field(default_factory=list)

    def ensure_chain(self, chain: str) -> None:
        if chain not in self.saved.chains:
            self.lines.append(f"-N {chain}")
            self.saved.chains.add(chain)
            self.undo_chains.insert(0, f"-X {chain}")

    def has(self, chain: str, args: Sequence[str]) -> bool:
        return _line(chain, args) in self.saved.rules_of(chain)

    def insert_first(self, chain: str, args: Sequence[str]) -> None:
        if not self.has(chain, args):
            self.lines.append(iptables.rule_line("-I", chain, ["1", *args]))
            self.saved.rules.setdefault(chain, []).insert(0, _line(chain, args))
            self.undo_rules.insert(0, iptables.rule_line("-D", chain, args))

    def append(self, chain: str, args: Sequence[str]) -> None:
        if not self.has(chain, args):
            self.lines.append(iptables.rule_line("-A", chain, args))
            self.saved.rules.setdefault(chain, []).append(_line(chain, args))
            self.undo_rules.insert(0, iptables.rule_line("-D", chain, args))

    @property
    def undo(self) -> list[str]:
        """What removes everything this plan adds: rules first, then the chains it created
        (a chain someone else started to use meanwhile makes the whole undo fail instead)."""
        return self.undo_rules + self.undo_chains

    def delete_all(self, chain: str, args: Sequence[str]) -> None:
        wanted = _line(chain, args)
        for saved in self.saved.rules_of(chain):
            if saved == wanted:
                self.lines.append(iptables.delete_line(saved))


def _apply(family: int, build: _Builder) -> list[str]:
    """Read, plan, write; recompute when another writer changed the table meanwhile.
    Returns the lines that undo what was written."""
    last: Exception | None = None
    for _ in range(RETRIES):
        try:
            plan = _Plan(iptables.save("filter", family), [])
        except iptables.IptablesError as exc:
            raise FirewallError(str(exc)) from None
        build(plan)
        if not plan.lines:
            return []
        try:
            iptables.restore(iptables.script("filter", [], plan.lines), family)
            return plan.undo
        except iptables.IptablesError as exc:
            last = exc
    raise FirewallError(str(last))


def ipt_undo(family: int, undo: list[str], ips: Sequence[IPAddress]) -> None:
    """Roll back one family of a failed ADD: everything it added in one restore, or, when
    that fails because the shared chains are in use by now, only its per-IP rules."""
    try:
        if undo:
            iptables.restore(iptables.script("filter", [], undo), family)
            return
    except iptables.IptablesError:
        pass
    ipt_delete(family, ips)


class _Builder:
    def __call__(self, plan: _Plan) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class _AddBuilder(_Builder):
    def __init__(
        self, ips: Sequence[IPAddress], admin_chain: str, bridge: str, policy: str
    ) -> None:
        self.ips, self.admin_chain, self.bridge, self.policy = ips, admin_chain, bridge, policy

    def __call__(self, plan: _Plan) -> None:
        if self.ips:
            plan.ensure_chain(PRIV_CHAIN)
            plan.ensure_chain(self.admin_chain)
            plan.insert_first(FORWARD, forward_jump())
            plan.insert_first(PRIV_CHAIN, admin_jump(self.admin_chain))
            for ip in self.ips:
                for rule in ip_rules(ip):
                    plan.append(PRIV_CHAIN, rule)
        if self.policy in ("same-bridge", "isolated"):
            plan.ensure_chain(STAGE1)
            plan.ensure_chain(STAGE2)
            plan.insert_first(
                FORWARD, ["-m", "comment", "--comment", ISOLATION_COMMENT, "-j", STAGE1]
            )
            stage1, stage2 = _isolation(self.bridge, self.policy)
            for rule in reversed(stage1):
                plan.insert_first(STAGE1, rule)
            plan.append(STAGE1, _return_rule())
            for rule in stage2:
                plan.insert_first(STAGE2, rule)
            plan.append(STAGE2, _return_rule())


class _DelBuilder(_Builder):
    def __init__(self, ips: Sequence[IPAddress]) -> None:
        self.ips = ips

    def __call__(self, plan: _Plan) -> None:
        for ip in self.ips:
            for rule in ip_rules(ip):
                plan.delete_all(PRIV_CHAIN, rule)


def ipt_add(
    family: int,
    ips: Sequence[IPAddress],
    admin_chain: str = DEFAULT_ADMIN_CHAIN,
    bridge: str = "",
    policy: str = "open",
) -> list[str]:
    """Chains, jumps and per-IP rules of one family (and the isolation chains), one restore.
    Returns the lines that undo it (for :func:`ipt_undo`)."""
    return _apply(family, _AddBuilder(ips, admin_chain, bridge, policy))


def ipt_delete(family: int, ips: Sequence[IPAddress]) -> None:
    """Remove the per-IP rules (every copy); chains and jumps stay, as in the reference."""
    _apply(family, _DelBuilder(ips))


def ipt_check(family: int, ips: Sequence[IPAddress], admin_chain: str) -> None:
    """The reference's CHECK: both jumps and every per-IP rule exist."""
    try:
        saved = iptables.save("filter", family)
    except iptables.IptablesError as exc:
        raise FirewallError(str(exc)) from None
    expected = [
        (FORWARD, forward_jump()),
        (PRIV_CHAIN, admin_jump(admin_chain)),
        *[(PRIV_CHAIN, rule) for ip in ips for rule in ip_rules(ip)],
    ]
    for chain, args in expected:
        if _line(chain, args) not in saved.rules_of(chain):
            raise FirewallError(f"expected {chain} rule {list(args)} not found")


# --- nftables ---------------------------------------------------------------------------------

NFT_TABLE = "pycni_firewall"
NFT_FAMILY = "inet"
NFT_TABLE_COMMENT = "CNI firewall plugin rules (pycni)"
NFT_COMMENT_MAX = 128


def nft_comment(network: str, ifname: str, container_id: str) -> str:
    text = f"{hash_for_instance(network, ifname, container_id)}, net: {network}, "
    text += f"if: {ifname}, id: {container_id}"
    return rule_tokens.plain_text("comment", text[:NFT_COMMENT_MAX], NFT_COMMENT_MAX)


def _obj(kind: str, **fields: Any) -> dict[str, Any]:
    return {kind: {"family": NFT_FAMILY, "table": NFT_TABLE, **fields}}


def _rule(chain: str, expr: list[dict[str, Any]], comment: str = "") -> dict[str, Any]:
    rule = _obj("rule", chain=chain, expr=expr)
    if comment:
        rule["rule"]["comment"] = comment
    return {"add": rule}


def _jump(target: str) -> dict[str, Any]:
    return {"jump": {"target": target}}


def _match(left: dict[str, Any], right: Any, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def _skeleton(admin_chain: str) -> list[dict[str, Any]]:
    table = {"family": NFT_FAMILY, "name": NFT_TABLE, "comment": NFT_TABLE_COMMENT}
    forward = _obj("chain", name="forward", type="filter", hook="forward", prio=0, policy="accept")
    return [
        {"add": {"table": table}},
        {"add": forward},
        *[
            {"add": _obj("chain", name=name)}
            for name in (admin_chain, "pods", "isolation_stage1", "isolation_stage2")
        ],
        {"flush": _obj("chain", name="forward")},
        *[_rule("forward", [_jump(t)]) for t in ("isolation_stage1", admin_chain, "pods")],
    ]


NFT_CHAINS = ("forward", "pods", "isolation_stage1", "isolation_stage2")


def nft_admin_chain(name: str) -> str:
    """nft chain names are identifiers: the iptables default maps to ``admin``."""
    return "admin" if name in ("", DEFAULT_ADMIN_CHAIN) else name


def _rules(chain: str) -> list[dict[str, object]]:
    """The rules of one chain of our table ([] when the table does not exist)."""
    try:
        items = nft.query(f"list chain {NFT_FAMILY} {NFT_TABLE} {chain}")
    except nft.NftError:
        return []
    return [item["rule"] for item in items if isinstance(item.get("rule"), dict)]


def _deletes(chain: str, match: Iterable[dict[str, object]]) -> list[dict[str, Any]]:
    return [{"delete": _obj("rule", chain=chain, handle=int(str(r["handle"])))} for r in match]


def _with_prefix(rules: list[dict[str, object]], prefix: str) -> list[dict[str, object]]:
    return [r for r in rules if str(r.get("comment", "")).startswith(prefix)]


def _isolation_nft(
    bridge: str, policy: str
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    iif = {"meta": {"key": "iifname"}}
    oif = {"meta": {"key": "oifname"}}
    stage1 = [[_match(iif, bridge), _match(oif, bridge, "!="), _jump("isolation_stage2")]]
    if policy == "isolated":
        stage1.append([_match(iif, bridge), _match(oif, bridge), {"drop": None}])
    return stage1, [[_match(oif, bridge), {"drop": None}]]


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
    rules: list[dict[str, Any]]

    def refill(self, create: bool) -> list[dict[str, Any]]:
        """Flush and refill; without ``create`` the flush fails (ENOENT) when the chain is
        missing, which is how an ADD learns that it must create it and its jump."""
        cmds: list[dict[str, Any]] = [{"add": _obj("chain", name=self.name)}] if create else []
        return [*cmds, {"flush": _obj("chain", name=self.name)}, *self.rules]


def _sub_chains(network: str, bridge: str, policy: str) -> list[_SubChain]:
    chain, sets = net_names(network)
    state = _match({"ct": {"key": "state"}}, ["established", "related"], "in")
    rules: list[dict[str, Any]] = []
    for family, name in sets.items():
        fam = "ip" if family == 4 else "ip6"
        daddr = _match({"payload": {"protocol": fam, "field": "daddr"}}, f"@{name}")
        saddr = _match({"payload": {"protocol": fam, "field": "saddr"}}, f"@{name}")
        rules += [
            _rule(chain, [daddr, state, {"accept": None}]),
            _rule(chain, [saddr, {"accept": None}]),
        ]
    out = [_SubChain("pods", chain, rules)]
    if policy in ("same-bridge", "isolated"):
        iso1, iso2 = iso_names(bridge)
        tag = f"{ISOLATION_COMMENT}: {bridge}"
        stage1, stage2 = _isolation_nft(bridge, policy)
        out.append(_SubChain("isolation_stage1", iso1, [_rule(iso1, e, tag) for e in stage1]))
        out.append(_SubChain("isolation_stage2", iso2, [_rule(iso2, e, tag) for e in stage2]))
    return out


def _sets(network: str) -> list[dict[str, Any]]:
    return [
        {"add": _obj("set", name=name, type="ipv4_addr" if family == 4 else "ipv6_addr")}
        for family, name in net_names(network)[1].items()
    ]


def _jumps_to(rules: list[dict[str, object]], target: str) -> bool:
    return any(f"'target': '{target}'" in str(r.get("expr", "")) for r in rules)


def _element(set_name: str, ip: IPAddress, comment: str = "") -> dict[str, Any]:
    value: Any = {"elem": {"val": str(ip), "comment": comment}} if comment else str(ip)
    return _obj("element", name=set_name, elem=[value])


def nft_add(
    ips: Sequence[IPAddress],
    network: str,
    ifname: str,
    container_id: str,
    admin_chain: str = DEFAULT_ADMIN_CHAIN,
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
    comment = nft_comment(network, ifname, container_id)
    _chain, sets = net_names(network)
    subs = _sub_chains(network, bridge, policy)
    elements: list[dict[str, Any]] = []
    for ip in ips:
        name = sets[ip.version]
        elements += [
            {"add": _element(name, ip)},
            {"delete": _element(name, ip)},
            {"add": _element(name, ip, comment)},
        ]
    head = _skeleton(nft_admin_chain(admin_chain)) + _sets(network)
    try:
        nft.apply_json(head + [c for sub in subs for c in sub.refill(False)] + elements)
        return
    except nft.NftError as exc:
        if "No such file or directory" not in str(exc):
            raise FirewallError(str(exc)) from None
    cmds = list(head)
    have: dict[str, list[dict[str, object]]] = {}
    for sub in subs:
        if sub.parent not in have:
            have[sub.parent] = _rules(sub.parent)
        cmds += sub.refill(True)
        if not _jumps_to(have[sub.parent], sub.name):
            cmds.append(_rule(sub.parent, [_jump(sub.name)]))
    _nft_apply(cmds + elements)


def _elements(network: str) -> list[tuple[str, str, str]]:
    """(set, address, comment) of every element of the network's sets."""
    out: list[tuple[str, str, str]] = []
    for name in net_names(network)[1].values():
        try:
            items = nft.query(f"list set {NFT_FAMILY} {NFT_TABLE} {name}")
        except nft.NftError:
            continue
        for item in items:
            for elem in item.get("set", {}).get("elem", []):
                if isinstance(elem, dict) and isinstance(elem.get("elem"), dict):
                    inner = elem["elem"]
                    out.append((name, str(inner.get("val", "")), str(inner.get("comment", ""))))
                else:
                    out.append((name, str(elem), ""))
    return out


def _delete_elements(elements: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    return [
        {"delete": _obj("element", name=name, elem=[str(ipaddress.ip_address(addr))])}
        for name, addr, _comment in elements
    ]


def nft_delete(network: str, ifname: str, container_id: str) -> None:
    """Remove the attachment's elements (and older per-pod rules), found by comment."""
    prefix = hash_for_instance(network, ifname, container_id)
    cmds = _deletes("pods", _with_prefix(_rules("pods"), prefix))
    cmds += _delete_elements(e for e in _elements(network) if e[2].startswith(prefix))
    if cmds:
        _nft_apply(cmds)


def nft_gc(network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Remove the network's elements (and older per-pod rules) whose attachment is not in
    ``valid``; returns how many."""
    keep = {hash_for_instance(network, ifname, cid) for cid, ifname in valid}
    net_prefix = hash_for_network(network) + "-"
    width = len(net_prefix) + 16

    def stale(comment: str) -> bool:
        return comment.startswith(net_prefix) and comment[:width] not in keep

    rules = [r for r in _rules("pods") if stale(str(r.get("comment", "")))]
    elements = [e for e in _elements(network) if stale(e[2])]
    if rules or elements:
        _nft_apply(_deletes("pods", rules) + _delete_elements(elements))
    return len(rules) + len(elements)


def nft_check(ips: Sequence[IPAddress], network: str, ifname: str, container_id: str) -> None:
    prefix = hash_for_instance(network, ifname, container_id)
    chain, _sets = net_names(network)
    mine = {addr for _s, addr, comment in _elements(network) if comment.startswith(prefix)}
    missing = [str(ip) for ip in ips if str(ip) not in mine]
    if missing:
        raise FirewallError(
            f"nftables set elements of {container_id}/{ifname} missing: {', '.join(missing)}"
        )
    if not _jumps_to(_rules("pods"), chain):
        raise FirewallError(f"the pods chain of {NFT_FAMILY} {NFT_TABLE} does not jump to {chain}")
    if not _jumps_to(_rules("forward"), "pods"):
        raise FirewallError(f"the forward chain of {NFT_FAMILY} {NFT_TABLE} does not jump to pods")


def _nft_apply(cmds: list[dict[str, Any]]) -> None:
    try:
        nft.apply_json(cmds)
    except nft.NftError as exc:
        raise FirewallError(str(exc)) from None
