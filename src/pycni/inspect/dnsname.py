"""The dnsname plugin's DNS servers: what `pycni inspect` shows of them and the ``dnsmasq`` leak.

Each per-network directory under the dnsname base dir (``/run/containers/cni/dnsname``) is one
server: its dnsmasq (pid file checked against /proc), the bridge it serves, the domain and the
names of the hosts file. A server whose dnsmasq runs in this namespace (or runs nowhere) and
none of whose names belongs to a live pod is a leak: every container it served is gone, so
the plugin's last DEL never came. `pycni cleanup` stops it and removes its directory, under
the plugin's lock and only if its hosts file did not change since it was inspected.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from pycni.inspect.leaks import Leak
from pycni.inspect.model import DnsServer, NodeState
from pycni.net.netfilter.iptables_seam import THREAD_IPTABLES  # this node's, as a DEL's
from pycni.net.ns import THREAD_NETNS
from pycni.plugins.meta.dnsname import dnsmasq, files
from pycni.plugins.meta.dnsname.plugin import teardown
from pycni.skel.host import REAL_HOST

KIND = "dnsmasq"


def _ns_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _conf_value(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    return ""


def _read_server(directory: Path) -> DnsServer:
    fs = REAL_HOST.state()
    net = files.NetworkFiles(directory.parent, directory.name)
    server = DnsServer(network=directory.name, directory=str(directory))
    try:
        conf = net.conf.read_text(errors="replace")
    except OSError:
        conf = ""
        server.problems.append("no dnsmasq.conf")
    server.domain = _conf_value(conf, "domain")
    server.interface = _conf_value(conf, "interface")
    server.pid = dnsmasq.Dnsmasq(REAL_HOST.processes(), fs).running_pid(net)
    if server.pid is not None:
        key = _ns_key(f"/proc/{server.pid}/ns/net")
        server.in_this_namespace = key is not None and key == _ns_key(THREAD_NETNS)
    for path in (directory, net.hosts):
        with contextlib.suppress(OSError):
            server.changed_at = max(server.changed_at, os.stat(path).st_mtime)
    lines = files.read_lines(fs, net.hosts)
    server.hosts = [" ".join(line.split()) for line in lines if line.split()]
    server.records = len(files.all_records(fs, net))
    return server


def read_servers(base: str) -> list[DnsServer]:
    """One entry per network directory under ``base`` (none when it does not exist)."""
    try:
        entries = sorted(p for p in Path(base).iterdir() if p.is_dir())
    except OSError:
        return []
    return [_read_server(entry) for entry in entries]


def addresses(server: DnsServer, state: NodeState) -> list[str]:
    """Where the server answers: the addresses of its bridge in this namespace."""
    found = [b.addresses for b in state.bridges if b.name == server.interface]
    found += [i.addresses for i in state.interfaces if i.name == server.interface]
    return [a.split("/")[0] for a in found[0]] if found else []


def find_leaks(state: NodeState, *, grace: float, now: float) -> list[Leak]:
    """dnsname servers that serve no live pod, by the rules of :mod:`pycni.inspect.leaks`:
    only after a complete scan of the live namespaces finds none of its names' addresses, and
    only once its files are older than the grace period (an ADD may be writing them)."""
    if not state.addresses_complete:
        return []
    out = []
    for server in state.dns_servers:
        if server.pid is not None and not server.in_this_namespace:
            continue  # another namespace's pods: we cannot tell whether they live
        if now - server.changed_at < grace:
            continue
        ips = {entry.split()[0] for entry in server.hosts}
        if ips & set(state.live_addresses):
            continue
        why = (
            f"dnsmasq pid {server.pid} serves no live container"
            if server.pid is not None
            else "no dnsmasq runs for it and no live container is named in it"
        )
        if server.hosts:
            why += f" ({len(server.hosts)} stale name line(s))"
        out.append(Leak(KIND, server.directory, why, server.network))
    return out


def remove(state: NodeState, leak: Leak) -> None:
    """Stop the leaked dnsmasq and remove its directory, as the plugin's last DEL would."""
    directory = Path(leak.subject)
    seen = next((s for s in state.dns_servers if s.directory == leak.subject), None)
    if seen is None:
        return
    net = files.NetworkFiles(directory.parent, directory.name)
    fs = REAL_HOST.state()
    with files.locked(fs, net, create=False) as held:
        if not held:
            return  # removed meanwhile
        lines = files.read_lines(fs, net.hosts)
        now = [" ".join(line.split()) for line in lines if line.split()]
        if now != seen.hosts:
            raise RuntimeError("its hosts file changed since it was inspected; left alone")
        teardown(THREAD_IPTABLES, fs, dnsmasq.Dnsmasq(REAL_HOST.processes(), fs), net)
