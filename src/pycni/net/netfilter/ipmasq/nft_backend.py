"""Masquerading with nftables (the default ``ipMasqBackend``), on the nftables model.

Layout (the table, ``postrouting`` and ``masq_checks`` are the reference's, so its pods and
ours coexist): the reference's table ``inet cni_plugins_masquerade`` with its base chain
``postrouting`` (nat, srcnat; skips multicast, then goes to ``masq_checks``). ``masq_checks``
holds one ``jump pycni-<hash(network)>`` per network; that chain holds one rule per subnet of
the network, ``<ip|ip6> saddr @<set> <ip|ip6> daddr != <subnet> masquerade``; the set holds
the pod addresses of that subnet, each element commented with the reference's per-attachment
comment ``<hash(network)>-<hash(ifname:containerID)>, net: …, if: …, id: …``, so DEL and GC
by attachment stay exact. A packet meets a constant number of rules and one hash lookup
whatever the number of pods; an ADD or DEL adds or removes elements (one nf_tables netlink
batch) and never lists the ruleset (libnftables' ``list`` loads every set element into its
cache: see netfilter/nftnl.py). Our rule comments start with ``pycni`` so the reference's GC,
which deletes the rules of a network whose comment starts with the network hash, leaves them
alone.

Pods added by older pycni versions (and by the Go reference) have one rule per address in
``masq_checks`` with the attachment's comment: DEL and GC remove those too, found with a
kernel-filtered dump of ``masq_checks`` (net/netfilter/nftnl.py), which holds only a rule per
network once those pods are gone. The last DEL (or GC) of a network removes its chain and
sets, and the last of all the table, so a node without masqueraded pods has no trace of it,
as under the reference (``release_unused``: checked by the kernel, and serialised with the
ADD that makes them).

The objects are model records (net/netfilter/model.py): JSON commands for libnftables,
nf_tables netlink changes for the per-pod elements and the removals. The scaffolding (table,
``postrouting``, ``masq_checks``) stays the reference's nft text, which the model cannot give
libnftables: its JSON input (1.0.6) silently drops the comments of tables and chains, and the
reference's table and ``masq_checks`` carry comments (checked: the same commands as text and
as JSON give the same netlink messages but for those comments). The text holds no config
value; ``nft_setup_script`` (the reference's per-address layout, which tests recreate) is
text built on it.
"""

from __future__ import annotations

import errno
import ipaddress
import os
from collections.abc import Iterable, Sequence

from pycni.net.netfilter import model, nft_records
from pycni.net.netfilter.ipmasq import (
    CHAIN,
    COMMENT_MAX,
    TABLE,
    IPMasqError,
    comment_for_instance,
    hash_for_instance,
    hash_for_network,
    hash_hex,
)
from pycni.net.netfilter.nft_records import NftError
from pycni.spec.result import IPInterface

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pycni.net.netfilter.nft_seam import Nftables
    from pycni.net.netfilter.seam import Netfilter


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

TABLE_COMMENT = "Masquerading for plugins from github.com/containernetworking/plugins"
CHAIN_COMMENT = "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"
T = model.Table("inet", TABLE)
RULE_PREFIX = "pycni "


def net_chain(network: str) -> str:
    """The per-network chain ``masq_checks`` jumps to."""
    return f"pycni-{hash_for_network(network)}"


def set_name(network: str, subnet: IPNetwork) -> str:
    """The set of the network's pod addresses in ``subnet``."""
    return f"pycni-{hash_for_network(network)}-{hash_hex(12, '', str(subnet))}"


def _subnet_comment(network: str, subnet: IPNetwork) -> str:
    return f"{RULE_PREFIX}{subnet} net: {network.replace(chr(34), '')}"[:COMMENT_MAX]


def _subnet_of_comment(comment: str) -> IPNetwork | None:
    if not comment.startswith(RULE_PREFIX):
        return None
    try:
        return ipaddress.ip_network(comment[len(RULE_PREFIX) :].split(" ", 1)[0])
    except ValueError:
        return None


def _fam(version: int) -> str:
    return "ip" if version == 4 else "ip6"


