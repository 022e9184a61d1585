"""Read what CNI has done on this node: conf dir, result cache, host-local store, kernel state.

Everything here only reads. Kernel state is read in the calling thread's network namespace
(the "node"); other namespaces (those under the netns dir and those named in the cache) are
entered one at a time on this thread to find the pod end of each veth.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
import json
import logging
import os
import socket
from typing import Any

from pycni.inspect import cluster as agent_state
from pycni.inspect import dnsname, nftmap
from pycni.inspect.model import (
    Attachment,
    Bridge,
    HostInterface,
    Namespace,
    Network,
    NodeState,
    PodLink,
    Reservation,
    Route,
    Veth,
)
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import Kernel
from pycni.net.ns import THREAD_NETNS, NetNS, NetNSNotFound
from pycni.net.nsscan import (
    NamespaceScan,
    linked_addresses,
    namespace_key,
    node_path_key,
    opaque_note,
    open_namespace,
)
from pycni.net.nsscan import scan as scan_namespaces
from pycni.record import record
from pycni.spec.errors import CNIError

DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CACHE_DIR = "/var/lib/cni"
DEFAULT_DATA_DIR = "/var/lib/cni/networks"
DEFAULT_NETNS_DIR = "/run/netns"
DEFAULT_DNSNAME_DIR = "/run/containers/cni/dnsname"
CACHE_KIND = "cniCacheV1"
_STORE_SKIP = ("lock", "last_reserved_ip.")
_CACHE_READ_MAX = 16 << 20

log = logging.getLogger(__name__)


@record(frozen=True)
class Paths:
    """Where to look; every one can be overridden on the command line."""

    conf_dir: str = DEFAULT_CONF_DIR
    cache_dir: str = DEFAULT_CACHE_DIR
    data_dir: str = DEFAULT_DATA_DIR
    netns_dir: str = DEFAULT_NETNS_DIR
    dnsname_dir: str = DEFAULT_DNSNAME_DIR


# --- on-disk state -------------------------------------------------------------------------


def _first_plugin_with(plugins: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    for plugin in plugins:
        if isinstance(plugin.get(key), dict):
            return plugin
    return None


def _network_from(path: str, raw: Any) -> Network:
    if not isinstance(raw, dict):
        return Network(name="", file=path, error="not a JSON object")
    plugins = raw.get("plugins")
    if not isinstance(plugins, list):  # a single-plugin .conf
        plugins = [raw]
    plugins = [p for p in plugins if isinstance(p, dict)]
    net = Network(
        name=str(raw.get("name", "")),
        file=path,
        cni_version=str(raw.get("cniVersion", "")),
        plugins=[str(p.get("type", "?")) for p in plugins],
    )
    for plugin in plugins:
        if plugin.get("type") == "bridge":
            net.bridge = str(plugin.get("bridge") or "cni0")
    owner = _first_plugin_with(plugins, "ipam")
    ipam: dict[str, Any] = owner["ipam"] if owner else {}
    if isinstance(ipam.get("dataDir"), str):
        net.data_dir = ipam["dataDir"]
    if isinstance(ipam.get("subnet"), str):
        net.subnets.append(ipam["subnet"])
    for rangeset in ipam.get("ranges") or []:
        for rng in rangeset if isinstance(rangeset, list) else []:
            if isinstance(rng, dict) and isinstance(rng.get("subnet"), str):
                net.subnets.append(rng["subnet"])
    if not net.name:
        net.error = "no network name"
    return net


def read_networks(conf_dir: str) -> list[Network]:
    """Every .conflist/.conf/.json in ``conf_dir``, parsed leniently (errors are reported)."""
    try:
        names = sorted(os.listdir(conf_dir))
    except OSError:
        return []
    out = []
    for name in names:
        if not name.endswith((".conflist", ".conf", ".json")):
            continue
        path = os.path.join(conf_dir, name)
        try:
            with open(path, "rb") as f:
                raw = json.loads(f.read())
        except (OSError, ValueError, RecursionError) as exc:
            out.append(Network(name="", file=path, error=f"unreadable: {exc}"))
            continue
        out.append(_network_from(path, raw))
    return out


def _list_of_dicts(value: Any) -> list[dict[str, Any]]:
    """The dict items of a JSON list; anything else (a corrupt or foreign entry) gives none."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _result_ips(result: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(pod addresses, host-side interface names) from a cached result of any version."""
    ips: list[str] = []
    for ip in _list_of_dicts(result.get("ips")):
        if isinstance(ip.get("address"), str):
            ips.append(ip["address"])
    for key in ("ip4", "ip6"):  # 0.2.0 results
        block = result.get(key)
        if isinstance(block, dict) and isinstance(block.get("ip"), str):
            ips.append(block["ip"])
    hosts = [
        i["name"]
        for i in _list_of_dicts(result.get("interfaces"))
        if isinstance(i.get("name"), str) and i["name"] and not i.get("sandbox")
    ]
    return ips, hosts


