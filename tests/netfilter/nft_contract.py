"""The contract of FakeNftables (net/netfilter/fake_nft.py): cases run on it and on the real
nftables (nft_seam.ThreadNftables, libnftables and nf_tables netlink) in a private namespace.

Each case drives one ``Nftables`` and returns plain values: what the calls returned, the errno
name of each refusal ("ok" when accepted; a libnftables refusal is named by the strerror text
its message carries, which is what plugins match on) and what a listing shows afterwards
(names, comments, jump targets, element keys and comments; handles as the kernel numbers
them). ``EXPECTED`` holds what the real side answered when the case was written.
tests/netfilter/test_nft_contract.py checks the fake against it (no root); the kernel lane
(tests/netfilter/test_nft_contract_kernel.py) checks the real side against the same values and
against the fake, so neither can drift alone. A case asserts only what a plugin relies on.
"""

from __future__ import annotations

import errno
import ipaddress
import os
from collections.abc import Callable
from typing import Any

from pycni.net.netfilter import model
from pycni.net.netfilter.ipmasq import nft_backend as masq
from pycni.net.netfilter.nft_records import ChainRemoval, NftError, Removal
from pycni.net.netfilter.nft_seam import Nftables
from pycni.plugins.main.bridge import macspoofchk
from pycni.plugins.meta.portmap import nft_backend as portmap

Case = Callable[[Nftables], Any]
CASES: dict[str, Case] = {}

T = model.Table("inet", "contract", "contract table")
IP = ipaddress.ip_address
_NAMES = {
    os.strerror(code): errno.errorcode[code]
    for code in (errno.ENOENT, errno.EEXIST, errno.EBUSY, errno.EINVAL)
}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def outcome(fn: Callable[[], object]) -> str:
    """ "ok", or the errno name of the refusal (OSError's errno, NftError's strerror text)."""
    try:
        fn()
    except NftError as exc:
        return next((name for text, name in _NAMES.items() if text in str(exc)), "NftError")
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok"


def listing(nft: Nftables, command: str) -> Any:
    """What a plugin reads from a ``list`` answer: tables, chains (base chain hooks), rules
    (handle, comment, jump targets), sets (type, elements with comments; sorted)."""
    try:
        found = model.parse(nft.query(command))
    except NftError:
        return outcome(lambda: nft.query(command))
    return {
        "tables": sorted((t.family, t.name) for t in found.tables),
        "chains": [(c.name, c.type, c.hook, c.prio, c.policy) for c in found.chains],
        "rules": [(r.chain, r.handle, r.comment, [t for t in _targets(r)]) for r in found.rules],
        "sets": [
            (s.kind, s.name, s.type, s.map, sorted(_element(e) for e in s.elements))
            for s in found.sets
        ],
    }


def _targets(rule: model.Rule) -> list[str]:
    return [s.target for s in rule.statements if isinstance(s, model.Verdict) and s.target]


def _element(e: model.Element) -> tuple[str, str, str]:
    key = e.key.parts if isinstance(e.key, model.Concat) else e.key
    value = e.value.parts if isinstance(e.value, model.Concat) else e.value
    shown = value.target if isinstance(value, model.Verdict) else value
    return (str(key), str(shown), e.comment)


def _base(nft: Nftables) -> None:
    """A table with a base chain, two regular chains and sets of each kind the plugins use."""
    nft.apply_json(
        [
            model.add(T),
            model.add(model.Chain(T, "post", "nat", "postrouting", 100, "accept")),
            model.add(model.Chain(T, "c1")),
            model.add(model.Chain(T, "c2")),
            model.add(model.Set(T, "s4", "ipv4_addr")),
            model.add(model.Set(T, "s6", "ipv6_addr")),
            model.add(model.Set(T, "ports", ("inet_proto", "inet_service"), "verdict")),
        ]
    )
    # a map with concatenated data is made in nft text, as portmap does (libnftables 1.0.6
    # takes no JSON form of it)
    nft.apply(
        "add map inet contract dnat4"
        " { type inet_proto . inet_service : ipv4_addr . inet_service ; }\n"
    )


def _rule(chain: str, statements: list[model.Statement], comment: str = "") -> Any:
    return model.add(model.Rule(T, chain, statements, comment))


