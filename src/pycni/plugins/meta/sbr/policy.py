"""Policy routing for sbr: ip rules by source address, routes copied into per-source tables."""

from __future__ import annotations

import ipaddress

from pycni import record
from pycni.net.netlink.kernel import AF_INET, AF_INET6, Kernel, Route, Rule
from pycni.net.netlink.kernel import MAIN_TABLE as MAIN_TABLE
from pycni.spec.result import IPInterface


def rules(kernel: Kernel) -> list[Rule]:
    """Every policy rule of both families."""
    return kernel.rules(AF_INET) + kernel.rules(AF_INET6)


def table_of(rule: Rule) -> int:
    return rule.table


def rule_source(rule: Rule) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    return rule.src.network_address if rule.src is not None else None


def next_free_table(used: set[int], start: int) -> int:
    table = start
    while table in used:
        table += 1
    return table


def add_source_rule(kernel: Kernel, address: IPInterface, table: int) -> None:
    """``from <address>/32 (or /128) lookup <table>`` at the priority the kernel would pick.

    pyroute2 always sends a priority (32000 by default), so we send the kernel's own choice
    for a rule without one: one below the family's second rule (``fib_default_rule_pref``).
    """
    family = AF_INET if address.version == 4 else AF_INET6
    src = ipaddress.ip_network(address.ip)
    kernel.add_rule(Rule(family, table, src, default_priority(kernel, family)))


def default_priority(kernel: Kernel, family: int) -> int:
    prios = sorted(r.priority or 0 for r in kernel.rules(family))
    if len(prios) >= 2 and prios[1] > 0:
        return prios[1] - 1
    return 0


def delete_rule(kernel: Kernel, rule: Rule) -> None:
    kernel.delete_rule(rule)


def main_routes_of(kernel: Kernel, index: int) -> list[Route]:
    """Main-table routes through the link, both families (the reference's RouteList(link))."""
    out = []
    for family in (AF_INET, AF_INET6):
        out += kernel.routes(family, table=MAIN_TABLE, oif=index)
    return out


def route_copy(route: Route, table: int | None = None) -> Route:
    """A kernel route as a request for replace/del (optionally in another table): its
    destination, link, gateway, source, priority, scope, protocol and type."""
    return record.replace(
        route,
        table=table if table is not None else route.table,
        flags=0,
        mtu=0,
        multipath_oifs=(),
    )