def scaffold_script() -> str:
    """The reference's table and chains (idempotent; ``postrouting`` is rebuilt)."""
    t = f"inet {TABLE}"
    lines = [
        f'add table {t} {{ comment "{TABLE_COMMENT}" ; }}',
        f'add chain {t} {CHAIN} {{ comment "{CHAIN_COMMENT}" ; }}',
        f"add chain {t} postrouting {{ type nat hook postrouting priority 100 ; }}",
        f"flush chain {t} postrouting",
        f"add rule {t} postrouting ip daddr == 224.0.0.0/4  return",
        f"add rule {t} postrouting ip6 daddr == ff00::/8  return",
        f"add rule {t} postrouting goto {CHAIN}",
    ]
    return "\n".join(lines) + "\n"


def nft_setup_script(
    ipns: Sequence[IPInterface], network: str, ifname: str, container_id: str, stale: Iterable[int]
) -> str:
    """The reference's per-rule layout (one rule per pod address in ``masq_checks``).

    Not used for new pods any more; kept as the description of what older versions and the
    reference wrote, which DEL and GC still remove (and tests recreate)."""
    t = f"inet {TABLE}"
    comment = comment_for_instance(network, ifname, container_id)
    lines = scaffold_script().splitlines()
    lines += [f"delete rule {t} {CHAIN} handle {h}" for h in stale]
    for ipn in ipns:
        fam = _fam(ipn.version)
        lines.append(
            f"add rule {t} {CHAIN} {fam} saddr == {ipn.ip} {fam} daddr != {ipn.network} "
            f'masquerade comment "{comment}"'
        )
    return "\n".join(lines) + "\n"


def element_changes(
    ipns: Sequence[IPInterface], network: str, comment: str
) -> list[nft_records.ElementChange]:
    """Add each address to its subnet's set with this attachment's comment, replacing an
    element left by an earlier attachment (add, delete, add: a no-op add makes the delete
    safe, and the last add carries the comment)."""
    out: list[nft_records.ElementChange] = []
    for ipn in ipns:
        name, element = set_name(network, ipn.network), model.Element(str(ipn.ip))
        out.append(element.change(name, True))
        out.append(element.change(name, False))
        out.append(element.change(name, True, comment))
    return out


def _jump_comment(network: str) -> str:
    """The comment of the network's jump in ``masq_checks``."""
    return f"{RULE_PREFIX}net: {network.replace(chr(34), '')}"[:COMMENT_MAX]


def _ensure_network(nft: Nftables, network: str, subnets: Iterable[IPNetwork]) -> None:
    """Create what the fast path needs, once per network and subnet. ``create`` fails when
    the object exists, so the chain and its jump (and a set and its rule) appear together
    exactly once even when several ADDs race."""
    nft.apply(scaffold_script())
    chain = net_chain(network)
    jump = model.Rule(T, CHAIN, [model.Verdict("jump", chain)], _jump_comment(network))
    _create_once(nft, [model.create(model.Chain(T, chain)), model.add(jump)])
    for subnet in subnets:
        fam = _fam(subnet.version)
        name = set_name(network, subnet)
        rule = model.Rule(
            T,
            chain,
            [
                model.Match(model.Payload(fam, "saddr"), model.SetRef(name)),
                model.Match(
                    model.Payload(fam, "daddr"),
                    model.Prefix(str(subnet.network_address), subnet.prefixlen),
                    "!=",
                ),
                model.Masquerade(),
            ],
            _subnet_comment(network, subnet),
        )
        set_type = "ipv4_addr" if subnet.version == 4 else "ipv6_addr"
        _create_once(nft, [model.create(model.Set(T, name, set_type)), model.add(rule)])


def _create_once(nft: Nftables, commands: list[Any]) -> None:
    try:
        nft.apply_json(commands)
    except NftError as exc:
        if "File exists" not in str(exc):
            raise


class _NamespaceLock:
    """Serialises the making of the table's objects with their removal in this thread's
    namespace: an ADD that finds its set missing makes it and adds to it under the lock, and
    a DEL removes unused objects under it, so neither can undo the other half-way (lock-free,
    a DEL could remove the sets between an ADD making them and adding to them, again and
    again under churn). An flock on the namespace's own inode (as sbr takes on a pod's): per
    node, no file to leave behind, released when a holder dies. The common ADD (the sets
    exist) and the element removals of a DEL never take it."""

    def __enter__(self) -> None:
        import fcntl  # only the first ADD of a network and the DEL's cleanup get here

        from pycni.net.ns import THREAD_NETNS

        self._fd = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self._fd)
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # drops the lock


