"""dnsname: containers on a network find each other by name through one dnsmasq per network.

A chained plugin after bridge. ADD publishes the container's name (CNI_ARGS ``K8S_POD_NAME``)
and its aliases (``runtimeConfig.aliases[<network>]``) for its addresses in the network's hosts
file and reloads dnsmasq (starting it, bound to the bridge, on the network's first container);
the bridge's addresses become the result's nameservers and ``domainName`` its search domain.
DEL removes the attachment's own lines (another container may publish the same name) and stops
dnsmasq when no name is left. The runtime directory (XDG_RUNTIME_DIR) is checked before any
file in it is used (files.secure): as root it must be root-owned, with no symlink below it.
CHECK verifies dnsmasq runs and the entries are there; GC drops names of attachments that are
no longer valid; STATUS reports whether dnsmasq is installed. Its files and dnsmasq come from
the request's host (``req.host.state()``, ``req.host.processes()``), bundled per call in a
``Node``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pycni.net.link import LinkNotFound, addresses, index_of, is_global_unicast
from pycni.plugins.meta.dnsname import config, dnsmasq, files, firewall, names
from pycni.plugins.meta.dnsname.dnsmasq import Dnsmasq
from pycni.plugins.meta.dnsname.files import NetworkFiles
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import (
    INVALID_NETWORK_CONFIG,
    PLUGIN_NOT_AVAILABLE,
    CNIError,
    InternalError,
)
from pycni.spec.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_seam import Iptables
    from pycni.skel.host import Host
    from pycni.state.files import StateFiles


class Node:
    """What dnsname touches on the node: its state files, its dnsmasq processes and (through
    ``iptables()``) the filter table its DNS rule goes to."""

    __slots__ = ("dnsmasq", "fs", "host")

    def __init__(self, fs: StateFiles, daemon: Dnsmasq, host: Host) -> None:
        self.fs = fs
        self.dnsmasq = daemon
        self.host = host

    @classmethod
    def of(cls, req: Request) -> Node:
        fs = req.host.state()
        return cls(fs, dnsmasq.Dnsmasq(req.host.processes(), fs), req.host)

    @contextlib.contextmanager
    def iptables(self) -> Iterator[Iptables]:
        """The node's iptables, for the block (``req.host.netfilter`` of the node's Kernel)."""
        with self.host.node() as node_kernel:
            yield self.host.netfilter(node_kernel).iptables


def _require_dnsmasq(node: Node) -> None:
    if node.dnsmasq.binary() is None:
        raise InternalError("unable to locate dnsmasq in path")


def _nameservers(req: Request, bridge: str) -> list[str]:
    """The bridge's global unicast addresses, where dnsmasq answers."""
    with req.host.node() as node_kernel:
        try:
            index = index_of(node_kernel, bridge)
        except LinkNotFound:
            raise InternalError(f"dnsname: no such network interface {bridge}") from None
        return [str(a.ip) for a in addresses(node_kernel, index) if is_global_unicast(a.ip)]


def teardown(
    ipt: Iptables,
    fs: StateFiles,
    daemon: Dnsmasq,
    net: NetworkFiles,
    log: list[str] | None = None,
) -> None:
    """Stop the network's dnsmasq, drop its firewall rule (from the node's ``ipt``) and remove
    its files (lock held)."""
    try:
        interface = files.conf_interface(files.read_conf(fs, net))
    except OSError:
        interface = None
    daemon.stop(net)
    if interface is not None:
        try:
            firewall.remove(ipt, names.interface_name(interface, "interface"))
        except Exception as exc:  # the reference never removes it; not worth failing DEL for
            if log is not None:
                log.append(f"dnsname: could not remove the DNS accept rule for {interface}: {exc}")
    files.remove_network(fs, net)


def _teardown(node: Node, net: NetworkFiles, log: list[str] | None = None) -> None:
    with node.iptables() as ipt:
        teardown(ipt, node.fs, node.dnsmasq, net, log)


