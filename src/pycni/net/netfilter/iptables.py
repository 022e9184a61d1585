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
from collections.abc import Sequence

from pycni.net import tools
from pycni.net.netfilter.iptables_script import IptablesError, SavedTable, parse_save

VARIANTS = ("legacy", "nft")


def tool(family: int, action: str, variant: str | None = None) -> str:
    """The binary name: ``iptables-save``, ``ip6tables-legacy-restore``, …"""
    base = "iptables" if family == 4 else "ip6tables"
    if variant is None:
        return f"{base}-{action}"
    if variant not in VARIANTS:
        raise ValueError(f"unknown iptables variant {variant!r} (use legacy or nft)")
    return f"{base}-{variant}-{action}"


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


def command(args: Sequence[str], family: int = 4) -> tuple[int, str]:
    """One ``iptables -w`` run (``ip6tables`` for family 6, the system's variant), as the
    reference runs one per rule: (exit status, stderr). IptablesError when not installed."""
    binary = "iptables" if family == 4 else "ip6tables"
    path = tools.which(binary)
    if path is None:
        raise IptablesError(f"{binary} not found")
    proc = subprocess.run([path, "-w", *args], capture_output=True, text=True, check=False)
    return proc.returncode, proc.stderr.strip()


def nft_chain_exists(table: str, chain: str, family: int = 4) -> bool:
    """Whether iptables-nft holds ``chain`` in ``table`` (one nf_tables netlink get: no
    process, and a libnftables ``list`` would load every set element of the namespace).
    iptables-nft makes a built-in chain only when a rule first goes into it."""
    from pycni.net.netfilter import nftnl

    try:
        return nftnl.chain_exists("ip" if family == 4 else "ip6", table, chain)
    except OSError:  # no nf_tables here: then no iptables-nft chain either
        return False
