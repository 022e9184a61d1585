"""Links: lookup by name, up/down, and the addresses on them."""

from __future__ import annotations

import ipaddress
from typing import Any

from pycni.net import addrdump
from pycni.net.netlink import rtnl

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


class LinkNotFound(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f'Link not found: "{name}"')
        self.name = name


def index_of(ipr: Any, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise LinkNotFound(name)
    return int(found[0])


def set_state(name: str, up: bool) -> int:
    """Set a link up or down in the current namespace; returns its index."""
    with rtnl() as ipr:
        idx = index_of(ipr, name)
        ipr.link("set", index=idx, state="up" if up else "down")
        return idx


def flags_of(name: str) -> int:
    with rtnl() as ipr:
        idx = index_of(ipr, name)
        return int(ipr.get_links(idx)[0]["flags"])


def addresses(ipr: Any, index: int) -> list[IPInterface]:
    """Every address on the link, IPv4 first, as the kernel reports them.

    When ``ipr`` belongs to the thread's current namespace (the usual case) this is one
    kernel-filtered dump (see net/addrdump.py for why not pyroute2's); otherwise pyroute2's."""
    if addrdump.socket_in_current_netns(ipr.fileno()):
        return addrdump.addresses(index)
    out: list[IPInterface] = []
    for msg in ipr.get_addr(index=index):
        addr = msg.get_attr("IFA_ADDRESS") or msg.get_attr("IFA_LOCAL")
        if addr:
            out.append(ipaddress.ip_interface(f"{addr}/{msg['prefixlen']}"))
    out.sort(key=lambda a: a.version)
    return out


# --- used by the interface plugins (bridge, …) ------------------------------------------------

IFF_UP = 0x1
IFF_PROMISC = 0x100

# The bridge port-up wait: the reference looks after 0, 50, 500, 1000 and 1000 ms. A veth port is
# usually up within a few milliseconds, so we look every 2 ms for the first 50 ms instead of
# sleeping 50 ms at once, then follow the reference's schedule (same total wait, ~2.55 s).
PORT_UP_SCHEDULE = (0.0,) + (0.002,) * 25 + (0.5, 1.0, 1.0)


def get(ipr: Any, name: str) -> Any:
    """The RTM_NEWLINK message of ``name`` in the socket's namespace."""
    return ipr.get_links(index_of(ipr, name))[0]


def get_by_index(ipr: Any, index: int) -> Any | None:
    try:
        return ipr.get_links(index)[0]
    except Exception as exc:
        if _errno(exc) in (19, 2):  # ENODEV, ENOENT
            return None
        raise


def kind_of(msg: Any) -> str:
    """The link's kind (``bridge``, ``veth``, …); ``""`` for a physical or loopback link."""
    info = msg.get_attr("IFLA_LINKINFO")
    if info is None:
        return ""
    return str(info.get_attr("IFLA_INFO_KIND") or "")


def name_of(msg: Any) -> str:
    return str(msg.get_attr("IFLA_IFNAME"))


def mac_of(msg: Any) -> str:
    return str(msg.get_attr("IFLA_ADDRESS") or "")


def mtu_of(msg: Any) -> int:
    return int(msg.get_attr("IFLA_MTU") or 0)


def master_of(msg: Any) -> int:
    return int(msg.get_attr("IFLA_MASTER") or 0)


def peer_index_of(msg: Any) -> int:
    """For a veth: the index of its peer (in the peer's namespace)."""
    return int(msg.get_attr("IFLA_LINK") or 0)


def oper_state_of(msg: Any) -> str:
    return str(msg.get_attr("IFLA_OPERSTATE") or "unknown").lower()


def delete_by_name(ipr: Any, name: str) -> list[IPInterface]:
    """Delete a link and return its global unicast addresses (pkg/ip's DelLinkByNameAddr).

    Raises LinkNotFound when there is no such link.
    """
    idx = index_of(ipr, name)
    found = [a for a in addresses(ipr, idx) if is_global_unicast(a.ip)]
    try:
        ipr.link("del", index=idx)
    except Exception as exc:
        if _errno(exc) not in (19, 2):
            raise
    return found


def is_global_unicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's IP.IsGlobalUnicast: private ranges count, link-local/loopback/multicast do not."""
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local:
        return False
    return not (ip.version == 4 and ip == ipaddress.IPv4Address("255.255.255.255"))


def wait_oper_up(
    ipr: Any, index: int, schedule: tuple[float, ...] = PORT_UP_SCHEDULE
) -> tuple[bool, str]:
    """Look at the link's operational state after each delay in ``schedule``.

    Returns (True, "up") as soon as it is up, else (False, last state seen).
    """
    import time

    state = "unknown"
    for delay in schedule:
        if delay:
            time.sleep(delay)
        msg = get_by_index(ipr, index)
        if msg is None:
            return False, "notpresent"
        state = oper_state_of(msg)
        if state == "up":
            return True, state
    return False, state


def _errno(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None
