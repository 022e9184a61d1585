"""iptables rule text: restore-script lines, quoting, and iptables-save output parsed.

Pure text, no process: plugins build their changes with these and hand the script to the
``Iptables`` of their namespace (pycni.net.netfilter.iptables_seam); the transport that runs
iptables-save / iptables-restore is pycni.net.netfilter.iptables.
"""

from __future__ import annotations

from collections.abc import Iterable

from pycni.net.errors import NetfilterError
from pycni.net.netfilter import rule_tokens
from pycni.record import field, record


class IptablesError(NetfilterError, RuntimeError):
    """An iptables tool failed; the message carries its stderr."""


@record
class SavedTable:
    """One table as iptables-save printed it: chain names and rule lines per chain."""

    chains: set[str] = field(default_factory=set)
    rules: dict[str, list[str]] = field(default_factory=dict)

    def rules_of(self, chain: str) -> list[str]:
        return self.rules.get(chain, [])

    def jumps_to(self, chain: str, target: str) -> list[str]:
        """Rule lines of ``chain`` whose target is ``target``."""
        suffix = f" -j {target}"
        return [r for r in self.rules_of(chain) if r.endswith(suffix)]


def parse_save(text: str, table: str) -> SavedTable:
    """Parse iptables-save output, keeping only ``table``."""
    out = SavedTable()
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            current = line[1:]
            continue
        if current != table:
            continue
        if line.startswith(":"):
            out.chains.add(line[1:].split()[0])
        elif line.startswith("-A "):
            chain = line.split()[1]
            out.rules.setdefault(chain, []).append(line)
    return out


def quote(token: str) -> str:
    """Quote one argument for an iptables-restore line (double quotes, backslash escapes).

    A control character (a newline above all) would end the line and start a new command,
    so it is refused here whatever the caller checked (code 7, see net/netfilter/rule_tokens.py)."""
    rule_tokens.iptables_word("rule argument", token)
    if token and not any(c in token for c in " \t\"'\\#"):
        return token
    return '"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rule_line(op: str, chain: str, args: Iterable[str]) -> str:
    """``-A CHAIN arg…`` with each argument quoted as needed (the chain is a checked token)."""
    return " ".join([op, _chain(chain), *(quote(a) for a in args)])


def delete_line(saved_rule: str) -> str:
    """Turn a saved ``-A CHAIN …`` line into the ``-D`` line that removes that rule."""
    if not saved_rule.startswith("-A "):
        raise ValueError(f"not a saved rule: {saved_rule!r}")
    return "-D " + saved_rule[3:]


def script(table: str, chains: Iterable[str], lines: Iterable[str]) -> str:
    """A restore script for one table: chain declarations, then rule lines, then COMMIT."""
    body = [f"*{table}"]
    body += [f":{_chain(c)} - [0:0]" for c in chains]
    body += list(lines)
    body.append("COMMIT")
    for line in body:  # one line is one command: nothing may start another
        rule_tokens.iptables_word("rule line", line)
    return "\n".join(body) + "\n"


def _chain(name: str) -> str:
    rule_tokens.iptables_word("chain", name)
    if not name or any(c in name for c in " \t\"'\\#"):
        raise ValueError(f"not a chain name: {name!r}")
    return name
