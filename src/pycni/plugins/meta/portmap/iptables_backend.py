"""The iptables backend: the reference plugin's chains and rules, written in one restore.

Chains (table ``nat``), as the reference creates them so either plugin can delete what the
other made:

- ``CNI-HOSTPORT-DNAT``, entered from PREROUTING and OUTPUT with ``-m addrtype --dst-type
  LOCAL``; per attachment it holds entry rules (per protocol, at most 15 ports each, comment
  ``dnat name: "<net>" id: "<cid>"``) jumping to
- ``CNI-DN-<hash>`` (sha512 of network name + container ID): per mapping, mark rules for
  hairpin and localhost sources first, then the DNAT rule;
- ``CNI-HOSTPORT-SETMARK`` (set the masquerade mark) and ``CNI-HOSTPORT-MASQ`` (masquerade
  marked packets, entered at POSTROUTING position 1). Top-level chains are never deleted.

Each ADD/DEL reads the table with one ``iptables-save`` and applies all changes with one
``iptables-restore --noflush`` per family, instead of one process per rule. Rules are
written in iptables-save's canonical form so CHECK can compare them textually.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from pycni.net.netfilter import iptables_script, rule_matches, rule_tokens
from pycni.net.netfilter.chain_names import format_comment, must_format_chain_name_with_prefix
from pycni.net.netfilter.iptables_script import IptablesError, SavedTable
from pycni.plugins.meta.portmap.config import IPTABLES, IPInterface, PortMapConfig, PortMapping
from pycni.spec.errors import CNIError, InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_seam import Iptables
    from pycni.net.netfilter.seam import Netfilter

TABLE = "nat"
DNAT_CHAIN = "CNI-HOSTPORT-DNAT"
SETMARK_CHAIN = "CNI-HOSTPORT-SETMARK"
MASQ_CHAIN = "CNI-HOSTPORT-MASQ"
LEGACY_SNAT_CHAIN = "CNI-HOSTPORT-SNAT"
SETMARK_COMMENT = "CNI portfwd masquerade mark"
MASQ_COMMENT = "CNI portfwd requiring masquerade"
MAX_MULTIPORT = 15
MAX_COMMENT = 255


def dnat_chain(network: str, container_id: str) -> str:
    return must_format_chain_name_with_prefix(network, container_id, "DN-")


def legacy_snat_chain(network: str, container_id: str) -> str:
    return must_format_chain_name_with_prefix(network, container_id, "SN-")


def entry_comment(network: str, container_id: str) -> str:
    comment = "dnat " + format_comment(network, container_id)
    if len(comment) > MAX_COMMENT:
        comment = comment[: MAX_COMMENT - 2] + "..."
    return comment


def _mark_text(mark: int) -> str:
    return f"{mark:#x}/{mark:#x}"


def _host(addr: str, family: int) -> str:
    """An address as iptables-save prints it (always with a prefix length)."""
    return addr if "/" in addr else f"{addr}/{32 if family == 4 else 128}"


def entry_rules(cfg: PortMapConfig, family: int, chain: str) -> list[str]:
    """The jumps from CNI-HOSTPORT-DNAT: per protocol (sorted), per at most 15 host ports."""
    comment = entry_comment(cfg.network, cfg.container_id)
    by_proto: dict[str, list[int]] = {}
    for m in cfg.mappings:  # all mappings of the protocol, like the reference
        ports = by_proto.setdefault(m.protocol, [])
        if m.host_port not in ports:
            ports.append(m.host_port)
    lines = []
    for proto in sorted(by_proto):
        ports = by_proto[proto]
        for start in range(0, len(ports), MAX_MULTIPORT):
            chunk = ",".join(str(p) for p in ports[start : start + MAX_MULTIPORT])
            args = ["-p", proto, "-m", "comment", "--comment", comment]
            args += ["-m", "multiport", "--dports", chunk]
            args += [*rule_matches.iptables_args(cfg.conditions(family)), "-j", chain]
            lines.append(iptables_script.rule_line("-A", DNAT_CHAIN, args))
    return lines


def _match(m: PortMapping, family: int, source: str | None) -> list[str]:
    args: list[str] = []
    if source is not None:
        args += ["-s", source]
    host = m.host_match(family)
    if host is not None:
        args += ["-d", _host(str(host), family)]
    return [*args, "-p", m.protocol, "-m", m.protocol, "--dport", str(m.host_port)]


def chain_rules(cfg: PortMapConfig, family: int, cip: IPInterface, chain: str) -> list[str]:
    """The per-container chain's rules, mark rules before each DNAT rule."""
    setmark = cfg.external_mark_chain or SETMARK_CHAIN
    lines: list[str] = []

    def rule(m: PortMapping, source: str | None, target: str) -> str:
        return iptables_script.rule_line("-A", chain, [*_match(m, family, source), "-j", target])

    for m in cfg.mappings_for(family):
        if cfg.snat:
            # hairpin: the pod's subnet (masqAll: any source, which iptables-save omits)
            hairpin = None if cfg.masq_all else str(cip.network)
            lines.append(rule(m, hairpin, setmark))
            if family == 4 and not cfg.masq_all:
                lines.append(rule(m, "127.0.0.1/32", setmark))  # localhost (route_localnet)
        ip = str(cip.ip) if family == 4 else f"[{cip.ip}]"
        dnat = ["-j", "DNAT", "--to-destination", f"{ip}:{m.container_port}"]
        lines.append(iptables_script.rule_line("-A", chain, [*_match(m, family, None), *dnat]))
    return lines


