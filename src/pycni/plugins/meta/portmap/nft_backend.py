"""The nftables backend: one ``inet`` table whose rules do not grow with the pod count.

Layout of ``table inet pycni_portmap`` (the shared scaffolding, re-created idempotently when
an ADD finds it incomplete)::

    chain prerouting { nat prerouting dstnat: fib daddr type local jump hostports }
    chain output     { nat output -100:       fib daddr type local jump hostports }
    chain hostports {
        jump marks
        ip  daddr . meta l4proto . th dport vmap @hostip4     # chain layout (conditions)
        ip6 daddr . meta l4proto . th dport vmap @hostip6
        meta nfproto ipv4 meta l4proto . th dport vmap @ports4
        meta nfproto ipv6 meta l4proto . th dport vmap @ports6
        dnat ip  to ip  daddr . meta l4proto . th dport map @dnat4h   # map layout
        dnat ip6 to ip6 daddr . meta l4proto . th dport map @dnat6h
        meta nfproto ipv4 dnat ip  to meta l4proto . th dport map @dnat4
        meta nfproto ipv6 dnat ip6 to meta l4proto . th dport map @dnat6
    }
    chain marks {     # two rules per (mark bit, family, source prefix length) in use
        ip saddr & 255.255.0.0 . meta l4proto . th dport @masq4-b13-p16 meta mark set
            meta mark | 0x2000 comment "b13 4/16"
        ip saddr & 255.255.0.0 . ip daddr . meta l4proto . th dport @masq4h-b13-p16 ...
        (the same for 127.0.0.1/32, for IPv6 prefixes, for other mark bits)
    }
    chain masq-b13 { nat postrouting 99: meta mark & 0x2000 == 0x2000 masquerade }

An attachment is map and set elements (nft_maps.py), unless its config has conditions: then
it is a chain of its own entered through the verdict maps (nft_chains.py), which is also how
an earlier pycni version stored every attachment, so DEL and GC still remove those.

Everything per attachment is built from the nftables model (net/netfilter/model.py). The
scaffolding is the one place written in nft's text syntax, because the model cannot give it to
libnftables: 1.0.6 crashes on the JSON form of a ``dnat ... map`` whose data is a
concatenation, the scaffold must be one transaction (``hostports`` is flushed and refilled
atomically), and one transaction is either text or JSON. It holds no config value but the
mark bit and the pods' prefix lengths, integers checked here.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Iterable
from functools import partial

from pycni.net.netfilter import nft_records
from pycni.net.netfilter.nft_records import NftError
from pycni.plugins.meta.portmap import nft_chains, nft_maps
from pycni.plugins.meta.portmap.config import NFTABLES, PortMapConfig
from pycni.spec.errors import CNIError, InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.nft_seam import Nftables
    from pycni.net.netfilter.seam import Netfilter

FAMILY = nft_chains.FAMILY
TABLE = nft_chains.TABLE
T = f"{FAMILY} {TABLE}"
VMAPS = {
    "hostip4": "ipv4_addr . inet_proto . inet_service",
    "hostip6": "ipv6_addr . inet_proto . inet_service",
    "ports4": "inet_proto . inet_service",
    "ports6": "inet_proto . inet_service",
}
HOSTPORTS_RULES = 9
MASQ_PRIORITY = 99  # just before srcnat (100), like the reference's POSTROUTING position 1
_KEY = "meta l4proto . th dport"
_ADDR = {4: ("ip", "ipv4_addr"), 6: ("ip6", "ipv6_addr")}


def _dnat_maps() -> list[str]:
    out = []
    for family, (_proto, kind) in _ADDR.items():
        target = f"{kind} . inet_service"
        out.append(f"add map {T} dnat{family} {{ type inet_proto . inet_service : {target} ; }}")
        out.append(
            f"add map {T} dnat{family}h {{ type {kind} . inet_proto . inet_service : {target} ; }}"
        )
    return out


def _hostports_rules() -> list[str]:
    rule = f"add rule {T} hostports"
    return [
        f"{rule} jump marks",
        f"{rule} ip daddr . {_KEY} vmap @hostip4",
        f"{rule} ip6 daddr . {_KEY} vmap @hostip6",
        f"{rule} meta nfproto ipv4 {_KEY} vmap @ports4",
        f"{rule} meta nfproto ipv6 {_KEY} vmap @ports6",
        f"{rule} dnat ip to ip daddr . {_KEY} map @dnat4h",
        f"{rule} dnat ip6 to ip6 daddr . {_KEY} map @dnat6h",
        f"{rule} meta nfproto ipv4 dnat ip to {_KEY} map @dnat4",
        f"{rule} meta nfproto ipv6 dnat ip6 to {_KEY} map @dnat6",
    ]


def _netmask(family: int, plen: int) -> str:
    return str(ipaddress.ip_network(f"{'0.0.0.0' if family == 4 else '::'}/{plen}").netmask)


def _mark_group(group: nft_maps.Group) -> list[str]:
    """The two sets and two ``marks`` rules of one (mark bit, family, prefix length); all
    three are integers checked here, the only values in the text."""
    bit, family, plen = group
    if not 0 <= bit <= 31 or family not in _ADDR or not 0 <= plen <= (32 if family == 4 else 128):
        raise ValueError(f"not a masquerade set group: {group}")
    proto, kind = _ADDR[family]
    plain = nft_maps.masq_set(family, False, bit, plen)
    host = nft_maps.masq_set(family, True, bit, plen)
    source = f"{proto} saddr & {_netmask(family, plen)}"
    set_mark = f'meta mark set meta mark | {1 << bit:#x} comment "{nft_maps.group_comment(group)}"'
    return [
        f"add set {T} {plain} {{ type {kind} . inet_proto . inet_service ; }}",
        f"add set {T} {host} {{ type {kind} . {kind} . inet_proto . inet_service ; }}",
        f"add rule {T} marks {source} . {_KEY} @{plain} {set_mark}",
        f"add rule {T} marks {source} . {proto} daddr . {_KEY} @{host} {set_mark}",
    ]


def _masq_chain(bit: int) -> list[str]:
    if not 0 <= bit <= 31:
        raise ValueError(f"mark bit {bit} is not 0-31")
    mark, chain = 1 << bit, f"masq-b{bit}"
    return [
        f"add chain {T} {chain} "
        f"{{ type nat hook postrouting priority {MASQ_PRIORITY} ; policy accept ; }}",
        f"flush chain {T} {chain}",
        f"add rule {T} {chain} meta mark & {mark:#x} == {mark:#x} masquerade",
    ]


def scaffold_script(
    groups: set[nft_maps.Group], bits: Iterable[int] = (), flush_marks: bool = True
) -> str:
    """The shared table, maps, sets and chains for the masquerade set ``groups`` (and the
    masquerade chains of ``bits``); safe to repeat (chains are flushed and refilled).
    Without ``flush_marks`` the groups' rules are added to ``marks`` as it is: two ADDs that
    each add a new group at the same moment must not flush each other's rules away."""
    lines = [f'add table {T} {{ comment "pycni portmap plugin" ; }}']
    lines += [f"add map {T} {name} {{ type {kind} : verdict ; }}" for name, kind in VMAPS.items()]
    lines += _dnat_maps()
    lines += [
        f"add chain {T} hostports",
        f"add chain {T} marks",
        f"add chain {T} prerouting "
        "{ type nat hook prerouting priority dstnat ; policy accept ; }",
        f"add chain {T} output {{ type nat hook output priority -100 ; policy accept ; }}",
        f"flush chain {T} hostports",
        *_hostports_rules(),
    ]
    if flush_marks:
        lines.append(f"flush chain {T} marks")
    for group in sorted(groups):
        lines += _mark_group(group)
    for bit in sorted(set(bits) | {g[0] for g in groups}):
        lines += _masq_chain(bit)
    for hook in ("prerouting", "output"):
        lines += [
            f"flush chain {T} {hook}",
            f"add rule {T} {hook} fib daddr type local jump hostports",
        ]
    return "\n".join(lines) + "\n"


