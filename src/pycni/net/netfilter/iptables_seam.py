"""iptables and conntrack as a plugin is handed them (pycni.net.netfilter.seam): save/restore of
one namespace's tables and deletes from its conntrack table, as Protocols and the real
transports (pycni.net.netfilter.iptables and .conntrack, on the calling thread's namespace)."""

from __future__ import annotations

from pycni.net.netfilter import conntrack

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from pycni.net.netfilter.iptables_script import SavedTable
else:
    Protocol = object  # typing is not imported at run time


class Iptables(Protocol):
    """One namespace's iptables (``family`` 4 or 6; ``variant`` legacy, nft or None for the
    system's alternative); failures are IptablesError (pycni.net.netfilter.iptables_script).
    Plugins read a table with ``save`` and write their whole change with one ``restore``;
    ipMasq's iptables backend runs the reference's one ``iptables`` per rule (``command``)."""

    def available(self, family: int = 4, variant: str | None = None) -> bool: ...

    def save(self, table: str, family: int = 4, variant: str | None = None) -> SavedTable: ...

    def restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        """One atomic ``iptables-restore --noflush`` of ``script``."""
        ...

    def command(self, args: Sequence[str], family: int = 4) -> tuple[int, str]:
        """One ``iptables -w <args>`` of the system's variant: (exit status, stderr)."""
        ...

    def nft_chain_exists(self, table: str, chain: str, family: int = 4) -> bool:
        """Whether iptables-nft holds ``chain`` in ``table`` (asked without a process)."""
        ...

    def legacy_nat(self) -> bool:
        """Whether iptables-legacy has a nat table here, either family (asked without a
        process: the kernel lists the namespace's legacy tables in /proc)."""
        ...


class Conntrack(Protocol):
    """One namespace's conntrack table; each method returns how many entries it deleted."""

    def delete_by_address(self, address: bytes, protocol: str) -> int: ...

    def delete_by_dst_port(self, ports: list[int], protocol: str, family: int) -> int: ...


class ThreadIptables:
    """The calling thread's namespace, through pycni.net.netfilter.iptables, imported by the
    first call: it imports subprocess, and an nftables-only plugin call is handed this too."""

    __slots__ = ()

    def available(self, family: int = 4, variant: str | None = None) -> bool:
        from pycni.net.netfilter import iptables

        return iptables.available(family, variant)

    def save(self, table: str, family: int = 4, variant: str | None = None) -> SavedTable:
        from pycni.net.netfilter import iptables

        return iptables.save(table, family, variant)

    def restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        from pycni.net.netfilter import iptables

        iptables.restore(script, family, variant)

    def command(self, args: Sequence[str], family: int = 4) -> tuple[int, str]:
        from pycni.net.netfilter import iptables

        return iptables.command(args, family)

    def nft_chain_exists(self, table: str, chain: str, family: int = 4) -> bool:
        # one nf_tables netlink get (iptables.nft_chain_exists), without importing the iptables
        # tools' module and its subprocess: an nftables-only DEL asks this too
        from pycni.net.netfilter import nftnl

        try:
            return nftnl.chain_exists("ip" if family == 4 else "ip6", table, chain)
        except OSError:  # no nf_tables here: then no iptables-nft chain either
            return False

    def legacy_nat(self) -> bool:
        for name in ("ip_tables_names", "ip6_tables_names"):
            try:
                with open(f"/proc/thread-self/net/{name}") as f:
                    if "nat" in f.read().split():
                        return True
            except OSError:  # no legacy iptables in this kernel (or this family)
                continue
        return False


class ThreadConntrack:
    """The calling thread's namespace, through pycni.net.netfilter.conntrack."""

    __slots__ = ()

    def delete_by_address(self, address: bytes, protocol: str) -> int:
        return conntrack.delete_by_address(address, protocol)

    def delete_by_dst_port(self, ports: list[int], protocol: str, family: int) -> int:
        return conntrack.delete_by_dst_port(ports, protocol, family)


THREAD_IPTABLES = ThreadIptables()
THREAD_CONNTRACK = ThreadConntrack()

if TYPE_CHECKING:
    _i: type[Iptables] = ThreadIptables  # mypy proves each satisfies its Protocol
    _c: type[Conntrack] = ThreadConntrack