def setup(nft: Nftables, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
    """Add the attachment's addresses to its network's sets: one small batch; the sets and
    their rules are made on the first ADD of a network (or subnet), under _NamespaceLock."""

    if not ipns:
        return
    changes = element_changes(ipns, network, comment_for_instance(network, ifname, cid))
    names = dict.fromkeys(set_name(network, ipn.network) for ipn in ipns)
    # asked first: a batch refused for a missing set costs the kernel an RCU grace period
    # (the first ADD after the last DEL of a network finds none), a question a round trip
    if all(nft.set_exists("inet", TABLE, name) for name in names):
        try:
            nft.change_elements("inet", TABLE, changes)
            return
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise NftError(f"adding the pod addresses to the masquerade sets: {exc}") from None
    # a set (or the table) is missing: make them, then add
    with _NamespaceLock():
        _ensure_network(nft, network, dict.fromkeys(ipn.network for ipn in ipns))
        try:
            nft.change_elements("inet", TABLE, changes)
        except OSError as exc:
            raise NftError(f"adding the pod addresses to the masquerade sets: {exc}") from None


def _elements(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(str(e.key), e.comment) for s in model.parse(items).sets for e in s.elements]


def _query(nft: Nftables, command: str) -> list[dict[str, Any]]:
    """A ``get``/``list`` command in nft text (only our hashed names and parsed addresses go
    into it); libnftables' JSON input has no ``get``."""
    return nft.query(command)


def _delete_element(name: str, ip: str) -> Any:
    return model.delete(model.Set(T, name), [model.Element(ip)])


def _delete_changes(nft: Nftables, doomed: list[Any]) -> None:
    """Apply deletions (elements and rules) as one libnftables transaction."""
    nft.apply_json(doomed)


def _delete_rule(handle: int) -> Any:
    return model.delete(model.Rule(T, CHAIN, handle=handle))


def _network_rules(nft: Nftables, network: str) -> list[tuple[int, str]]:
    """(handle, set) of each rule of the network's chain, the set read from its comment
    ("" for a rule that is not one of ours)."""

    out = []
    for rule in nft.chain_rules("inet", TABLE, net_chain(network)):
        subnet = _subnet_of_comment(rule.comment)
        out.append((rule.handle, "" if subnet is None else set_name(network, subnet)))
    return out


def _network_sets(nft: Nftables, network: str) -> list[str]:
    """The sets of a network, read from the comments of its chain's rules."""
    return [name for _handle, name in _network_rules(nft, network) if name]


def release_unused(nft: Nftables, network: str, sets: Sequence[str] = ()) -> bool:
    """After a DEL or GC: remove the network's chain, jump, rules and sets once its sets hold
    no address, then the table once nothing else is in it, so the last DEL leaves no trace
    (as the reference, whose iptables chains go with their pod). ``sets``: those the caller
    just removed addresses from (else the network's). Returns whether the table went.

    First, without a lock, each set is read (nftnl.set_is_empty): a set that still holds an
    address ends it there, the common case, at the cost of one dump. Then, under
    _NamespaceLock (so an ADD of ours making the sets is not cut in two), each step is one
    nf_tables batch whose removals the kernel refuses (NLM_F_NONREC: EBUSY, and the whole
    batch is undone) when a set still holds an element, a chain holds a rule we did not name,
    or the table holds anything else, as checked in the kernel's commit of that batch: an
    address added meanwhile by anyone (our daemon's threads, another process, the reference)
    keeps everything. Such a refusal costs the kernel an RCU grace period (docs/benchmarks.md),
    hence the reads first."""

    for name in sets or _network_sets(nft, network):
        if nft.set_is_empty("inet", TABLE, name) is False:
            return False  # addresses left (a missing set holds none: an older layout's pod)
    with _NamespaceLock():
        checks = nft.chain_rules("inet", TABLE, CHAIN)
        jumps = [rule.handle for rule in checks if rule.comment == _jump_comment(network)]
        rules = _network_rules(nft, network)
        if len(jumps) > 1 or (rules and not jumps) or any(not name for _h, name in rules):
            return False  # not our layout as we made it (names cut to one comment): leave it
        if jumps:
            batch = [model.removal(model.Rule(T, CHAIN, handle=jumps[0]))]
            batch += [
                model.removal(model.Rule(T, net_chain(network), handle=handle))
                for handle, _s in rules
            ]
            batch += [model.removal(model.Set(T, name), True) for _h, name in rules]
            batch.append(model.removal(model.Chain(T, net_chain(network)), True))
            if not _try_removal(nft, batch):
                return False  # an address came meanwhile: keep it all
        if len(checks) > len(jumps):
            return False  # other networks' jumps or the older layout's rules keep the table
        if not jumps and not nft.chain_exists("inet", TABLE, CHAIN):
            return False  # no table (a refused batch costs a grace period: ask first)
        return _try_removal(
            nft,
            [
                model.removal(model.Chain(T, "postrouting")),  # ours alone: remade by a first ADD
                model.removal(model.Chain(T, CHAIN), True),
                model.removal(T, True),
            ],
        )


def _try_removal(nft: Nftables, batch: Sequence[nft_records.Removal]) -> bool:
    """Apply a batch of removals; False when the kernel refused it as in use (EBUSY) or
    something of it is gone already (ENOENT: a concurrent removal or change)."""

    try:
        nft.change_elements("inet", TABLE, batch)
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOENT):
            return False
        raise NftError(f"removing the unused masquerade table: {exc}") from None
    return True