def ensure_scaffold(nft: Nftables, cfg: PortMapConfig, groups: set[nft_maps.Group]) -> None:
    """Write the scaffolding again when the fixed chains do not hold their rules, or lack a
    masquerade set group (or chain) this ADD needs; checked by kernel-filtered dumps of the
    fixed chains (a libnftables listing would cost O(pods))."""
    bits = {cfg.mark_bit} if cfg.snat else set()
    try:
        marks = nft.chain_rules(FAMILY, TABLE, "marks")
        present = nft_maps.mark_groups(nft, marks)
        fixed = {"hostports": HOSTPORTS_RULES, "prerouting": 1, "output": 1}
        fixed.update({f"masq-b{bit}": 1 for bit in bits})
        ok = all(len(nft.chain_rules(FAMILY, TABLE, c)) == n for c, n in fixed.items())
    except OSError:
        marks, present, ok = [], {}, False
    # marks drifted (a group without its two rules, a rule of no group): rewrite it whole
    drift = any(n != 2 for n in present.values()) or len(marks) != 2 * len(present)
    missing = groups - set(present)
    if ok and not drift and not missing:
        return
    script = (
        scaffold_script(set(present) | groups, bits)
        if drift
        else scaffold_script(missing, bits, flush_marks=False)
    )
    try:
        nft.apply(script)
    except NftError as exc:
        raise InternalError(f"portmap: cannot set up the nftables table: {exc}") from None


