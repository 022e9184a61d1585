"""The map layout of the nftables backend: an attachment's mappings are map and set elements.

Per mapping and family, one element of a DNAT map, keyed by what the packet is addressed to
and holding where it goes (the concatenated NAT target)::

    dnat4h / dnat6h   daddr . l4proto . dport : pod address . container port   (hostIP set)
    dnat4  / dnat6    l4proto . dport         : pod address . container port

and, with ``snat``, the elements of the sets that request masquerading (with mark bit N)
for hairpin traffic from the pod's subnet and for localhost (IPv4), or for every source with
``masqAll``. A source is a prefix of length P; the rule of set ``…-pP`` masks the packet's
source to P bits, so each set is a plain hash (an interval set of concatenations, nft's
``pipapo``, makes the kernel's deletion of an element grow with the set: docs/benchmarks.md)::

    masq4-bN-pP / masq6-bN-pP     saddr & mask(P) . l4proto . dport
    masq4h-bN-pP / masq6h-bN-pP   saddr & mask(P) . daddr . l4proto . dport

Every element carries the attachment's owner name (``pm-<network hash>-<attachment hash>``,
the chain name the chain layout gives it) as its comment, so DEL and GC delete exactly one
attachment's elements, and a key held by another owner is a conflict. The elements are
written and removed in one nf_tables netlink batch (net/netfilter/nftnl.py), and DEL finds them by
keyed lookups: no call here depends on how many pods exist.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Iterable

from pycni.net.netfilter import model, nft_records
from pycni.plugins.meta.portmap.config import IPInterface, PortMapConfig, PortMapping
from pycni.plugins.meta.portmap.nft_chains import FAMILY, TABLE, chain_name
from pycni.record import field, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.nft_seam import Nftables

DNAT_MAPS = ("dnat4", "dnat4h", "dnat6", "dnat6h")
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def dnat_map(family: int, host: bool) -> str:
    return f"dnat{family}{'h' if host else ''}"


Group = tuple[int, int, int]  # (mark bit, family, source prefix length): one pair of sets


def masq_set(family: int, host: bool, bit: int, plen: int) -> str:
    return f"masq{family}{'h' if host else ''}-b{bit}-p{plen}"


def group_comment(group: Group) -> str:
    """The comment of a group's two rules in ``marks``: ``b13 4/16``."""
    bit, family, plen = group
    return f"b{bit} {family}/{plen}"


def group_of(comment: str) -> Group | None:
    """The group a ``marks`` rule comment names; None unless it is one we could write."""
    head, _, tail = comment.partition(" ")
    family, _, plen = tail.partition("/")
    if not (head[:1] == "b" and head[1:].isdigit() and family in ("4", "6") and plen.isdigit()):
        return None
    group = (int(head[1:]), int(family), int(plen))
    ok = group[0] < 32 and group[2] <= (32 if group[1] == 4 else 128)
    return group if ok and group_comment(group) == comment else None


def owner_name(network: str, container_id: str, ifname: str) -> str:
    """The comment of an attachment's elements (same as its chain name in the chain layout)."""
    return chain_name(network, container_id, ifname)


@record(frozen=True)
class Entry:
    """One element of a set or map of the layout (a model element in the kernel's form: the
    key and, for a DNAT map, the data, rendered once); ``shown`` is the key in nft's syntax,
    for messages."""

    set_name: str
    element: model.Element
    shown: str
    group: Group | None = None  # a masquerade element's set pair

    @property
    def key(self) -> bytes:
        return self.element.key_bytes()

    @property
    def data(self) -> bytes:
        return self.element.value_bytes()

    def change(self, add: bool, owner: str = "") -> nft_records.ElementChange:
        return self.element.change(self.set_name, add, owner, exclusive=add)


@record
class Mapping:
    """A mapping's DNAT element and the masquerade elements that go with it."""

    dnat: Entry
    masq: list[Entry] = field(default_factory=list)

    @property
    def entries(self) -> list[Entry]:
        return [self.dnat, *self.masq]


def _concat(*parts: str) -> model.Concat:
    return model.Concat(parts)


def _sources(cip: IPInterface, family: int, masq_all: bool) -> list[IPNetwork]:
    """Sources whose DNATed packets are masqueraded: the pod's subnet (hairpin) and
    localhost for IPv4 (needs route_localnet), or every source with ``masqAll``."""
    if masq_all:
        return [ipaddress.ip_network("0.0.0.0/0" if family == 4 else "::/0")]
    out: list[IPNetwork] = [cip.network]
    if family == 4:
        out.append(ipaddress.ip_network("127.0.0.1/32"))
    return out


def _mapping(cfg: PortMapConfig, m: PortMapping, family: int, cip: IPInterface) -> Mapping:
    host = m.host_match(family)
    head = [str(host)] if host is not None else []
    tail = [m.protocol, str(m.host_port)]
    dnat = Entry(
        dnat_map(family, host is not None),
        model.Element(
            _concat(*head, *tail), _concat(str(cip.ip), str(m.container_port))
        ).in_kernel_form(),
        " . ".join([*head, *tail]),
    )
    out = Mapping(dnat)
    if cfg.snat:
        for src in _sources(cip, family, cfg.masq_all):
            group = (cfg.mark_bit, family, src.prefixlen)
            out.masq.append(
                Entry(
                    masq_set(family, host is not None, cfg.mark_bit, src.prefixlen),
                    model.Element(_concat(str(src.network_address), *head, *tail)).in_kernel_form(),
                    " . ".join([str(src), *head, *tail]),
                    group=group,
                )
            )
    return out


