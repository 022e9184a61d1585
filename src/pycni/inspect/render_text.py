"""The human-readable report of `pycni inspect`."""

from __future__ import annotations

from pycni.inspect.dnsname import addresses
from pycni.inspect.leaks import Leak
from pycni.inspect.model import ClusterAgentState, DaemonStatus, NodeState


def _short(cid: str) -> str:
    return cid if len(cid) <= 16 else cid[:12] + "…"


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    if not rows:
        return [f"{indent}(none)"]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _cluster_lines(agent: ClusterAgentState) -> list[str]:
    out = [f"Cluster agent (masquerade table {'present' if agent.masquerade_table else 'absent'})"]
    out += ["  Lease"]
    out += _table(
        [
            [
                lease.subnet or "-",
                f"of {lease.network}" if lease.network else "",
                f"mtu {lease.mtu}" if lease.mtu is not None else "",
                f"ipmasq {str(lease.ipmasq).lower()}" if lease.ipmasq is not None else "",
                lease.subnet_file,
                lease.error or "",
            ]
            for lease in agent.leases
        ],
        indent="    ",
    )
    out += [f"  Routes to other nodes ({len(agent.routes)}, proto 157)"]
    out += _table(
        [
            [
                r.dst,
                f"via {r.gateway}",
                f"dev {r.dev}" if r.dev else "",
                "onlink" if r.onlink else "",
            ]
            for r in agent.routes
        ],
        indent="    ",
    )
    for dev in agent.vxlan_devices:
        out += [
            f"  VXLAN {dev.name} vni {dev.vni} local {dev.local or '-'} port {dev.port} "
            f"mac {dev.mac} {'up' if dev.up else 'down'} {', '.join(dev.addresses)}".rstrip()
        ]
        out += _table([[mac, f"→ {dst}"] for mac, dst in dev.peers.items()], indent="    ")
    return out


def _daemon_line(daemon: DaemonStatus) -> str:
    reason = daemon.chosen_because.removeprefix("given").removeprefix("; ")
    why = f"; {reason}" if reason else ""
    if not daemon.answers:
        here = daemon.here or "in-process: the entry points run the plugins themselves"
        return f"Daemon: not running on {daemon.socket}{why}; calls run {here}"
    facts = [f"pid {daemon.pid}"] if daemon.pid is not None else []
    if daemon.workers is not None:
        facts.append(f"{daemon.workers} workers")
    if daemon.started_by:
        facts.append(f"started {daemon.started_by}")
    if daemon.status and daemon.status not in ("ok", "other mount namespace"):
        facts.append(daemon.status)
    said = f" ({', '.join(facts)})" if facts else ""
    here = daemon.here or "through the daemon"
    return f"Daemon: answering on {daemon.socket}{said}{why}; calls from here run {here}"


def _host_row(line: str) -> list[str]:
    """A hosts-file line ``IP name alias…`` as [name, → IP, aliases]."""
    parts = line.split()
    aliases = f"aliases {', '.join(parts[2:])}" if len(parts) > 2 else ""
    return [parts[1] if len(parts) > 1 else "?", f"→ {parts[0]}", aliases]


def _dns_lines(state: NodeState) -> list[str]:
    """The dnsname plugin's servers: where each answers, for which domain, and the names."""
    out = [f"DNS servers (dnsname) ({len(state.dns_servers)})"]
    for s in state.dns_servers:
        where = ", ".join(addresses(s, state)) or "-"
        running = f"dnsmasq pid {s.pid}" if s.pid is not None else "dnsmasq not running"
        if s.pid is not None and not s.in_this_namespace:
            running += " (another namespace)"
        domain = f"domain {s.domain}" if s.domain else "no domain"
        out.append(f"  {s.network}: {where} on {s.interface or '?'}, {domain}, {running}")
        out += _table([_host_row(line) for line in s.hosts], indent="    ")
        out += [f"    problem: {p}" for p in s.problems]
    return out


def _entry_point_lines(daemon: DaemonStatus) -> list[str]:
    out = []
    for found in daemon.entry_points:
        if found.plugins == 0:
            what = "; ".join(found.modes) or "no pycni entry points"
            out.append(f"  {found.directory}: {what}")
            continue
        out.append(f"  {found.directory}: {found.plugins} pycni entry points, {found.modes[0]}")
        out += [f"    also: {mode}" for mode in found.modes[1:]]
    return ["Entry points:", *out] if out else []