def _config_name(encoded: Any) -> str:
    if not isinstance(encoded, str):
        return ""
    try:
        conf = json.loads(base64.b64decode(encoded))
    except (binascii.Error, ValueError, RecursionError):
        return ""
    name = conf.get("name", "") if isinstance(conf, dict) else ""
    return name if isinstance(name, str) else ""


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _attachment_from(path: str, data: Any, mtime: float) -> Attachment:
    """One cache entry; ValueError when it is not a usable ``cniCacheV1`` object."""
    if not isinstance(data, dict) or data.get("kind") != CACHE_KIND:
        raise ValueError(f"not a {CACHE_KIND} entry")
    network = _text(data, "networkName") or _config_name(data.get("config"))
    container_id, ifname = _text(data, "containerId"), _text(data, "ifName")
    if not (network and container_id and ifname):
        raise ValueError("no network name, container ID or ifname")
    netns = _text(data, "netns")
    result = data.get("result")
    ips, hosts = _result_ips(result if isinstance(result, dict) else {})
    caps = data.get("capabilityArgs")
    mappings = _list_of_dicts(caps.get("portMappings")) if isinstance(caps, dict) else []
    return Attachment(
        network=network,
        container_id=container_id,
        ifname=ifname,
        netns=netns,
        netns_exists=bool(netns) and node_path_key(netns) is not None,
        cache_file=path,
        ips=ips,
        host_interfaces=hosts,
        port_mappings=mappings,
        cached_at=mtime,
    )


def _read_attachments(cache_dir: str) -> tuple[list[Attachment], list[str]]:
    """Cached attachments, plus a note for each file that could not be understood.

    A truncated, non-JSON or oddly shaped file is skipped (logged and noted), never fatal.
    """
    results = os.path.join(cache_dir, "results")
    try:
        names = sorted(os.listdir(results))
    except OSError:
        return [], []
    out: list[Attachment] = []
    problems: list[str] = []
    for name in names:
        if name.startswith("."):
            continue  # a writer's temp file
        path = os.path.join(results, name)
        try:
            with open(path, "rb") as f:
                mtime = os.fstat(f.fileno()).st_mtime
                data = json.loads(f.read(_CACHE_READ_MAX).decode("utf-8", errors="replace"))
            out.append(_attachment_from(path, data, mtime))
        except (OSError, ValueError, RecursionError) as exc:
            note = f"cache file {path} skipped: {exc}"
            log.info("%s", note)  # reported with the problems, which every command prints
            problems.append(note)
    return out, problems


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.replace("_", ":"))
    except ValueError:
        return False
    return True


