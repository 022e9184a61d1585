"""What is left behind: state whose attachment is proven gone, never merely unaccounted for.

GC runs as root on a node where other runtimes, and ADDs still in progress, hold state that
no result cache describes yet (the cache is written after the whole chain; some runtimes keep
none).  So a thing is a leak only with positive evidence that its attachment is gone, and
only once it is older than the grace period (an ADD in progress is younger).  The evidence
always includes a *complete* scan of every live network namespace on the machine (see
:mod:`pycni.net.nsscan`): an address configured in any of them, or a host veth whose pod end
is in one, is live, whatever the cache and /run/netns say.  A vanished namespace path is not
evidence on its own (``ip netns del`` with a process inside leaves the namespace alive, and
a runtime may hold it by an fd only).  Without a complete scan nothing is a leak.

- ``attachment``: a cached result whose network namespace path no longer exists (or is no
  longer a namespace file), cached longer ago than the grace period, none of whose addresses
  is configured in a live namespace and none of whose host veths has its pod end in another
  namespace.  Cleanup DELs it through its chain.
- ``reservation``: a host-local reservation older than the grace period whose address no
  live namespace has, and that is
  (a) empty (an ADD killed between creating and writing it: no attachment can own it), or
  (b) owned by cached attachments that are all leaks as above, or
  (c) not in the cache at all.
- ``veth``: a host veth on a CNI bridge (or named in the cache) whose pod end is in no live
  namespace: the namespace is pinned only by something no process or runtime can reach.
- ``mapping``: a portmap rule whose owner's cached attachments are all leaks, or, when no
  cached attachment owns it, whose target address no live namespace has.
- ``temp``: a writer's temporary file (result cache, host-local's ``last_reserved_ip``) older
  than the grace period: a writer killed between creating and renaming it.
- ``dnsmasq``: a dnsname server (dnsmasq and its directory) whose files are older than the
  grace period and whose names' addresses no live namespace has (stop it and remove the
  directory; see inspect/dnsname.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from pycni.inspect.model import Attachment, NodeState, Reservation
from pycni.inspect.nftmap import owner_chain
from pycni.record import record

DEFAULT_GRACE_PERIOD = 600.0  # seconds; an ADD (even a slow DHCP one) is over long before

_CACHE_TEMP_PREFIX = ".pycni-tmp-"  # = pycni.runtime.cache._TEMP_PREFIX; libcni makes none
_STORE_TEMP_PREFIX = "last_reserved_ip.tmp-"


@record
class Leak:
    kind: str  # attachment, reservation, veth, mapping, temp or dnsmasq
    subject: str
    reason: str
    network: str = ""
    container_id: str = ""
    ifname: str = ""


def _age(now: float, since: float) -> str:
    return f"{max(0.0, now - since):.0f}s ago"


class _Judge:
    """The evidence about attachments that every kind of leak is decided on."""

    def __init__(self, state: NodeState, grace: float, now: float) -> None:
        self.state, self.grace, self.now = state, grace, now
        self.by_key: dict[tuple[str, str, str], list[Attachment]] = {}
        self.by_id: dict[tuple[str, str], list[Attachment]] = {}
        for att in state.attachments:
            self.by_key.setdefault((att.network, att.container_id, att.ifname), []).append(att)
            self.by_id.setdefault((att.network, att.container_id), []).append(att)

        self.reserved: dict[tuple[str, str, str], list[str]] = {}  # the store's view too
        for res in state.reservations:
            self.reserved.setdefault((res.network, res.container_id, res.ifname), []).append(res.ip)
        self.pod_ends = {  # host veths whose pod end is alive in another namespace
            veth.name for veth in state.veths if veth.peer_netnsid is not None
        }

    def old(self, since: float) -> bool:
        return self.now - since >= self.grace

    def dead(self, att: Attachment) -> bool:
        """Proven gone: a recorded namespace path that no longer exists, cached long enough
        ago, and nothing of it alive anywhere: none of its addresses is configured in a live
        namespace, none of its host veths still has a pod end (a veth dies with its
        namespace, so a pod end means the namespace lives, held by whatever)."""
        return (
            bool(att.netns)
            and not att.netns_exists
            and self.old(att.cached_at)
            and all(self.address_unused(ip) for ip in self.addresses_of(att))
            and not self.pod_ends.intersection(att.host_interfaces)
        )

    def addresses_of(self, att: Attachment) -> list[str]:
        """Its cached result's addresses and those host-local reserved for it (a DEL of it
        releases those, whatever the result says)."""
        found = list(att.ips)
        found += self.reserved.get((att.network, att.container_id, att.ifname), [])
        found += self.reserved.get((att.network, att.container_id, ""), [])  # legacy id-only
        return found

    def all_dead(self, atts: Iterable[Attachment]) -> bool:
        found = list(atts)
        return bool(found) and all(self.dead(a) for a in found)

    def address_unused(self, ip: str) -> bool:
        return self.state.addresses_complete and ip.split("/")[0] not in self.state.live_addresses

    # -- one verdict per kind -------------------------------------------------------------

    def attachment(self, att: Attachment) -> Leak | None:
        if not self.dead(att):
            return None
        why = (
            f"namespace {att.netns} is gone and none of the {self.state.live_namespaces} live "
            f"network namespaces has its addresses (cached {_age(self.now, att.cached_at)})"
        )
        return Leak("attachment", att.cache_file, why, att.network, att.container_id, att.ifname)

    def reservation(self, res: Reservation) -> Leak | None:
        if not self.old(res.reserved_at) or not self.address_unused(res.ip):
            return None  # young (an ADD in progress), or configured in a live namespace
        reserved = f"reserved {_age(self.now, res.reserved_at)}"
        why = ""
        if not res.container_id:
            why = f"{res.ip}: empty reservation file, no attachment can own it ({reserved})"
        else:
            owners = self.by_key.get((res.network, res.container_id, res.ifname), [])
            if not res.ifname:  # a legacy id-only reservation
                owners = self.by_id.get((res.network, res.container_id), [])
            if owners:
                if self.all_dead(owners):
                    why = (
                        f"{res.ip}: its attachment's namespace {owners[0].netns} is gone, "
                        "and no live namespace has this address"
                    )
            else:
                why = (
                    f"{res.ip}: no cached attachment, and none of the "
                    f"{self.state.live_namespaces} live network namespaces has this "
                    f"address ({reserved})"
                )
        if not why:
            return None
        return Leak("reservation", res.path, why, res.network, res.container_id, res.ifname)


def _temp_files(state: NodeState, judge: _Judge) -> list[Leak]:
    """Writers' temp files older than the grace period (never read by anyone)."""
    places = [(os.path.join(state.cache_dir, "results"), _CACHE_TEMP_PREFIX)]
    places += [(d, _STORE_TEMP_PREFIX) for d in sorted(set(state.store_dirs))]
    leaks = []
    for directory, prefix in places:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if not name.startswith(prefix):
                continue
            path = os.path.join(directory, name)
            try:
                mtime = os.lstat(path).st_mtime
            except OSError:
                continue
            if judge.old(mtime):
                leaks.append(
                    Leak("temp", path, f"a writer's temporary file left {_age(judge.now, mtime)}")
                )
    return leaks


