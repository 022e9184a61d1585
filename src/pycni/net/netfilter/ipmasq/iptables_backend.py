"""Masquerading with iptables (``ipMasqBackend: "iptables"``): the reference's chain
``CNI-<hash(network + containerID)>`` in ``nat``, reached from POSTROUTING by ``-s <ip>``,
accepting the pod's own subnet and masquerading everything else but multicast. Every rule
carries the reference's comment, so either implementation removes the other's. It runs the
iptables binaries once per rule, as the reference does, so it is slower; it exists for
compatibility."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pycni.net.netfilter import iptables_script
from pycni.net.netfilter.ipmasq import IPMasqError, chain_name, iptables_comment
from pycni.spec.result import IPInterface

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_script import SavedTable
    from pycni.net.netfilter.iptables_seam import Iptables
    from pycni.net.netfilter.seam import Netfilter


def _ipt(ipt: Iptables, version: int, *args: str) -> tuple[int, str]:
    """One ``iptables -w -t nat <args>``: (exit status, stderr)."""
    try:
        return ipt.command(["-t", "nat", *args], version)
    except iptables_script.IptablesError as exc:
        raise IPMasqError(f"failed to locate iptables: {exc}") from None


def _append_unique(ipt: Iptables, version: int, chain: str, *rule: str) -> None:
    if _ipt(ipt, version, "-C", chain, *rule)[0] == 0:
        return
    status, stderr = _ipt(ipt, version, "-A", chain, *rule)
    if status != 0:
        raise IPMasqError(stderr)


def setup(ipt: Iptables, ipns: Sequence[IPInterface], network: str, cid: str) -> None:
    chain = chain_name(network, cid)
    comment = iptables_comment(network, cid)
    for ipn in ipns:
        v = ipn.version
        multicast = "224.0.0.0/4" if v == 4 else "ff00::/8"
        if _ipt(ipt, v, "-S", chain)[0] != 0:
            status, stderr = _ipt(ipt, v, "-N", chain)
            if status not in (0, 1):
                raise IPMasqError(stderr)
        _append_unique(
            ipt, v, chain, "-d", str(ipn), "-j", "ACCEPT", "-m", "comment", "--comment", comment
        )
        _append_unique(
            ipt,
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
            ipt,
            v,
            "POSTROUTING",
            "-s",
            str(ipn.ip),
            "-j",
            chain,
            "-m",
            "comment",
            "--comment",
            comment,
        )


def teardown(ipt: Iptables, ipns: Sequence[IPInterface], network: str, cid: str) -> None:
    chain = chain_name(network, cid)
    comment = iptables_comment(network, cid)
    for ipn in ipns:
        v = ipn.version
        for src in (str(ipn.ip), str(ipn)):
            _ipt(
                ipt,
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
        _ipt(ipt, v, "-F", chain)
        _ipt(ipt, v, "-X", chain)


def chain_exists(ipt: Iptables, version: int, chain: str) -> bool:
    """Whether iptables-nft holds ``chain`` in its nat table (one netlink get: a libnftables
    ``list`` would load every set element of the namespace first)."""
    return ipt.nft_chain_exists("nat", chain, version)


class IptablesMasq:
    """The reference's ``CNI-<hash>`` chain per (network, containerID) in ``nat``."""

    name = "iptables"

    def setup(
        self, nf: Netfilter, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
    ) -> None:
        setup(nf.iptables, ipns, network, cid)

    def teardown(
        self, nf: Netfilter, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
    ) -> None:
        if not ipns:
            # no IPs known (the namespace is gone): the POSTROUTING jumps are found by their
            # target, so the chain can go too (the reference leaves both behind then)
            chain = chain_name(network, cid)
            for v in (4, 6):
                if chain_exists(nf.iptables, v, chain):
                    _remove_chains(nf.iptables, v, [chain])
        teardown(nf.iptables, ipns, network, cid)

    def may_hold(self, nf: Netfilter, network: str, cid: str) -> bool:
        chain = chain_name(network, cid)
        return any(chain_exists(nf.iptables, v, chain) for v in (4, 6))

    def gc(self, nf: Netfilter, network: str, valid: Iterable[tuple[str, str]]) -> int:
        """Remove the chains of this network's attachments not in ``valid``: their
        POSTROUTING jumps carry the reference's comment, naming network and container ID
        (the reference's own GC leaves iptables alone)."""
        keep = {cid for cid, _ifname in valid}
        marker = f'--comment "name: \\"{network}\\" id: \\"'
        removed = 0
        for v in (4, 6):
            if not chain_exists(nf.iptables, v, "POSTROUTING"):
                continue
            saved = _save(nf.iptables, v)
            if saved is None:
                continue
            stale: list[str] = []
            for rule in saved.rules_of("POSTROUTING"):
                at = rule.find(marker)
                if at < 0:
                    continue
                cid = rule[at + len(marker) :].split('\\"', 1)[0]
                chain = chain_name(network, cid)
                if cid not in keep and rule.endswith(f" -j {chain}") and chain not in stale:
                    stale.append(chain)
            if stale:
                _remove_chains(nf.iptables, v, stale, saved)
                removed += len(stale)
        return removed


def _save(ipt: Iptables, version: int) -> SavedTable | None:
    try:
        return ipt.save("nat", version)
    except iptables_script.IptablesError:
        return None


def _remove_chains(
    ipt: Iptables, version: int, chains: list[str], saved: SavedTable | None = None
) -> None:
    """Remove ``chains`` and every POSTROUTING jump to them, in one restore."""
    saved = saved or _save(ipt, version)
    if saved is None:
        return
    lines: list[str] = []
    for chain in chains:
        if chain not in saved.chains:
            continue
        lines += [iptables_script.delete_line(r) for r in saved.jumps_to("POSTROUTING", chain)]
        lines += [f"-F {chain}", f"-X {chain}"]
    if not lines:
        return
    try:
        ipt.restore(iptables_script.script("nat", [], lines), version)
    except iptables_script.IptablesError as exc:
        raise IPMasqError(f"iptables: removing {', '.join(chains)} failed: {exc}") from None


BACKEND = IptablesMasq()