@case
def rules_and_chains(nft: Nftables) -> Any:
    """Rules keep their order, handles and comments; listing, the netlink dump and the
    existence questions agree; a flush empties one chain."""
    _base(nft)
    saddr = model.Match(model.Payload("ip", "saddr"), model.SetRef("s4"))
    nft.apply_json(
        [
            _rule("post", [model.Verdict("jump", "c1")], "to c1"),
            _rule("c1", [saddr, model.Masquerade()], "masq"),
            _rule("c1", [model.Verdict("goto", "c2")]),
            _rule("c2", [model.Verdict("accept")], "last"),
        ]
    )
    before = listing(nft, "list table inet contract")
    dump = [(r.handle, r.comment) for r in nft.chain_rules("inet", "contract", "c1")]
    nft.apply_json([model.flush(model.Chain(T, "c1"))])
    return {
        "before": before,
        "dump": dump,
        "chain": listing(nft, "list chain inet contract post"),
        "after_flush": nft.chain_rules("inet", "contract", "c1"),
        "exists": [
            nft.table_exists("inet", "contract"),
            nft.table_exists("ip", "ct"),
            nft.chain_exists("inet", "contract", "c2"),
            nft.chain_exists("inet", "contract", "nope"),
            nft.chain_exists("inet", "nope", "c2"),
            nft.set_exists("inet", "contract", "s4"),
            nft.set_exists("inet", "contract", "nope"),
        ],
        "tables": [(t.family, t.name) for t in model.parse(nft.query("list tables")).tables],
        "missing": nft.chain_rules("inet", "contract", "nope"),
        "available": nft.available(),
    }


@case
def refusals(nft: Nftables) -> Any:
    """What the kernel refuses, as plugins see it."""
    _base(nft)
    saddr = model.Match(model.Payload("ip", "saddr"), model.SetRef("s4"))
    nft.apply_json([_rule("c1", [saddr, model.Verdict("jump", "c2")])])

    def json(*commands: Any) -> Callable[[], None]:
        return lambda: nft.apply_json(list(commands))

    return {
        "create_table": outcome(json(model.create(T))),
        "create_chain": outcome(json(model.create(model.Chain(T, "c1")))),
        "create_set": outcome(json(model.create(model.Set(T, "s4", "ipv4_addr")))),
        "add_again": outcome(json(model.add(T), model.add(model.Chain(T, "c1")))),
        "flush_missing": outcome(json(model.flush(model.Chain(T, "nope")))),
        "rule_missing_chain": outcome(json(_rule("nope", [model.Verdict("accept")]))),
        "jump_missing": outcome(json(_rule("c1", [model.Verdict("jump", "nope")]))),
        "lookup_missing": outcome(
            json(_rule("c1", [model.Match(model.Payload("ip", "saddr"), model.SetRef("no"))]))
        ),
        "delete_rule_missing": outcome(json(model.delete(model.Rule(T, "c1", handle=999)))),
        "delete_set_in_use": outcome(json(model.delete(model.Set(T, "s4")))),
        "delete_chain_jumped_to": outcome(json(model.delete(model.Chain(T, "c2")))),
        "delete_missing_element": outcome(
            json(model.delete(model.Set(T, "s4"), [model.Element("10.0.0.9")]))
        ),
        "element_missing_set": outcome(
            json(model.add(model.Set(T, "nope"), [model.Element("10.0.0.9")]))
        ),
        "query_missing_chain": outcome(lambda: nft.query("list chain inet contract nope")),
        "query_missing_table": outcome(lambda: nft.query("list table inet nope")),
        "query_missing_set": outcome(lambda: nft.query("list set inet contract nope")),
        "delete_chain_with_rules": outcome(
            json(
                model.add(model.Chain(T, "full")),
                _rule("full", [model.Verdict("accept")]),
                model.delete(model.Chain(T, "full")),
            )
        ),
        "after": listing(nft, "list table inet contract"),
    }