def _publish(
    node: Node,
    net: NetworkFiles,
    rb: Rollback,
    own: files.Entry | None,
    entry: files.Entry,
    aliases: list[str],
) -> None:
    fs = node.fs
    before = files.read_lines(fs, net.hosts)
    rb.step("hosts")
    lines = files.host_lines(entry.name, aliases, entry.ips)
    if own is not None:  # a repeated ADD of this attachment replaces its own lines
        files.write_lines(fs, net.hosts, files.without_entry(before, own) + lines)
    else:
        files.append_lines(fs, net.hosts, lines)

    def undo() -> None:
        files.write_lines(fs, net.hosts, before)
        if not files.names_in(before):
            _teardown(node, net)
        elif node.dnsmasq.running_pid(net) is not None:
            node.dnsmasq.reload(net)

    rb.push("hosts", undo)


def _network(req: Request, node: Node, network: str, *, create: bool) -> NetworkFiles:
    net = NetworkFiles(files.base_dir(req.env), network)
    files.secure(node.fs, net, create=create)
    return net


def _recorded(
    fs: StateFiles, net: NetworkFiles, req: Request, name: str | None
) -> tuple[files.Entry | None, bool]:
    """This attachment's record, and whether it is one an older pycni wrote under the shared
    ``<containerID>-<ifname>`` name. Such a record may be another attachment's: it is taken
    as ours only when it publishes the name this call gives (or the call gives none)."""
    own = files.read_record(fs, net, req.container_id, req.ifname)
    if own is not None:
        return own, False
    legacy = files.read_legacy_record(fs, net, req.container_id, req.ifname)
    if legacy is not None and (name is None or legacy.name == name):
        return legacy, True
    return None, False


def _prev_ips(req: Request) -> list[str]:
    try:
        prev = req.prev_result()
        return config.container_ips(prev) if prev is not None else []
    except CNIError:
        return []


