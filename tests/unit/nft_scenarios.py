"""The scenarios of the golden transport tests (test_nft_model.py): portmap's nftables backend,
masquerading (both backends), the firewall plugin (both backends) and inspect's nftables
reader, each run against scripted kernel answers through the entry points their callers use.

Names (chains, sets, comments) are computed here from their documented hashes, not through
the code under test, so a scenario keeps meaning the same thing across a refactor.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable
from typing import Any

from pycni.net.netfilter import ipmasq
from pycni.net.netfilter.nft_records import NftError
from pycni.plugins.meta.portmap.config import PortMapConfig, PortMapping
from pycni.record import asdict
from pycni.skel.base import Request
from pycni.spec.errors import CNIError
from pycni.spec.result import IPInterface
from tests.unit.nft_transport import EEXIST, ENOENT, Recorder, element, packed, rule

Scenario = Callable[[Recorder, str], Any]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def h(text: str, n: int) -> str:
    return hashlib.sha512(text.encode()).hexdigest()[:n]


def caught(fn: Callable[[], Any]) -> Any:
    """The result, or the error a verb raised (its type and message: part of the behaviour)."""
    try:
        out = fn()
    except (CNIError, OSError, ValueError, RuntimeError) as exc:
        code = getattr(exc, "code", None)
        return {"error": type(exc).__name__, "code": code, "message": str(exc)}
    return out if isinstance(out, bool | int | str | list | type(None)) else repr(out)


# --- portmap -----------------------------------------------------------------------------------


def portmap_cfg(**kw: Any) -> PortMapConfig:
    base: dict[str, Any] = {
        "network": "net",
        "container_id": "cid",
        "ifname": "eth0",
        "mappings": [
            PortMapping(8080, 80, "tcp"),
            PortMapping(8081, 81, "udp", ipaddress.ip_address("192.0.2.1")),
            PortMapping(8082, 82, "sctp", ipaddress.ip_address("2001:db8::1")),
        ],
        "backend": "nftables",
        "container_ips": {
            4: ipaddress.ip_interface("10.0.0.2/24"),
            6: ipaddress.ip_interface("fd00::2/64"),
        },
    }
    base.update(kw)
    return PortMapConfig(**base)


def pm_chain(network: str = "net", cid: str = "cid", ifname: str = "eth0") -> str:
    attachment = "\0".join((network, cid, ifname))
    return f"pm-{h(network, 8)}-{h(attachment, 20)}"


def _conditions() -> dict[str, Any]:
    from pycni.net.netfilter import rule_matches

    v4, _ = rule_matches.parse("conditionsV4", ["ip", "saddr", "!=", "10.9.0.0/16"], 4)
    v6, _ = rule_matches.parse(
        "conditionsV6", ["iifname", "eth*", "fib", "daddr", "type", "local"], 6
    )
    return {"conditions_v4": v4, "conditions_v6": v6}


def _backend() -> Any:
    from pycni.plugins.meta.portmap import nft_backend

    return nft_backend.BACKEND


def _scaffold_present(rec: Recorder, groups: list[str]) -> None:
    rec.answer("nftnl.chain_rules", "hostports", [rule(i, "") for i in range(9)])
    rec.answer("nftnl.chain_rules", "prerouting", [rule(20, "")])
    rec.answer("nftnl.chain_rules", "output", [rule(21, "")])
    rec.answer("nftnl.chain_rules", "masq-b13", [rule(22, "")])
    rec.answer(
        "nftnl.chain_rules",
        "marks",
        [rule(30 + i, g) for i, g in enumerate(g2 for g2 in groups for _ in (0, 1))],
    )


@scenario
def portmap_add_maps_fresh(rec: Recorder, _tmp: str) -> Any:
    return caught(lambda: _backend().add(rec.nf, portmap_cfg(), lambda step: None) and None)


@scenario
def portmap_add_maps_masq_all_existing(rec: Recorder, _tmp: str) -> Any:
    _scaffold_present(rec, ["b13 4/0", "b13 6/0"])
    cfg = portmap_cfg(masq_all=True)
    return caught(lambda: _backend().add(rec.nf, cfg, lambda step: None) and None)


@scenario
def portmap_add_maps_marks_drifted(rec: Recorder, _tmp: str) -> Any:
    _scaffold_present(rec, ["b13 4/24"])
    rec.answer("nftnl.chain_rules", "marks", [rule(30, "b13 4/24"), rule(31, "b7 6/64")])
    cfg = portmap_cfg(mark_bit=7)
    return caught(lambda: _backend().add(rec.nf, cfg, lambda step: None) and None)


@scenario
def portmap_add_maps_conflict(rec: Recorder, _tmp: str) -> Any:
    _scaffold_present(rec, ["b13 4/24", "b13 4/32", "b13 6/64"])
    rec.fail_next("nftnl.batch", EEXIST)
    key = "06000000" + (8080).to_bytes(2, "big").hex() + "0000"
    rec.answer("nftnl.get_element", f"dnat4 {key}", element("pm-other"))
    return caught(lambda: _backend().add(rec.nf, portmap_cfg(), lambda step: None))


@scenario
def portmap_add_maps_replaces_own(rec: Recorder, _tmp: str) -> Any:
    _scaffold_present(rec, ["b13 4/24", "b13 4/32", "b13 6/64"])
    rec.fail_next("nftnl.batch", EEXIST)
    key = "06000000" + (8080).to_bytes(2, "big").hex() + "0000"
    rec.answer("nftnl.get_element", f"dnat4 {key}", element(pm_chain()))
    rec.answer("nftnl.set_elements", "dnat4", [element(pm_chain(), bytes.fromhex(key))])
    return caught(lambda: _backend().add(rec.nf, portmap_cfg(), lambda step: None) and None)


@scenario
def portmap_add_chain_layout(rec: Recorder, _tmp: str) -> Any:
    cfg = portmap_cfg(**_conditions())
    return caught(lambda: _backend().add(rec.nf, cfg, lambda step: None) and None)


@scenario
def portmap_add_chain_layout_no_snat(rec: Recorder, _tmp: str) -> Any:
    cfg = portmap_cfg(snat=False, masq_all=True, **_conditions())
    return caught(lambda: _backend().add(rec.nf, cfg, lambda step: None) and None)


@scenario
def portmap_add_chain_layout_taken(rec: Recorder, _tmp: str) -> Any:
    cfg = portmap_cfg(**_conditions())
    rec.fail_next("nft.json", NftError("Could not process rule: File exists"))
    rec.answer(
        "nft.query",
        "list map inet pycni_portmap ports4",
        [
            {
                "map": {
                    "name": "ports4",
                    "elem": [[{"concat": ["tcp", 8080]}, {"jump": {"target": "pm-x"}}]],
                }
            }
        ],
    )
    return caught(lambda: _backend().add(rec.nf, cfg, lambda step: None))


@scenario
def portmap_delete_known(rec: Recorder, _tmp: str) -> Any:
    key = "06000000" + (8080).to_bytes(2, "big").hex() + "0000"
    rec.answer("nftnl.get_element", f"dnat4 {key}", element(pm_chain()))
    return caught(lambda: _backend().delete(rec.nf, portmap_cfg()))


@scenario
def portmap_delete_unknown_dumps(rec: Recorder, _tmp: str) -> Any:
    rec.answer("nftnl.chain_rules", "marks", [rule(1, "b13 4/24"), rule(2, "b13 4/24")])
    rec.answer(
        "nftnl.set_elements",
        "dnat4",
        [element(pm_chain(), b"\x06\0\0\0\x1f\x90\0\0"), element("pm-x", b"\x06")],
    )
    rec.answer("nftnl.set_elements", "masq4-b13-p24", [element(pm_chain(), b"\x0a\0\0\0")])
    rec.fail_next("nftnl.batch", ENOENT, None, ENOENT)
    cfg = portmap_cfg(mappings_given=False, container_ips={})
    return caught(lambda: _backend().delete(rec.nf, cfg))


@scenario
def portmap_delete_chain_fast(rec: Recorder, _tmp: str) -> Any:
    rec.answer(
        "nftnl.chain_rules",
        pm_chain(),
        [
            rule(5, ""),
            rule(6, "k ports4 tcp . 8080"),
            rule(7, "k hostip4 192.0.2.1 . udp . 8081"),
            rule(8, "k bogus x"),
        ],
    )
    return caught(lambda: _backend().delete(rec.nf, portmap_cfg()))


@scenario
def portmap_delete_chain_slow(rec: Recorder, _tmp: str) -> Any:
    chain = pm_chain()
    rec.answer("nftnl.chain_rules", chain, OSError(1, "EPERM"))
    rec.answer(
        "nft.query",
        f"list chain inet pycni_portmap {chain}",
        [
            {"chain": {"name": chain}},
            {"rule": {"handle": 4, "comment": "k ports6 udp . 53", "expr": []}},
        ],
    )
    rec.answer(
        "nft.query",
        "list map inet pycni_portmap ports6",
        [
            {
                "map": {
                    "name": "ports6",
                    "elem": [[{"concat": ["tcp", 99]}, {"goto": {"target": chain}}]],
                }
            }
        ],
    )
    rec.fail_next("nft.json", NftError("No such file or directory"))
    return caught(lambda: _backend().delete(rec.nf, portmap_cfg()))


@scenario
def portmap_gc(rec: Recorder, _tmp: str) -> Any:
    stale = pm_chain("net", "old", "eth0")
    rec.answer(
        "nft.query",
        "list table inet pycni_portmap",
        [
            {"table": {"name": "pycni_portmap"}},
            {"chain": {"name": stale}},
            {"chain": {"name": pm_chain()}},
            {"chain": {"name": pm_chain("other", "old", "eth0")}},
            {
                "map": {
                    "name": "hostip4",
                    "elem": [
                        [{"concat": ["192.0.2.9", "tcp", 80]}, {"jump": {"target": stale}}],
                        [
                            {"elem": {"val": {"concat": ["192.0.2.8", "udp", 81]}}},
                            {"jump": {"target": pm_chain()}},
                        ],
                    ],
                }
            },
        ],
    )
    rec.answer("nftnl.set_elements", "dnat6", [element(pm_chain("net", "gone", "eth1"), b"\x11")])
    return caught(lambda: _backend().gc(rec.nf, portmap_cfg(), [("cid", "eth0")]))


@scenario
def portmap_check_chain_layout(rec: Recorder, _tmp: str) -> Any:
    cfg = portmap_cfg(**_conditions())
    chain = pm_chain()
    rules = [
        {"handle": i, "comment": c}
        for i, c in enumerate(
            [
                "",
                "",
                "k ports4 tcp . 8080",
                "",
                "",
                "k hostip4 192.0.2.1 . udp . 8081",
                "",
                "k ports6 tcp . 8080",
                "",
                "k hostip6 2001:db8::1 . sctp . 8082",
            ]
        )
    ]
    rec.answer("nft.query", f"list chain inet pycni_portmap {chain}", [{"rule": r} for r in rules])
    rec.answer(
        "nft.query",
        "list map inet pycni_portmap ports4",
        [
            {
                "map": {
                    "name": "ports4",
                    "elem": [[{"concat": ["tcp", 8080]}, {"jump": {"target": chain}}]],
                }
            }
        ],
    )
    return caught(lambda: _backend().check(rec.nf, cfg))


@scenario
def portmap_check_maps(rec: Recorder, _tmp: str) -> Any:
    key = "06000000" + (8080).to_bytes(2, "big").hex() + "0000"
    data = packed("10.0.0.2") + (80).to_bytes(2, "big").hex() + "0000"
    rec.answer("nftnl.get_element", f"dnat4 {key}", element(pm_chain(), data=bytes.fromhex(data)))
    return caught(lambda: _backend().check(rec.nf, portmap_cfg()))


@scenario
def portmap_scaffold_texts(rec: Recorder, _tmp: str) -> Any:
    from pycni.plugins.meta.portmap import nft_backend

    return [
        nft_backend.scaffold_script({(13, 4, 24), (13, 4, 32), (3, 6, 64)}, [7]),
        nft_backend.scaffold_script({(13, 4, 24)}, flush_marks=False),
    ]


# --- masquerade --------------------------------------------------------------------------------

IPNS: list[IPInterface] = [
    ipaddress.ip_interface("10.88.0.5/16"),
    ipaddress.ip_interface("fd88::5/64"),
]


def masq_set(network: str, subnet: str) -> str:
    return f"pycni-{h(network, 16)}-{h(subnet, 12)}"


@scenario
def masq_setup_new_network(rec: Recorder, _tmp: str) -> Any:
    rec.answer("nftnl.set_exists", masq_set("mnet", "10.88.0.0/16"), False)
    rec.fail_next("nft.json", None, NftError("Error: Could not process rule: File exists"))
    return caught(lambda: ipmasq.backend("nftables").setup(rec.nf, IPNS, "mnet", "eth0", "c1"))


@scenario
def masq_setup_existing(rec: Recorder, _tmp: str) -> Any:
    return caught(lambda: ipmasq.backend("nftables").setup(rec.nf, IPNS, 'm"net', "eth0", "c1"))


@scenario
def masq_setup_set_vanished(rec: Recorder, _tmp: str) -> Any:
    rec.fail_next("nftnl.batch", ENOENT)
    return caught(lambda: ipmasq.backend("nftables").setup(rec.nf, IPNS[:1], "mnet", "eth0", "c1"))


@scenario
def masq_teardown_known(rec: Recorder, _tmp: str) -> Any:
    comment = ipmasq.comment_for_instance("mnet", "eth0", "c1")
    s4 = masq_set("mnet", "10.88.0.0/16")
    rec.answer("nftnl.get_element", f"{s4} {packed('10.88.0.5')}", element(comment))
    rec.answer("nftnl.chain_rules", "masq_checks", [rule(3, comment), rule(4, "pycni net: mnet")])
    rec.answer("nftnl.set_is_empty", s4, False)
    nft_backend = ipmasq.backend("nftables")
    return caught(lambda: ipmasq.teardown(rec.nf, nft_backend, IPNS, "mnet", "eth0", "c1"))


@scenario
def masq_teardown_last(rec: Recorder, _tmp: str) -> Any:
    comment = ipmasq.comment_for_instance("mnet", "eth0", "c1")
    s4, s6 = masq_set("mnet", "10.88.0.0/16"), masq_set("mnet", "fd88::/64")
    rec.answer("nftnl.get_element", f"{s4} {packed('10.88.0.5')}", element(comment))
    rec.answer("nftnl.get_element", f"{s6} {packed('fd88::5')}", element(comment))
    rec.answer("nftnl.set_is_empty", s4, True)
    rec.answer("nftnl.set_is_empty", s6, None)
    rec.answer("nftnl.chain_rules", "masq_checks", [rule(4, "pycni net: mnet")])
    net_chain = f"pycni-{h('mnet', 16)}"
    rec.answer(
        "nftnl.chain_rules",
        net_chain,
        [rule(8, "pycni 10.88.0.0/16 net: mnet"), rule(9, "pycni fd88::/64 net: mnet")],
    )
    rec.fail_next("nftnl.batch", ENOENT, None, None)
    return caught(lambda: ipmasq.backend("nftables").teardown(rec.nf, IPNS, "mnet", "eth0", "c1"))


@scenario
def masq_teardown_no_ips(rec: Recorder, _tmp: str) -> Any:
    comment = ipmasq.comment_for_instance("mnet", "eth0", "c1")
    s4 = masq_set("mnet", "10.88.0.0/16")
    net_chain = f"pycni-{h('mnet', 16)}"
    rec.answer(
        "nftnl.chain_rules", net_chain, [rule(8, "pycni 10.88.0.0/16 net: mnet"), rule(9, "odd")]
    )
    rec.answer(
        "nft.query",
        f"list set inet cni_plugins_masquerade {s4}",
        [
            {
                "set": {
                    "name": s4,
                    "elem": [{"elem": {"val": "10.88.0.5", "comment": comment}}, "10.88.0.6"],
                }
            }
        ],
    )
    return caught(lambda: ipmasq.backend("nftables").teardown(rec.nf, [], "mnet", "eth0", "c1"))


@scenario
def masq_gc(rec: Recorder, _tmp: str) -> Any:
    keep = ipmasq.comment_for_instance("mnet", "eth0", "c1")
    gone = ipmasq.comment_for_instance("mnet", "eth0", "c2")
    s4 = masq_set("mnet", "10.88.0.0/16")
    net_chain = f"pycni-{h('mnet', 16)}"
    rec.answer("nftnl.chain_rules", net_chain, [rule(8, "pycni 10.88.0.0/16 net: mnet")])
    rec.answer(
        "nftnl.chain_rules",
        "masq_checks",
        [rule(3, gone), rule(4, keep), rule(5, "pycni net: mnet")],
    )
    rec.answer(
        "nft.query",
        f"list set inet cni_plugins_masquerade {s4}",
        [
            {
                "set": {
                    "name": s4,
                    "elem": [
                        {"elem": {"val": "10.88.0.5", "comment": keep}},
                        {"elem": {"val": "10.88.0.6", "comment": gone}},
                    ],
                }
            }
        ],
    )
    return caught(lambda: ipmasq.gc(rec.nf, "mnet", [("c1", "eth0")]))


@scenario
def masq_iptables_setup(rec: Recorder, _tmp: str) -> Any:
    rec.exec_rc = {"-w -t nat -S": 1, "-w -t nat -C POSTROUTING": 0, "-w -t nat -C": 1}
    return caught(lambda: ipmasq.backend("iptables").setup(rec.nf, IPNS, "mnet", "eth0", "c1"))


@scenario
def masq_iptables_teardown(rec: Recorder, _tmp: str) -> Any:
    chosen = ipmasq.backend("iptables")
    chain = f"CNI-{h('mnet' + 'c1', 24)}"
    rec.answer("nftnl.chain_exists", chain, True)
    # without the pod's IPs the POSTROUTING jump is found by its target (one save, one restore)
    comment = ipmasq.iptables_comment("mnet", "c1").replace('"', '\\"')
    saved = (
        f"*nat\n:POSTROUTING ACCEPT [0:0]\n:{chain} - [0:0]\n"
        f'-A POSTROUTING -s 10.88.0.5/32 -m comment --comment "{comment}" -j {chain}\n'
        f"-A {chain} -d 10.88.0.0/16 -j ACCEPT\nCOMMIT\n"
    )
    rec.answer("iptables.save", "nat 4", saved)
    return caught(lambda: ipmasq.teardown(rec.nf, chosen, [], "mnet", "eth0", "c1"))


@scenario
def masq_iptables_gc(rec: Recorder, _tmp: str) -> Any:
    """GC finds the reference's chains of stale attachments by their POSTROUTING jump's
    comment: c2's goes, valid c1's and another network's stay."""
    rec.answer("nftnl.chain_exists", "POSTROUTING", True)
    lines = ["*nat", ":POSTROUTING ACCEPT [0:0]"]
    for net, cid, ip in (
        ("mnet", "c1", "10.88.0.5"),
        ("mnet", "c2", "10.88.0.6"),
        ("o", "c2", "10.9.0.2"),
    ):
        chain = f"CNI-{h(net + cid, 24)}"
        comment = ipmasq.iptables_comment(net, cid).replace('"', '\\"')
        lines.insert(2, f":{chain} - [0:0]")
        lines.append(f'-A POSTROUTING -s {ip}/32 -m comment --comment "{comment}" -j {chain}')
    rec.answer("iptables.save", "nat 4", "\n".join([*lines, "COMMIT", ""]))
    return caught(lambda: ipmasq.backend("iptables").gc(rec.nf, "mnet", [("c1", "eth0")]))