@case
def transactions_are_atomic(nft: Nftables) -> Any:
    """A transaction or batch that fails anywhere changes nothing."""
    _base(nft)
    failed_json = outcome(
        lambda: nft.apply_json(
            [
                model.add(model.Chain(T, "new")),
                model.add(model.Set(T, "s4"), [model.Element("10.0.0.1")]),
                model.flush(model.Chain(T, "nope")),
            ]
        )
    )
    failed_text = outcome(
        lambda: nft.apply("add chain inet contract newer\nflush chain inet contract nope\n")
    )
    first = model.Element("10.0.0.2").change("s4", True, "kept")
    failed_batch = outcome(
        lambda: nft.change_elements(
            "inet",
            "ct",
            [
                model.Element("10.0.0.3").change("s4", True),
                model.Element("10.0.0.9").change("s4", False),
            ],
        )
    )
    nft.change_elements("inet", "contract", [first])
    failed_removal = outcome(
        lambda: nft.change_elements(
            "inet", "contract", [Removal("chain", "c2"), Removal("set", "s4", only_if_unused=True)]
        )
    )
    return {
        "json": failed_json,
        "text": failed_text,
        "batch": failed_batch,
        "removal": failed_removal,
        "after": listing(nft, "list table inet contract"),
    }


@case
def elements(nft: Nftables) -> Any:
    """Elements by JSON and by netlink are one thing: keys, map data, verdicts, comments;
    keyed lookups, dumps, and the add/delete rules of the kernel."""
    _base(nft)
    nft.apply_json(
        [
            model.add(
                model.Set(T, "s4"),
                [model.Element("10.0.0.1", comment="one"), model.Element("10.0.0.2")],
            ),
            model.add(model.Set(T, "s6"), [model.Element("fd00::1", comment="six")]),
            model.add(
                model.Set(T, "ports"),
                [model.Element(model.Concat(("tcp", 8080)), model.Verdict("jump", "c1"))],
            ),
            model.add(
                model.Set(T, "dnat4"),
                [model.Element(model.Concat(("udp", 53)), model.Concat(("10.0.0.5", 5353)), "dns")],
            ),
        ]
    )
    dnat = model.Element(model.Concat(("tcp", 80)), model.Concat(("10.0.0.6", 8080)))
    steps = {
        "netlink_add": outcome(
            lambda: nft.change_elements(
                "inet",
                "ct",
                [
                    model.Element("10.0.0.3").change("s4", True, "three"),
                    dnat.change("dnat", True, "web"),
                ],
            )
        ),
        "add_present_keeps_comment": outcome(
            lambda: nft.change_elements(
                "inet", "contract", [model.Element("10.0.0.1").change("s4", True, "other")]
            )
        ),
        "exclusive_present": outcome(
            lambda: nft.change_elements(
                "inet", "contract", [model.Element("10.0.0.1").change("s4", True, exclusive=True)]
            )
        ),
        "map_data_changed": outcome(
            lambda: nft.change_elements(
                "inet",
                "ct",
                [
                    model.Element(
                        model.Concat(("tcp", 80)), model.Concat(("10.0.0.7", 8080))
                    ).change("dnat", True)
                ],
            )
        ),
        "delete_missing": outcome(
            lambda: nft.change_elements(
                "inet", "contract", [model.Element("10.0.0.9").change("s4", False)]
            )
        ),
        "missing_set": outcome(
            lambda: nft.change_elements(
                "inet", "contract", [model.Element("10.0.0.9").change("nope", True)]
            )
        ),
        "add_delete_add": outcome(
            lambda: nft.change_elements(
                "inet",
                "ct",
                [
                    model.Element("10.0.0.2").change("s4", True),
                    model.Element("10.0.0.2").change("s4", False),
                    model.Element("10.0.0.2").change("s4", True, "two"),
                ],
            )
        ),
    }
    dnat_key = model.Element(model.Concat(("udp", 53))).key_bytes()
    vmap = nft.get_element(
        "inet", "contract", "ports", model.Element(model.Concat(("tcp", 8080))).key_bytes()
    )
    found = nft.get_element("inet", "contract", "dnat4", dnat_key)
    return {
        "steps": steps,
        "listed": [
            listing(nft, f"list {kind} inet contract {name}")
            for kind, name in (("set", "s4"), ("set", "s6"), ("map", "ports"), ("map", "dnat4"))
        ],
        "dump": sorted(
            (e.key.hex(), e.data.hex(), e.comment, e.chain)
            for e in nft.set_elements("inet", "contract", "dnat4") or []
        ),
        "vmap_element": None if vmap is None else (vmap.comment, vmap.chain, vmap.data.hex()),
        "dnat_element": None if found is None else (found.comment, found.data.hex()),
        "comments": [
            nft.element_comment("inet", "contract", "s4", IP("10.0.0.1")),
            nft.element_comment("inet", "contract", "s4", IP("10.0.0.2")),
            nft.element_comment("inet", "contract", "s4", IP("10.0.0.3")),
            nft.element_comment("inet", "contract", "s4", IP("10.0.0.9")),
            nft.element_comment("inet", "contract", "s6", IP("fd00::1")),
            nft.element_comment("inet", "contract", "nope", IP("10.0.0.1")),
        ],
        "empty": [
            nft.set_is_empty("inet", "contract", "s4"),
            nft.set_is_empty("inet", "contract", "ports"),
            nft.set_is_empty("inet", "contract", "nope"),
        ],
        "missing_dump": nft.set_elements("inet", "contract", "nope"),
        "missing_table": nft.get_element("inet", "nope", "s4", IP("10.0.0.1").packed),
    }


