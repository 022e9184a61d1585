"""The firewall plugin's iptables backend: the reference's chains, rule for rule.

Filter table, per family: ``FORWARD`` jumps to ``CNI-FORWARD`` (inserted first), which jumps to
the admin chain (``CNI-ADMIN`` by default, first rule) and then accepts, per pod IP,
``-d IP/32 … RELATED,ESTABLISHED`` and ``-s IP/32``. ingressPolicy same-bridge/isolated adds
``CNI-ISOLATION-STAGE-1/2``. Rule texts are byte-for-byte the reference's, so rules made by
either implementation are found and removed by the other. Each call reads the table once
(iptables-save) and writes its whole change with one iptables-restore; a change that lost a
race with another writer fails as a whole and is recomputed. The IPs of each attachment are
recorded (records.py) for GC, which has no prevResult.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from pycni.net import tools
from pycni.net.netfilter import iptables_script
from pycni.plugins.meta.firewall.backend import (
    DEFAULT_ADMIN_CHAIN,
    ISOLATION_PREFIX,
    Attachment,
    FirewallError,
    IPAddress,
)
from pycni.record import field, record
from pycni.skel.rollback import Rollback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_seam import Iptables
    from pycni.net.netfilter.seam import Netfilter
    from pycni.plugins.meta.firewall.records import Records

FORWARD = "FORWARD"
PRIV_CHAIN = "CNI-FORWARD"
STAGE1 = "CNI-ISOLATION-STAGE-1"
STAGE2 = "CNI-ISOLATION-STAGE-2"
FILTER_COMMENT = "CNI firewall plugin rules"
ADMIN_COMMENT = "CNI firewall plugin admin overrides"
RETRIES = 3


def host_cidr(ip: IPAddress) -> str:
    return f"{ip}/{32 if ip.version == 4 else 128}"


def _line(chain: str, args: Sequence[str]) -> str:
    """A rule as iptables-save prints it (``-A CHAIN …``)."""
    return iptables_script.rule_line("-A", chain, args)


def forward_jump() -> list[str]:
    return ["-m", "comment", "--comment", FILTER_COMMENT, "-j", PRIV_CHAIN]


def admin_jump(admin_chain: str) -> list[str]:
    return ["-m", "comment", "--comment", ADMIN_COMMENT, "-j", admin_chain]


def ip_rules(ip: IPAddress) -> list[list[str]]:
    """The two per-IP rules of CNI-FORWARD, in the reference's order."""
    cidr = host_cidr(ip)
    return [
        ["-d", cidr, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"],
        ["-s", cidr, "-j", "ACCEPT"],
    ]


def _policy_comment(policy: str) -> list[str]:
    """The comment of a bridge's own stage-1 rules: its policy, as the reference (v1.9.1)."""
    return ["-m", "comment", "--comment", f"{ISOLATION_PREFIX}: {policy})"]


# the reference's comment on the rules every isolating policy shares (v1.1.1 had
# ISOLATION_COMMENT on all of them)
SHARED_COMMENT = ["-m", "comment", "--comment", f"{ISOLATION_PREFIX}: same-bridge|isolated)"]


def _isolation(bridge: str, policy: str) -> tuple[list[list[str]], list[list[str]]]:
    """(stage-1 rules to insert first, in turn; stage-2 rules to insert first) for one bridge:
    the reference's rules and comments (its ``isolated`` DROP ends up before the jump)."""
    mine = _policy_comment(policy)
    stage1 = [["-i", bridge, "!", "-o", bridge, *mine, "-j", STAGE2]]
    if policy == "isolated":
        stage1.append(["-i", bridge, "-o", bridge, *mine, "-j", "DROP"])
    stage2 = [["-o", bridge, *SHARED_COMMENT, "-j", "DROP"]]
    return stage1, stage2


def _return_rule() -> list[str]:
    return [*SHARED_COMMENT, "-j", "RETURN"]


@record
class _Plan:
    """Lines of one restore script, built against one saved table."""

    saved: iptables_script.SavedTable
    lines: list[str]
    undo_rules: list[str] = field(default_factory=list)
    undo_chains: list[str] = field(default_factory=list)

    def ensure_chain(self, chain: str) -> None:
        if chain not in self.saved.chains:
            self.lines.append(f"-N {chain}")
            self.saved.chains.add(chain)
            self.undo_chains.insert(0, f"-X {chain}")

    def has(self, chain: str, args: Sequence[str]) -> bool:
        return _line(chain, args) in self.saved.rules_of(chain)

    def insert_first(self, chain: str, args: Sequence[str]) -> None:
        if not self.has(chain, args):
            self.lines.append(iptables_script.rule_line("-I", chain, ["1", *args]))
            self.saved.rules.setdefault(chain, []).insert(0, _line(chain, args))
            self.undo_rules.insert(0, iptables_script.rule_line("-D", chain, args))

    def append(self, chain: str, args: Sequence[str]) -> None:
        if not self.has(chain, args):
            self.lines.append(iptables_script.rule_line("-A", chain, args))
            self.saved.rules.setdefault(chain, []).append(_line(chain, args))
            self.undo_rules.insert(0, iptables_script.rule_line("-D", chain, args))

    @property
    def undo(self) -> list[str]:
        """What removes everything this plan adds: rules first, then the chains it created
        (a chain someone else started to use meanwhile makes the whole undo fail instead)."""
        return self.undo_rules + self.undo_chains

    def delete_all(self, chain: str, args: Sequence[str]) -> None:
        wanted = _line(chain, args)
        for saved in self.saved.rules_of(chain):
            if saved == wanted:
                self.lines.append(iptables_script.delete_line(saved))


def _apply(ipt: Iptables, family: int, build: _Builder) -> list[str]:
    """Read, plan, write; recompute when another writer changed the table meanwhile.
    Returns the lines that undo what was written."""
    last: Exception | None = None
    for _ in range(RETRIES):
        try:
            plan = _Plan(ipt.save("filter", family), [])
        except iptables_script.IptablesError as exc:
            raise FirewallError(str(exc)) from None
        build(plan)
        if not plan.lines:
            return []
        try:
            ipt.restore(iptables_script.script("filter", [], plan.lines), family)
            return plan.undo
        except iptables_script.IptablesError as exc:
            last = exc
    raise FirewallError(str(last))


def undo(ipt: Iptables, family: int, undo: list[str], ips: Sequence[IPAddress]) -> None:
    """Roll back one family of a failed ADD: everything it added in one restore, or, when
    that fails because the shared chains are in use by now, only its per-IP rules."""
    try:
        if undo:
            ipt.restore(iptables_script.script("filter", [], undo), family)
            return
    except iptables_script.IptablesError:
        pass
    delete(ipt, family, ips)


class _Builder:
    def __call__(self, plan: _Plan) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class _AddBuilder(_Builder):
    def __init__(
        self, ips: Sequence[IPAddress], admin_chain: str, bridge: str, policy: str
    ) -> None:
        self.ips, self.admin_chain, self.bridge, self.policy = ips, admin_chain, bridge, policy

    def __call__(self, plan: _Plan) -> None:
        if self.ips:
            plan.ensure_chain(PRIV_CHAIN)
            plan.ensure_chain(self.admin_chain)
            plan.insert_first(FORWARD, forward_jump())
            plan.insert_first(PRIV_CHAIN, admin_jump(self.admin_chain))
            for ip in self.ips:
                for rule in ip_rules(ip):
                    plan.append(PRIV_CHAIN, rule)
        if self.policy in ("same-bridge", "isolated"):
            plan.ensure_chain(STAGE1)
            plan.ensure_chain(STAGE2)
            plan.insert_first(FORWARD, [*SHARED_COMMENT, "-j", STAGE1])
            stage1, stage2 = _isolation(self.bridge, self.policy)
            for rule in stage1:
                plan.insert_first(STAGE1, rule)
            plan.append(STAGE1, _return_rule())
            for rule in stage2:
                plan.insert_first(STAGE2, rule)
            plan.append(STAGE2, _return_rule())


class _DelBuilder(_Builder):
    def __init__(self, ips: Sequence[IPAddress]) -> None:
        self.ips = ips

    def __call__(self, plan: _Plan) -> None:
        for ip in self.ips:
            for rule in ip_rules(ip):
                plan.delete_all(PRIV_CHAIN, rule)


def add(
    ipt: Iptables,
    family: int,
    ips: Sequence[IPAddress],
    admin_chain: str = DEFAULT_ADMIN_CHAIN,
    bridge: str = "",
    policy: str = "open",
) -> list[str]:
    """Chains, jumps and per-IP rules of one family (and the isolation chains), one restore.
    Returns the lines that undo it (for :func:`undo`)."""
    return _apply(ipt, family, _AddBuilder(ips, admin_chain, bridge, policy))


def delete(ipt: Iptables, family: int, ips: Sequence[IPAddress]) -> None:
    """Remove the per-IP rules (every copy); chains and jumps stay, as in the reference."""
    _apply(ipt, family, _DelBuilder(ips))


def check(ipt: Iptables, family: int, ips: Sequence[IPAddress], admin_chain: str) -> None:
    """The reference's CHECK: both jumps and every per-IP rule exist."""
    try:
        saved = ipt.save("filter", family)
    except iptables_script.IptablesError as exc:
        raise FirewallError(str(exc)) from None
    expected = [
        (FORWARD, forward_jump()),
        (PRIV_CHAIN, admin_jump(admin_chain)),
        *[(PRIV_CHAIN, rule) for ip in ips for rule in ip_rules(ip)],
    ]
    for chain, args in expected:
        if _line(chain, args) not in saved.rules_of(chain):
            raise FirewallError(f"expected {chain} rule {list(args)} not found")


def tools_present() -> bool:
    return all(tools.which(t) for t in ("iptables-restore", "ip6tables-restore"))


class IptablesBackend:
    """The reference's CNI-FORWARD / CNI-ADMIN chains, one iptables-restore per family."""

    name = "iptables"
    unavailable = "iptables-restore / ip6tables-restore not found"
    cleans_others = False

    def usable(self, nf: Netfilter) -> bool:
        return tools_present()

    def check_admin_chain(self, admin: str) -> None:
        return None  # rule_tokens.chain_name (in the plugin's parse) is iptables' own rule

    def add(self, nf: Netfilter, att: Attachment, rb: Rollback) -> None:
        for family, ips in sorted(att.families.items()):
            rb.step(f"iptables{family}")
            lines = add(nf.iptables, family, ips, att.admin_chain, att.bridge, att.policy)
            rb.push(f"iptables{family}", partial(undo, nf.iptables, family, lines, ips))
        rb.step("record")
        records = att.records
        if records is None:
            raise FirewallError("iptables: no records for the attachment (a plugin bug)")
        records.save(att.container_id, att.ifname, list(att.addresses))
        rb.push("record", partial(records.remove, att.container_id, att.ifname))

    def delete(self, nf: Netfilter, att: Attachment) -> None:
        for family, ips in sorted(att.families.items()):
            try:
                delete(nf.iptables, family, ips)
            except FirewallError as exc:
                att.log(f"firewall DEL: {exc}")  # the reference ignores these too

    def check(self, nf: Netfilter, att: Attachment) -> None:
        for family, ips in sorted(att.families.items()):
            check(nf.iptables, family, ips, att.admin_chain)

    def gc(
        self, nf: Netfilter, network: str, records: Records, valid: list[tuple[str, str]]
    ) -> None:
        """Remove the per-IP rules of recorded attachments not in ``valid`` (keeping an IP a
        valid attachment still holds), and their records."""
        stale = records.stale(valid)
        if not stale:
            return
        kept: dict[int, set[IPAddress]] = {}
        for cid, ifname in valid:
            for family, ips in records.load(cid, ifname).items():
                kept.setdefault(family, set()).update(ips)
        for cid, ifname in stale:
            for family, ips in records.load(cid, ifname).items():
                gone = [ip for ip in ips if ip not in kept.get(family, set())]
                if gone:
                    delete(nf.iptables, family, gone)
            records.remove(cid, ifname)


BACKEND = IptablesBackend()
