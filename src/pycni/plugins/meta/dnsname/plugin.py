"""dnsname: containers on a network find each other by name through one dnsmasq per network.

A chained plugin after bridge. ADD publishes the container's name (CNI_ARGS ``K8S_POD_NAME``)
and its aliases (``runtimeConfig.aliases[<network>]``) for its addresses in the network's hosts
file and reloads dnsmasq (starting it, bound to the bridge, on the network's first container);
the bridge's addresses become the result's nameservers and ``domainName`` its search domain.
DEL removes the name and stops dnsmasq when no name is left. CHECK verifies dnsmasq runs and
the entries are there; GC drops names of attachments that are no longer valid; STATUS reports
whether dnsmasq is installed.
"""

from __future__ import annotations

from pycni.net.link import LinkNotFound, addresses, index_of, is_global_unicast
from pycni.net.netlink import rtnl
from pycni.plugin.base import Plugin, Request
from pycni.plugin.rollback import Rollback
from pycni.plugins.meta.dnsname import config, dnsmasq, files, firewall, names
from pycni.plugins.meta.dnsname.files import NetworkFiles
from pycni.spec.errors import INTERNAL, INVALID_NETWORK_CONFIG, PLUGIN_NOT_AVAILABLE, CNIError
from pycni.spec.result import Result


def _require_dnsmasq() -> None:
    if dnsmasq.binary() is None:
        raise CNIError(INTERNAL, "unable to locate dnsmasq in path")


def _nameservers(bridge: str) -> list[str]:
    """The bridge's global unicast addresses, where dnsmasq answers."""
    with rtnl() as kernel:
        try:
            index = index_of(kernel, bridge)
        except LinkNotFound:
            raise CNIError(INTERNAL, f"dnsname: no such network interface {bridge}") from None
        return [str(a.ip) for a in addresses(kernel, index) if is_global_unicast(a.ip)]


def teardown(net: NetworkFiles, log: list[str] | None = None) -> None:
    """Stop the network's dnsmasq, drop its firewall rule and remove its files (lock held)."""
    try:
        interface = files.conf_interface(net.conf.read_text())
    except OSError:
        interface = None
    dnsmasq.stop(net)
    if interface is not None:
        try:
            firewall.remove(names.interface_name(interface, "interface"))
        except Exception as exc:  # the reference never removes it; not worth failing DEL for
            if log is not None:
                log.append(f"dnsname: could not remove the DNS accept rule for {interface}: {exc}")
    files.remove_network(net)


def _publish(
    net: NetworkFiles, rb: Rollback, name: str, aliases: list[str], ips: list[str]
) -> None:
    before = files.read_lines(net.hosts)
    rb.step("hosts")
    lines = files.host_lines(name, aliases, ips)
    if name in files.names_in(before):  # a repeated ADD replaces the name's lines
        files.write_lines(net.hosts, files.without_name(before, name) + lines)
    else:
        files.append_lines(net.hosts, lines)

    def undo() -> None:
        files.write_lines(net.hosts, before)
        if not files.names_in(before):
            teardown(net)
        elif dnsmasq.running_pid(net) is not None:
            dnsmasq.reload(net)

    rb.push("hosts", undo)


