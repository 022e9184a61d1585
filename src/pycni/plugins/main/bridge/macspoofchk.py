"""MAC spoof check for a bridge port (``macspoofchk``): nftables rules in the bridge family
that drop frames from the port whose source MAC is not the pod's. Same table, chains and
comments as the reference (pkg/link), so either implementation can remove the other's. Each
call takes the node's nftables (``req.host.netfilter(kernel).nft``)."""

from __future__ import annotations

from pycni.net.netfilter.nft_records import NftError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.nft_seam import Nftables

TABLE = "bridge nat"
BASE_CHAIN = "PREROUTING"
COMMENT_PREFIX = "macspoofchk-"


def ref_id(container_id: str, ifname: str) -> str:
    return f"{container_id}-{ifname}"


def iface_chain(ref: str) -> str:
    return f"cni-br-iface-{ref}"


def setup_script(host_ifname: str, mac: str, ref: str) -> str:
    """Declare table and chains, then flush our chains and add the rules: one transaction.
    ``host_ifname`` and ``mac`` come from the kernel (the veth made, the pod link's address),
    ``ref`` is checked by the bridge plugin (container ID and ifname)."""
    ic = iface_chain(ref)
    mc = ic + "-mac"
    comment = COMMENT_PREFIX + ref
    return f"""add table {TABLE}
add chain {TABLE} {BASE_CHAIN} {{ type filter hook prerouting priority -300 ; policy accept ; }}
add chain {TABLE} {ic}
add chain {TABLE} {mc}
flush chain {TABLE} {ic}
flush chain {TABLE} {mc}
add rule {TABLE} {BASE_CHAIN} iifname "{host_ifname}" jump {ic} comment "{comment}"
add rule {TABLE} {ic} jump {mc} comment "{comment}"
add rule {TABLE} {mc} ether saddr {mac} return comment "{comment}"
add rule {TABLE} {mc} drop comment "{comment}"
"""


def setup(nft: Nftables, host_ifname: str, mac: str, ref: str) -> None:
    nft.apply(setup_script(host_ifname, mac, ref))


def teardown(nft: Nftables, ref: str) -> None:
    """Remove the base-chain jump (found by comment and target) and both chains; missing
    pieces are fine, so this is idempotent."""
    ic = iface_chain(ref)
    comment = COMMENT_PREFIX + ref
    try:
        items = nft.query(f"list chain {TABLE} {BASE_CHAIN}")
    except NftError:
        return  # no table: nothing of ours can exist
    lines = []
    for item in items:
        rule = item.get("rule")
        if rule and rule.get("comment") == comment and _jumps_to(rule, ic):
            lines.append(f"delete rule {TABLE} {BASE_CHAIN} handle {int(rule['handle'])}")
    present = [c for c in (ic, ic + "-mac") if _chain_exists(nft, c)]
    lines += [f"flush chain {TABLE} {c}" for c in present]
    lines += [f"delete chain {TABLE} {c}" for c in present]
    if lines:
        nft.apply("\n".join(lines) + "\n")


def exists(nft: Nftables, ref: str) -> bool:
    return _chain_exists(nft, iface_chain(ref))


def _chain_exists(nft: Nftables, chain: str) -> bool:
    try:
        nft.query(f"list chain {TABLE} {chain}")
    except NftError:
        return False
    return True


def _jumps_to(rule: dict[str, object], chain: str) -> bool:
    for stmt in rule.get("expr", []) or []:  # type: ignore[attr-defined]
        if isinstance(stmt, dict) and stmt.get("jump", {}).get("target") == chain:
            return True
    return False