@scenario
def masq_legacy_script(rec: Recorder, _tmp: str) -> Any:
    from pycni.net.netfilter.ipmasq import nft_backend

    return nft_backend.nft_setup_script(IPNS, "mnet", "eth0", "c1", [7, 9])


# --- firewall ----------------------------------------------------------------------------------

FW_PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/x"}],
    "ips": [
        {"address": "10.22.0.5/16", "interface": 2},
        {"address": "fd22::5/64", "interface": 2},
    ],
}


def fw_request(rec: Recorder, command: str, tmp: str, prev: Any = FW_PREV, **conf: Any) -> Request:
    config: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "fwnet",
        "type": "firewall",
        "dataDir": tmp,
        **conf,
    }
    if prev is not None:
        config["prevResult"] = prev
    return Request(
        command, "ctr1", "/run/netns/p", "eth0", "", [], config, b"", {}, host=rec.host()
    )


def _fw(method: str, req: Request) -> Any:
    from pycni.plugins.meta.firewall.plugin import PLUGIN

    def run() -> Any:
        out = getattr(PLUGIN, method)(req)
        return None if out is None else "result"

    return caught(run)


def fw_comment(network: str, ifname: str, cid: str) -> str:
    return ipmasq.comment_for_instance(network, ifname, cid)