def _conflict(taken: list[nft_maps.Entry]) -> CNIError:
    shown = ", ".join(f"{e.shown} ({e.set_name})" for e in taken)
    return InternalError(f"portmap: host port already mapped by another attachment: {shown}")


def _vmap_of(entry: nft_maps.Entry) -> str:
    """The chain layout's verdict map for the same key as a DNAT map entry."""
    family, host = entry.set_name[4], entry.set_name.endswith("h")
    return f"hostip{family}" if host else f"ports{family}"


def _refuse_chain_layout_keys(
    nft: Nftables, cfg: PortMapConfig, wanted: list[nft_maps.Mapping]
) -> None:
    """A key the verdict maps already send to a chain is a conflict, unless the chain is this
    attachment's own from an earlier pycni version: that one is removed first."""
    owner = nft_maps.owner_name(cfg.network, cfg.container_id, cfg.ifname)
    taken = []
    own_chain = False
    for m in wanted:
        found = nft.get_element(FAMILY, TABLE, _vmap_of(m.dnat), m.dnat.key)
        if found is not None:
            if found.chain == owner:
                own_chain = True
            else:
                taken.append(m.dnat)
    if taken:
        raise _conflict(taken)
    if own_chain:
        nft_chains.delete(nft, cfg.network, cfg.container_id, cfg.ifname)


def _add_elements(nft: Nftables, cfg: PortMapConfig, wanted: list[nft_maps.Mapping]) -> None:
    owner = nft_maps.owner_name(cfg.network, cfg.container_id, cfg.ifname)
    _refuse_chain_layout_keys(nft, cfg, wanted)
    try:
        nft_maps.install(nft, owner, wanted)
        return
    except nft_records.NftnlError as exc:
        if exc.errno not in (errno.EEXIST, errno.EBUSY):
            raise InternalError(f"portmap: nftables ADD failed: {exc}") from None
    # A key is present: another attachment's (a conflict), or this one's from an earlier
    # ADD (replaced: its elements are removed, then the batch is sent again).
    taken = [e for e, held in nft_maps.holders(nft, wanted).items() if held != owner]
    if taken:
        raise _conflict(taken)
    nft_maps.remove_owned(nft, lambda comment: comment == owner)
    try:
        nft_maps.install(nft, owner, wanted)
    except nft_records.NftnlError as exc:
        raise InternalError(f"portmap: nftables ADD failed: {exc}") from None


