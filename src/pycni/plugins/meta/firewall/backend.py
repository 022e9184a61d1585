"""What the firewall plugin needs from a backend (iptables, nftables): one set of verbs, picked
once per call from the config, and the names both backends share.

The plugin (``__init__.py``) parses the config and the prevResult into an ``Attachment`` and
calls the chosen backend; DEL also runs every backend that ``cleans_others`` (nftables: a pod
set up before the network's backend changed still goes), GC runs every usable backend.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from pycni.net.errors import NetfilterError
from pycni.record import record
from pycni.skel.rollback import Rollback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from pycni.net.netfilter.seam import Netfilter
    from pycni.plugins.meta.firewall.records import Records
else:
    Protocol = object  # typing is not imported at run time

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_ADMIN_CHAIN = "CNI-ADMIN"
ISOLATION_PREFIX = "CNI firewall plugin rules (ingressPolicy"
# pycni's nftables backend tags its isolation rules with this (v1.1.1's iptables comment)
ISOLATION_COMMENT = f"{ISOLATION_PREFIX}: same-bridge)"
POLICIES = ("open", "same-bridge", "isolated")


class FirewallError(NetfilterError, RuntimeError):
    """A firewall tool refused a change; the message is the tool's."""


@record(frozen=True)
class Attachment:
    """One pod attachment as the backends see it: its IPs per family (from prevResult, or the
    record a DEL without prevResult finds), the admin chain, the bridge to isolate ("" for
    ``open``) and the ingress policy."""

    network: str
    container_id: str
    ifname: str
    families: dict[int, list[IPAddress]]
    admin_chain: str = DEFAULT_ADMIN_CHAIN
    bridge: str = ""
    policy: str = "open"
    records: Records | None = None  # the network's records (req.host.state()), iptables' GC
    log: Callable[[str], None] = print
    addresses: tuple[IPAddress, ...] = ()  # every IP in prevResult's order (the record's)

    @property
    def ips(self) -> list[IPAddress]:
        return [ip for group in self.families.values() for ip in group]


class Backend(Protocol):
    name: str
    unavailable: str  # STATUS's message when the backend cannot be used here
    cleans_others: bool  # DEL runs it whatever backend the config names

    def usable(self, nf: Netfilter) -> bool:
        """Whether the backend's tools work on this node."""
        ...

    def check_admin_chain(self, admin: str) -> None:
        """Refuse (code 7) an ``iptablesAdminChainName`` this backend cannot use."""
        ...

    def add(self, nf: Netfilter, att: Attachment, rb: Rollback) -> None:
        """Allow the attachment's traffic, pushing onto ``rb`` what undoes each step.
        Raises FirewallError."""
        ...

    def delete(self, nf: Netfilter, att: Attachment) -> None:
        """Remove the attachment's rules or elements. Raises FirewallError."""
        ...

    def check(self, nf: Netfilter, att: Attachment) -> None:
        """Raise FirewallError when something of the attachment is missing."""
        ...

    def gc(
        self, nf: Netfilter, network: str, records: Records, valid: list[tuple[str, str]]
    ) -> None:
        """Remove the network's attachments not in ``valid``. Raises FirewallError."""
        ...