@scenario
def firewall_nft_add_open(rec: Recorder, tmp: str) -> Any:
    return _fw("add", fw_request(rec, "ADD", tmp, backend="nftables"))


@scenario
def firewall_nft_add_isolated_first(rec: Recorder, tmp: str) -> Any:
    rec.fail_next("nft.json", NftError("Error: No such file or directory"))
    rec.answer(
        "nft.query",
        "list chain inet pycni_firewall pods",
        [{"rule": {"handle": 3, "expr": [{"jump": {"target": "net-other"}}]}}],
    )
    rec.answer(
        "nft.query",
        "list chain inet pycni_firewall isolation_stage1",
        [{"rule": {"handle": 4, "expr": [{"jump": {"target": f"iso1-{h('cni0', 16)}"}}]}}],
    )
    req = fw_request(
        rec,
        "ADD",
        tmp,
        backend="nftables",
        ingressPolicy="isolated",
        iptablesAdminChainName="MYADMIN",
    )
    return _fw("add", req)


@scenario
def firewall_nft_add_refused(rec: Recorder, tmp: str) -> Any:
    rec.fail_next("nft.json", NftError("Error: Operation not permitted"))
    return _fw("add", fw_request(rec, "ADD", tmp, backend="nftables", ingressPolicy="same-bridge"))


