"""The contract of FakeIptables and FakeConntrack (net/netfilter/fake_iptables.py): cases run
on the fakes and on the real transports (net/netfilter/iptables_seam.py) in a private namespace.

Each case drives one ``Side`` (an Iptables and a Conntrack of one fresh namespace, and the
iptables variant under test) and returns plain values: what saves answered, which writes were
refused ("IptablesError") and what the table held after a refused one. ``EXPECTED`` holds what
the real tools answered when the case was written, the same for the legacy and the nft
variant. tests/netfilter/test_iptables_contract.py checks the fakes against it without root;
tests/netfilter/test_iptables_contract_kernel.py checks the real transports in private
namespaces against the same values and against the fakes, so neither side drifts alone.

The rules are the shapes the plugins write (portmap, firewall, dnsname, ipMasq), built with
the same builders, so a case also proves the real iptables-save prints each of them back
byte for byte, which the plugins' textual CHECKs and the fake's kept-as-written rules rely on.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pycni.net.netfilter.fake_iptables import FakeConntrack, FakeIptables
from pycni.net.netfilter.iptables_script import IptablesError, rule_line, script
from pycni.net.netfilter.iptables_seam import Conntrack, Iptables

Entry = tuple[str, str, str, int, int, str]  # protocol, src, dst, sport, dport, reply source


@dataclass
class Side:
    """One implementation: the namespace's Iptables and Conntrack, the variant the case
    saves and restores with, and how to seed and list conntrack entries."""

    ipt: Iptables
    ct: Conntrack
    variant: str
    seed: Callable[[Entry], None]
    entries: Callable[[], set[Entry]]
    notes: list[str] = field(default_factory=list)


def on_fake(case: Callable[[Side], Any], variant: str) -> Any:
    """What the fakes answer ``case`` (both variants installed, nft the system's default)."""
    ipt, ct = FakeIptables(), FakeConntrack()

    def seed(e: Entry) -> None:
        ct.add(*e)

    def entries() -> set[Entry]:
        return {
            (e.protocol, e.src, e.dst, e.sport, e.dport, "" if e.answers == e.dst else e.answers)
            for e in ct.entries
        }

    return case(Side(ipt, ct, variant, seed, entries))


def outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except IptablesError:
        return "IptablesError"
    return "ok"


def rules(side: Side, table: str, family: int = 4) -> dict[str, list[str]]:
    saved = side.ipt.save(table, family, side.variant)
    return {chain: list(found) for chain, found in sorted(saved.rules.items())}


def chains(side: Side, table: str, family: int = 4) -> list[str]:
    return sorted(side.ipt.save(table, family, side.variant).chains)


def restore(side: Side, text: str, family: int = 4) -> str:
    return outcome(lambda: side.ipt.restore(text, family, side.variant))


COMMENT = 'name: "net1" id: "c1"'
DNAT_COMMENT = 'dnat name: "net1" id: "c1"'

# the rule shapes the plugins write, each as the plugin's builder renders it
PORTMAP = [
    rule_line("-A", "PREROUTING", ["-m", "addrtype", "--dst-type", "LOCAL", "-j", "HP-DNAT"]),
    rule_line(
        "-A",
        "HP-DNAT",
        [
            *["-p", "tcp", "-m", "comment", "--comment", DNAT_COMMENT, "-m", "multiport"],
            *["--dports", "8080,8443", "-j", "HP-DN"],
        ],
    ),
    rule_line(
        "-A",
        "HP-DN",
        ["-s", "10.88.0.0/16", "-p", "tcp", "-m", "tcp", "--dport", "8080", "-j", "HP-MARK"],
    ),
    rule_line(
        "-A",
        "HP-DN",
        [
            *["-p", "tcp", "-m", "tcp", "--dport", "8080", "-j", "DNAT"],
            *["--to-destination", "10.88.0.5:80"],
        ],
    ),
    rule_line(
        "-A",
        "HP-MARK",
        [
            *["-m", "comment", "--comment", "CNI portfwd masquerade mark", "-j", "MARK"],
            *["--set-xmark", "0x2000/0x2000"],
        ],
    ),
    rule_line("-A", "HP-MASQ", ["-m", "mark", "--mark", "0x2000/0x2000", "-j", "MASQUERADE"]),
    rule_line(
        "-A",
        "POSTROUTING",
        ["-m", "comment", "--comment", "CNI portfwd requiring masquerade", "-j", "HP-MASQ"],
    ),
]
FIREWALL = [
    rule_line(
        "-A", "FORWARD", ["-m", "comment", "--comment", "CNI firewall plugin rules", "-j", "FW"]
    ),
    rule_line(
        "-A",
        "FW",
        [
            *["-d", "10.88.0.5/32", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"],
            *["-j", "ACCEPT"],
        ],
    ),
    rule_line("-A", "FW", ["-s", "10.88.0.5/32", "-j", "ACCEPT"]),
    rule_line("-A", "FW", ["-i", "cni0", "!", "-o", "cni0", "-j", "RETURN"]),
    rule_line(
        "-A", "INPUT", ["-i", "cni0", "-p", "udp", "-m", "udp", "--dport", "53", "-j", "ACCEPT"]
    ),
]


def _chains_of(lines: list[str]) -> list[str]:
    builtin = {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING", "FORWARD"}
    return sorted({line.split()[1] for line in lines} - builtin)


def fresh_tables(side: Side) -> Any:
    """A new namespace: built-in chains, no rules, in both families."""
    return {
        f"{table} {family}": [chains(side, table, family), rules(side, table, family)]
        for table in ("nat", "filter")
        for family in (4, 6)
    } | {"available": [side.ipt.available(4, side.variant), side.ipt.available(6, side.variant)]}


def plugin_shapes_read_back(side: Side) -> Any:
    """Every shape the plugins write comes back from iptables-save as written."""
    nat = restore(side, script("nat", _chains_of(PORTMAP), PORTMAP))
    filt = restore(side, script("filter", _chains_of(FIREWALL), FIREWALL))
    return [nat, filt, rules(side, "nat"), rules(side, "filter"), chains(side, "nat")]


def noflush_declare(side: Side) -> Any:
    """``:CHAIN - [0:0]`` flushes an existing user chain and leaves every other chain alone;
    ``-N`` of an existing chain is refused."""
    first = script("nat", ["A", "B"], ["-A A -j RETURN", "-A B -j RETURN", "-A A -j ACCEPT"])
    again = script("nat", ["A"], ["-A A -j MASQUERADE"])
    return [
        restore(side, first),
        restore(side, again),
        rules(side, "nat"),
        restore(side, script("nat", [], ["-N B"])),
        restore(side, script("nat", [], ["-N C"])),
        chains(side, "nat"),
    ]


def refused_scripts_change_nothing(side: Side) -> Any:
    """A script with one bad line changes nothing, whatever came before it in the script."""
    restore(side, script("nat", ["A", "B"], ["-A A -j RETURN", "-A B -j A"]))
    before = [chains(side, "nat"), rules(side, "nat")]
    good = ["-N NEW", "-A NEW -j RETURN", "-I A 1 -j ACCEPT", "-D B -j A", "-F B"]
    bad = {
        "delete a missing rule": "-D A -j MASQUERADE",
        "delete a chain in use": "-X A",
        "delete a chain holding rules": "-X NEW",
        "jump to a missing chain": "-A A -j NOPE",
        "append to a missing chain": "-A NOPE -j RETURN",
        "flush a missing chain": "-F NOPE",
        "filter in nat": "-A A -j DROP",
        "insert past the end": "-I A 9 -j RETURN",
        "create an existing chain": "-N A",
    }
    out = {why: restore(side, script("nat", [], [*good, line])) for why, line in bad.items()}
    out["unchanged"] = [chains(side, "nat"), rules(side, "nat")] == before
    out["then all good"] = restore(side, script("nat", [], good))
    out["after"] = [chains(side, "nat"), rules(side, "nat")]
    return out


def insert_delete_flush(side: Side) -> Any:
    """-I at positions, -D by text and by number, -F then -X of a user chain."""
    lines = ["-A A -j RETURN", "-I A 1 -j ACCEPT", "-I A 2 -j MASQUERADE", "-I A 4 -j SNAT"]
    lines[-1] += " --to-source 10.0.0.1"
    steps = [
        restore(side, script("nat", ["A"], lines)),
        rules(side, "nat"),
        restore(side, script("nat", [], ["-D A -j ACCEPT", "-D A 2"])),
        rules(side, "nat"),
        restore(side, script("nat", [], ["-F A", "-X A"])),
        chains(side, "nat"),
    ]
    return steps


def ipv6_apart(side: Side) -> Any:
    """The families are separate tables."""
    v6 = ["-A A -s fd00::5/128 -j ACCEPT", "-A A -d fd00::/64 -j RETURN"]
    return [
        restore(side, script("filter", ["A"], v6), 6),
        rules(side, "filter", 6),
        rules(side, "filter", 4),
        chains(side, "filter", 4),
    ]


def nft_chains_seen_without_a_process(side: Side) -> Any:
    """``nft_chain_exists`` sees the chains iptables-nft made (a built-in only once it held a
    rule), and none of iptables-legacy's."""
    ask = side.ipt.nft_chain_exists
    seen = [ask("nat", "POSTROUTING"), ask("nat", "A")]
    restore(side, script("nat", ["A"], []))
    seen += [ask("nat", "POSTROUTING"), ask("nat", "A")]
    restore(side, script("nat", [], ["-A POSTROUTING -j A"]))
    seen += [ask("nat", "POSTROUTING"), ask("nat", "A", 6)]
    restore(side, script("nat", [], ["-D POSTROUTING -j A", "-X A"]))
    seen += [ask("nat", "POSTROUTING"), ask("nat", "A")]
    return seen


def legacy_nat_seen_without_a_process(side: Side) -> Any:
    """``legacy_nat`` (portmap's look for the reference's legacy scaffolding) sees a nat table
    once iptables-legacy made one here, and never one iptables-nft made."""
    seen = [side.ipt.legacy_nat()]
    restore(side, script("filter", ["A"], []))
    seen.append(side.ipt.legacy_nat())
    restore(side, script("nat", ["A"], []), family=6)
    seen.append(side.ipt.legacy_nat())
    return seen


CASES: dict[str, Callable[[Side], Any]] = {
    f.__name__: f
    for f in (
        fresh_tables,
        plugin_shapes_read_back,
        noflush_declare,
        refused_scripts_change_nothing,
        insert_delete_flush,
        ipv6_apart,
        nft_chains_seen_without_a_process,
        legacy_nat_seen_without_a_process,
    )
}

# --- the reference's one process per rule (ipMasq's backend): the system's variant only ------


def masq_commands(side: Side) -> Any:
    """``iptables -w -t nat`` as ipMasq's iptables backend runs it: exit statuses, and the
    rules saved in iptables-save's form (prefix added, host bits cleared, target last)."""
    run = side.ipt.command

    def rc(*args: str, family: int = 4) -> int:
        return run(["-t", "nat", *args], family)[0]

    chain = "CNI-abc"
    comment = ["-m", "comment", "--comment", COMMENT]
    out: dict[str, Any] = {
        "-S missing": rc("-S", chain),
        "-N": rc("-N", chain),
        "-N again": rc("-N", chain),
        "-S": rc("-S", chain),
        "-C missing": rc("-C", chain, "-d", "10.88.0.5/16", "-j", "ACCEPT", *comment),
        "-A accept": rc("-A", chain, "-d", "10.88.0.5/16", "-j", "ACCEPT", *comment),
        "-C accept": rc("-C", chain, "-d", "10.88.0.5/16", "-j", "ACCEPT", *comment),
        "-A masq": rc("-A", chain, "!", "-d", "224.0.0.0/4", "-j", "MASQUERADE", *comment),
        "-A jump": rc("-A", "POSTROUTING", "-s", "10.88.0.5", "-j", chain, *comment),
        "-C jump": rc("-C", "POSTROUTING", "-s", "10.88.0.5", "-j", chain, *comment),
        "-N v6": rc("-N", chain, family=6),
        "-A v6": rc("-A", chain, "-d", "fd00::5/64", "-j", "ACCEPT", *comment, family=6),
    }
    saved = side.ipt.save("nat", 4, None).rules
    out["saved"] = {c: saved[c] for c in sorted(saved)}
    out["saved v6"] = dict(side.ipt.save("nat", 6, None).rules)
    out["-D jump"] = rc("-D", "POSTROUTING", "-s", "10.88.0.5", "-j", chain, *comment)
    out["-D jump again"] = rc("-D", "POSTROUTING", "-s", "10.88.0.5", "-j", chain, *comment)
    out["-X holding rules"] = rc("-X", chain)
    out["-F"] = rc("-F", chain)
    out["-X"] = rc("-X", chain)
    out["-F missing"] = rc("-F", chain)
    out["-X missing"] = rc("-X", chain)
    out["chains"] = sorted(side.ipt.save("nat", 4, None).chains)
    return out


# --- conntrack ------------------------------------------------------------------------------

SEEDED: list[Entry] = [
    ("udp", "10.1.0.1", "10.1.0.2", 1000, 8080, ""),
    ("udp", "10.1.0.3", "10.1.0.2", 1001, 8080, ""),
    ("udp", "10.1.0.1", "10.1.0.2", 1002, 8081, ""),
    ("tcp", "10.1.0.1", "10.1.0.2", 1003, 8080, ""),
    ("udp", "fd00::1", "fd00::2", 1004, 8080, ""),
    # DNATed to a pod: the pod's address is the reply's source only
    ("udp", "10.9.0.1", "192.168.1.1", 1005, 5353, "10.88.0.5"),
    ("udp", "10.88.0.5", "10.9.0.9", 1006, 53, ""),  # the pod's own flow
    ("tcp", "10.9.0.1", "192.168.1.1", 1007, 5353, "10.88.0.5"),
]


def conntrack_deletes(side: Side) -> Any:
    """The two deletes: counts, and only the entries of that protocol (and family, port, or
    address as original or reply source) go."""
    for entry in SEEDED:
        side.seed(entry)
    pod = ipaddress.ip_address("10.88.0.5").packed
    counts = [
        side.ct.delete_by_dst_port([8080, 9999], "udp", 4),
        side.ct.delete_by_dst_port([8080], "udp", 4),
        side.ct.delete_by_dst_port([], "udp", 4),
        side.ct.delete_by_address(pod, "udp"),
        side.ct.delete_by_address(pod, "udp"),
        side.ct.delete_by_dst_port([8080], "udp", 6),
    ]
    return [counts, sorted(side.entries())]


CONNTRACK_CASES: dict[str, Callable[[Side], Any]] = {"conntrack_deletes": conntrack_deletes}
COMMAND_CASES: dict[str, Callable[[Side], Any]] = {"masq_commands": masq_commands}
ALL = {**CASES, **COMMAND_CASES, **CONNTRACK_CASES}


def expected(name: str, variant: str) -> Any:
    """What the real tools answered (per variant where the two differ)."""
    return EXPECTED.get(f"{name} {variant}", EXPECTED.get(name))


def params() -> list[tuple[str, str]]:
    """(case, variant) pairs: every table case with both variants, the process-per-rule and
    conntrack cases once (the system's variant, nft here)."""
    out = [(n, v) for n in sorted(CASES) for v in ("legacy", "nft")]
    return out + [(n, "nft") for n in sorted(COMMAND_CASES) + sorted(CONNTRACK_CASES)]


EXPECTED: dict[str, Any] = {
    "legacy_nat_seen_without_a_process legacy": [False, False, True],
    "legacy_nat_seen_without_a_process nft": [False, False, False],
    "conntrack_deletes": [
        [2, 0, 0, 2, 0, 1],
        [
            ("tcp", "10.1.0.1", "10.1.0.2", 1003, 8080, ""),
            ("tcp", "10.9.0.1", "192.168.1.1", 1007, 5353, "10.88.0.5"),
            ("udp", "10.1.0.1", "10.1.0.2", 1002, 8081, ""),
        ],
    ],
    "fresh_tables": {
        "available": [True, True],
        "filter 4": [["FORWARD", "INPUT", "OUTPUT"], {}],
        "filter 6": [["FORWARD", "INPUT", "OUTPUT"], {}],
        "nat 4": [["INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"], {}],
        "nat 6": [["INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"], {}],
    },
    "insert_delete_flush": [
        "ok",
        {
            "A": [
                "-A A -j ACCEPT",
                "-A A -j MASQUERADE",
                "-A A -j RETURN",
                "-A A -j SNAT --to-source 10.0.0.1",
            ]
        },
        "ok",
        {"A": ["-A A -j MASQUERADE", "-A A -j SNAT --to-source 10.0.0.1"]},
        "ok",
        ["INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"],
    ],
    "ipv6_apart": [
        "ok",
        {"A": ["-A A -s fd00::5/128 -j ACCEPT", "-A A -d fd00::/64 -j RETURN"]},
        {},
        ["FORWARD", "INPUT", "OUTPUT"],
    ],
    "masq_commands": {
        "-A accept": 0,
        "-A jump": 0,
        "-A masq": 0,
        "-A v6": 0,
        "-C accept": 0,
        "-C jump": 0,
        "-C missing": 1,
        "-D jump": 0,
        "-D jump again": 1,
        "-F": 0,
        "-F missing": 1,
        "-N": 0,
        "-N again": 1,
        "-N v6": 0,
        "-S": 0,
        "-S missing": 1,
        "-X": 0,
        "-X holding rules": 4,
        "-X missing": 1,
        "chains": ["INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"],
        "saved": {
            "CNI-abc": [
                "-A CNI-abc -d 10.88.0.0/16 -m comment --comment "
                '"name: \\"net1\\" id: \\"c1\\"" -j ACCEPT',
                "-A CNI-abc ! -d 224.0.0.0/4 -m comment --comment "
                '"name: \\"net1\\" id: \\"c1\\"" -j MASQUERADE',
            ],
            "POSTROUTING": [
                "-A POSTROUTING -s 10.88.0.5/32 -m comment "
                '--comment "name: \\"net1\\" id: \\"c1\\"" -j '
                "CNI-abc"
            ],
        },
        "saved v6": {
            "CNI-abc": [
                "-A CNI-abc -d fd00::/64 -m comment --comment "
                '"name: \\"net1\\" id: \\"c1\\"" -j ACCEPT'
            ]
        },
    },
    "nft_chains_seen_without_a_process legacy": [
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
    ],
    "nft_chains_seen_without_a_process nft": [False, False, False, True, True, False, True, False],
    "noflush_declare": [
        "ok",
        "ok",
        {"A": ["-A A -j MASQUERADE"], "B": ["-A B -j RETURN"]},
        "IptablesError",
        "ok",
        ["A", "B", "C", "INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"],
    ],
    "plugin_shapes_read_back": [
        "ok",
        "ok",
        {
            "HP-DN": [
                "-A HP-DN -s 10.88.0.0/16 -p tcp -m tcp --dport 8080 -j HP-MARK",
                "-A HP-DN -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.88.0.5:80",
            ],
            "HP-DNAT": [
                '-A HP-DNAT -p tcp -m comment --comment "dnat name: '
                '\\"net1\\" id: \\"c1\\"" -m multiport --dports '
                "8080,8443 -j HP-DN"
            ],
            "HP-MARK": [
                '-A HP-MARK -m comment --comment "CNI portfwd '
                'masquerade mark" -j MARK --set-xmark 0x2000/0x2000'
            ],
            "HP-MASQ": ["-A HP-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE"],
            "POSTROUTING": [
                '-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j HP-MASQ'
            ],
            "PREROUTING": ["-A PREROUTING -m addrtype --dst-type LOCAL -j HP-DNAT"],
        },
        {
            "FORWARD": ['-A FORWARD -m comment --comment "CNI firewall plugin rules" -j FW'],
            "FW": [
                "-A FW -d 10.88.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                "-A FW -s 10.88.0.5/32 -j ACCEPT",
                "-A FW -i cni0 ! -o cni0 -j RETURN",
            ],
            "INPUT": ["-A INPUT -i cni0 -p udp -m udp --dport 53 -j ACCEPT"],
        },
        ["HP-DN", "HP-DNAT", "HP-MARK", "HP-MASQ", "INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"],
    ],
    "refused_scripts_change_nothing": {
        "after": [
            ["A", "B", "INPUT", "NEW", "OUTPUT", "POSTROUTING", "PREROUTING"],
            {"A": ["-A A -j ACCEPT", "-A A -j RETURN"], "NEW": ["-A NEW -j RETURN"]},
        ],
        "append to a missing chain": "IptablesError",
        "create an existing chain": "IptablesError",
        "delete a chain holding rules": "IptablesError",
        "delete a chain in use": "IptablesError",
        "delete a missing rule": "IptablesError",
        "filter in nat": "IptablesError",
        "flush a missing chain": "IptablesError",
        "insert past the end": "IptablesError",
        "jump to a missing chain": "IptablesError",
        "then all good": "ok",
        "unchanged": True,
    },
}