def _read_reservations(store_dirs: dict[str, str]) -> list[Reservation]:
    """host-local reservations: ``store_dirs`` maps a network name to its store directory."""
    out = []
    for network, directory in sorted(store_dirs.items()):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if name.startswith(_STORE_SKIP) or not _is_ip(name):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    mtime = os.fstat(f.fileno()).st_mtime
                    content = f.read(1 << 16)
            except OSError:
                continue
            lines = content.splitlines() or [""]  # "cid\r\nifname"; older: "cid\nifname", "cid"
            ifname = lines[1].strip() if len(lines) > 1 else ""
            out.append(
                Reservation(network, name.replace("_", ":"), lines[0].strip(), ifname, path, mtime)
            )
    return out


def store_dirs(networks: list[Network], data_dir: str) -> dict[str, str]:
    """Each network's host-local store: its configured dataDir, else ``data_dir``.

    Directories under ``data_dir`` without a configuration are included too (a network
    whose conf was removed can still hold reservations).
    """
    dirs: dict[str, str] = {}
    try:
        for name in os.listdir(data_dir):
            if os.path.isdir(os.path.join(data_dir, name)):
                dirs[name] = os.path.join(data_dir, name)
    except OSError:
        pass
    for net in networks:
        if net.name and "host-local" in _ipam_types(net):
            dirs[net.name] = os.path.join(net.data_dir or data_dir, net.name)
    return dirs


def _ipam_types(net: Network) -> list[str]:
    try:
        with open(net.file, "rb") as f:
            raw = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return []
    plugins = raw.get("plugins") if isinstance(raw, dict) else None
    plugins = plugins if isinstance(plugins, list) else [raw]
    return [
        str(p["ipam"].get("type"))
        for p in plugins
        if isinstance(p, dict) and isinstance(p.get("ipam"), dict)
    ]


# --- kernel state --------------------------------------------------------------------------


def _addresses(kernel: Kernel) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for found in kernel.addresses():
        if not str(found.interface.ip).startswith("fe80:"):  # link-local: noise here
            out.setdefault(found.index, []).append(str(found.interface))
    return out


@record
class _RawLink:
    index: int
    name: str
    kind: str
    mac: str
    up: bool
    master: int | None
    peer_index: int | None
    peer_netnsid: int | None
    addresses: list[str]


def _dump_links(kernel: Kernel) -> list[_RawLink]:
    addrs = _addresses(kernel)
    return [
        _RawLink(
            index=found.index,
            name=found.name,
            kind=found.kind,
            mac=found.mac,
            up=found.up,
            master=found.master or None,
            peer_index=found.peer_index or None,
            peer_netnsid=found.peer_netnsid,
            addresses=addrs.get(found.index, []),
        )
        for found in kernel.links()
    ]