@scenario
def firewall_nft_del(rec: Recorder, tmp: str) -> Any:
    prefix = fw_comment("fwnet", "eth0", "ctr1")[:33]
    base = f"net-{h('fwnet', 16)}"
    rec.answer(
        "nft.query",
        "list chain inet pycni_firewall pods",
        [
            {"rule": {"handle": 3, "comment": prefix + ", old rule"}},
            {"rule": {"handle": 4, "comment": "other"}},
        ],
    )
    rec.answer(
        "nft.query",
        f"list set inet pycni_firewall {base}-v4",
        [
            {
                "set": {
                    "elem": [{"elem": {"val": "10.22.0.5", "comment": prefix + ", x"}}, "10.22.0.7"]
                }
            }
        ],
    )
    return _fw("delete", fw_request(rec, "DEL", tmp, backend="nftables"))


@scenario
def firewall_nft_gc(rec: Recorder, tmp: str) -> Any:
    keep = fw_comment("fwnet", "eth0", "ctr1")
    gone = fw_comment("fwnet", "eth0", "ctr2")
    base = f"net-{h('fwnet', 16)}"
    rec.answer(
        "nft.query",
        "list chain inet pycni_firewall pods",
        [{"rule": {"handle": 5, "comment": gone}}],
    )
    rec.answer(
        "nft.query",
        f"list set inet pycni_firewall {base}-v6",
        [
            {
                "set": {
                    "elem": [
                        {"elem": {"val": "fd22::5", "comment": keep}},
                        {"elem": {"val": "fd22::7", "comment": gone}},
                    ]
                }
            }
        ],
    )
    req = fw_request(rec, "GC", tmp, prev=None, backend="nftables")
    req.config["cni.dev/valid-attachments"] = [{"containerID": "ctr1", "ifname": "eth0"}]
    return _fw("gc", req)