class Dnsname(Plugin):
    about = "pycni dnsname: container name resolution with one dnsmasq per network"

    def add(self, req: Request) -> Result:
        node = Node.of(req)
        fs = node.fs
        _require_dnsmasq(node)
        cfg = config.parse(req)
        prev = req.prev_result()
        if prev is None:
            raise CNIError(INVALID_NETWORK_CONFIG, "must be called as chained plugin")
        name = config.require_pod_name(cfg)
        ips = config.container_ips(prev)
        bridge = config.bridge_name(prev)
        servers = _nameservers(req, bridge)
        net = _network(req, node, cfg.network, create=True)
        entry = files.Entry(name, tuple(ips))
        with files.locked(fs, net, create=True), Rollback(req.env) as rb:
            if not _exists(fs, net.conf):
                rb.push("conf", lambda: _teardown(node, net))
                rb.step("conf")
                files.write_conf(fs, net, files.render_conf(net, cfg.domain, bridge))
                rb.step("firewall")
                with node.iptables() as ipt:
                    firewall.ensure(ipt, bridge)
            own, legacy = _recorded(fs, net, req, name)
            _publish(node, net, rb, own, entry, cfg.aliases)
            rb.step("record")
            files.write_record(fs, net, req.container_id, req.ifname, entry)
            rb.push("record", lambda: files.remove_record(fs, net, req.container_id, req.ifname))
            rb.step("dnsmasq")
            node.dnsmasq.reload(net)
            if legacy:  # superseded by the record just written
                files.remove_legacy_record(fs, net, req.container_id, req.ifname)
        prev.dns.nameservers = servers + prev.dns.nameservers
        prev.dns.search = [*prev.dns.search, cfg.domain]
        return prev

    def delete(self, req: Request) -> None:
        """Never fails for a bad config or a refused runtime directory (as the reference for
        configs): later plugins' DEL must still run."""
        node = Node.of(req)
        fs = node.fs
        try:
            cfg = config.parse(req)
            net = _network(req, node, cfg.network, create=False)
        except CNIError as err:
            req.log(f"dnsname: DEL skipped: {err.msg}")
            return
        # The name CNI_ARGS gives (else the recorded one), for the addresses this attachment
        # published (recorded; else prevResult's, e.g. after the reference's ADD).
        recorded, legacy = _recorded(fs, net, req, cfg.pod_name or None)
        name = cfg.pod_name or (recorded.name if recorded is not None else None)
        ips = recorded.ips if recorded is not None else tuple(_prev_ips(req))
        entry = files.Entry(name, ips) if name else None

        def forget() -> None:
            files.remove_record(fs, net, req.container_id, req.ifname)
            if legacy:
                files.remove_legacy_record(fs, net, req.container_id, req.ifname)

        if not fs.is_dir(str(net.directory)):  # e.g. the reference's last DEL removed it
            forget()
            files.prune_records(fs, net)
            return
        log: list[str] = []
        with files.locked(fs, net, create=False) as held:
            forget()
            if held and entry is not None:
                self._unpublish(node, net, entry, log)
        for line in log:
            req.log(line)

    def _unpublish(self, node: Node, net: NetworkFiles, entry: files.Entry, log: list[str]) -> None:
        remaining = files.without_entry(files.read_lines(node.fs, net.hosts), entry)
        if not remaining:
            _teardown(node, net, log)
            return
        files.write_lines(node.fs, net.hosts, remaining)
        node.dnsmasq.reload(net)

    def check(self, req: Request) -> None:
        node = Node.of(req)
        fs = node.fs
        _require_dnsmasq(node)
        cfg = config.parse(req)
        prev = req.prev_result()
        if prev is None:
            raise CNIError(INVALID_NETWORK_CONFIG, "Required prevResult missing")
        net = _network(req, node, cfg.network, create=False)
        recorded, _legacy = _recorded(fs, net, req, cfg.pod_name or None)
        name = cfg.pod_name or (recorded.name if recorded is not None else None)
        if name is None:
            config.require_pod_name(cfg)
        assert name is not None
        ips = config.container_ips(prev)
        with files.locked(fs, net, create=False) as held:
            if not held or node.dnsmasq.running_pid(net) is None:
                raise InternalError("dnsmasq instance not running")
            if not _exists(fs, net.hosts):
                raise InternalError("addnhost file missing from configuration")
            if not _exists(fs, net.conf):
                raise InternalError("dnsmasq.conf file missing from configuration")
            published = files.names_in(files.read_lines(fs, net.hosts)).get(name, [])
            missing = [ip for ip in ips if ip not in published]
            if missing:
                raise InternalError(f"dnsname: {name} is not published for {', '.join(missing)}")

    def gc(self, req: Request) -> None:
        """Drop the names of recorded attachments that are not in the valid list."""
        node = Node.of(req)
        fs = node.fs
        cfg = config.parse(req)
        net = _network(req, node, cfg.network, create=False)
        attachments = req.valid_attachments() or []
        valid = {files.record_name(cid, ifname) for cid, ifname in attachments}
        # an older pycni's records of live attachments (their shared names) stay too
        valid |= {files.legacy_record_name(cid, ifname) for cid, ifname in attachments}
        if not fs.is_dir(str(net.directory)):
            for key in files.all_records(fs, net):
                _remove(fs, net, key)
            files.remove_network(fs, net)
            return
        log: list[str] = []
        with files.locked(fs, net, create=False) as held:
            if held:
                self._collect(node, net, valid, log)
        for line in log:
            req.log(line)

    def _collect(self, node: Node, net: NetworkFiles, valid: set[str], log: list[str]) -> None:
        fs = node.fs
        records = files.all_records(fs, net)
        kept = {entry.name for key, entry in records.items() if key in valid}
        before = files.read_lines(fs, net.hosts)
        lines = before
        for key, entry in records.items():
            if key in valid:
                continue
            _remove(fs, net, key)
            if entry.ips or entry.name not in kept:  # by name only when no live one has it
                lines = files.without_entry(lines, entry)
        if not files.names_in(lines):
            _teardown(node, net, log)
        elif lines != before:
            files.write_lines(fs, net.hosts, lines)
            node.dnsmasq.reload(net)

    def status(self, req: Request) -> None:
        if Node.of(req).dnsmasq.binary() is None:
            raise CNIError(PLUGIN_NOT_AVAILABLE, "dnsname: dnsmasq is not installed (not in PATH)")


def _exists(fs: StateFiles, path: object) -> bool:
    """A file is there (readable, not through a symlink)."""
    try:
        fs.read(str(path), nofollow=True)
    except OSError:
        return False
    return True


def _remove(fs: StateFiles, net: NetworkFiles, key: str) -> None:
    """One record file, by its name (GC)."""
    with contextlib.suppress(FileNotFoundError):
        fs.remove(str(net.records / key))


PLUGIN = Dnsname()