def _setmark_rule(mark: int) -> str:
    args = ["-m", "comment", "--comment", SETMARK_COMMENT, "-j", "MARK", "--set-xmark"]
    return iptables_script.rule_line("-A", SETMARK_CHAIN, [*args, _mark_text(mark)])


def _masq_rule(mark: int) -> str:
    args = ["-m", "mark", "--mark", _mark_text(mark), "-j", "MASQUERADE"]
    return iptables_script.rule_line("-A", MASQ_CHAIN, args)


def add_script(cfg: PortMapConfig, family: int, saved: SavedTable) -> str:
    """The whole ADD for one family as a restore script, given the table as it is now."""
    cip = cfg.container_ips[family]
    chain = dnat_chain(cfg.network, cfg.container_id)
    declare: list[str] = []
    lines: list[str] = []
    if cfg.snat and not cfg.external_mark_chain:
        if SETMARK_CHAIN not in saved.chains:
            declare.append(SETMARK_CHAIN)
        if _setmark_rule(cfg.mark) not in saved.rules_of(SETMARK_CHAIN):
            lines.append(_setmark_rule(cfg.mark))
        if MASQ_CHAIN not in saved.chains:
            declare.append(MASQ_CHAIN)
        if _masq_rule(cfg.mark) not in saved.rules_of(MASQ_CHAIN):
            lines.append(_masq_rule(cfg.mark))
        if not saved.jumps_to("POSTROUTING", MASQ_CHAIN):
            args = ["1", "-m", "comment", "--comment", MASQ_COMMENT, "-j", MASQ_CHAIN]
            lines.append(iptables_script.rule_line("-I", "POSTROUTING", args))
    if DNAT_CHAIN not in saved.chains:
        declare.append(DNAT_CHAIN)
    for hook in ("PREROUTING", "OUTPUT"):
        if not saved.jumps_to(hook, DNAT_CHAIN):
            args = ["-m", "addrtype", "--dst-type", "LOCAL", "-j", DNAT_CHAIN]
            lines.append(iptables_script.rule_line("-A", hook, args))
    declare.append(chain)  # created, or flushed when it exists: rebuilt from scratch
    lines += [iptables_script.delete_line(r) for r in saved.jumps_to(DNAT_CHAIN, chain)]
    lines += entry_rules(cfg, family, chain)
    lines += chain_rules(cfg, family, cip, chain)
    return iptables_script.script(TABLE, declare, lines)


def teardown_lines(network: str, container_id: str, saved: SavedTable) -> list[str]:
    """Remove the container's DN chain (and a legacy SN chain) and the jumps to them."""
    lines: list[str] = []
    for parent, chain in (
        (DNAT_CHAIN, dnat_chain(network, container_id)),
        (LEGACY_SNAT_CHAIN, legacy_snat_chain(network, container_id)),
    ):
        if chain not in saved.chains:
            continue
        lines += [iptables_script.delete_line(r) for r in saved.jumps_to(parent, chain)]
        lines += [f"-F {chain}", f"-X {chain}"]
    return lines