@scenario
def firewall_nft_check(rec: Recorder, tmp: str) -> Any:
    comment = fw_comment("fwnet", "eth0", "ctr1")
    base = f"net-{h('fwnet', 16)}"
    rec.answer(
        "nft.query",
        f"list set inet pycni_firewall {base}-v4",
        [{"set": {"elem": [{"elem": {"val": "10.22.0.5", "comment": comment}}]}}],
    )
    rec.answer(
        "nft.query",
        f"list set inet pycni_firewall {base}-v6",
        [{"set": {"elem": [{"elem": {"val": "fd22::5", "comment": comment}}]}}],
    )
    rec.answer(
        "nft.query",
        "list chain inet pycni_firewall pods",
        [{"rule": {"expr": [{"jump": {"target": base}}]}}],
    )
    first = _fw("check", fw_request(rec, "CHECK", tmp, backend="nftables"))
    rec.answer(
        "nft.query",
        "list chain inet pycni_firewall forward",
        [{"rule": {"expr": [{"jump": {"target": "pods"}}]}}],
    )
    return [first, _fw("check", fw_request(rec, "CHECK", tmp, backend="nftables"))]


SAVED4 = """*filter
:FORWARD ACCEPT [0:0]
:CNI-FORWARD - [0:0]
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -s 10.22.0.5/32 -j ACCEPT
COMMIT
"""


