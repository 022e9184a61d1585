"""What the reference plugin (v1.9.1) leaves that pycni's selected backend does not own.

A node moved from the Go plugins to pycni keeps its live pods, and with the same conflist
the two pick different layouts: without ``backend`` the reference writes its iptables
chains (``CNI-DN-<hash>``), pycni its nftables maps; with ``backend: nftables`` the
reference writes rules in ``table ip/ip6 cni_hostport`` (chains ``hostports``,
``hostip_hostports``, ``masquerading``), commented with the bare container ID. So DEL, CHECK
and GC look here too, after the selected backend:

- iptables: only when the nat table has ``CNI-HOSTPORT-DNAT`` (asked over nf_tables netlink
  for iptables-nft, ``/proc/thread-self/net/ip_tables_names`` for legacy), so a node that
  never ran iptables pays no ``iptables-save``;
- ``cni_hostport``: only when its ``hostports`` chain exists (one netlink request per
  family, then a dump per chain). The reference's rules there carry no network name, so,
  like the reference, DEL removes those of the container ID; GC cannot tell networks apart
  and leaves them (the reference has no GC).
"""

from __future__ import annotations

from pycni.net.netfilter import nft_records
from pycni.plugins.meta.portmap import iptables_backend
from pycni.plugins.meta.portmap.config import PortMapConfig
from pycni.spec.errors import InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.nft_seam import Nftables
    from pycni.net.netfilter.seam import Netfilter

REFERENCE_NFT_TABLE = "cni_hostport"
REFERENCE_NFT_CHAINS = ("hostports", "hostip_hostports", "masquerading")
_NFT_FAMILIES = ("ip", "ip6")
_DNAT_CHAIN = "CNI-HOSTPORT-DNAT"


def iptables_variants(nf: Netfilter, cfg: PortMapConfig) -> list[str | None]:
    """The iptables variants whose nat table holds the reference's scaffolding (asked without
    running iptables); the configured variant only, when the config names one."""
    if cfg.iptables_variant is not None:
        return [cfg.iptables_variant]
    found: list[str | None] = []
    try:
        if any(nf.nft.chain_exists(f, "nat", _DNAT_CHAIN) for f in _NFT_FAMILIES):
            found.append("nft")  # only iptables-nft (or pycni's backend) names a chain so
    except nft_records.NftnlError:
        pass
    if nf.iptables.legacy_nat():
        found.append("legacy")
    return found


def nft_rules(nft: Nftables, container_id: str) -> dict[str, list[tuple[str, int]]]:
    """The reference's ``cni_hostport`` rules commented with ``container_id``: per family,
    (chain, handle) pairs."""
    out: dict[str, list[tuple[str, int]]] = {}
    for family in _NFT_FAMILIES:
        # the reference makes ``hostports`` with its table: one cheap GET (a dump of a missing
        # chain costs 0.5 ms) tells whether the family has anything to look at
        if not nft.chain_exists(family, REFERENCE_NFT_TABLE, "hostports"):
            continue
        for chain in REFERENCE_NFT_CHAINS:
            for rule in nft.chain_rules(family, REFERENCE_NFT_TABLE, chain):
                if rule.comment == container_id:
                    out.setdefault(family, []).append((chain, rule.handle))
    return out


def _delete_nft(nft: Nftables, container_id: str) -> bool:
    removed = False
    for family, rules in nft_rules(nft, container_id).items():
        changes = [nft_records.Removal("rule", chain, handle) for chain, handle in rules]
        try:
            nft.change_elements(family, REFERENCE_NFT_TABLE, changes)
        except nft_records.NftnlError as exc:
            raise InternalError(
                f"portmap: nftables DEL of {REFERENCE_NFT_TABLE} failed: {exc}"
            ) from None
        removed = True
    return removed


def delete(nf: Netfilter, cfg: PortMapConfig, skip_iptables: bool) -> bool:
    """Remove the attachment's state in the reference's layouts; False when there was none."""
    removed = _delete_nft(nf.nft, cfg.container_id)
    if skip_iptables:
        return removed

    for variant in iptables_variants(nf, cfg):
        removed = (
            iptables_backend.delete(nf.iptables, cfg.network, cfg.container_id, variant) or removed
        )
    return removed