def _families(cfg: PortMapConfig) -> list[int]:
    return [f for f in (4, 6) if f in cfg.container_ips and cfg.mappings_for(f)]


def _fail(verb: str, exc: Exception) -> CNIError:
    return InternalError(f"portmap: iptables {verb} failed: {exc}")


def scaffold_undo(cfg: PortMapConfig, saved: SavedTable) -> list[str]:
    """The lines that remove the shared chains, rules and jumps an ADD against ``saved`` adds.

    Applied only when that ADD fails later, in its own restore: it deletes jumps first and
    never flushes CNI-HOSTPORT-DNAT, so if another attachment started to use the scaffolding
    meanwhile, a ``-X`` fails and the whole restore changes nothing."""
    jumps: list[str] = []
    chains: list[str] = []
    if cfg.snat and not cfg.external_mark_chain:
        for chain, rule in ((SETMARK_CHAIN, _setmark_rule), (MASQ_CHAIN, _masq_rule)):
            if chain not in saved.chains:
                chains += [f"-F {chain}", f"-X {chain}"]
            elif rule(cfg.mark) not in saved.rules_of(chain):
                jumps.append(iptables_script.delete_line(rule(cfg.mark)))
        if not saved.jumps_to("POSTROUTING", MASQ_CHAIN):
            args = ["-m", "comment", "--comment", MASQ_COMMENT, "-j", MASQ_CHAIN]
            jumps.append(iptables_script.rule_line("-D", "POSTROUTING", args))
    for hook in ("PREROUTING", "OUTPUT"):
        if not saved.jumps_to(hook, DNAT_CHAIN):
            args = ["-m", "addrtype", "--dst-type", "LOCAL", "-j", DNAT_CHAIN]
            jumps.append(iptables_script.rule_line("-D", hook, args))
    if DNAT_CHAIN not in saved.chains:
        chains.append(f"-X {DNAT_CHAIN}")
    return jumps + chains


def add(
    ipt: Iptables, cfg: PortMapConfig, step: Callable[[str], None] = lambda name: None
) -> Callable[[], None]:
    """One restore per family; when a later family (or ``step``) fails, the families done so
    far lose this attachment's chain and the scaffolding this ADD created. Returns what does
    the same when a later step of the ADD fails."""
    done: list[tuple[int, list[str]]] = []
    try:
        for family in _families(cfg):
            step(f"iptables{family}")
            saved = ipt.save(TABLE, family, cfg.iptables_variant)
            external = cfg.external_mark_chain
            if cfg.snat and external and external not in saved.chains:
                raise rule_tokens.refuse(
                    "externalSetMarkChain",
                    f'names chain "{external}", which does not exist in the IPv{family} nat table',
                    "create it first (e.g. KUBE-MARK-MASQ) or leave the field out",
                )
            undo = scaffold_undo(cfg, saved)
            ipt.restore(add_script(cfg, family, saved), family, cfg.iptables_variant)
            done.append((family, undo))
        return lambda: _undo(ipt, cfg, done)
    except IptablesError as exc:
        _undo(ipt, cfg, done)
        raise _fail("ADD", exc) from None
    except BaseException:
        _undo(ipt, cfg, done)
        raise


def _undo(ipt: Iptables, cfg: PortMapConfig, done: list[tuple[int, list[str]]]) -> None:
    """Best effort: the attachment's chain, then the scaffolding (which may be in use)."""
    for family, undo in reversed(done):
        with contextlib.suppress(IptablesError):
            saved = ipt.save(TABLE, family, cfg.iptables_variant)
            lines = teardown_lines(cfg.network, cfg.container_id, saved)
            if lines:
                ipt.restore(iptables_script.script(TABLE, [], lines), family, cfg.iptables_variant)
        if undo:
            with contextlib.suppress(IptablesError):
                ipt.restore(iptables_script.script(TABLE, [], undo), family, cfg.iptables_variant)


