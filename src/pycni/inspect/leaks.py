"""What looks left behind: state that no live attachment accounts for.

Kinds, each with what `pycni cleanup` does about it:
- ``attachment``: a cached result whose network namespace is gone (DEL it through the chain);
- ``reservation``: a host-local reservation with no cached attachment (release the file);
- ``veth``: a host veth on a CNI bridge (or named in the cache) whose pod end is in no namespace
  that a live attachment owns (delete the link);
- ``mapping``: a portmap rule whose target address is no live pod's, or whose owner container
  has no live attachment (delete the owner's rules);
- ``dnsmasq``: a dnsname server (dnsmasq and its directory) that names no live pod (stop it and
  remove the directory; see inspect/dnsname.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pycni.inspect.collect import iter_live_pod_ips, ns_key
from pycni.inspect.model import NodeState
from pycni.inspect.nftmap import owner_chain

KINDS = ("attachment", "reservation", "veth", "mapping", "dnsmasq")


@dataclass
class Leak:
    kind: str
    subject: str
    reason: str
    network: str = ""
    container_id: str = ""
    ifname: str = ""


def _cni_bridges(state: NodeState) -> set[str]:
    return {net.bridge for net in state.networks if net.bridge}


def find_leaks(state: NodeState) -> list[Leak]:
    leaks: list[Leak] = []
    cached = {(a.network, a.container_id, a.ifname) for a in state.attachments}
    cached_ids = {(a.network, a.container_id) for a in state.attachments}
    live = [a for a in state.attachments if a.netns_exists]
    live_owners = {a.container_id for a in live} | {
        owner_chain(a.network, a.container_id, a.ifname) for a in live
    }

    for att in state.attachments:
        if att.netns and not att.netns_exists:
            leaks.append(
                Leak(
                    "attachment",
                    att.cache_file,
                    f"namespace {att.netns} is gone",
                    att.network,
                    att.container_id,
                    att.ifname,
                )
            )

    for res in state.reservations:
        if res.ifname:
            known = (res.network, res.container_id, res.ifname) in cached
        else:  # a legacy id-only reservation
            known = (res.network, res.container_id) in cached_ids
        if not known:
            leaks.append(
                Leak(
                    "reservation",
                    res.path,
                    f"{res.ip} is reserved but no attachment is cached for it",
                    res.network,
                    res.container_id,
                    res.ifname,
                )
            )

    live_ns = {key for key in (ns_key(a.netns) for a in live) if key is not None}
    live_host_ifs = {name for a in live for name in a.host_interfaces}
    cached_host_ifs = {name for a in state.attachments for name in a.host_interfaces}
    bridges = _cni_bridges(state)
    for veth in state.veths:
        managed = (veth.master in bridges) or veth.name in cached_host_ifs
        if not managed:
            continue
        if veth.peer is not None and ns_key(veth.peer.namespace_path) in live_ns:
            continue
        if veth.peer is None and veth.name in live_host_ifs:
            continue  # the peer's namespace is not one we can see, but the cache vouches for it
        where = (
            f"its peer is in namespace {veth.peer.namespace} that no attachment owns"
            if veth.peer is not None
            else "its peer is in no namespace we can find"
        )
        leaks.append(Leak("veth", veth.name, f"host veth on {veth.master or '-'}: {where}"))

    live_ips = set(iter_live_pod_ips(state))
    for m in state.port_mappings:
        target_dead = m.target_ip not in live_ips
        owner_dead = bool(m.owner) and m.owner not in live_owners
        if target_dead or owner_dead:
            why = (
                f"no live pod has {m.target_ip}"
                if target_dead
                else f"owner {m.owner} has no live attachment"
            )
            leaks.append(
                Leak(
                    "mapping",
                    f"{m.family} {m.table} {m.chain} handle {m.handle}",
                    f"{m.protocol}/{m.host_port} -> {m.target_ip}:{m.target_port}: {why}",
                    container_id=m.owner,
                )
            )
    from pycni.inspect import dnsname

    leaks += dnsname.find_leaks(state, live_ips)
    return leaks
