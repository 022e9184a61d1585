"""Masquerading of pod traffic leaving its subnet (bridge/ptp ``ipMasq``).

Two backends with exactly the reference's names, so pods set up by the Go plugins and by
pycni coexist and either can tear down what the other made:

* nftables (our default, in-process via libnftables, one transaction per call): table
  ``inet cni_plugins_masquerade``, regular chain ``masq_checks`` holding one rule per pod IP
  commented ``<hash(network)>-<hash(ifname:containerID)>, net: …, if: …, id: …``, and the
  base chain ``postrouting`` (nat, srcnat) that skips multicast and jumps there.
* iptables (``ipMasqBackend: "iptables"``): chain ``CNI-<hash>`` in ``nat`` per
  (network, containerID), reached from POSTROUTING by ``-s <ip>``. It runs the iptables
  binaries, so it is slower; it exists for compatibility.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterable, Sequence

from pycni.net import nft, tools
from pycni.net.nft import NftError
from pycni.spec.result import IPInterface

TABLE = "cni_plugins_masquerade"
CHAIN = "masq_checks"
TABLE_COMMENT = "Masquerading for plugins from github.com/containernetworking/plugins"
CHAIN_COMMENT = "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"
COMMENT_MAX = 128
BACKENDS = ("nftables", "iptables")
DEFAULT_BACKEND = "nftables"


class IPMasqError(Exception):
    pass


def hash_hex(length: int, prefix: str, text: str) -> str:
    """pkg/utils' MustFormatHashWithPrefix: prefix + sha512 hex, cut to ``length``."""
    if len(prefix) >= length or length > 128:
        raise ValueError("invalid hash length")
    return (prefix + hashlib.sha512(text.encode()).hexdigest())[:length]


def hash_for_network(network: str) -> str:
    return hash_hex(16, "", network)


def hash_for_instance(network: str, ifname: str, container_id: str) -> str:
    return hash_for_network(network) + "-" + hash_hex(16, "", f"{ifname}:{container_id}")


def comment_for_instance(network: str, ifname: str, container_id: str) -> str:
    def clean(s: str) -> str:
        return s.replace('"', "")

    text = (
        f"{hash_for_instance(network, ifname, container_id)}, net: {clean(network)}, "
        f"if: {clean(ifname)}, id: {clean(container_id)}"
    )
    return text[:COMMENT_MAX]


def chain_name(network: str, container_id: str) -> str:
    """pkg/utils' FormatChainName: ``CNI-`` + 24 hex of sha512(network+containerID)."""
    return hash_hex(28, "CNI-", network + container_id)


def iptables_comment(network: str, container_id: str) -> str:
    """pkg/utils' FormatComment: ``name: "<net>" id: "<id>"`` (Go %q quoting)."""
    return f"name: {json.dumps(network)} id: {json.dumps(container_id)}"


# --- nftables ---------------------------------------------------------------------------


def _rules_with_prefix(prefix: str) -> list[tuple[int, str]]:
    """(handle, comment) of the masq_checks rules whose comment starts with ``prefix``."""
    try:
        items = nft.query(f"list chain inet {TABLE} {CHAIN}")
    except NftError:
        return []  # no table or chain yet
    out = []
    for item in items:
        rule = item.get("rule")
        if not rule:
            continue
        comment = str(rule.get("comment", ""))
        if comment.startswith(prefix):
            out.append((int(rule["handle"]), comment))
    return out


def nft_setup_script(
    ipns: Sequence[IPInterface], network: str, ifname: str, container_id: str, stale: Iterable[int]
) -> str:
    t = f"inet {TABLE}"
    comment = comment_for_instance(network, ifname, container_id)
    lines = [
        f'add table {t} {{ comment "{TABLE_COMMENT}" ; }}',
        f'add chain {t} {CHAIN} {{ comment "{CHAIN_COMMENT}" ; }}',
        f"add chain {t} postrouting {{ type nat hook postrouting priority 100 ; }}",
        f"flush chain {t} postrouting",
        f"add rule {t} postrouting ip daddr == 224.0.0.0/4  return",
        f"add rule {t} postrouting ip6 daddr == ff00::/8  return",
        f"add rule {t} postrouting goto {CHAIN}",
    ]
    lines += [f"delete rule {t} {CHAIN} handle {h}" for h in stale]
    for ipn in ipns:
        fam = "ip" if ipn.version == 4 else "ip6"
        lines.append(
            f"add rule {t} {CHAIN} {fam} saddr == {ipn.ip} {fam} daddr != {ipn.network} "
            f'masquerade comment "{comment}"'
        )
    return "\n".join(lines) + "\n"


