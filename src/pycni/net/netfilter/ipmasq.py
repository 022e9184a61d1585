"""Masquerading of pod traffic leaving its subnet (bridge/ptp ``ipMasq``).

Two backends with exactly the reference's names, so pods set up by the Go plugins and by
pycni coexist and either can tear down what the other made:

* nftables (our default, in-process via libnftables): the reference's table
  ``inet cni_plugins_masquerade`` with its base chain ``postrouting`` (nat, srcnat; skips
  multicast, then goes to ``masq_checks``), where each network has one jump to its own chain
  holding one rule per subnet that matches a set of the pods' addresses. Each element carries
  the reference's attachment comment ``<hash(network)>-<hash(ifname:containerID)>, net: …,
  if: …, id: …``. The reference's own layout (one rule per pod address in ``masq_checks``,
  same comment) is still removed by DEL and GC, so pods set up before an upgrade go cleanly.
  The last DEL (or GC) of a network removes its chain and sets, and the last of all the table,
  so a node without masqueraded pods has no trace of it, as under the reference
  (``release_unused``: checked by the kernel, and serialised with the ADD that makes them).
* iptables (``ipMasqBackend: "iptables"``): chain ``CNI-<hash>`` in ``nat`` per
  (network, containerID), reached from POSTROUTING by ``-s <ip>``. It runs the iptables
  binaries, so it is slower; it exists for compatibility.
"""

from __future__ import annotations

import errno
import ipaddress
import os
from collections.abc import Iterable, Sequence

from pycni.net import tools
from pycni.net.errors import NetfilterError
from pycni.net.netfilter import nft
from pycni.net.netfilter.nft import NftError
from pycni.spec import jsoncodec
from pycni.spec.result import IPInterface

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any, Protocol

    from pycni.net.netfilter import nftnl
else:
    Protocol = object  # typing is not imported at run time

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

TABLE = "cni_plugins_masquerade"
CHAIN = "masq_checks"
TABLE_COMMENT = "Masquerading for plugins from github.com/containernetworking/plugins"
CHAIN_COMMENT = "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"
COMMENT_MAX = 128
BACKENDS = ("nftables", "iptables")  # the names of the Backend classes below
DEFAULT_BACKEND = "nftables"


class IPMasqError(NetfilterError):
    pass


def hash_hex(length: int, prefix: str, text: str) -> str:
    """pkg/utils' MustFormatHashWithPrefix: prefix + sha512 hex, cut to ``length``."""
    if len(prefix) >= length or length > 128:
        raise ValueError("invalid hash length")
    import hashlib  # loads OpenSSL: only calls that name a chain or a rule pay for it

    return (prefix + hashlib.sha512(text.encode()).hexdigest())[:length]


def hash_for_network(network: str) -> str:
    return hash_hex(16, "", network)


def hash_for_instance(network: str, ifname: str, container_id: str) -> str:
    return hash_for_network(network) + "-" + hash_hex(16, "", f"{ifname}:{container_id}")


def comment_for_instance(network: str, ifname: str, container_id: str) -> str:
    def clean(s: str) -> str:
        return s.replace('"', "")

    text = (
        f"{hash_for_instance(network, ifname, container_id)}, net: {clean(network)}, "
        f"if: {clean(ifname)}, id: {clean(container_id)}"
    )
    return text[:COMMENT_MAX]


def chain_name(network: str, container_id: str) -> str:
    """pkg/utils' FormatChainName: ``CNI-`` + 24 hex of sha512(network+containerID)."""
    return hash_hex(28, "CNI-", network + container_id)


def iptables_comment(network: str, container_id: str) -> str:
    """pkg/utils' FormatComment: ``name: "<net>" id: "<id>"`` (Go %q quoting)."""
    return f"name: {jsoncodec.dumps(network)} id: {jsoncodec.dumps(container_id)}"