def _set_elements(nft: Nftables, name: str) -> list[tuple[str, str]]:
    """Every (address, comment) of a set: O(elements), for GC and for a DEL without IPs."""
    try:
        return _elements(_query(nft, f"list set inet {TABLE} {name}"))
    except NftError:
        return []


def teardown(
    nft: Nftables, network: str, ifname: str, cid: str, ipns: Sequence[IPInterface] = ()
) -> None:
    """Remove this attachment's set elements and any per-address rule of the older layout.

    With the pod's addresses known (the usual DEL) each element is looked up by key and
    removed only when its comment names this attachment; without them the network's sets
    are searched by comment."""

    comment = comment_for_instance(network, ifname, cid)
    ours: list[nft_records.ElementChange] = []
    doomed: list[Any] = []
    if ipns:
        for ipn in ipns:
            name = set_name(network, ipn.network)
            if nft.element_comment("inet", TABLE, name, ipn.ip) == comment:
                ours.append(model.Element(str(ipn.ip)).change(name, False))
    else:
        for name in _network_sets(nft, network):
            doomed += [
                _delete_element(name, ip) for ip, c in _set_elements(nft, name) if c == comment
            ]
    prefix = hash_for_instance(network, ifname, cid)
    doomed += [
        _delete_rule(rule.handle)
        for rule in nft.chain_rules("inet", TABLE, CHAIN)
        if rule.comment.startswith(prefix)
    ]
    try:
        nft.change_elements("inet", TABLE, ours)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise NftError(f"removing pod addresses from the masquerade sets: {exc}") from None
        for change in ours if len(ours) > 1 else []:  # one went meanwhile: the others alone
            try:
                nft.change_elements("inet", TABLE, [change])
            except OSError as one:
                if one.errno != errno.ENOENT:
                    raise NftError(f"removing a pod address from a masquerade set: {one}") from None
    _delete_changes(nft, doomed)
    release_unused(nft, network, [set_name(network, ipn.network) for ipn in ipns])


def gc(nft: Nftables, network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Delete this network's elements and older-layout rules whose attachment is not in
    ``valid`` (containerID, ifname). Returns how many were removed."""

    keep = {comment_for_instance(network, ifname, cid) for cid, ifname in valid}
    doomed = [
        _delete_rule(rule.handle)
        for rule in nft.chain_rules("inet", TABLE, CHAIN)
        if rule.comment.startswith(hash_for_network(network)) and rule.comment not in keep
    ]
    for name in _network_sets(nft, network):
        doomed += [_delete_element(name, ip) for ip, c in _set_elements(nft, name) if c not in keep]
    _delete_changes(nft, doomed)
    release_unused(nft, network)
    return len(doomed)


class NftablesBackend:
    """The reference's ``inet cni_plugins_masquerade`` table, sets per subnet (see above)."""

    name = "nftables"

    def setup(
        self, nf: Netfilter, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
    ) -> None:
        setup(nf.nft, ipns, network, ifname, cid)

    def teardown(
        self, nf: Netfilter, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
    ) -> None:
        try:
            teardown(nf.nft, network, ifname, cid, ipns)
        except (NftError, OSError) as exc:
            if nf.nft.available():  # no nftables here: nothing of ours can be left in it
                raise IPMasqError(str(exc)) from None

    def may_hold(self, nf: Netfilter, network: str, cid: str) -> bool:
        return True  # elements are found by key and comment: always worth a look

    def gc(self, nf: Netfilter, network: str, valid: Iterable[tuple[str, str]]) -> int:
        return gc(nf.nft, network, valid)


BACKEND = NftablesBackend()