def render(state: NodeState, leaks: list[Leak]) -> str:
    out = [
        f"CNI state of namespace {state.netns}",
        f"  conf dir {state.conf_dir}, cache dir {state.cache_dir}, data dir {state.data_dir}",
        "",
        f"Networks ({len(state.networks)})",
    ]
    out += _table(
        [
            [
                n.name or "?",
                n.cni_version,
                " → ".join(n.plugins),
                f"bridge {n.bridge}" if n.bridge else "",
                ", ".join(n.subnets),
                n.error or "",
            ]
            for n in state.networks
        ]
    )
    out += ["", f"Attachments ({len(state.attachments)})"]
    out += _table(
        [
            [
                a.network,
                _short(a.container_id),
                a.ifname,
                ", ".join(a.ips) or "-",
                a.netns or "-",
                "" if a.netns_exists else "(namespace gone)",
            ]
            for a in state.attachments
        ]
    )
    out += ["", f"Reservations ({len(state.reservations)})"]
    out += _table([[r.network, r.ip, _short(r.container_id), r.ifname] for r in state.reservations])
    out += ["", f"Bridges ({len(state.bridges)})"]
    out += _table(
        [
            [
                b.name,
                "up" if b.up else "down",
                ", ".join(b.addresses) or "-",
                "ports: " + (", ".join(b.ports) or "none"),
            ]
            for b in state.bridges
        ]
    )
    out += ["", f"Veths ({len(state.veths)})"]
    out += _table(
        [
            [
                v.name,
                f"on {v.master}" if v.master else "no bridge",
                (
                    f"→ {v.peer.namespace}:{v.peer.name}"
                    if v.peer
                    else f"→ peer #{v.peer_index} (namespace not found)"
                ),
                ", ".join(v.peer.addresses) if v.peer else "",
            ]
            for v in state.veths
        ]
    )
    out += ["", f"Other interfaces ({len(state.interfaces)})"]
    out += _table(
        [
            [i.name, i.kind or "-", "up" if i.up else "down", ", ".join(i.addresses)]
            for i in state.interfaces
        ]
    )
    out += ["", f"Routes ({len(state.routes)})"]
    out += _table(
        [
            [r.dst, f"via {r.gateway}" if r.gateway else "", f"dev {r.dev}" if r.dev else ""]
            for r in state.routes
        ]
    )
    out += ["", f"Port mappings ({len(state.port_mappings)})"]
    out += _table(
        [
            [
                f"{m.protocol}/{m.host_port}",
                f"on {m.host_ip}" if m.host_ip else "",
                f"→ {m.target_ip}:{m.target_port}",
                _short(m.owner),
                f"({m.family} {m.table})",
            ]
            for m in state.port_mappings
        ]
    )
    out += ["", f"Masquerade ({len(state.masquerades)})"]
    out += _table(
        [
            [
                m.network,
                f"from {m.subnet}" if m.subnet else "per address",
                f"{len(m.addresses)} pod address{'' if len(m.addresses) == 1 else 'es'}",
                ", ".join(m.addresses[:4]) + (" …" if len(m.addresses) > 4 else ""),
                "(inet cni_plugins_masquerade)" if m.backend == "nftables" else "(iptables nat)",
            ]
            for m in state.masquerades
        ]
    )
    if state.daemon is not None:
        out += ["", _daemon_line(state.daemon), *_entry_point_lines(state.daemon)]
    if state.cluster is not None:
        out += ["", *_cluster_lines(state.cluster)]
    if state.dns_servers:
        out += ["", *_dns_lines(state)]
    if state.notes:
        out += [""] + [f"Note: {n}" for n in state.notes]
    if state.problems:
        out += ["", f"Problems ({len(state.problems)})"]
        out += [f"  {p}" for p in state.problems]
    out += [""]
    if leaks:
        out += [f"Leaks ({len(leaks)}) — `pycni cleanup` removes them"]
        out += _table([[lk.kind, lk.subject, lk.reason] for lk in leaks])
    else:
        out += ["Leaks: none"]
    # Names come from configs, caches, nftables and iptables comments: never print a terminal
    # escape from them.
    return "\n".join(_printable(line) for line in out) + "\n"


def _printable(line: str) -> str:
    return line if line.isprintable() else "".join(c if c.isprintable() else "?" for c in line)