@scenario
def firewall_ipt_add(rec: Recorder, tmp: str) -> Any:
    rec.answer("iptables.save", "filter 4", SAVED4)
    req = fw_request(rec, "ADD", tmp, backend="iptables", ingressPolicy="same-bridge")
    return _fw("add", req)


@scenario
def firewall_ipt_add_rolls_back(rec: Recorder, tmp: str) -> Any:
    from pycni.net.netfilter import iptables

    rec.fail_next("iptables.restore", None, *[iptables.IptablesError("busy")] * 3)
    return _fw("add", fw_request(rec, "ADD", tmp, backend="iptables"))


@scenario
def firewall_ipt_del_and_check(rec: Recorder, tmp: str) -> Any:
    rec.answer("iptables.save", "filter 4", SAVED4)
    check = _fw("check", fw_request(rec, "CHECK", tmp, backend="iptables"))
    return [check, _fw("delete", fw_request(rec, "DEL", tmp, backend="iptables"))]


@scenario
def firewall_ipt_gc(rec: Recorder, tmp: str) -> Any:
    import json
    import os

    os.makedirs(os.path.join(tmp, "fwnet"))
    for cid, ips in (("ctr1", ["10.22.0.5"]), ("ctr2", ["10.22.0.5", "10.22.0.6", "fd22::6"])):
        with open(os.path.join(tmp, "fwnet", f"{cid}_eth0"), "w") as fh:
            json.dump({"containerID": cid, "ifname": "eth0", "ips": ips}, fh)
    req = fw_request(rec, "GC", tmp, prev=None, backend="iptables")
    req.config["cni.dev/valid-attachments"] = [{"containerID": "ctr1", "ifname": "eth0"}]
    out = _fw("gc", req)
    return [out, sorted(os.listdir(os.path.join(tmp, "fwnet")))]