def delete(ipt: Iptables, network: str, container_id: str, variant: str | None = None) -> bool:
    """Tear down in every usable family; an error only when no family is usable."""
    usable = 0
    removed = False
    errors: list[str] = []
    for family in (4, 6):
        try:
            saved = ipt.save(TABLE, family, variant)
        except IptablesError as exc:
            errors.append(str(exc))
            continue
        usable += 1
        lines = teardown_lines(network, container_id, saved)
        if not lines:
            continue
        try:
            ipt.restore(iptables_script.script(TABLE, [], lines), family, variant)
            removed = True
        except IptablesError as exc:
            raise _fail("DEL", exc) from None
    if not usable:
        raise InternalError(f"portmap: neither iptables nor ip6tables usable: {errors}")
    return removed


def has_chain(ipt: Iptables, chain: str, variant: str | None = None) -> bool:
    """Whether either family's nat table has ``chain``."""
    for family in (4, 6):
        with contextlib.suppress(IptablesError):
            if chain in ipt.save(TABLE, family, variant).chains:
                return True
    return False


def check(ipt: Iptables, cfg: PortMapConfig, variant: str | None = None) -> None:
    """The attachment's chain, rules and entry jumps are in place (``variant``: the iptables
    variant to read, the config's when None)."""
    chain = dnat_chain(cfg.network, cfg.container_id)
    variant = variant or cfg.iptables_variant
    for family in _families(cfg):
        try:
            saved = ipt.save(TABLE, family, variant)
        except IptablesError as exc:
            raise _fail("CHECK", exc) from None
        if chain not in saved.chains:
            raise InternalError(f"portmap: chain {chain} is missing (IPv{family})")
        have = saved.rules_of(chain)
        for rule in chain_rules(cfg, family, cfg.container_ips[family], chain):
            if rule not in have:
                raise InternalError(f"portmap: rule missing (IPv{family}): {rule}")
        want = len(entry_rules(cfg, family, chain))
        if len(saved.jumps_to(DNAT_CHAIN, chain)) < want:
            raise InternalError(f"portmap: entry rules to {chain} missing (IPv{family})")


def gc(ipt: Iptables, network: str, valid_ids: set[str], variant: str | None = None) -> list[str]:
    """Delete DN chains of this network whose container is not in ``valid_ids``."""
    removed: set[str] = set()
    marker = f'--comment "dnat name: \\"{network}\\" id: \\"'
    for family in (4, 6):
        try:
            saved = ipt.save(TABLE, family, variant)
        except IptablesError:
            continue
        lines: list[str] = []
        done: set[str] = set()
        for rule in saved.rules_of(DNAT_CHAIN):
            at = rule.find(marker)
            if at < 0:
                continue
            cid = rule[at + len(marker) :].split('\\"', 1)[0]
            chain = dnat_chain(network, cid)
            if cid in valid_ids or not rule.endswith(f" -j {chain}") or chain in done:
                continue
            done.add(chain)
            lines += teardown_lines(network, cid, saved)
        if not lines:
            continue
        try:
            ipt.restore(iptables_script.script(TABLE, [], lines), family, variant)
        except IptablesError as exc:
            raise _fail("GC", exc) from None
        removed |= done
    return sorted(removed)


def usable(ipt: Iptables, variant: str | None = None) -> bool:
    return ipt.available(4, variant) or ipt.available(6, variant)


class IptablesBackend:
    """The reference's iptables layout behind the same verbs as the nftables backend."""

    name = IPTABLES

    def add(
        self, nf: Netfilter, cfg: PortMapConfig, step: Callable[[str], None]
    ) -> Callable[[], object]:
        return add(nf.iptables, cfg, step)

    def delete(self, nf: Netfilter, cfg: PortMapConfig) -> bool:
        return delete(nf.iptables, cfg.network, cfg.container_id, cfg.iptables_variant)

    def check(self, nf: Netfilter, cfg: PortMapConfig) -> None:
        check(nf.iptables, cfg)

    def gc(self, nf: Netfilter, cfg: PortMapConfig, valid: list[tuple[str, str]]) -> list[str]:
        return gc(nf.iptables, cfg.network, {cid for cid, _ in valid}, cfg.iptables_variant)

    def usable(self, nf: Netfilter, cfg: PortMapConfig) -> bool:
        return usable(nf.iptables, cfg.iptables_variant)


BACKEND = IptablesBackend()