def check(nf: Netfilter, cfg: PortMapConfig) -> bool:
    """True when the attachment is complete in one of the reference's layouts (raises when it
    is there but incomplete); False when the reference holds nothing of it."""
    rules = nft_rules(nf.nft, cfg.container_id)
    if rules:
        for family, ip in ((f, cfg.container_ips.get(4 if f == "ip" else 6)) for f in rules):
            if ip is None:
                continue
            dnat = [c for c, _ in rules[family] if c != "masquerading"]
            want = len(cfg.mappings_for(4 if family == "ip" else 6))
            if len(dnat) < want:
                raise InternalError(
                    f'portmap: missing hostport rules in "{family} '
                    f'{REFERENCE_NFT_TABLE}" for {cfg.container_id}',
                )
        return True

    chain = iptables_backend.dnat_chain(cfg.network, cfg.container_id)
    for variant in iptables_variants(nf, cfg):
        if iptables_backend.has_chain(nf.iptables, chain, variant):
            iptables_backend.check(nf.iptables, cfg, variant)
            return True
    return False


def _nft_scaffold(nft: Nftables, family: str) -> str:
    """The reference's table and chains in ``family`` (fixed names only: nft text, since
    libnftables' JSON input drops the table's comment). The hook chains are written only
    when the table has none: the reference rebuilds them on its next ADD anyway."""
    t = f"{family} {REFERENCE_NFT_TABLE}"
    lines = [f'add table {t} {{ comment "CNI portmap plugin" ; }}']
    lines += [f"add chain {t} {c}" for c in ("hostports", "hostip_hostports", "hostports_all")]
    lines.append(f"add chain {t} masquerading {{ type nat hook postrouting priority 100 ; }}")
    if not nft.chain_exists(family, REFERENCE_NFT_TABLE, "prerouting"):
        lines += [
            f"flush chain {t} hostports_all",
            f"add rule {t} hostports_all jump hostip_hostports",
            f"add rule {t} hostports_all jump hostports",
        ]
        for hook, chain in (("prerouting", "prerouting"), ("output", "output")):
            lines.append(f"add chain {t} {chain} {{ type nat hook {hook} priority -100 ; }}")
            lines.append(f"add rule {t} {chain} fib daddr type local jump hostports_all")
    return "\n".join(lines) + "\n"


def _match(protocol: str, field: str, value: object) -> dict[str, object]:
    return {
        "match": {
            "op": "==",
            "left": {"payload": {"protocol": protocol, "field": field}},
            "right": value,
        }
    }


def _rule(
    family: str, chain: str, comment: str, expr: list[dict[str, object]]
) -> dict[str, object]:
    body = {"family": family, "table": REFERENCE_NFT_TABLE, "chain": chain, "comment": comment}
    return {"add": {"rule": {**body, "expr": expr}}}


def install_nft(nft: Nftables, cfg: PortMapConfig) -> None:
    """Write the attachment as the reference's nftables backend does: per family, a DNAT rule
    per mapping in ``hostports`` and, with snat, the hairpin (and IPv4 localhost) masquerade
    rules in ``masquerading``, each commented with the container ID (given as JSON: the ID
    is never nft text). Used by ``pycni migrate --to-reference``; conditions are refused
    before (the reference puts them in its shared hook chains)."""
    for version, family in ((4, "ip"), (6, "ip6")):
        cip = cfg.container_ips.get(version)
        if cip is None:
            continue
        nft.apply(_nft_scaffold(nft, family))
        cid = cfg.container_id
        rules: list[dict[str, object]] = []
        for m in cfg.mappings_for(version):
            expr = []
            host = m.host_match(version)
            if host is not None:
                expr.append(_match(family, "daddr", str(host)))
            expr.append(_match(m.protocol, "dport", m.host_port))
            expr.append({"dnat": {"family": family, "addr": str(cip.ip), "port": m.container_port}})
            rules.append(_rule(family, "hostports", cid, expr))
        if cfg.snat:
            sources = [str(cip.ip)] + (["127.0.0.1"] if version == 4 else [])
            for source in sources:
                expr = [_match(family, "saddr", source), _match(family, "daddr", str(cip.ip))]
                rules.append(_rule(family, "masquerading", cid, [*expr, {"masquerade": None}]))
        nft.apply_json(rules)


def gc(nf: Netfilter, cfg: PortMapConfig, valid_ids: set[str], skip_iptables: bool) -> list[str]:
    """Remove the reference's iptables chains of this network's attachments not in
    ``valid_ids``."""
    if skip_iptables:
        return []

    removed: list[str] = []
    for variant in iptables_variants(nf, cfg):
        removed += iptables_backend.gc(nf.iptables, cfg.network, valid_ids, variant)
    return removed