def mappings(cfg: PortMapConfig) -> list[Mapping]:
    """The attachment's elements, one ``Mapping`` per distinct DNAT key (the first of two
    mappings with the same key wins, as the first of two rules would)."""
    out: dict[tuple[str, bytes], Mapping] = {}
    for family in (4, 6):
        cip = cfg.container_ips.get(family)
        if cip is None:
            continue
        for m in cfg.mappings_for(family):
            mapping = _mapping(cfg, m, family, cip)
            out.setdefault((mapping.dnat.set_name, mapping.dnat.key), mapping)
    return list(out.values())


# ---------------------------------------------------------------------------------------------
# Kernel operations (one netlink batch, keyed lookups; dumps only for GC and repairs)


def install(nft: Nftables, owner: str, wanted: list[Mapping]) -> None:
    """Add the elements in one batch; every add is exclusive, so a key already present
    (another attachment's, or this one's from an earlier ADD) makes the batch fail with
    EEXIST/EBUSY and nothing changes. Raises nft_records.NftnlError."""
    nft.change_elements(FAMILY, TABLE, [e.change(True, owner) for m in wanted for e in m.entries])


def holders(nft: Nftables, wanted: list[Mapping]) -> dict[Entry, str]:
    """The owner (comment) of every DNAT key of ``wanted`` that is present (keyed lookups)."""
    out: dict[Entry, str] = {}
    for m in wanted:
        found = nft.get_element(FAMILY, TABLE, m.dnat.set_name, m.dnat.key)
        if found is not None:
            out[m.dnat] = found.comment
    return out


def remove_known(nft: Nftables, owner: str, known: list[Mapping]) -> bool | None:
    """Delete the elements of ``known`` whose DNAT element ``owner`` holds (keyed lookups, one
    batch). True when some were deleted, False when none is held by ``owner``, None when the
    batch failed (an element is not as computed: the config changed since the ADD)."""
    held = holders(nft, known)
    ours = [m for m in known if held.get(m.dnat) == owner]
    if not ours:
        return False
    try:
        nft.change_elements(FAMILY, TABLE, [e.change(False) for m in ours for e in m.entries])
    except nft_records.NftnlError:
        return None
    return True


def groups_needed(wanted: Iterable[Mapping]) -> set[Group]:
    return {e.group for m in wanted for e in m.masq if e.group is not None}


def mark_groups(nft: Nftables, rules: list[nft_records.Rule] | None = None) -> dict[Group, int]:
    """The masquerade set groups whose rules are in ``marks`` (or ``rules``, that chain's
    rules already read), with their rule counts."""
    out: dict[Group, int] = {}
    for rule in nft.chain_rules(FAMILY, TABLE, "marks") if rules is None else rules:
        group = group_of(rule.comment)
        if group is not None:
            out[group] = out.get(group, 0) + 1
    return out


def _all_sets(
    nft: Nftables,
) -> list[str]:
    names = list(DNAT_MAPS)
    for bit, family, plen in sorted(mark_groups(nft)):
        names += [masq_set(family, host, bit, plen) for host in (False, True)]
    return names


def remove_owned(nft: Nftables, owned: Callable[[str], bool]) -> set[str]:
    """Delete every element whose owner ``owned`` accepts, found by dumping the layout's maps
    and sets (O(elements): for GC, and for a DEL that cannot compute its keys). Returns the
    owners removed."""
    changes: list[nft_records.ElementChange | nft_records.ChainRemoval] = []
    owners: set[str] = set()
    for name in _all_sets(nft):
        for element in nft.set_elements(FAMILY, TABLE, name) or []:
            if element.comment and owned(element.comment):
                owners.add(element.comment)
                changes.append(model.Element(element.key).change(name, False))
    if not changes:
        return set()
    try:
        nft.change_elements(FAMILY, TABLE, changes)
    except nft_records.NftnlError as exc:
        if exc.errno != errno.ENOENT:  # ENOENT: a concurrent DEL removed one first
            raise
        for change in changes:  # one by one, skipping what is gone
            try:
                nft.change_elements(FAMILY, TABLE, [change])
            except nft_records.NftnlError as one:
                if one.errno != errno.ENOENT:
                    raise
    return owners


def missing(nft: Nftables, owner: str, wanted: Iterable[Mapping]) -> list[str]:
    """What CHECK finds wrong: DNAT elements absent, held by another owner or pointing
    elsewhere, masquerade elements absent (keyed lookups)."""
    problems: list[str] = []
    for m in wanted:
        found = nft.get_element(FAMILY, TABLE, m.dnat.set_name, m.dnat.key)
        if found is None:
            problems.append(f"map {m.dnat.set_name} has no element {m.dnat.shown}")
        elif found.comment != owner:
            problems.append(f"map {m.dnat.set_name} sends {m.dnat.shown} to {found.comment!r}")
        elif found.data != m.dnat.data:
            problems.append(f"map {m.dnat.set_name} sends {m.dnat.shown} to another target")
        for e in m.masq:
            if nft.get_element(FAMILY, TABLE, e.set_name, e.key) is None:
                problems.append(f"set {e.set_name} has no element {e.shown}")
    return problems
