"""macvlan links: modes, the node's default-route interface, creation straight into a pod.

The link is created with a temporary name directly in the pod namespace (``net_ns_fd``) and
renamed there afterwards: creating it under its final name could clash with a node link of
that name (the kernel checks the name in the namespace of creation).
"""

from __future__ import annotations

from typing import Any

from pycni.net.veth import random_host_name

# IFLA_MACVLAN_MODE values, by the names the CNI config uses ("" means bridge).
MODES: dict[str, int] = {"private": 1, "vepa": 2, "bridge": 4, "passthru": 8}
_NAMES = {v: k for k, v in MODES.items()}


class NoDefaultRoute(LookupError):
    """No route with a zero destination exists in this namespace."""


def parse_mode(text: str) -> str:
    """The canonical mode name; raises ValueError for an unknown one."""
    name = text or "bridge"
    if name not in MODES:
        raise ValueError(f"unknown macvlan mode: {text!r}")
    return name


def mode_of(msg: Any) -> str:
    """The mode of an existing macvlan link message ("" when it is not a macvlan)."""
    info = msg.get_attr("IFLA_LINKINFO")
    if info is None or info.get_attr("IFLA_INFO_KIND") != "macvlan":
        return ""
    data = info.get_attr("IFLA_INFO_DATA")
    raw = data.get_attr("IFLA_MACVLAN_MODE") if data is not None else None
    if isinstance(raw, str):
        return raw
    return _NAMES.get(int(raw or 0), str(raw))


def default_route_interface(ipr: Any) -> str:
    """The link of the first route without a destination (any family), as the reference."""
    for family in (2, 10):
        for msg in ipr.get_routes(family=family, table=254):
            if msg["dst_len"] == 0 and msg.get_attr("RTA_OIF"):
                link = ipr.get_links(int(msg.get_attr("RTA_OIF")))[0]
                return str(link.get_attr("IFLA_IFNAME"))
            multipath = msg.get_attr("RTA_MULTIPATH")
            if msg["dst_len"] == 0 and multipath:
                link = ipr.get_links(int(multipath[0]["oif"]))[0]
                return str(link.get_attr("IFLA_IFNAME"))
    raise NoDefaultRoute("no default route interface found")


def create_in_netns(
    ipr: Any,
    master_index: int,
    target_ns_fd: int,
    mode: str,
    mtu: int = 0,
    mac: str = "",
) -> str:
    """Create a macvlan of ``master_index`` under a temporary name in ``target_ns_fd``.

    ``ipr`` is a socket of the master's namespace. Returns the temporary name.
    """
    for _ in range(10):
        tmp = random_host_name()
        spec: dict[str, Any] = {
            "ifname": tmp,
            "kind": "macvlan",
            "link": master_index,
            "macvlan_mode": mode,
            "net_ns_fd": target_ns_fd,
        }
        if mtu:
            spec["mtu"] = mtu
        if mac:
            spec["address"] = mac
        try:
            ipr.link("add", **spec)
        except Exception as exc:
            if getattr(exc, "code", None) == 17:  # EEXIST: the random name was taken
                continue
            raise
        return tmp
    raise RuntimeError("failed to find a free temporary link name")