def find_leaks(
    state: NodeState, *, grace: float = DEFAULT_GRACE_PERIOD, now: float | None = None
) -> list[Leak]:
    """Every leak with the evidence for it (``reason``); see the module text for the rules.

    None at all when the scan of live namespaces was not complete (``state.problems`` says
    why): what it could not see may hold any address.
    """
    if not state.addresses_complete:
        return []
    judge = _Judge(state, grace, time.time() if now is None else now)
    leaks: list[Leak] = []
    for att in state.attachments:
        found = judge.attachment(att)
        if found:
            leaks.append(found)
    for res in state.reservations:
        found = judge.reservation(res)
        if found:
            leaks.append(found)

    bridges = {net.bridge for net in state.networks if net.bridge}
    cached_host_ifs = {name for a in state.attachments for name in a.host_interfaces}
    for veth in state.veths:
        managed = (veth.master in bridges) or veth.name in cached_host_ifs
        if not managed or veth.peer is not None or veth.peer_netnsid is None:
            continue  # not ours, its pod end is in a live namespace, or both ends are here
        if not state.peers_complete:
            continue
        leaks.append(
            Leak(
                "veth",
                veth.name,
                f"host veth on {veth.master or '-'}: its pod end is in no live namespace "
                f"(of {state.live_namespaces})",
            )
        )

    live = [a for a in state.attachments if not judge.dead(a)]
    live_owners = {a.container_id for a in live} | {
        owner_chain(a.network, a.container_id, a.ifname) for a in live
    }
    dead = [a for a in state.attachments if judge.dead(a)]
    dead_owners = {a.container_id for a in dead} | {
        owner_chain(a.network, a.container_id, a.ifname) for a in dead
    }
    for m in state.port_mappings:
        why = ""
        if m.owner and m.owner in live_owners:
            continue  # a cached attachment not proven gone vouches for its rules
        if m.owner and m.owner in dead_owners:
            why = f"owner {m.owner}'s namespace is gone"
        elif judge.address_unused(m.target_ip):
            why = f"no live network namespace has {m.target_ip}"
        if why:
            leaks.append(
                Leak(
                    "mapping",
                    f"{m.family} {m.table} {m.chain} handle {m.handle}",
                    f"{m.protocol}/{m.host_port} -> {m.target_ip}:{m.target_port}: {why}",
                    container_id=m.owner,
                )
            )
    leaks += _temp_files(state, judge)
    from pycni.inspect import dnsname  # here: dnsname imports this module's Leak

    leaks += dnsname.find_leaks(state, grace=judge.grace, now=judge.now)
    return leaks