@case
def removals(nft: Nftables) -> Any:
    """Removals over netlink: ``only_if_unused`` refuses what still holds something; a chain
    removal takes its rules; a rule goes by handle; the empty table goes last."""
    _base(nft)
    nft.apply_json(
        [
            _rule(
                "c1",
                [
                    model.Match(model.Payload("ip", "saddr"), model.SetRef("s4")),
                    model.Verdict("accept"),
                ],
            ),
            _rule("c2", [model.Verdict("accept")], "in c2"),
            model.add(model.Set(T, "s4"), [model.Element("10.0.0.1")]),
        ]
    )
    handle = nft.chain_rules("inet", "contract", "c1")[0].handle

    def batch(*changes: Any) -> str:
        return outcome(lambda: nft.change_elements("inet", "contract", list(changes)))

    return {
        "set_with_elements": batch(Removal("set", "s6"), Removal("set", "s4", only_if_unused=True)),
        "set_in_use": batch(Removal("set", "s4")),
        "chain_with_rules": batch(Removal("chain", "c2", only_if_unused=True)),
        "table_in_use": batch(Removal("table", "contract", only_if_unused=True)),
        "rule_missing": batch(Removal("rule", "c1", 999)),
        "chain_missing": batch(ChainRemoval("nope")),
        "rule_and_set": batch(
            Removal("rule", "c1", handle),
            model.Element("10.0.0.1").change("s4", False),
            Removal("set", "s4", only_if_unused=True),
        ),
        "chain_removal": batch(ChainRemoval("c2")),
        "after": listing(nft, "list table inet contract"),
        "everything": batch(
            *[Removal(kind, name) for kind, name in (("chain", "c1"), ("chain", "post"))],
            *[Removal("set", name) for name in ("s6", "ports", "dnat4")],
            Removal("table", "contract", only_if_unused=True),
        ),
        "gone": nft.table_exists("inet", "contract"),
    }


@case
def plugin_scripts(nft: Nftables) -> Any:
    """The fixed nft text scripts plugins send (masquerade's and portmap's scaffolding,
    macspoofchk's chains) make the chains, sets and rules plugins then read back; sent again,
    they rebuild the same thing."""
    outcomes = []
    for _ in range(2):
        outcomes.append(outcome(lambda: nft.apply(masq.scaffold_script())))
        outcomes.append(
            outcome(lambda: nft.apply(portmap.scaffold_script({(13, 4, 24), (13, 6, 64)}, [13])))
        )
        outcomes.append(
            outcome(
                lambda: nft.apply(
                    macspoofchk.setup_script("veth1", "02:00:00:00:00:01", "cid-eth0")
                )
            )
        )
    return {
        "outcomes": outcomes,
        "masquerade": listing(nft, f"list table inet {masq.TABLE}"),
        "portmap_chains": listing(nft, "list chain inet pycni_portmap hostports")["rules"],
        "portmap_marks": [r.comment for r in nft.chain_rules("inet", "pycni_portmap", "marks")],
        "portmap_sets": sorted(
            (s.name, s.kind) for s in model.parse(nft.query("list table inet pycni_portmap")).sets
        ),
        "bridge": listing(nft, "list table bridge nat"),
    }


