"""Policy routing for sbr: ip rules by source address, routes copied into per-source tables."""

from __future__ import annotations

import ipaddress
from typing import Any

from pycni.spec.result import IPInterface

MAIN_TABLE = 254
AF_INET, AF_INET6 = 2, 10


def rules(ipr: Any) -> list[Any]:
    """Every policy rule of both families."""
    return list(ipr.get_rules(family=AF_INET)) + list(ipr.get_rules(family=AF_INET6))


def table_of(msg: Any) -> int:
    return int(msg.get_attr("FRA_TABLE") or msg.get_attr("RTA_TABLE") or msg["table"])


def rule_source(msg: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    src = msg.get_attr("FRA_SRC")
    return ipaddress.ip_address(src) if src else None


def next_free_table(used: set[int], start: int) -> int:
    table = start
    while table in used:
        table += 1
    return table


def add_source_rule(ipr: Any, address: IPInterface, table: int) -> None:
    """``from <address>/32 (or /128) lookup <table>`` at the priority the kernel would pick.

    pyroute2 always sends a priority (32000 by default), so we send the kernel's own choice
    for a rule without one: one below the family's second rule (``fib_default_rule_pref``).
    """
    family = AF_INET if address.version == 4 else AF_INET6
    ipr.rule(
        "add",
        family=family,
        table=table,
        src=str(address.ip),
        src_len=address.max_prefixlen,
        priority=default_priority(ipr, family),
    )


def default_priority(ipr: Any, family: int) -> int:
    prios = sorted(int(r.get_attr("FRA_PRIORITY") or 0) for r in ipr.get_rules(family=family))
    if len(prios) >= 2 and prios[1] > 0:
        return prios[1] - 1
    return 0


def delete_rule(ipr: Any, msg: Any) -> None:
    spec: dict[str, Any] = {"family": msg["family"], "table": table_of(msg)}
    src = msg.get_attr("FRA_SRC")
    if src:
        spec["src"] = src
        spec["src_len"] = msg["src_len"]
    prio = msg.get_attr("FRA_PRIORITY")
    if prio is not None:
        spec["priority"] = prio
    ipr.rule("del", **spec)


def main_routes_of(ipr: Any, index: int) -> list[Any]:
    """Main-table routes through the link, both families (the reference's RouteList(link))."""
    out = []
    for family in (AF_INET, AF_INET6):
        for msg in ipr.get_routes(family=family, oif=index, table=MAIN_TABLE):
            if int(msg.get_attr("RTA_TABLE") or msg["table"]) == MAIN_TABLE:
                out.append(msg)
    return out


def route_spec(msg: Any, table: int | None = None) -> dict[str, Any]:
    """The keyword form of a route message, for replace/del (optionally in another table)."""
    family = int(msg["family"])
    dst = msg.get_attr("RTA_DST") or ("0.0.0.0" if family == AF_INET else "::")
    spec: dict[str, Any] = {
        "family": family,
        "dst": f"{dst}/{msg['dst_len']}",
        "table": table if table is not None else int(msg.get_attr("RTA_TABLE") or msg["table"]),
        "oif": msg.get_attr("RTA_OIF"),
        "scope": msg["scope"],
        "proto": msg["proto"],
        "type": msg["type"],
    }
    for attr, key in (("RTA_GATEWAY", "gateway"), ("RTA_PREFSRC", "prefsrc")):
        if msg.get_attr(attr):
            spec[key] = msg.get_attr(attr)
    if msg.get_attr("RTA_PRIORITY") is not None:
        spec["priority"] = msg.get_attr("RTA_PRIORITY")
    return spec


def route_gateway(msg: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    gw = msg.get_attr("RTA_GATEWAY")
    return ipaddress.ip_address(gw) if gw else None


def route_prefsrc(msg: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    src = msg.get_attr("RTA_PREFSRC")
    return ipaddress.ip_address(src) if src else None
