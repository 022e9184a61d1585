"""portmap pure logic: reference chain names and comments, config validation, container IP
selection, and the rules both backends generate."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pycni.net.netfilter import iptables, iptables_script, nft_records, rule_matches
from pycni.net.netfilter.chain_names import (
    format_chain_name,
    format_comment,
    must_format_chain_name_with_prefix,
    must_format_hash_with_prefix,
)
from pycni.plugins.meta.portmap import iptables_backend, nft_backend, nft_chains, nft_maps
from pycni.plugins.meta.portmap.config import PortMapConfig, PortMapping, parse
from pycni.skel.base import Request
from pycni.spec.errors import CNIError

LONG_ID = (
    "icee6giejonei6sohng6ahngee7laquohquee9shiGo7fohferakah3Feiyoolu2pei7ciPhoh7shaoX6vai3"
    "vuf0ahfaeng8yohb9ceu0daez5hashee8ooYai5wa3y"
)


# --- chain names (reference test vectors) ---------------------------------------------------


def test_chain_name_vectors() -> None:
    assert format_chain_name("test", "1234") == "CNI-2bbe0c48b91a7d1b8a6753a8"
    assert must_format_chain_name_with_prefix("test", "1234", "PREFIX-") == (
        "CNI-PREFIX-2bbe0c48b91a7d1b8"
    )
    assert iptables_backend.dnat_chain("testNetName", LONG_ID) == "CNI-DN-bfd599665540dd91d5d28"
    assert iptables_backend.dnat_chain("test", LONG_ID) == "CNI-DN-67e92b96e692a494b6b85"
    assert len(format_chain_name("x", "y")) == 28


def test_hash_concatenates_without_separator() -> None:
    assert format_chain_name("ab", "c") == format_chain_name("a", "bc")


def test_hash_length_limits() -> None:
    with pytest.raises(ValueError):
        must_format_hash_with_prefix(4, "CNI-", "x")
    with pytest.raises(ValueError):
        must_format_hash_with_prefix(129, "CNI-", "x")


def test_comment_is_go_quoted() -> None:
    assert format_comment("net", "id1") == 'name: "net" id: "id1"'
    assert format_comment('a"b', "c\\d") == 'name: "a\\"b" id: "c\\\\d"'


def test_long_entry_comment_is_truncated() -> None:
    comment = iptables_backend.entry_comment("n", "x" * 300)
    assert len(comment) == 256 and comment.endswith("...")


# --- config ------------------------------------------------------------------------------------

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "br0"},
        {"name": "vethx"},
        {"name": "eth0", "sandbox": "/run/netns/p"},
        {"name": "eth1", "sandbox": "/run/netns/p"},
    ],
    "ips": [
        {"address": "10.1.0.5/24", "interface": 3},
        {"address": "10.0.0.2/24", "interface": 2},
        {"address": "10.0.0.3/24", "interface": 2},
        {"address": "fd00::2/64"},
    ],
}


def request(mappings: Any = None, command: str = "ADD", prev: Any = PREV, **conf: Any) -> Request:
    config: dict[str, Any] = {"cniVersion": "1.0.0", "name": "net", "type": "portmap", **conf}
    if mappings is not None:
        config["runtimeConfig"] = {"portMappings": mappings}
    if prev is not None:
        config["prevResult"] = prev
    return Request(command, "cid", "/run/netns/p", "eth0", "", [], config, b"", {})


M = [{"hostPort": 8080, "containerPort": 80, "protocol": "TCP"}]


def test_container_ips_pick_first_of_ifname() -> None:
    cfg = parse(request(M), need_prev=True)
    assert str(cfg.container_ips[4]) == "10.0.0.2/24"
    assert str(cfg.container_ips[6]) == "fd00::2/64"
    assert cfg.mappings == [PortMapping(8080, 80, "tcp")]
    assert cfg.backend == "nftables"


def test_needs_prev_result() -> None:
    with pytest.raises(CNIError) as err:
        parse(request(M, prev=None), need_prev=True)
    assert err.value.code == 7 and "chained" in err.value.msg


@pytest.mark.parametrize(
    ("mapping", "fragment"),
    [
        ({"hostPort": 0, "containerPort": 80}, "hostPort"),
        ({"hostPort": 70000, "containerPort": 80}, "hostPort"),
        ({"hostPort": 80, "containerPort": -1}, "containerPort"),
        ({"hostPort": 80, "containerPort": 80, "protocol": "icmp"}, "protocol"),
        ({"hostPort": 80, "containerPort": 80, "hostIP": "nope"}, "hostIP"),
        ({"hostPort": "80", "containerPort": 80}, "hostPort"),
    ],
)
def test_bad_mappings(mapping: dict[str, Any], fragment: str) -> None:
    with pytest.raises(CNIError) as err:
        parse(request([mapping]), need_prev=True)
    assert err.value.code == 7 and fragment in err.value.msg


@pytest.mark.parametrize(
    ("conf", "fragment"),
    [
        ({"backend": "nftables", "externalSetMarkChain": "KUBE-MARK-MASQ"}, "iptables-specific"),
        ({"backend": "nftables", "conditionsV4": ["-s", "1.2.3.4"]}, "iptables-specific"),
        ({"backend": "iptables", "conditionsV4": ["ip", "saddr", "1.2.3.4"]}, "nftables-specific"),
        ({"markMasqBit": 5, "externalSetMarkChain": "X", "backend": "iptables"}, "cannot both"),
        ({"markMasqBit": 32}, "between 0 and 31"),
        ({"backend": "ebpf"}, "Invalid backend"),
        ({"iptablesVariant": "xt", "backend": "iptables"}, "iptablesVariant"),
    ],
)
def test_option_conflicts(conf: dict[str, Any], fragment: str) -> None:
    with pytest.raises(CNIError) as err:
        parse(request(M, **conf), need_prev=True)
    assert err.value.code == 7 and fragment in err.value.msg


@pytest.mark.parametrize(
    ("conf", "mappings", "fragment"),
    [
        ({"snat": "yes"}, M, "snat must be a boolean"),
        ({"masqAll": 1}, M, "masqAll must be a boolean"),
        ({"markMasqBit": "5"}, M, "markMasqBit must be a number"),
        ({"backend": 5}, M, "backend must be"),
        ({"conditionsV4": "ip saddr 1.2.3.4"}, M, "conditionsV4 must be a list"),
        ({"externalSetMarkChain": "x" * 300, "backend": "iptables"}, M, "at most 256"),
        ({}, {"8080": 80}, "runtimeConfig.portMappings must be a list"),
        ({}, [[8080, 80]], "runtimeConfig.portMappings[0] must be an object"),
        ({}, [{"containerPort": 80}], "hostPort number: missing"),
        ({}, [{"hostPort": 8080, "containerPort": 80, "hostIP": 1}], "hostIP must be a string"),
    ],
)
def test_fields_are_decoded_with_their_path(
    conf: dict[str, Any], mappings: Any, fragment: str
) -> None:
    with pytest.raises(CNIError) as err:
        parse(request(mappings, **conf), need_prev=True)
    assert err.value.code == 7 and fragment in err.value.msg, err.value.msg


def test_del_knows_whether_mappings_were_given() -> None:
    assert parse(request([], "DEL"), need_prev=False).mappings_given
    assert not parse(request(None, "DEL"), need_prev=False).mappings_given
    cfg = parse(request(None, "DEL", prev=None), need_prev=False)
    assert cfg.container_ips == {} and not cfg.mappings_given
    assert str(parse(request(M, "DEL"), need_prev=False).container_ips[4]) == "10.0.0.2/24"


def test_iptables_options_select_iptables_without_backend() -> None:
    cfg = parse(request(M, conditionsV4=["-s", "1.2.3.4"]), need_prev=True)
    assert cfg.backend == "iptables"


# --- nftables rules ------------------------------------------------------------------------------


def cfg_of(**kw: Any) -> PortMapConfig:
    base: dict[str, Any] = {
        "network": "net",
        "container_id": "cid",
        "ifname": "eth0",
        "mappings": [
            PortMapping(8080, 80, "tcp"),
            PortMapping(8081, 81, "udp", ipaddress.ip_address("192.0.2.1")),
            PortMapping(8082, 82, "sctp", ipaddress.ip_address("2001:db8::1")),
            PortMapping(8083, 83, "tcp", ipaddress.ip_address("0.0.0.0")),
        ],
        "backend": "nftables",
        "container_ips": {
            4: ipaddress.ip_interface("10.0.0.2/24"),
            6: ipaddress.ip_interface("fd00::2/64"),
        },
    }
    base.update(kw)
    return PortMapConfig(**base)


def _eq(proto: str, field: str, right: Any) -> dict[str, Any]:
    return {
        "match": {
            "op": "==",
            "left": {"payload": {"protocol": proto, "field": field}},
            "right": right,
        }
    }


NFPROTO4 = {"match": {"op": "==", "left": {"meta": {"key": "nfproto"}}, "right": "ipv4"}}
MARK = {
    "mangle": {
        "key": {"meta": {"key": "mark"}},
        "value": {"|": [{"meta": {"key": "mark"}}, 0x2000]},
    }
}


def test_nft_pod_rules() -> None:
    rules, elements = nft_chains.pod_rules(cfg_of())
    tcp8080 = _eq("tcp", "dport", 8080)
    assert [r.expr for r in rules[:3]] == [
        [_eq("ip", "saddr", {"prefix": {"addr": "10.0.0.0", "len": 24}}), NFPROTO4, tcp8080, MARK],
        [_eq("ip", "saddr", "127.0.0.1"), NFPROTO4, tcp8080, MARK],
        [NFPROTO4, tcp8080, {"dnat": {"family": "ip", "addr": "10.0.0.2", "port": 80}}],
    ]
    assert [r.comment for r in rules[:3]] == ["", "", "k ports4 tcp . 8080"]
    assert rules[5].expr[0] == _eq("ip", "daddr", "192.0.2.1")
    text = json.dumps([r.expr for r in rules])
    assert "set" not in text and "elem" not in text  # no anonymous sets: they make cost grow
    assert any(
        {"dnat": {"family": "ip6", "addr": "fd00::2", "port": 82}} in r.expr
        and _eq("ip6", "daddr", "2001:db8::1") in r.expr
        for r in rules
    )
    assert [e.comment for e in elements] == [
        "k ports4 tcp . 8080",
        "k hostip4 192.0.2.1 . udp . 8081",
        "k ports4 tcp . 8083",  # 0.0.0.0 = any address
        "k ports6 tcp . 8080",
        "k hostip6 2001:db8::1 . sctp . 8082",
    ]  # 0.0.0.0 is an IPv4 hostIP: skipped for IPv6, as the reference does
    assert all(nft_chains.Element.from_comment(e.comment) == e for e in elements)
    assert elements[1].key_parts() == ["192.0.2.1", "udp", 8081]


def test_element_comments_of_others_are_ignored() -> None:
    for comment in (
        'k ports4 tcp . 8080 }; add rule inet x y accept; {"',
        "k hostip4 fe80::1 . tcp . 80",  # wrong family
        "k ports4 icmp . 80",
        "k ports4 tcp . 70000",
        "k other tcp . 80",
    ):
        assert nft_chains.Element.from_comment(comment) is None, comment


def test_nft_snat_variants_and_conditions() -> None:
    rules, _ = nft_chains.pod_rules(cfg_of(snat=False))
    assert not any("mangle" in json.dumps(r.expr) for r in rules)
    rules, _ = nft_chains.pod_rules(cfg_of(masq_all=True, mark_bit=3))
    assert rules[0].expr[0] == NFPROTO4 and rules[0].expr[-1]["mangle"]["value"]["|"][1] == 8
    cond = rule_matches.parse("conditionsV4", ["iifname", '"eth9"'], 4)[0]
    rules, _ = nft_chains.pod_rules(cfg_of(conditions_v4=cond))
    iif = {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "eth9"}}
    assert rules[2].expr[2] == iif and "dnat" in rules[2].expr[3]


def test_nft_scaffold_gates_on_local_destination() -> None:
    script = nft_backend.scaffold_script({(13, 4, 24), (13, 4, 32), (3, 6, 64)}, [7])
    for hook in ("prerouting", "output"):
        assert f"add rule inet pycni_portmap {hook} fib daddr type local jump hostports" in script
    lines = script.splitlines()
    hostports = [line for line in lines if "rule inet pycni_portmap hostports" in line]
    assert len(hostports) == nft_backend.HOSTPORTS_RULES
    marks = [line for line in lines if "rule inet pycni_portmap marks" in line]
    assert len(marks) == 6 and sum('comment "b13 4/24"' in line for line in marks) == 2
    assert any(
        "ip saddr & 255.255.255.0 . meta l4proto . th dport @masq4-b13-p24" in m for m in marks
    )
    assert any("ip6 saddr & ffff:ffff:ffff:ffff:: . ip6 daddr" in m for m in marks)
    for mark in ("0x2000", "0x8", "0x80"):  # bits 13, 3 and 7
        assert f"meta mark & {mark} == {mark} masquerade" in script
    assert "flush chain inet pycni_portmap marks" in script
    added = nft_backend.scaffold_script({(13, 4, 24)}, flush_marks=False)
    assert "flush chain inet pycni_portmap marks" not in added and "@masq4-b13-p24" in added
    for bad in ((32, 4, 24), (1, 4, 33), (1, 5, 8), (1, 6, 129)):
        with pytest.raises(ValueError):
            nft_backend.scaffold_script({bad})


def test_nft_mark_group_comments() -> None:
    assert nft_maps.group_of(nft_maps.group_comment((13, 4, 16))) == (13, 4, 16)
    for comment in ("b13", "b13 4/33", "b32 4/16", "b1 6/129", "b1 4/016", "x1 4/1", "b1 5/1"):
        assert nft_maps.group_of(comment) is None, comment


def test_nft_map_layout_elements() -> None:
    cfg = cfg_of()
    owner = nft_maps.owner_name("net", "cid", "eth0")
    assert owner == nft_chains.chain_name("net", "cid", "eth0")
    found = nft_maps.mappings(cfg)
    dnat = [(m.dnat.set_name, m.dnat.shown) for m in found]
    assert dnat == [
        ("dnat4", "tcp . 8080"),
        ("dnat4h", "192.0.2.1 . udp . 8081"),
        ("dnat4", "tcp . 8083"),  # 0.0.0.0 = any address
        ("dnat6", "tcp . 8080"),
        ("dnat6h", "2001:db8::1 . sctp . 8082"),
    ]  # 0.0.0.0 is an IPv4 hostIP: skipped for IPv6, as the reference does
    first = found[0]
    assert first.dnat.key == nft_records.concat_key(["tcp", "8080"])
    assert first.dnat.data == nft_records.concat_key(["10.0.0.2", "80"])
    assert [(e.set_name, e.shown) for e in first.masq] == [
        ("masq4-b13-p24", "10.0.0.0/24 . tcp . 8080"),
        ("masq4-b13-p32", "127.0.0.1/32 . tcp . 8080"),
    ]
    assert first.masq[0].key == nft_records.concat_key(["10.0.0.0", "tcp", "8080"])
    assert first.masq[0].group == (13, 4, 24) and not first.masq[0].change(True).key_end
    assert found[1].masq[0].set_name == "masq4h-b13-p24"
    assert found[1].masq[0].shown == "10.0.0.0/24 . 192.0.2.1 . udp . 8081"
    assert [e.set_name for e in found[3].masq] == ["masq6-b13-p64"]  # no localhost for IPv6
    assert nft_maps.groups_needed(found) == {(13, 4, 24), (13, 4, 32), (13, 6, 64)}
    assert all(not m.masq for m in nft_maps.mappings(cfg_of(snat=False)))
    every = nft_maps.mappings(cfg_of(masq_all=True, mark_bit=3))
    assert [e.shown for e in every[0].masq] == ["0.0.0.0/0 . tcp . 8080"]
    assert every[3].masq[0].set_name == "masq6-b3-p0"
    change = first.dnat.change(True, owner)
    assert change.exclusive and change.comment == owner and change.data == first.dnat.data


def test_nft_map_layout_duplicate_keys_first_wins() -> None:
    cfg = cfg_of()
    cfg.mappings = [
        PortMapping(host_port=9000, container_port=80, protocol="tcp"),
        PortMapping(host_port=9000, container_port=81, protocol="tcp"),
    ]
    found = nft_maps.mappings(cfg)
    assert [m.dnat.data for m in found if m.dnat.set_name == "dnat4"] == [
        nft_records.concat_key(["10.0.0.2", "80"])
    ]


def test_nft_chain_names_differ_per_attachment_and_network() -> None:
    a = nft_chains.chain_name("net", "cid", "eth0")
    assert a != nft_chains.chain_name("net", "cid", "eth1")
    assert a != nft_chains.chain_name("net2", "cid", "eth0")
    assert a.startswith(nft_chains.network_prefix("net"))
    assert len(a) <= 64


def test_nft_map_elements_parse() -> None:
    items = [
        {
            "map": {
                "name": "hostip4",
                "elem": [
                    [{"concat": ["192.0.2.1", "udp", 53]}, {"jump": {"target": "pm-a"}}],
                ],
            }
        },
        {"map": {"name": "other", "elem": [[1, {"jump": {"target": "x"}}]]}},
    ]
    assert nft_chains.map_elements(items) == {
        nft_chains.Element("hostip4", "192.0.2.1 . udp . 53"): "pm-a"
    }


# --- iptables rules --------------------------------------------------------------------------


def test_iptables_chain_rules_mark_first_and_canonical() -> None:
    cfg = cfg_of(backend="iptables")
    chain = iptables_backend.dnat_chain("net", "cid")
    rules = iptables_backend.chain_rules(cfg, 4, cfg.container_ips[4], chain)
    assert rules[:3] == [
        f"-A {chain} -s 10.0.0.0/24 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
        f"-A {chain} -s 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
        f"-A {chain} -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.0.0.2:80",
    ]
    assert f"-A {chain} -d 192.0.2.1/32 -p udp -m udp --dport 8081 -j DNAT" in rules[5]
    rules6 = iptables_backend.chain_rules(cfg, 6, cfg.container_ips[6], chain)
    assert f"-A {chain} -s fd00::/64 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK" in rules6
    assert not any("127.0.0.1" in r for r in rules6)
    assert any("--to-destination [fd00::2]:82" in r for r in rules6)


def test_iptables_entry_rules_split_at_15() -> None:
    mappings = [PortMapping(7000 + i, 80, "tcp") for i in range(17)]
    mappings.append(PortMapping(53, 53, "udp"))
    cfg = cfg_of(backend="iptables", mappings=mappings)
    lines = iptables_backend.entry_rules(cfg, 4, "CNI-DN-x")
    assert len(lines) == 3
    assert lines[0].startswith(
        '-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"net\\" id: \\"cid\\""'
    )
    assert "--dports 7015,7016 -j CNI-DN-x" in lines[1]
    assert lines[2].startswith("-A CNI-HOSTPORT-DNAT -p udp")


def test_iptables_add_script_declares_only_missing_shared_chains() -> None:
    cfg = cfg_of(backend="iptables")
    chain = iptables_backend.dnat_chain("net", "cid")
    fresh = iptables_backend.add_script(cfg, 4, iptables_script.SavedTable())
    assert ":CNI-HOSTPORT-DNAT - [0:0]" in fresh and f":{chain} - [0:0]" in fresh
    assert "-I POSTROUTING 1 -m comment" in fresh
    saved = iptables_script.parse_save(fresh.replace("-I POSTROUTING 1", "-A POSTROUTING"), "nat")
    again = iptables_backend.add_script(cfg, 4, saved)
    assert ":CNI-HOSTPORT-DNAT" not in again and ":CNI-HOSTPORT-SETMARK" not in again
    assert "POSTROUTING" not in again and "PREROUTING" not in again
    assert f":{chain} - [0:0]" in again  # the container chain is rebuilt
    assert again.count("-D CNI-HOSTPORT-DNAT") == 3  # the 3 protocols: entries replaced
    assert again.rstrip().endswith("COMMIT")


def test_external_mark_chain_replaces_setmark() -> None:
    cfg = cfg_of(backend="iptables", external_mark_chain="KUBE-MARK-MASQ")
    script = iptables_backend.add_script(cfg, 4, iptables_script.SavedTable())
    assert "-j KUBE-MARK-MASQ" in script and "CNI-HOSTPORT-SETMARK" not in script


def test_iptables_quote_and_parse_roundtrip() -> None:
    assert iptables_script.quote("plain") == "plain"
    assert iptables_script.quote('a "b"') == '"a \\"b\\""'
    saved = iptables_script.parse_save(
        "*nat\n:X - [0:0]\n-A X -j Y\nCOMMIT\n*filter\n-A F -j Z\n", "nat"
    )
    assert saved.chains == {"X"} and saved.jumps_to("X", "Y") == ["-A X -j Y"]
    assert "F" not in saved.rules
    assert iptables_script.delete_line("-A X -j Y") == "-D X -j Y"
    assert iptables.tool(6, "save", "legacy") == "ip6tables-legacy-save"