def _add_chain(nft: Nftables, cfg: PortMapConfig) -> None:
    """The chain layout (conditions); a key the DNAT maps hold is a conflict."""
    owner = nft_maps.owner_name(cfg.network, cfg.container_id, cfg.ifname)
    taken = [
        e for e, held in nft_maps.holders(nft, nft_maps.mappings(cfg)).items() if held != owner
    ]
    if taken:
        raise _conflict(taken)
    nft_chains.add(nft, cfg)


class NftablesBackend:
    """portmap's nftables backend (see the module docstring for the layout)."""

    name = NFTABLES

    def add(
        self, nf: Netfilter, cfg: PortMapConfig, step: Callable[[str], None]
    ) -> Callable[[], object]:
        step("nftables")
        nft = nf.nft
        if cfg.has_conditions:
            ensure_scaffold(nft, cfg, set())
            _add_chain(nft, cfg)
        else:
            wanted = nft_maps.mappings(cfg)
            ensure_scaffold(nft, cfg, nft_maps.groups_needed(wanted))
            _add_elements(nft, cfg, wanted)
        return partial(self.delete, nf, cfg)

    def delete(self, nf: Netfilter, cfg: PortMapConfig) -> bool:
        """Remove this attachment's state in both layouts; False when there was none. With
        the mappings (``runtimeConfig``) and the pod's addresses (``prevResult``) the
        elements are found by keyed lookups; without them, by dumping the maps (O(pods))."""
        nft = nf.nft
        owner = nft_maps.owner_name(cfg.network, cfg.container_id, cfg.ifname)
        removed = nft_chains.delete(nft, cfg.network, cfg.container_id, cfg.ifname)
        if cfg.mappings_given and not cfg.mappings:
            return removed
        if cfg.mappings_given and cfg.container_ips:
            known = nft_maps.remove_known(nft, owner, nft_maps.mappings(cfg))
            if known is not None:
                return known or removed
        try:
            return bool(nft_maps.remove_owned(nft, lambda comment: comment == owner)) or removed
        except nft_records.NftnlError as exc:
            raise InternalError(f"portmap: nftables DEL failed: {exc}") from None

    def check(self, nf: Netfilter, cfg: PortMapConfig) -> None:
        nft = nf.nft
        if cfg.has_conditions:
            nft_chains.check(nft, cfg)
            return
        owner = nft_maps.owner_name(cfg.network, cfg.container_id, cfg.ifname)
        problems = nft_maps.missing(nft, owner, nft_maps.mappings(cfg))
        if problems:
            raise InternalError(f"portmap: {problems[0]} (owner {owner})")

    def gc(self, nf: Netfilter, cfg: PortMapConfig, valid: list[tuple[str, str]]) -> list[str]:
        """Remove this network's attachments that are not in ``valid``, in both layouts;
        returns their owner names."""
        nft = nf.nft
        removed = nft_chains.gc(nft, cfg.network, valid)
        keep = {nft_maps.owner_name(cfg.network, cid, ifname) for cid, ifname in valid}
        prefix = nft_chains.network_prefix(cfg.network)
        try:
            owners = nft_maps.remove_owned(nft, lambda c: c.startswith(prefix) and c not in keep)
        except nft_records.NftnlError as exc:
            raise InternalError(f"portmap: nftables GC failed: {exc}") from None
        return sorted(set(removed) | owners)

    def usable(self, nf: Netfilter, cfg: PortMapConfig) -> bool:
        return nf.nft.available()


BACKEND = NftablesBackend()