class Dnsname(Plugin):
    about = "pycni dnsname: container name resolution with one dnsmasq per network"

    def add(self, req: Request) -> Result:
        _require_dnsmasq()
        cfg = config.parse(req)
        prev = req.prev_result()
        if prev is None:
            raise CNIError(INVALID_NETWORK_CONFIG, "must be called as chained plugin")
        name = config.require_pod_name(cfg)
        ips = config.container_ips(prev)
        bridge = config.bridge_name(prev)
        servers = _nameservers(bridge)
        net = NetworkFiles(files.base_dir(req.env), cfg.network)
        with files.locked(net, create=True), Rollback(req.env) as rb:
            if not net.conf.exists():
                rb.push("conf", lambda: teardown(net))
                rb.step("conf")
                files.write_conf(net, files.render_conf(net, cfg.domain, bridge))
                rb.step("firewall")
                firewall.ensure(bridge)
            _publish(net, rb, name, cfg.aliases, ips)
            rb.step("record")
            files.write_record(net, req.container_id, req.ifname, name)
            rb.push("record", lambda: files.remove_record(net, req.container_id, req.ifname))
            rb.step("dnsmasq")
            dnsmasq.reload(net)
        prev.dns.nameservers = servers + prev.dns.nameservers
        prev.dns.search = [*prev.dns.search, cfg.domain]
        return prev

    def delete(self, req: Request) -> None:
        """Never fails for a bad config (as the reference): later plugins' DEL must still run."""
        try:
            cfg = config.parse(req)
            net = NetworkFiles(files.base_dir(req.env), cfg.network)
        except CNIError as err:
            req.log(f"dnsname: DEL skipped: {err.msg}")
            return
        name = cfg.pod_name or files.read_record(net, req.container_id, req.ifname)
        if not net.directory.is_dir():  # e.g. the reference's DEL of the last name removed it
            files.remove_record(net, req.container_id, req.ifname)
            files.prune_records(net)
            return
        log: list[str] = []
        with files.locked(net, create=False) as held:
            files.remove_record(net, req.container_id, req.ifname)
            if held and name is not None:
                self._unpublish(net, name, log)
        for line in log:
            req.log(line)

    def _unpublish(self, net: NetworkFiles, name: str, log: list[str]) -> None:
        remaining = files.without_name(files.read_lines(net.hosts), name)
        if not remaining:
            teardown(net, log)
            return
        files.write_lines(net.hosts, remaining)
        dnsmasq.reload(net)

    def check(self, req: Request) -> None:
        _require_dnsmasq()
        cfg = config.parse(req)
        prev = req.prev_result()
        if prev is None:
            raise CNIError(INVALID_NETWORK_CONFIG, "Required prevResult missing")
        net = NetworkFiles(files.base_dir(req.env), cfg.network)
        name = cfg.pod_name or files.read_record(net, req.container_id, req.ifname)
        if name is None:
            config.require_pod_name(cfg)
        assert name is not None
        ips = config.container_ips(prev)
        with files.locked(net, create=False) as held:
            if not held or dnsmasq.running_pid(net) is None:
                raise CNIError(INTERNAL, "dnsmasq instance not running")
            if not net.hosts.exists():
                raise CNIError(INTERNAL, "addnhost file missing from configuration")
            if not net.conf.exists():
                raise CNIError(INTERNAL, "dnsmasq.conf file missing from configuration")
            published = files.names_in(files.read_lines(net.hosts)).get(name, [])
            missing = [ip for ip in ips if ip not in published]
            if missing:
                raise CNIError(
                    INTERNAL, f"dnsname: {name} is not published for {', '.join(missing)}"
                )

    def gc(self, req: Request) -> None:
        """Drop the names of recorded attachments that are not in the valid list."""
        cfg = config.parse(req)
        net = NetworkFiles(files.base_dir(req.env), cfg.network)
        valid = {f"{cid}-{ifname}" for cid, ifname in req.valid_attachments() or []}
        if not net.directory.is_dir():
            for key in files.all_records(net):
                (net.records / key).unlink(missing_ok=True)
            files.remove_network(net)
            return
        log: list[str] = []
        with files.locked(net, create=False) as held:
            if held:
                self._collect(net, valid, log)
        for line in log:
            req.log(line)

    def _collect(self, net: NetworkFiles, valid: set[str], log: list[str]) -> None:
        records = files.all_records(net)
        kept = {name for key, name in records.items() if key in valid}
        before = files.read_lines(net.hosts)
        lines = before
        for key, name in records.items():
            if key in valid:
                continue
            (net.records / key).unlink(missing_ok=True)
            if name not in kept:
                lines = files.without_name(lines, name)
        if not files.names_in(lines):
            teardown(net, log)
        elif lines != before:
            files.write_lines(net.hosts, lines)
            dnsmasq.reload(net)

    def status(self, req: Request) -> None:
        if dnsmasq.binary() is None:
            raise CNIError(PLUGIN_NOT_AVAILABLE, "dnsname: dnsmasq is not installed (not in PATH)")


PLUGIN = Dnsname()
