"""The reference's one iptables rule: accept DNS queries arriving on the bridge.

``-I INPUT 1 -i <bridge> -p udp -m udp --dport 53 -j ACCEPT`` in the filter table, inserted
when the network's dnsmasq.conf is first written. The reference never removes it; pycni
removes it when the network's dnsmasq is stopped (see docs/plugins/dnsname.md). The rule goes
to the node's iptables the plugin is handed (``req.host.netfilter(kernel).iptables``).
"""

from __future__ import annotations

from pycni.net.netfilter import iptables_script

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_seam import Iptables

TABLE = "filter"
CHAIN = "INPUT"


def rule_args(interface: str) -> list[str]:
    return ["-i", interface, "-p", "udp", "-m", "udp", "--dport", "53", "-j", "ACCEPT"]


def _saved_line(interface: str) -> str:
    return iptables_script.rule_line("-A", CHAIN, rule_args(interface))


def present(ipt: Iptables, interface: str) -> bool:
    return _saved_line(interface) in ipt.save(TABLE).rules_of(CHAIN)


def ensure(ipt: Iptables, interface: str) -> bool:
    """Insert the rule unless it is there; True when this call inserted it."""
    if present(ipt, interface):
        return False
    line = iptables_script.rule_line("-I", CHAIN, ["1", *rule_args(interface)])
    ipt.restore(iptables_script.script(TABLE, [], [line]))
    return True


def remove(ipt: Iptables, interface: str) -> None:
    """Delete every copy of the rule (nothing when there is none)."""
    saved = _saved_line(interface)
    rules = ipt.save(TABLE).rules_of(CHAIN)
    lines = [iptables_script.delete_line(r) for r in rules if r == saved]
    if lines:
        ipt.restore(iptables_script.script(TABLE, [], lines))