# --- nftables ---------------------------------------------------------------------------
#
# Layout (the table, ``postrouting`` and ``masq_checks`` are the reference's, so its pods and
# ours coexist): ``masq_checks`` holds one ``jump pycni-<hash(network)>`` per network; that
# chain holds one rule per subnet of the network, ``<ip|ip6> saddr @<set> <ip|ip6> daddr !=
# <subnet> masquerade``; the set holds the pod addresses of that subnet, each element
# commented with the reference's per-attachment comment, so DEL and GC by attachment stay
# exact. A packet meets a constant number of rules and one hash lookup whatever the number of
# pods; an ADD or DEL adds or removes elements and never lists the ruleset (libnftables'
# ``list`` loads every set element into its cache: see netfilter/nftnl.py). Our rule comments start
# with ``pycni`` so the reference's GC, which deletes the rules of a network whose comment
# starts with the network hash, leaves them alone.
#
# Pods added by older pycni versions (and by the Go reference) have one rule per address in
# ``masq_checks`` with the attachment's comment: DEL and GC remove those too, found with a
# kernel-filtered dump of ``masq_checks`` (net/netfilter/nftnl.py), which holds only a rule per
# network once those pods are gone.

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


def _obj(**fields: Any) -> dict[str, Any]:
    return {"family": "inet", "table": TABLE, **fields}


def _run_json(commands: list[dict[str, Any]]) -> str:
    """One transaction in libnftables' JSON input: names and comments are data, never text
    that nft parses."""
    return nft.run_document(jsoncodec.dumps({"nftables": commands}))


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
) -> list[nftnl.ElementChange]:
    """Add each address to its subnet's set with this attachment's comment, replacing an
    element left by an earlier attachment (add, delete, add: a no-op add makes the delete
    safe, and the last add carries the comment)."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    out: list[nftnl.ElementChange] = []
    for ipn in ipns:
        name = set_name(network, ipn.network)
        out.append(nftnl.ElementChange(True, name, ipn.ip.packed))
        out.append(nftnl.ElementChange(False, name, ipn.ip.packed))
        out.append(nftnl.ElementChange(True, name, ipn.ip.packed, comment))
    return out


def _jump_comment(network: str) -> str:
    """The comment of the network's jump in ``masq_checks``."""
    return f"{RULE_PREFIX}net: {network.replace(chr(34), '')}"[:COMMENT_MAX]


def _ensure_network(network: str, subnets: Iterable[IPNetwork]) -> None:
    """Create what the fast path needs, once per network and subnet. ``create`` fails when
    the object exists, so the chain and its jump (and a set and its rule) appear together
    exactly once even when several ADDs race."""
    nft.apply(scaffold_script())
    chain = net_chain(network)
    jump = {
        "add": {
            "rule": _obj(
                chain=CHAIN,
                comment=_jump_comment(network),
                expr=[{"jump": {"target": chain}}],
            )
        }
    }
    _create_once([{"create": {"chain": _obj(name=chain)}}, jump])
    for subnet in subnets:
        fam = _fam(subnet.version)
        name = set_name(network, subnet)
        rule = _obj(
            chain=chain,
            comment=_subnet_comment(network, subnet),
            expr=[
                {
                    "match": {
                        "op": "==",
                        "left": {"payload": {"protocol": fam, "field": "saddr"}},
                        "right": f"@{name}",
                    }
                },
                {
                    "match": {
                        "op": "!=",
                        "left": {"payload": {"protocol": fam, "field": "daddr"}},
                        "right": {
                            "prefix": {
                                "addr": str(subnet.network_address),
                                "len": subnet.prefixlen,
                            }
                        },
                    }
                },
                {"masquerade": None},
            ],
        )
        set_type = "ipv4_addr" if subnet.version == 4 else "ipv6_addr"
        _create_once([{"create": {"set": _obj(name=name, type=set_type)}}, {"add": {"rule": rule}}])


def _create_once(commands: list[dict[str, Any]]) -> None:
    try:
        _run_json(commands)
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


