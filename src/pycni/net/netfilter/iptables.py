"""iptables through iptables-save / iptables-restore: one read and one atomic write per call.

The reference plugins exec ``iptables --wait`` once per rule (28 processes for an ADD with one
port mapping). Here a caller reads a table once with :func:`save`, builds its whole change as a
restore script and applies it with a single ``iptables-restore --noflush`` (:func:`restore`).
Both the legacy and the nf_tables variants are supported; ``variant=None`` uses whatever the
system's ``iptables`` alternative is, which is what the reference plugins use.

With ``--noflush`` a chain line (``:NAME - [0:0]``) creates the chain, or flushes it when it
exists, so scripts declare only chains they own or know to be missing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence

from pycni.net import tools
from pycni.net.errors import NetfilterError
from pycni.net.netfilter import rule_tokens
from pycni.record import field, record

VARIANTS = ("legacy", "nft")


class IptablesError(NetfilterError, RuntimeError):
    """An iptables tool failed; the message carries its stderr."""


def tool(family: int, action: str, variant: str | None = None) -> str:
    """The binary name: ``iptables-save``, ``ip6tables-legacy-restore``, …"""
    base = "iptables" if family == 4 else "ip6tables"
    if variant is None:
        return f"{base}-{action}"
    if variant not in VARIANTS:
        raise ValueError(f"unknown iptables variant {variant!r} (use legacy or nft)")
    return f"{base}-{variant}-{action}"


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


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    binary = tools.which(argv[0])
    if binary is None:
        raise IptablesError(f"{argv[0]} is not installed")
    try:
        proc = subprocess.run(
            [binary, *argv[1:]], input=stdin, capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise IptablesError(f"{argv[0]}: {exc}") from None
    if proc.returncode != 0:
        raise IptablesError(
            f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout


def save(table: str, family: int = 4, variant: str | None = None) -> SavedTable:
    """Read one table of the current network namespace."""
    return parse_save(_run([tool(family, "save", variant), "-t", table]), table)


def restore(script: str, family: int = 4, variant: str | None = None) -> None:
    """Apply ``script`` atomically, leaving everything it does not mention alone."""
    _run([tool(family, "restore", variant), "--noflush", "--wait"], stdin=script)


def available(family: int = 4, variant: str | None = None) -> bool:
    """The tools exist and can read the nat table here."""
    try:
        save("nat", family, variant)
    except IptablesError:
        return False
    return True


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
