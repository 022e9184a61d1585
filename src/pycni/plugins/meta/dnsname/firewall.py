"""The reference's one iptables rule: accept DNS queries arriving on the bridge.

``-I INPUT 1 -i <bridge> -p udp -m udp --dport 53 -j ACCEPT`` in the filter table, inserted
when the network's dnsmasq.conf is first written. The reference never removes it; pycni
removes it when the network's dnsmasq is stopped (see docs/plugins/dnsname.md).
"""

from __future__ import annotations

from pycni.net.netfilter import iptables, iptables_script

TABLE = "filter"
CHAIN = "INPUT"


def rule_args(interface: str) -> list[str]:
    return ["-i", interface, "-p", "udp", "-m", "udp", "--dport", "53", "-j", "ACCEPT"]


def _saved_line(interface: str) -> str:
    return iptables_script.rule_line("-A", CHAIN, rule_args(interface))


def present(interface: str) -> bool:
    return _saved_line(interface) in iptables.save(TABLE).rules_of(CHAIN)


def ensure(interface: str) -> bool:
    """Insert the rule unless it is there; True when this call inserted it."""
    if present(interface):
        return False
    line = iptables_script.rule_line("-I", CHAIN, ["1", *rule_args(interface)])
    iptables.restore(iptables_script.script(TABLE, [], [line]))
    return True


def remove(interface: str) -> None:
    """Delete every copy of the rule (nothing when there is none)."""
    saved = _saved_line(interface)
    lines = [
        iptables_script.delete_line(r) for r in iptables.save(TABLE).rules_of(CHAIN) if r == saved
    ]
    if lines:
        iptables.restore(iptables_script.script(TABLE, [], lines))
