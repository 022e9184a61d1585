"""Masquerading with iptables (``ipMasqBackend: "iptables"``): the reference's chain
``CNI-<hash(network + containerID)>`` in ``nat``, reached from POSTROUTING by ``-s <ip>``,
accepting the pod's own subnet and masquerading everything else but multicast. Every rule
carries the reference's comment, so either implementation removes the other's. It runs the
iptables binaries once per rule, as the reference does, so it is slower; it exists for
compatibility."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pycni.net import tools
from pycni.net.netfilter.ipmasq import IPMasqError, chain_name, iptables_comment
from pycni.spec.result import IPInterface

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess

__all__: list[str] = []


def _ipt(version: int, *args: str) -> subprocess.CompletedProcess[str]:
    binary = "iptables" if version == 4 else "ip6tables"
    path = tools.which(binary)
    if path is None:
        raise IPMasqError(f"failed to locate iptables: {binary} not found")
    import subprocess  # iptables only: the nftables backend never runs a command here

    return subprocess.run(
        [path, "-w", "-t", "nat", *args], capture_output=True, text=True, check=False
    )


def _append_unique(version: int, chain: str, *rule: str) -> None:
    if _ipt(version, "-C", chain, *rule).returncode == 0:
        return
    proc = _ipt(version, "-A", chain, *rule)
    if proc.returncode != 0:
        raise IPMasqError(proc.stderr.strip())


def setup(ipns: Sequence[IPInterface], network: str, cid: str) -> None:
    chain = chain_name(network, cid)
    comment = iptables_comment(network, cid)
    for ipn in ipns:
        v = ipn.version
        multicast = "224.0.0.0/4" if v == 4 else "ff00::/8"
        if _ipt(v, "-S", chain).returncode != 0:
            proc = _ipt(v, "-N", chain)
            if proc.returncode not in (0, 1):
                raise IPMasqError(proc.stderr.strip())
        _append_unique(
            v, chain, "-d", str(ipn), "-j", "ACCEPT", "-m", "comment", "--comment", comment
        )
        _append_unique(
            v,
            chain,
            "!",
            "-d",
            multicast,
            "-j",
            "MASQUERADE",
            "-m",
            "comment",
            "--comment",
            comment,
        )
        _append_unique(
            v, "POSTROUTING", "-s", str(ipn.ip), "-j", chain, "-m", "comment", "--comment", comment
        )


def teardown(ipns: Sequence[IPInterface], network: str, cid: str) -> None:
    chain = chain_name(network, cid)
    comment = iptables_comment(network, cid)
    for ipn in ipns:
        v = ipn.version
        for src in (str(ipn.ip), str(ipn)):
            _ipt(
                v,
                "-D",
                "POSTROUTING",
                "-s",
                src,
                "-j",
                chain,
                "-m",
                "comment",
                "--comment",
                comment,
            )
        _ipt(v, "-F", chain)
        _ipt(v, "-X", chain)


def chain_exists(version: int, chain: str) -> bool:
    """Whether iptables-nft holds ``chain`` in its nat table (one netlink get: a libnftables
    ``list`` would load every set element of the namespace first)."""
    from pycni.net.netfilter import nftnl

    family = "ip" if version == 4 else "ip6"
    try:
        return nftnl.chain_exists(family, "nat", chain)
    except OSError:  # no nf_tables here: then no iptables-nft chain either
        return False


class Iptables:
    """The reference's ``CNI-<hash>`` chain per (network, containerID) in ``nat``."""

    name = "iptables"

    def setup(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        setup(ipns, network, cid)

    def teardown(self, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
        if not ipns:
            # no IPs known (link already gone): still remove the chain itself
            chain = chain_name(network, cid)
            for v in (4, 6):
                if chain_exists(v, chain):
                    _ipt(v, "-F", chain)
                    _ipt(v, "-X", chain)
        teardown(ipns, network, cid)

    def may_hold(self, network: str, cid: str) -> bool:
        chain = chain_name(network, cid)
        return any(chain_exists(v, chain) for v in (4, 6))

    def gc(self, network: str, valid: Iterable[tuple[str, str]]) -> int:
        return 0  # as the reference: GC covers the nftables layout only


BACKEND = Iptables()
