"""The one place values become firewall rule text: net/netfilter/rule_tokens.py (token checks) and
net/netfilter/rule_matches.py (the portmap condition grammar). Pure: no kernel."""

from __future__ import annotations

import json
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.net.netfilter import iptables_script, rule_matches, rule_tokens
from pycni.net.netfilter.rule_matches import Match
from pycni.spec.errors import CNIError

HOSTILE_CHARS = "\n\r\x00\x7f\t\x0b\x1b\udcff\"';#{}\\ $`|&<>()*+!,=@[]^~%"
# What may appear in a rendered iptables argument or nft value (besides the fixed keywords).
SAFE = re.compile(r"[A-Za-z0-9_.\-:/+*!]*")

hostile = st.one_of(
    st.text(alphabet=HOSTILE_CHARS + "ab09", min_size=1, max_size=40),
    st.text(min_size=1, max_size=40),
    st.builds(lambda a, b: a + b, st.sampled_from(["eth0", "10.0.0.0/8", "-s", "ip"]), st.text()),
    st.just("x" * 5000),
    st.binary(min_size=1, max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
FEW = settings(max_examples=40, deadline=None)


def refused(fn: object, *args: object, **kw: object) -> CNIError:
    with pytest.raises(CNIError) as err:
        fn(*args, **kw)  # type: ignore[operator]
    assert err.value.code == 7
    return err.value


# --- tokens -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["KUBE-MARK-MASQ", "CNI-ADMIN", "my_chain.1", "a"])
def test_chain_names_accepted(name: str) -> None:
    assert rule_tokens.chain_name("externalSetMarkChain", name) == name


@pytest.mark.parametrize(
    "name",
    ["", "-j", "A B", 'X"', "X\nY", "X;Y", "X#", "{X}", "x" * 29, "ACCEPT", "drop", "FORWARD"],
)
def test_chain_names_refused(name: str) -> None:
    err = refused(rule_tokens.chain_name, "externalSetMarkChain", name)
    assert "externalSetMarkChain" in err.msg and "chain name" in err.msg
    assert "\n" not in err.msg and "\x00" not in err.msg


@pytest.mark.parametrize("name", ["eth0", "cni-podman0", "br-0a1b2c3d4e5f", "flannel.1", "a_b"])
def test_interface_names_accepted(name: str) -> None:
    assert rule_tokens.interface_name("prevResult.interfaces[0].name", name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "a:b", "a b", 'br"0', "br;0", "br#0", "x" * 16, "br{", "é0"]
)
def test_interface_names_refused(name: str) -> None:
    err = refused(rule_tokens.interface_name, "prevResult.interfaces[0].name", name)
    assert err.msg.startswith("invalid config: prevResult.interfaces[0].name")


def test_interface_wildcards() -> None:
    assert rule_tokens.interface_name("f", "eth+", wildcard="+") == "eth+"
    refused(rule_tokens.interface_name, "f", "eth+")
    refused(rule_tokens.interface_name, "f", "+", wildcard="+")


@pytest.mark.parametrize(
    "text", ["fe80::1%eth0", "fe80::1%x;drop", "10.0.0.1/33", "1.2.3", "\u0661.2.3.4"]
)
def test_addresses_refused(text: str) -> None:
    refused(rule_tokens.network, "conditionsV4[1]", text, 4)
    refused(rule_tokens.address, "runtimeConfig.portMappings[0].hostIP", text)


def test_networks_are_canonical() -> None:
    assert str(rule_tokens.network("f", "10.1.2.3/8", 4)) == "10.0.0.0/8"
    assert str(rule_tokens.network("f", "fd00::1", 6)) == "fd00::1/128"
    err = refused(rule_tokens.network, "conditionsV6[1]", "10.0.0.0/8", 6)
    assert "conditionsV6[1]" in err.msg and "IPv6" in err.msg


@FEW
@given(st.text(max_size=30), st.sampled_from("\n\r\x00\x1b\x7f\x85\udc80"), st.text(max_size=30))
def test_control_characters_are_refused_everywhere(head: str, bad: str, tail: str) -> None:
    value = head + bad + tail
    for check in (
        lambda: rule_tokens.plain_text("f", value, 10_000),
        lambda: rule_tokens.chain_name("f", value),
        lambda: rule_tokens.interface_name("f", value),
        lambda: rule_tokens.iptables_word("f", value),
        lambda: iptables_script.quote(value),
        lambda: iptables_script.rule_line("-A", "X", ["-s", value]),
        lambda: rule_matches.parse("conditionsV4", ["-s", value], 4),
        lambda: rule_matches.parse("conditionsV4", ["ip", "saddr", value], 4),
        lambda: rule_matches.parse("conditionsV4", [value], 4),
    ):
        err = refused(check)
        assert "\n" not in err.msg and "\x00" not in err.msg


@FEW
@given(hostile)
def test_quoted_iptables_arguments_stay_one_token(value: str) -> None:
    """Whatever quote() accepts is one shell-like token without a line break."""
    try:
        quoted = iptables_script.quote(value)
    except CNIError as exc:
        assert exc.code == 7
        return
    assert "\n" not in quoted and "\r" not in quoted and "\x00" not in quoted
    if quoted.startswith('"'):
        inner = quoted[1:-1]
        assert re.fullmatch(r'(?:[^"\\]|\\.)*', inner, re.S)


# --- condition grammar ------------------------------------------------------------------------


def test_iptables_grammar() -> None:
    tokens = ["!", "-s", "10.1.2.3/8", "-d", "192.0.2.1", "-i", "eth+", "! ", "-o", "br0"]
    refused(rule_matches.parse, "conditionsV4", tokens, 4)  # "! " is not "!"
    tokens = ["!", "-s", "10.1.2.3/8", "-d", "192.0.2.1", "-i", "eth+", "!", "-o", "br0"]
    tokens += ["-m", "addrtype", "!", "--src-type", "LOCAL", "--dst-type", "UNICAST"]
    matches, syntax = rule_matches.parse("conditionsV4", tokens, 4)
    assert syntax == "iptables"
    assert matches == [
        Match("saddr", "10.0.0.0/8", True),
        Match("daddr", "192.0.2.1/32"),
        Match("iifname", "eth*"),
        Match("oifname", "br0", True),
        Match("src-type", "local", True),
        Match("dst-type", "unicast"),
    ]
    assert rule_matches.iptables_args(matches) == [
        "!", "-s", "10.0.0.0/8", "-d", "192.0.2.1/32", "-i", "eth+", "!", "-o", "br0",
        "-m", "addrtype", "!", "--src-type", "LOCAL", "-m", "addrtype", "--dst-type", "UNICAST",
    ]  # fmt: skip
    again, _ = rule_matches.parse("conditionsV4", rule_matches.iptables_args(matches), 4)
    assert again == matches


def test_nft_grammar() -> None:
    tokens = ["ip saddr != 10.0.0.0/8", "iifname", '"eth*"', "meta oifname br0"]
    tokens += ["fib", "daddr", "type", "local"]
    matches, syntax = rule_matches.parse("conditionsV4", tokens, 4)
    assert syntax == "nftables"
    assert matches == [
        Match("saddr", "10.0.0.0/8", True),
        Match("iifname", "eth*"),
        Match("oifname", "br0"),
        Match("dst-type", "local"),
    ]
    exprs = rule_matches.nft_exprs(matches, 4)
    assert exprs[0] == {
        "match": {
            "op": "!=",
            "left": {"payload": {"protocol": "ip", "field": "saddr"}},
            "right": {"prefix": {"addr": "10.0.0.0", "len": 8}},
        }
    }
    assert exprs[3]["match"]["left"] == {"fib": {"result": "type", "flags": ["daddr"]}}
    six, _ = rule_matches.parse("conditionsV6", ["ip6", "daddr", "fd00::1"], 6)
    assert rule_matches.nft_exprs(six, 6)[0]["match"]["right"] == "fd00::1"


@pytest.mark.parametrize(
    ("tokens", "index"),
    [
        (["-s", "10.0.0.0/8", "-j", "ACCEPT"], 2),
        (["-s", "10.0.0.0/8\n-A INPUT -j ACCEPT"], 1),
        (["-s"], 0),
        (["-m", "comment", "--comment", "x"], 1),
        (["-m", "addrtype"], 0),
        (["-m", "addrtype", "--dst-type", "local"], 3),
        (["-s", "fd00::/8"], 1),
        (["-i", 'eth0"'], 1),
        (["!", "!", "-s", "1.2.3.4"], 1),
        (["ip", "saddr", "1.2.3.4", "accept"], 3),
        (["ip saddr 1.2.3.4;", "drop"], 0),
        (["ip6", "saddr", "fd00::1"], 0),
        (["ip", "saddr", "1.2.3.4", "}", "chain", "x", "{"], 3),
        (["iifname", '"a" drop'], 1),
        (["fib", "daddr", "type", "LOCAL"], 3),
        (["# comment"], 0),
    ],
)
def test_conditions_outside_the_grammar(tokens: list[str], index: int) -> None:
    err = refused(rule_matches.parse, "conditionsV4", tokens, 4)
    assert err.msg.startswith(f"invalid config: conditionsV4[{index}]"), err.msg
    assert "; " in err.msg  # what is wrong; what is allowed


@FEW
@given(st.lists(hostile, min_size=1, max_size=6), st.sampled_from([4, 6]))
def test_hostile_conditions_are_refused_or_render_safely(tokens: list[str], family: int) -> None:
    field = f"conditionsV{family}"
    try:
        matches, _ = rule_matches.parse(field, tokens, family)
    except CNIError as exc:
        assert exc.code == 7 and exc.msg.startswith(f"invalid config: {field}")
        return
    for arg in rule_matches.iptables_args(matches):
        assert SAFE.fullmatch(arg), arg
    for expr in rule_matches.nft_exprs(matches, family):
        for value in re.findall(r'"((?:[^"\\]|\\.)*)"', json.dumps(expr)):
            assert SAFE.fullmatch(value), value


@FEW
@given(
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["-s", "-d"]), st.ip_addresses(v=4).map(str)),
            st.tuples(
                st.sampled_from(["-i", "-o"]),
                st.text(string.ascii_letters, min_size=1, max_size=15),
            ),
        ),
        min_size=1,
        max_size=5,
    ),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_valid_iptables_conditions_roundtrip(
    pairs: list[tuple[str, str]], negs: list[bool]
) -> None:
    tokens: list[str] = []
    for (opt, value), neg in zip(pairs, negs, strict=False):
        tokens += (["!"] if neg else []) + [opt, value]
    matches, _ = rule_matches.parse("conditionsV4", tokens, 4)
    assert len(matches) == len(pairs)
    assert rule_matches.parse("conditionsV4", rule_matches.iptables_args(matches), 4)[0] == matches


def test_not_a_list() -> None:
    err = refused(rule_matches.parse, "conditionsV6", "-s 1.2.3.4", 6)
    assert "conditionsV6" in err.msg
    assert rule_matches.parse("conditionsV6", [], 6) == ([], "")