# What the real side answered (nft 1.0.6, kernel 6.1, Debian 12): PYTHONPATH=. and
# tests/netfilter/test_nft_contract_kernel.py's assertion show any change.
EXPECTED: dict[str, Any] = {
    "elements": {
        "steps": {
            "netlink_add": "ENOENT",
            "add_present_keeps_comment": "ok",
            "exclusive_present": "EEXIST",
            "map_data_changed": "ENOENT",
            "delete_missing": "ENOENT",
            "missing_set": "ENOENT",
            "add_delete_add": "ENOENT",
        },
        "listed": [
            {
                "tables": [],
                "chains": [],
                "rules": [],
                "sets": [
                    (
                        "set",
                        "s4",
                        "ipv4_addr",
                        "",
                        [("10.0.0.1", "None", "one"), ("10.0.0.2", "None", "")],
                    )
                ],
            },
            {
                "tables": [],
                "chains": [],
                "rules": [],
                "sets": [("set", "s6", "ipv6_addr", "", [("fd00::1", "None", "six")])],
            },
            {
                "tables": [],
                "chains": [],
                "rules": [],
                "sets": [
                    (
                        "map",
                        "ports",
                        ("inet_proto", "inet_service"),
                        "verdict",
                        [("('tcp', 8080)", "c1", "")],
                    )
                ],
            },
            {
                "tables": [],
                "chains": [],
                "rules": [],
                "sets": [
                    (
                        "map",
                        "dnat4",
                        ("inet_proto", "inet_service"),
                        "ipv4_addr . inet_service",
                        [("('udp', 53)", "('10.0.0.5', 5353)", "dns")],
                    )
                ],
            },
        ],
        "dump": [("1100000000350000", "0a00000514e90000", "dns", "")],
        "vmap_element": ("", "c1", ""),
        "dnat_element": ("dns", "0a00000514e90000"),
        "comments": ["one", "", None, None, "six", None],
        "empty": [False, False, None],
        "missing_dump": None,
        "missing_table": None,
    },
    "plugin_scripts": {
        "outcomes": ["ok", "ok", "ok", "ok", "ok", "ok"],
        "masquerade": {
            "tables": [("inet", "cni_plugins_masquerade")],
            "chains": [
                ("masq_checks", "", "", None, ""),
                ("postrouting", "nat", "postrouting", 100, "accept"),
            ],
            "rules": [
                ("postrouting", 6, "", []),
                ("postrouting", 7, "", []),
                ("postrouting", 8, "", ["masq_checks"]),
            ],
            "sets": [],
        },
        "portmap_chains": [
            ("hostports", 34, "", ["marks"]),
            ("hostports", 35, "", []),
            ("hostports", 36, "", []),
            ("hostports", 37, "", []),
            ("hostports", 38, "", []),
            ("hostports", 39, "", []),
            ("hostports", 40, "", []),
            ("hostports", 41, "", []),
            ("hostports", 42, "", []),
        ],
        "portmap_marks": ["b13 4/24", "b13 4/24", "b13 6/64", "b13 6/64"],
        "portmap_sets": [
            ("dnat4", "map"),
            ("dnat4h", "map"),
            ("dnat6", "map"),
            ("dnat6h", "map"),
            ("hostip4", "map"),
            ("hostip6", "map"),
            ("masq4-b13-p24", "set"),
            ("masq4h-b13-p24", "set"),
            ("masq6-b13-p64", "set"),
            ("masq6h-b13-p64", "set"),
            ("ports4", "map"),
            ("ports6", "map"),
        ],
        "bridge": {
            "tables": [("bridge", "nat")],
            "chains": [
                ("PREROUTING", "filter", "prerouting", -300, "accept"),
                ("cni-br-iface-cid-eth0", "", "", None, ""),
                ("cni-br-iface-cid-eth0-mac", "", "", None, ""),
            ],
            "rules": [
                ("PREROUTING", 4, "macspoofchk-cid-eth0", ["cni-br-iface-cid-eth0"]),
                ("PREROUTING", 8, "macspoofchk-cid-eth0", ["cni-br-iface-cid-eth0"]),
                ("cni-br-iface-cid-eth0", 9, "macspoofchk-cid-eth0", ["cni-br-iface-cid-eth0-mac"]),
                ("cni-br-iface-cid-eth0-mac", 10, "macspoofchk-cid-eth0", []),
                ("cni-br-iface-cid-eth0-mac", 11, "macspoofchk-cid-eth0", []),
            ],
            "sets": [],
        },
    },
    "refusals": {
        "create_table": "EEXIST",
        "create_chain": "EEXIST",
        "create_set": "EEXIST",
        "add_again": "ok",
        "flush_missing": "ENOENT",
        "rule_missing_chain": "ENOENT",
        "jump_missing": "ENOENT",
        "lookup_missing": "ENOENT",
        "delete_rule_missing": "ENOENT",
        "delete_set_in_use": "EBUSY",
        "delete_chain_jumped_to": "EBUSY",
        "delete_missing_element": "ENOENT",
        "element_missing_set": "ENOENT",
        "query_missing_chain": "ENOENT",
        "query_missing_table": "ENOENT",
        "query_missing_set": "ENOENT",
        "delete_chain_with_rules": "ok",
        "after": {
            "tables": [("inet", "contract")],
            "chains": [
                ("post", "nat", "postrouting", 100, "accept"),
                ("c1", "", "", None, ""),
                ("c2", "", "", None, ""),
            ],
            "rules": [("c1", 8, "", ["c2"])],
            "sets": [
                ("set", "s4", "ipv4_addr", "", []),
                ("set", "s6", "ipv6_addr", "", []),
                ("map", "ports", ("inet_proto", "inet_service"), "verdict", []),
                ("map", "dnat4", ("inet_proto", "inet_service"), "ipv4_addr . inet_service", []),
            ],
        },
    },
    "removals": {
        "set_with_elements": "EBUSY",
        "set_in_use": "EBUSY",
        "chain_with_rules": "EBUSY",
        "table_in_use": "EBUSY",
        "rule_missing": "ENOENT",
        "chain_missing": "ENOENT",
        "rule_and_set": "EBUSY",
        "chain_removal": "ok",
        "after": {
            "tables": [("inet", "contract")],
            "chains": [("post", "nat", "postrouting", 100, "accept"), ("c1", "", "", None, "")],
            "rules": [("c1", 8, "", [])],
            "sets": [
                ("set", "s4", "ipv4_addr", "", [("10.0.0.1", "None", "")]),
                ("set", "s6", "ipv6_addr", "", []),
                ("map", "ports", ("inet_proto", "inet_service"), "verdict", []),
                ("map", "dnat4", ("inet_proto", "inet_service"), "ipv4_addr . inet_service", []),
            ],
        },
        "everything": "EBUSY",
        "gone": True,
    },
    "rules_and_chains": {
        "before": {
            "tables": [("inet", "contract")],
            "chains": [
                ("post", "nat", "postrouting", 100, "accept"),
                ("c1", "", "", None, ""),
                ("c2", "", "", None, ""),
            ],
            "rules": [
                ("post", 8, "to c1", ["c1"]),
                ("c1", 9, "masq", []),
                ("c1", 10, "", ["c2"]),
                ("c2", 11, "last", []),
            ],
            "sets": [
                ("set", "s4", "ipv4_addr", "", []),
                ("set", "s6", "ipv6_addr", "", []),
                ("map", "ports", ("inet_proto", "inet_service"), "verdict", []),
                ("map", "dnat4", ("inet_proto", "inet_service"), "ipv4_addr . inet_service", []),
            ],
        },
        "dump": [(9, "masq"), (10, "")],
        "chain": {
            "tables": [],
            "chains": [("post", "nat", "postrouting", 100, "accept")],
            "rules": [("post", 8, "to c1", ["c1"])],
            "sets": [],
        },
        "after_flush": [],
        "exists": [True, False, True, False, False, True, False],
        "tables": [("inet", "contract")],
        "missing": [],
        "available": True,
    },
    "transactions_are_atomic": {
        "json": "ENOENT",
        "text": "ENOENT",
        "batch": "ENOENT",
        "removal": "EBUSY",
        "after": {
            "tables": [("inet", "contract")],
            "chains": [
                ("post", "nat", "postrouting", 100, "accept"),
                ("c1", "", "", None, ""),
                ("c2", "", "", None, ""),
            ],
            "rules": [],
            "sets": [
                ("set", "s4", "ipv4_addr", "", [("10.0.0.2", "None", "kept")]),
                ("set", "s6", "ipv6_addr", "", []),
                ("map", "ports", ("inet_proto", "inet_service"), "verdict", []),
                ("map", "dnat4", ("inet_proto", "inet_service"), "ipv4_addr . inet_service", []),
            ],
        },
    },
}