def setup_nftables(ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
    stale = [h for h, _ in _rules_with_prefix(hash_for_instance(network, ifname, cid))]
    nft.apply(nft_setup_script(ipns, network, ifname, cid, stale))


def teardown_nftables(network: str, ifname: str, cid: str) -> None:
    """Delete this attachment's rules (matched on the comment, so no IPs are needed)."""
    handles = [h for h, _ in _rules_with_prefix(hash_for_instance(network, ifname, cid))]
    if handles:
        nft.apply("".join(f"delete rule inet {TABLE} {CHAIN} handle {h}\n" for h in handles))


def gc_nftables(network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Delete this network's rules whose attachment is not in ``valid`` (containerID, ifname).

    Returns how many rules were removed.
    """
    keep = {comment_for_instance(network, ifname, cid) for cid, ifname in valid}
    doomed = [h for h, c in _rules_with_prefix(hash_for_network(network)) if c not in keep]
    if doomed:
        nft.apply("".join(f"delete rule inet {TABLE} {CHAIN} handle {h}\n" for h in doomed))
    return len(doomed)


# --- iptables ---------------------------------------------------------------------------


def _ipt(version: int, *args: str) -> subprocess.CompletedProcess[str]:
    binary = "iptables" if version == 4 else "ip6tables"
    path = tools.which(binary)
    if path is None:
        raise IPMasqError(f"failed to locate iptables: {binary} not found")
    return subprocess.run(
        [path, "-w", "-t", "nat", *args], capture_output=True, text=True, check=False
    )


def _append_unique(version: int, chain: str, *rule: str) -> None:
    if _ipt(version, "-C", chain, *rule).returncode == 0:
        return
    proc = _ipt(version, "-A", chain, *rule)
    if proc.returncode != 0:
        raise IPMasqError(proc.stderr.strip())


def setup_iptables(ipns: Sequence[IPInterface], network: str, cid: str) -> None:
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


def teardown_iptables(ipns: Sequence[IPInterface], network: str, cid: str) -> None:
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


def iptables_nft_chain_exists(version: int, chain: str) -> bool:
    """Whether iptables-nft holds ``chain`` in its nat table (checked in-process)."""
    family = "ip" if version == 4 else "ip6"
    try:
        nft.query(f"list chain {family} nat {chain}")
    except NftError:
        return False
    return True


# --- the two together -------------------------------------------------------------------


def setup(backend: str, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str) -> None:
    if backend == "nftables":
        setup_nftables(ipns, network, ifname, cid)
    elif backend == "iptables":
        setup_iptables(ipns, network, cid)
    else:
        raise IPMasqError(f'unknown ipmasq backend "{backend}"')


def teardown(
    backend: str, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
) -> list[str]:
    """Remove the attachment's rules from nftables always, and from iptables when that is the
    configured backend or its chain exists in iptables-nft. Returns the errors (not raised)."""
    errors: list[str] = []
    try:
        teardown_nftables(network, ifname, cid)
    except (NftError, OSError) as exc:
        if nft.available():
            errors.append(str(exc))
    chain = chain_name(network, cid)
    families = {ipn.version for ipn in ipns}
    want_ipt = backend == "iptables" or any(iptables_nft_chain_exists(v, chain) for v in (4, 6))
    if want_ipt:
        targets = list(ipns)
        if not targets:
            # no IPs known (link already gone): still remove the chain itself
            for v in (4, 6):
                if v not in families and iptables_nft_chain_exists(v, chain):
                    _ipt(v, "-F", chain)
                    _ipt(v, "-X", chain)
        try:
            teardown_iptables(targets, network, cid)
        except IPMasqError as exc:
            errors.append(str(exc))
    return errors