def _ns_key(path: str) -> tuple[int, int] | None:
    """What identifies a namespace file (device, inode); None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _candidate_namespaces(
    netns_dir: str, attachments: list[Attachment]
) -> tuple[list[tuple[str, str]], NamespaceScan]:
    """(name, path) of every live namespace but our own, and the scan that found them.

    Named ones (``netns_dir`` entries, cached netns paths) come first and keep their names;
    the rest are found through /proc (see :mod:`pycni.net.nsscan`).
    """
    named: list[tuple[str, str]] = []
    with contextlib.suppress(OSError):
        named += [(n, os.path.join(netns_dir, n)) for n in sorted(os.listdir(netns_dir))]
    named += [(a.netns, a.netns) for a in attachments if a.netns_exists]
    found = scan_namespaces(named)
    own = _ns_key(THREAD_NETNS)
    return [(ns.label, ns.path) for ns in found.namespaces if ns.key != own], found


def _look_into(
    name: str, path: str, node_kernel: Kernel
) -> tuple[Namespace, list[_RawLink], int | None]:
    """A namespace's links, and the nsid this (node) namespace knows it by.

    ``node_kernel`` is one client of the node namespace shared by every look (a machine can
    have a thousand namespaces: one client each would cost more than the looks).
    """
    with NetNS.open(path) as ns:
        nsid: int | None = None
        try:
            nsid = node_kernel.netns_id(ns.fd)
        except OSError:  # older kernels do not answer RTM_GETNSID by fd
            nsid = None
        with ns.entered(), rtnl() as kernel:
            links = _dump_links(kernel)
    view = Namespace(
        name=name,
        path=path,
        links=[
            PodLink(name, path, link.name, link.index, link.mac, link.addresses)
            for link in links
            if link.name != "lo"
        ],
    )
    return view, links, nsid


def _look_into_or_note(
    name: str, path: str, node_kernel: Kernel, state: NodeState
) -> tuple[Namespace, list[_RawLink], int | None] | None:
    """``_look_into``, or None: a namespace gone meanwhile, or one we could not read (noted).

    Paths come from other mount namespaces too (``/proc/PID/root/...``), where a container
    can swap a path component between our checks: only a namespace file is opened
    (:func:`pycni.net.nsscan.open_namespace`), and entered through that fd.
    """
    try:
        fd = open_namespace(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _note_blind_spot(path, exc, state)
        return None
    if fd is None:
        return None  # no longer a namespace file: it went away
    try:
        view, links, nsid = _look_into(name, f"/proc/self/fd/{fd}", node_kernel)
    except NetNSNotFound:
        return None
    except (OSError, CNIError) as exc:
        _note_blind_spot(path, exc, state)
        return None
    finally:
        os.close(fd)
    view.path = path
    for pod_link in view.links:
        pod_link.namespace_path = path
    return view, links, nsid


def _note_blind_spot(path: str, exc: Exception, state: NodeState) -> None:
    if namespace_key(path) is not None:  # still there: a blind spot, say so
        state.problems.append(f"cannot look into namespace {path}: {exc}")


def _match_peer(
    veth: _RawLink, views: list[tuple[Namespace, list[_RawLink], int | None]]
) -> PodLink | None:
    """The pod end: index pairing both ways, in the namespace with the veth's peer nsid.

    A namespace whose nsid the kernel did not tell is accepted only when no namespace
    with the right nsid pairs up (indexes repeat across namespaces).
    """
    found: list[tuple[bool, PodLink]] = []
    for view, links, nsid in views:
        if nsid is not None and nsid != veth.peer_netnsid:
            continue
        for link in links:
            if link.index == veth.peer_index and link.peer_index == veth.index:
                pod = next(p for p in view.links if p.index == link.index)
                found.append((nsid is not None, pod))
    if not found:
        return None
    found.sort(key=lambda item: not item[0])
    return found[0][1]


def _routes(kernel: Kernel, names: dict[int, str]) -> list[Route]:
    out = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for r in kernel.routes(family, table=254):
            dst_text = str(r.dst) if r.dst.prefixlen else "default"
            if family == socket.AF_INET6 and dst_text.startswith("fe80"):
                continue
            out.append(
                Route(
                    dst=dst_text,
                    dev=names.get(r.oif, "") if r.oif else "",
                    gateway=str(r.gateway) if r.gateway is not None else None,
                    source=str(r.prefsrc) if r.prefsrc is not None else None,
                )
            )
    return out


def _read_kernel(state: NodeState, netns_dir: str) -> None:
    """Fill bridges, veths, other interfaces, routes and namespaces from the kernel."""
    with rtnl() as kernel:
        links = _dump_links(kernel)
        names = {link.index: link.name for link in links}
        state.routes = _routes(kernel, names)
        try:
            state.cluster = agent_state.read_agent_state(
                kernel, state.networks, names, {link.index: link.addresses for link in links}
            )
        except Exception as exc:  # a partial picture beats none
            state.problems.append(f"cannot read the cluster agent's state: {exc}")
    candidates, found = _candidate_namespaces(netns_dir, state.attachments)
    state.problems.extend(found.problems)
    note = opaque_note(found.opaque)
    if note is not None:
        state.notes.append(note)
    complete = found.complete
    views = []
    try:
        with rtnl() as node_kernel:
            for name, path in candidates:
                look = _look_into_or_note(name, path, node_kernel, state)
                if look is None:
                    complete = complete and namespace_key(path) is None
                    continue
                views.append(look)
    finally:
        found.close()  # paths into held mount namespaces end here; the looks are done
    state.live_namespaces = len(views) + 1
    state.addresses_complete = complete
    state.peers_complete = complete and not found.opaque and not found.partial
    live: dict[str, list[str]] = {}
    for link in links:
        for addr in link.addresses:
            live.setdefault(addr.split("/")[0], []).append(state.netns)
    for view, _links, _nsid in views:
        for pod_link in view.links:
            for addr in pod_link.addresses:
                live.setdefault(addr.split("/")[0], []).append(view.name)
    for label, addresses in found.opaque.items():
        for addr in addresses:
            live.setdefault(addr, []).append(label)
    for nsid, linked in sorted(linked_addresses().items()):  # held by what /proc cannot show
        for addr in sorted(linked - live.keys()):
            if not addr.startswith("fe80:"):
                live[addr] = [f"nsid {nsid}"]
    state.live_addresses = live
    for link in links:
        if link.kind == "bridge":
            state.bridges.append(
                Bridge(
                    name=link.name,
                    index=link.index,
                    mac=link.mac,
                    up=link.up,
                    addresses=link.addresses,
                    ports=[p.name for p in links if p.master == link.index],
                )
            )
        elif link.kind == "veth":
            state.veths.append(
                Veth(
                    name=link.name,
                    index=link.index,
                    mac=link.mac,
                    master=names.get(link.master) if link.master else None,
                    up=link.up,
                    addresses=link.addresses,
                    peer_index=link.peer_index,
                    peer_netnsid=link.peer_netnsid,
                    peer=_match_peer(link, views) if link.peer_netnsid is not None else None,
                )
            )
        else:
            state.interfaces.append(
                HostInterface(link.name, link.index, link.kind, link.up, link.addresses)
            )
    peer_namespaces = {v.peer.namespace_path for v in state.veths if v.peer is not None}
    state.namespaces = [
        view
        for view, _links, _nsid in views
        if not view.name.startswith("pid ") or view.path in peer_namespaces
    ]


def _current_netns_label(netns_dir: str) -> str:
    own = _ns_key(THREAD_NETNS)
    try:
        for name in sorted(os.listdir(netns_dir)):
            if _ns_key(os.path.join(netns_dir, name)) == own:
                return name
    except OSError:
        pass
    if own == _ns_key("/proc/1/ns/net"):
        return "host"
    return f"this namespace (not named in {netns_dir})"


def collect(paths: Paths) -> NodeState:
    """The whole picture for the current network namespace."""
    state = NodeState(
        netns=_current_netns_label(paths.netns_dir),
        conf_dir=paths.conf_dir,
        cache_dir=paths.cache_dir,
        data_dir=paths.data_dir,
    )
    state.networks = read_networks(paths.conf_dir)
    state.attachments, problems = _read_attachments(paths.cache_dir)
    state.problems.extend(problems)
    stores = store_dirs(state.networks, paths.data_dir)
    state.store_dirs = sorted(set(stores.values()))
    state.reservations = _read_reservations(stores)
    _read_kernel(state, paths.netns_dir)
    state.port_mappings, problems = nftmap.read_mappings()
    state.problems.extend(problems)
    state.masquerades, problems = nftmap.read_masquerades()
    state.masquerades += nftmap.read_iptables_masquerades()
    state.problems.extend(problems)
    _collect_dns_servers(state, paths.dnsname_dir)
    return state


def _collect_dns_servers(state: NodeState, dnsname_dir: str) -> None:
    try:
        state.dns_servers = dnsname.read_servers(dnsname_dir)
    except Exception as exc:  # a partial picture beats none
        state.problems.append(f"cannot read the dnsname servers in {dnsname_dir}: {exc}")