def setup_nftables(ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
    """Add the attachment's addresses to its network's sets: one small batch; the sets and
    their rules are made on the first ADD of a network (or subnet), under _NamespaceLock."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    if not ipns:
        return
    changes = element_changes(ipns, network, comment_for_instance(network, ifname, cid))
    names = dict.fromkeys(set_name(network, ipn.network) for ipn in ipns)
    # asked first: a batch refused for a missing set costs ~10 ms (the first ADD after the
    # last DEL of a network finds none), a question 0.02 ms
    if all(nftnl.set_exists("inet", TABLE, name) for name in names):
        try:
            nftnl.change_elements("inet", TABLE, changes)
            return
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise NftError(f"adding the pod addresses to the masquerade sets: {exc}") from None
    # a set (or the table) is missing: make them, then add
    with _NamespaceLock():
        _ensure_network(network, dict.fromkeys(ipn.network for ipn in ipns))
        try:
            nftnl.change_elements("inet", TABLE, changes)
        except OSError as exc:
            raise NftError(f"adding the pod addresses to the masquerade sets: {exc}") from None


def _elements(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in items:
        found = item.get("set")
        if not isinstance(found, dict):
            continue
        for elem in found.get("elem", []):
            if isinstance(elem, dict) and isinstance(elem.get("elem"), dict):
                inner = elem["elem"]
                out.append((str(inner.get("val")), str(inner.get("comment", ""))))
            else:
                out.append((str(elem), ""))
    return out


def _query(command: str) -> list[dict[str, Any]]:
    """A ``get``/``list`` command in nft text (only our hashed names and parsed addresses go
    into it); libnftables' JSON input has no ``get``."""
    return nft.query(command)


def _delete_element(name: str, ip: str) -> dict[str, Any]:
    return {"delete": {"element": _obj(name=name, elem=[ip])}}


def _delete_changes(doomed: list[dict[str, Any]]) -> None:
    """Apply deletions (elements and rules) as one libnftables transaction."""
    if doomed:
        _run_json(doomed)


def _delete_rule(handle: int) -> dict[str, Any]:
    return {"delete": {"rule": _obj(chain=CHAIN, handle=handle)}}


def _network_rules(network: str) -> list[tuple[int, str]]:
    """(handle, set) of each rule of the network's chain, the set read from its comment
    ("" for a rule that is not one of ours)."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    out = []
    for rule in nftnl.chain_rules("inet", TABLE, net_chain(network)):
        subnet = _subnet_of_comment(rule.comment)
        out.append((rule.handle, "" if subnet is None else set_name(network, subnet)))
    return out


def _network_sets(network: str) -> list[str]:
    """The sets of a network, read from the comments of its chain's rules."""
    return [name for _handle, name in _network_rules(network) if name]


def release_unused(network: str, sets: Sequence[str] = ()) -> bool:
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
    keeps everything. Such a refusal costs the kernel an RCU grace period (~10 ms measured),
    hence the reads first."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    for name in sets or _network_sets(network):
        if nftnl.set_is_empty("inet", TABLE, name) is False:
            return False  # addresses left (a missing set holds none: an older layout's pod)
    with _NamespaceLock():
        checks = nftnl.chain_rules("inet", TABLE, CHAIN)
        jumps = [rule.handle for rule in checks if rule.comment == _jump_comment(network)]
        rules = _network_rules(network)
        if len(jumps) > 1 or (rules and not jumps) or any(not name for _h, name in rules):
            return False  # not our layout as we made it (names cut to one comment): leave it
        if jumps:
            batch = [nftnl.Removal("rule", CHAIN, jumps[0])]
            batch += [nftnl.Removal("rule", net_chain(network), handle) for handle, _s in rules]
            batch += [nftnl.Removal("set", name, only_if_unused=True) for _h, name in rules]
            batch.append(nftnl.Removal("chain", net_chain(network), only_if_unused=True))
            if not _try_removal(batch):
                return False  # an address came meanwhile: keep it all
        if len(checks) > len(jumps):
            return False  # other networks' jumps or the older layout's rules keep the table
        if not jumps and not nftnl.chain_exists("inet", TABLE, CHAIN):
            return False  # no table (a refused batch costs ~10 ms: ask first)
        return _try_removal(
            [
                nftnl.Removal("chain", "postrouting"),  # ours alone: remade by a first ADD
                nftnl.Removal("chain", CHAIN, only_if_unused=True),
                nftnl.Removal("table", TABLE, only_if_unused=True),
            ]
        )


def _try_removal(batch: Sequence[nftnl.Removal]) -> bool:
    """Apply a batch of removals; False when the kernel refused it as in use (EBUSY) or
    something of it is gone already (ENOENT: a concurrent removal or change)."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    try:
        nftnl.change_elements("inet", TABLE, batch)
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOENT):
            return False
        raise NftError(f"removing the unused masquerade table: {exc}") from None
    return True


def _set_elements(name: str) -> list[tuple[str, str]]:
    """Every (address, comment) of a set: O(elements), for GC and for a DEL without IPs."""
    try:
        return _elements(_query(f"list set inet {TABLE} {name}"))
    except NftError:
        return []


def teardown_nftables(
    network: str, ifname: str, cid: str, ipns: Sequence[IPInterface] = ()
) -> None:
    """Remove this attachment's set elements and any per-address rule of the older layout.

    With the pod's addresses known (the usual DEL) each element is looked up by key and
    removed only when its comment names this attachment; without them the network's sets
    are searched by comment."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    comment = comment_for_instance(network, ifname, cid)
    ours: list[nftnl.ElementChange] = []
    doomed: list[dict[str, Any]] = []
    if ipns:
        for ipn in ipns:
            name = set_name(network, ipn.network)
            if nftnl.element_comment("inet", TABLE, name, ipn.ip) == comment:
                ours.append(nftnl.ElementChange(False, name, ipn.ip.packed))
    else:
        for name in _network_sets(network):
            doomed += [_delete_element(name, ip) for ip, c in _set_elements(name) if c == comment]
    prefix = hash_for_instance(network, ifname, cid)
    doomed += [
        _delete_rule(rule.handle)
        for rule in nftnl.chain_rules("inet", TABLE, CHAIN)
        if rule.comment.startswith(prefix)
    ]
    try:
        nftnl.change_elements("inet", TABLE, ours)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise NftError(f"removing pod addresses from the masquerade sets: {exc}") from None
        for change in ours if len(ours) > 1 else []:  # one went meanwhile: the others alone
            try:
                nftnl.change_elements("inet", TABLE, [change])
            except OSError as one:
                if one.errno != errno.ENOENT:
                    raise NftError(f"removing a pod address from a masquerade set: {one}") from None
    _delete_changes(doomed)
    release_unused(network, [set_name(network, ipn.network) for ipn in ipns])


def gc_nftables(network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Delete this network's elements and older-layout rules whose attachment is not in
    ``valid`` (containerID, ifname). Returns how many were removed."""
    from pycni.net.netfilter import nftnl  # netlink to nftables: only masquerading calls load it

    keep = {comment_for_instance(network, ifname, cid) for cid, ifname in valid}
    doomed = [
        _delete_rule(rule.handle)
        for rule in nftnl.chain_rules("inet", TABLE, CHAIN)
        if rule.comment.startswith(hash_for_network(network)) and rule.comment not in keep
    ]
    for name in _network_sets(network):
        doomed += [_delete_element(name, ip) for ip, c in _set_elements(name) if c not in keep]
    _delete_changes(doomed)
    release_unused(network)
    return len(doomed)


# --- iptables ---------------------------------------------------------------------------


def _ipt(version: int, *args: str) -> subprocess.CompletedProcess[str]:
    binary = "iptables" if version == 4 else "ip6tables"
    path = tools.which(binary)
    if path is None:
        raise IPMasqError(f"failed to locate iptables: {binary} not found")
    import subprocess  # iptables only: the nftables backend never runs a command here

    return subprocess.run(
        [path, "-w", "-t", "nat", *args], capture_output=True, text=True, check=False
    )


def _append_unique(version: int, chain: str, *rule: str) -> None:
    if _ipt(version, "-C", chain, *rule).returncode == 0:
        return
    proc = _ipt(version, "-A", chain, *rule)
    if proc.returncode != 0:
        raise IPMasqError(proc.stderr.strip())


def setup_iptables(ipns: Sequence[IPInterface], network: str, cid: str) -> None:
    chain = chain_name(network, cid)
    comment = iptables_comment(network, cid)
    for ipn in ipns:
        v = ipn.version
        multicast = "224.0.0.0/4" if v == 4 else "ff00::/8"
        if _ipt(v, "-S", chain).returncode != 0:
            proc = _ipt(v, "-N", chain)
            if proc.returncode not in (0, 1):
                raise IPMasqError(proc.stderr.strip())
        _append_unique(
            v, chain, "-d", str(ipn), "-j", "ACCEPT", "-m", "comment", "--comment", comment
        )
        _append_unique(
            v,
            chain,
            "!",
            "-d",
            multicast,
            "-j",
            "MASQUERADE",
            "-m",
            "comment",
            "--comment",
            comment,
        )
        _append_unique(
            v, "POSTROUTING", "-s", str(ipn.ip), "-j", chain, "-m", "comment", "--comment", comment
        )


def teardown_iptables(ipns: Sequence[IPInterface], network: str, cid: str) -> None:
    chain = chain_name(network, cid)
    comment = iptables_comment(network, cid)
    for ipn in ipns:
        v = ipn.version
        for src in (str(ipn.ip), str(ipn)):
            _ipt(
                v,
                "-D",
                "POSTROUTING",
                "-s",
                src,
                "-j",
                chain,
                "-m",
                "comment",
                "--comment",
                comment,
            )
        _ipt(v, "-F", chain)
        _ipt(v, "-X", chain)


def iptables_nft_chain_exists(version: int, chain: str) -> bool:
    """Whether iptables-nft holds ``chain`` in its nat table (one netlink get: a libnftables
    ``list`` would load every set element of the namespace first)."""
    from pycni.net.netfilter import nftnl

    family = "ip" if version == 4 else "ip6"
    try:
        return nftnl.chain_exists(family, "nat", chain)
    except OSError:  # no nf_tables here: then no iptables-nft chain either
        return False


# --- the backends behind one interface --------------------------------------------------


class Backend(Protocol):
    """One way of masquerading an attachment's addresses (bridge's and ptp's ``ipMasq``)."""

    name: str

    def setup(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        """Masquerade traffic from ``ipns`` leaving their subnets, tagged with the attachment."""
        ...

    def teardown(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        """Remove what ``setup`` made for the attachment (``ipns`` may be empty: the link is
        gone and its addresses unknown). Raises IPMasqError."""
        ...

    def may_hold(self, network: str, cid: str) -> bool:
        """Whether this backend may hold something of the attachment, so a DEL under another
        backend cleans it too (a pod set up before the network's backend changed)."""
        ...

    def gc(self, network: str, valid: Iterable[tuple[str, str]]) -> int:
        """Remove the network's entries whose (containerID, ifname) is not in ``valid``."""
        ...


class Nftables:
    """The reference's ``inet cni_plugins_masquerade`` table, sets per subnet (see above)."""

    name = "nftables"

    def setup(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        setup_nftables(ipns, network, ifname, cid)

    def teardown(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        try:
            teardown_nftables(network, ifname, cid, ipns)
        except (NftError, OSError) as exc:
            if nft.available():  # no nftables here: nothing of ours can be left in it
                raise IPMasqError(str(exc)) from None

    def may_hold(self, network: str, cid: str) -> bool:
        return True  # elements are found by key and comment: always worth a look

    def gc(self, network: str, valid: Iterable[tuple[str, str]]) -> int:
        return gc_nftables(network, valid)


class Iptables:
    """The reference's ``CNI-<hash>`` chain per (network, containerID) in ``nat``."""

    name = "iptables"

    def setup(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        setup_iptables(ipns, network, cid)

    def teardown(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        if not ipns:
            # no IPs known (link already gone): still remove the chain itself
            chain = chain_name(network, cid)
            for v in (4, 6):
                if iptables_nft_chain_exists(v, chain):
                    _ipt(v, "-F", chain)
                    _ipt(v, "-X", chain)
        teardown_iptables(ipns, network, cid)

    def may_hold(self, network: str, cid: str) -> bool:
        chain = chain_name(network, cid)
        return any(iptables_nft_chain_exists(v, chain) for v in (4, 6))

    def gc(self, network: str, valid: Iterable[tuple[str, str]]) -> int:
        return 0  # as the reference: GC covers the nftables layout only


NFTABLES = Nftables()
IPTABLES = Iptables()
_ALL: tuple[Backend, ...] = (NFTABLES, IPTABLES)


def backend(name: str) -> Backend:
    """The backend a config names (``ipMasqBackend``, checked against BACKENDS by the plugin)."""
    for found in _ALL:
        if found.name == name:
            return found
    raise IPMasqError(f'unknown ipmasq backend "{name}"')


def teardown(
    chosen: Backend, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
) -> list[str]:
    """Remove the attachment from the chosen backend and from any other that may hold it
    (nftables always, iptables when its chain exists). Returns the errors (not raised)."""
    errors: list[str] = []
    for each in _ALL:
        if each is chosen or each.may_hold(network, cid):
            try:
                each.teardown(ipns, network, ifname, cid)
            except IPMasqError as exc:
                errors.append(str(exc))
    return errors


def gc(network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Garbage-collect the network in every backend; returns how many entries went."""
    return sum(each.gc(network, valid) for each in _ALL)
