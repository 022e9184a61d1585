"""sbr: source-based routing. Each pod address gets its own routing table (from 100 up) and a
rule ``from <address> lookup <table>``, so replies leave through the interface that owns the
address; the interface's main-table routes move into those tables.

With ``table`` (the reference's v1.6+ key) every address gets a rule to that one table and no
route moves: whoever set the config fills the table. DEL then looks only at that table's rules.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import partial

from pycni.net.link import LinkNotFound, addresses, index_of
from pycni.net.netlink.kernel import IPAddress, IPInterface, Kernel, NetlinkError, Route
from pycni.net.ns import NetNSNotFound
from pycni.plugins.meta.sbr import policy
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.decode import UINT32_MAX, Int, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import IPConfig, Result

FIRST_TABLE = 100


@record(frozen=True)
class SbrKeys:
    """sbr's own keys. ``table`` is a Go ``*int`` upstream, sent to the kernel as a u32; 0 (no
    table) and values outside u32 only fail there, at the rule's creation: refused here."""

    table: int | None = option("table", Int(1, UINT32_MAX))


def load_keys(req: Request) -> SbrKeys:
    """The config's own keys (no kernel lookups)."""
    return decode(SbrKeys, req.config)


def ip_configs(ifname: str, prev: Result) -> list[IPConfig]:
    """prevResult IPs of this interface, plus those that name no interface."""
    if not prev.ips:
        raise InternalError(f"No IP addresses supplied on interface: {ifname}")
    out = []
    for ipc in prev.ips:
        idx = ipc.interface
        if (
            idx is not None
            and 0 <= idx < len(prev.interfaces)
            and prev.interfaces[idx].name != ifname
        ):
            continue
        out.append(ipc)
    return out


def _same_family(ip: IPAddress | None, address: IPInterface) -> bool:
    return ip is not None and ip.version == address.version


class Sbr(Plugin):
    about = "pycni sbr: per-address routing tables and source rules in the pod"

    def add(self, req: Request) -> Result:
        keys = load_keys(req)
        prev = req.prev_result()
        if prev is None:
            raise InvalidConfig("This plugin must be called as chained plugin")
        ipcs = ip_configs(req.ifname, prev)
        with (
            req.open_netns() as pod,
            req.host.locked(pod),  # one run at a time per pod
            req.host.pod(pod) as pod_kernel,
            Rollback(req.env) as rb,
        ):
            if keys.table is not None:
                _rules_to(pod_kernel, ipcs, keys.table, rb)
            else:
                self._route(pod_kernel, req.ifname, ipcs, rb)
        return prev

    def _route(self, pod_kernel: Kernel, ifname: str, ipcs: list[IPConfig], rb: Rollback) -> None:
        used = {policy.table_of(r) for r in policy.rules(pod_kernel)} | {policy.MAIN_TABLE}
        table = policy.next_free_table(used, FIRST_TABLE)
        try:
            index = index_of(pod_kernel, ifname)
        except LinkNotFound:
            raise InternalError(f"Cannot find network interface {ifname}") from None
        link_routes = policy.main_routes_of(pod_kernel, index)
        for ipc in ipcs:
            rb.step("rule")
            _kernel(
                partial(policy.add_source_rule, pod_kernel, ipc.address, table),
                "Failed to add rule",
            )
            for rule in [r for r in policy.rules(pod_kernel) if policy.table_of(r) == table]:
                rb.push("rule", partial(policy.delete_rule, pod_kernel, rule))
            if ipc.gateway is not None:
                dst = ipaddress.ip_network("0.0.0.0/0" if ipc.address.version == 4 else "::/0")
                default = Route(dst=dst, gateway=ipc.gateway, table=table, oif=index)
                rb.step("default-route")
                what = f"Failed to add default route to {ipc.gateway}"
                _kernel(partial(pod_kernel.add_route, default), what)
                rb.push("default-route", partial(pod_kernel.delete_route, default))
            for route in link_routes:
                src, gw = route.prefsrc, route.gateway
                if (
                    (_same_family(src, ipc.address) and src in ipc.address.network)
                    or (_same_family(gw, ipc.address) and gw in ipc.address.network)
                    or (src is None and gw is None)
                ):
                    copy = policy.route_copy(route, table)
                    rb.step("copy-route")
                    _kernel(partial(pod_kernel.replace_route, copy), "Failed to readd route")
                    rb.push("copy-route", partial(pod_kernel.delete_route, copy))
            table = policy.next_free_table(used, table + 1)
        for route in link_routes:
            original = policy.route_copy(route)
            rb.step("delete-route")
            _kernel(partial(pod_kernel.delete_route, original), "Failed to delete route")
            rb.push("delete-route", partial(pod_kernel.add_route, original))

    def delete(self, req: Request) -> None:
        keys = load_keys(req)
        if not req.netns:
            return
        try:
            pod = req.open_netns()
        except NetNSNotFound:
            return
        with pod, req.host.locked(pod), req.host.pod(pod) as pod_kernel:
            try:
                index = index_of(pod_kernel, req.ifname)
            except LinkNotFound:
                return  # the interface is gone, and its addresses with it
            mine = {a.ip for a in addresses(pod_kernel, index)}
            failed = []
            for rule in policy.rules(pod_kernel):
                if keys.table is not None and policy.table_of(rule) != keys.table:
                    continue
                src = policy.rule_source(rule)
                if src is not None and src in mine:
                    try:
                        policy.delete_rule(pod_kernel, rule)
                    except NetlinkError as exc:
                        failed.append(str(exc))
            if failed:
                raise InternalError(f"Failed to delete rule {failed[0]}")


def _rules_to(pod_kernel: Kernel, ipcs: list[IPConfig], table: int, rb: Rollback) -> None:
    """``from <address> lookup <table>`` for each address, nothing else (the fixed-table mode);
    each rule is undone if a later one fails."""
    for ipc in ipcs:
        before = policy.rules(pod_kernel)
        rb.step("rule")
        _kernel(
            partial(policy.add_source_rule, pod_kernel, ipc.address, table), "failed to add rule"
        )
        for rule in policy.rules(pod_kernel):
            if policy.table_of(rule) == table and rule not in before:
                rb.push("rule", partial(policy.delete_rule, pod_kernel, rule))


def _kernel(action: Callable[[], None], what: str) -> None:
    try:
        action()
    except (NetlinkError, ValueError) as exc:
        raise InternalError(f"{what}: {exc}") from None


PLUGIN = Sbr()