@scenario
def firewall_status(rec: Recorder, tmp: str) -> Any:
    return [
        _fw("status", fw_request(rec, "STATUS", tmp, prev=None, backend=b))
        for b in ("iptables", "nftables", "firewalld")
    ]


# --- inspect ----------------------------------------------------------------------------------


def _inspect_tables(rec: Recorder) -> None:
    rec.answer(
        "nft.query",
        "list tables",
        [
            {"table": {"family": "inet", "name": "pycni_portmap"}},
            {"table": {"family": "ip", "name": "cni_hostport"}},
            {"table": {"family": "inet", "name": "filter"}},
        ],
    )
    chain = pm_chain()
    rec.answer(
        "nft.query",
        "list table inet pycni_portmap",
        [
            {"table": {"family": "inet", "name": "pycni_portmap"}},
            {"chain": {"family": "inet", "table": "pycni_portmap", "name": chain}},
            {
                "map": {
                    "family": "inet",
                    "name": "dnat4",
                    "table": "pycni_portmap",
                    "elem": [
                        [
                            {"elem": {"val": {"concat": ["tcp", 8080]}, "comment": chain}},
                            {"concat": ["10.0.0.2", 80]},
                        ],
                        [{"concat": ["udp", 53]}, {"concat": ["10.0.0.3", 5353]}],
                        ["junk"],
                    ],
                }
            },
            {
                "map": {
                    "family": "inet",
                    "name": "dnat6h",
                    "table": "pycni_portmap",
                    "elem": [[{"concat": ["fd00::1", "sctp", 9]}, {"concat": ["fd00::2", 10]}]],
                }
            },
            {
                "map": {
                    "family": "inet",
                    "name": "ports4",
                    "table": "pycni_portmap",
                    "elem": [[{"concat": ["tcp", 8081]}, {"jump": {"target": chain}}]],
                }
            },
            {
                "rule": {
                    "family": "inet",
                    "table": "pycni_portmap",
                    "chain": chain,
                    "handle": 12,
                    "comment": "k ports4 tcp . 8081",
                    "expr": [
                        {
                            "match": {
                                "op": "==",
                                "left": {"meta": {"key": "nfproto"}},
                                "right": "ipv4",
                            }
                        },
                        {
                            "match": {
                                "op": "==",
                                "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                                "right": 8081,
                            }
                        },
                        {"dnat": {"family": "ip", "addr": "10.0.0.4", "port": 81}},
                    ],
                }
            },
        ],
    )
    rec.answer(
        "nft.query",
        "list table ip cni_hostport",
        [
            {
                "rule": {
                    "family": "ip",
                    "table": "cni_hostport",
                    "chain": "hostports",
                    "handle": 7,
                    "comment": "ctr9",
                    "expr": [
                        {
                            "match": {
                                "op": "==",
                                "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                                "right": "192.0.2.1",
                            }
                        },
                        {
                            "match": {
                                "op": "==",
                                "left": {"payload": {"protocol": "udp", "field": "dport"}},
                                "right": 53,
                            }
                        },
                        {"dnat": {"addr": "10.1.0.9"}},
                    ],
                }
            },
            {
                "rule": {
                    "family": "ip",
                    "table": "cni_hostport",
                    "chain": "masq",
                    "handle": 8,
                    "comment": "ctr9",
                    "expr": [{"masquerade": None}],
                }
            },
        ],
    )


@scenario
def inspect_read_mappings(rec: Recorder, _tmp: str) -> Any:
    from pycni.inspect import nftmap

    _inspect_tables(rec)
    found, errors = nftmap.read_mappings(rec.nf.nft)
    return [[asdict(m) for m in found], errors]


@scenario
def inspect_delete_mappings(rec: Recorder, _tmp: str) -> Any:
    from pycni.inspect import nftmap

    _inspect_tables(rec)
    rec.answer("nftnl.chain_rules", "marks", [rule(1, "b13 4/24")])
    rec.answer(
        "nftnl.set_elements", "dnat4", [element(pm_chain(), b"\x06"), element("pm-z", b"\x11")]
    )
    found, _errors = nftmap.read_mappings(rec.nf.nft)
    for mapping in found:
        nftmap.delete_mapping(mapping, rec.nf.nft)
    return len(found)


@scenario
def inspect_read_masquerades(rec: Recorder, _tmp: str) -> Any:
    from pycni.inspect import nftmap

    s4 = masq_set("mnet", "10.88.0.0/16")
    rec.answer(
        "nft.query",
        "list table inet cni_plugins_masquerade",
        [
            {
                "rule": {
                    "chain": "masq_checks",
                    "comment": "pycni net: mnet",
                    "expr": [{"jump": {"target": "x"}}],
                }
            },
            {
                "rule": {
                    "chain": "pycni-x",
                    "comment": "pycni 10.88.0.0/16 net: mnet",
                    "expr": [
                        {
                            "match": {
                                "op": "==",
                                "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                                "right": f"@{s4}",
                            }
                        },
                        {"masquerade": None},
                    ],
                }
            },
            {
                "rule": {
                    "chain": "masq_checks",
                    "comment": "abc-def, net: oldnet, if: eth0, id: c9",
                    "expr": [
                        {
                            "match": {
                                "op": "==",
                                "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                                "right": "10.1.0.4",
                            }
                        },
                        {"masquerade": None},
                    ],
                }
            },
            {
                "set": {
                    "name": s4,
                    "elem": ["10.88.0.5", {"elem": {"val": "10.88.0.6", "comment": "c"}}],
                }
            },
        ],
    )
    found, errors = nftmap.read_masquerades(rec.nf.nft)
    return [[asdict(m) for m in found], errors]
