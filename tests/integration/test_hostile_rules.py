"""Hostile configs against portmap (both backends) and firewall (both backends), in-process in a
node namespace: every string field, and the interface names of prevResult, get
hypothesis-generated hostile values (newlines, quotes, ``;``, ``#``, braces, NUL, very long,
non-UTF-8). Each ADD either fails with code 7 (6 for bytes that are not JSON text) and changes
nothing, or succeeds having created only the pod's own objects: ``nft list ruleset`` and
``iptables-save`` / ``ip6tables-save`` (nft and legacy) outside them are byte-identical before
and after, and after DEL the whole output equals the start."""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pycni.plugins.meta.firewall.nft_backend import iso_names
from pycni.plugins.meta.portmap.iptables_backend import dnat_chain
from pycni.plugins.meta.portmap.nft_chains import chain_name
from pycni.skel import run as skel
from tests.harness import Namespace

pytestmark = pytest.mark.kernel

NET = "hostnet"
CID = "hostile-pod"
BASE_CID = "benign-pod"
SAVERS = (
    "iptables-nft-save",
    "ip6tables-nft-save",
    "iptables-legacy-save",
    "ip6tables-legacy-save",
)

INJECTIONS = [
    "KUBE-MARK-MASQ\n-A INPUT -j ACCEPT",
    "X\nCOMMIT\n*filter\n-A INPUT -j ACCEPT",
    '10.0.0.0/8" -j ACCEPT "',
    "eth0; add chain inet pycni_portmap evil { type filter hook input priority 0; policy drop; }",
    'eth0" drop comment "',
    "} ; table inet evil { chain c { type filter hook input priority 0 ; policy drop ; } }",
    "# comment",
    "{ 1.2.3.4 }",
    "a\x00b",
    "fe80::1%eth0;drop",
    "ACCEPT",
    "-j",
    "x" * 4096,
    "\udcff\udcfe",
    "",
]
hostile_text = st.one_of(
    st.sampled_from(INJECTIONS),
    st.text(alphabet="\n\r\x00\x7f\t\"';#{}\\ $`|&<>()*+!,=@[]%-_.aZ09", min_size=1, max_size=30),
    st.text(max_size=30),
    st.binary(min_size=1, max_size=20).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
# 12 examples per field and backend (48 tests): the suite's profile derandomizes them, so a
# CI run tries a fixed set (HYPOTHESIS_PROFILE=explore draws new ones); every value is first
# checked by rule_tokens, whose unit tests (tests/unit/test_rule_tokens.py) try more at a
# fraction of the cost. Here each example costs about ten nft/iptables runs: 25 took twice
# as long, for the same checks.
EXAMPLES = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "hbr0"},
        {"name": "veth1"},
        {"name": "eth0", "sandbox": "/var/run/netns/x"},
    ],
    "ips": [
        {"address": "10.98.0.2/24", "gateway": "10.98.0.1", "interface": 2},
        {"address": "fd00:98::2/64", "gateway": "fd00:98::1", "interface": 2},
    ],
}
BASE_PREV = copy.deepcopy(PREV)
BASE_PREV["ips"] = [
    {"address": "10.98.0.3/24", "interface": 2},
    {"address": "fd00:98::3/64", "interface": 2},
]
MAPPINGS = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
BASE_MAPPINGS = [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]


# --- the node and its snapshots -----------------------------------------------------------------


@pytest.fixture(scope="module")
def host() -> Iterator[Namespace]:
    """One node for the whole module (hypothesis runs many examples in it): a veth with the
    pod subnets, so portmap's route lookup finds a device."""
    from tests import harness

    ns = harness.create_namespace("hostile")
    ns.run("ip", "link", "add", "hbr0", "type", "veth", "peer", "name", "hbr1")
    ns.run("ip", "addr", "add", "10.98.0.1/24", "dev", "hbr0")
    ns.run("ip", "addr", "add", "fd00:98::1/64", "dev", "hbr0", "nodad")
    ns.run("ip", "link", "set", "hbr0", "up")
    ns.run("ip", "link", "set", "hbr1", "up")
    try:
        yield ns
    finally:
        ns.delete()


def _iptables(ns: Namespace) -> dict[str, str]:
    out = {}
    for tool in SAVERS:
        text = ns.run(tool, check=False).stdout
        out[tool] = "\n".join(
            re.sub(r"\[\d+:\d+\]", "[]", line)
            for line in text.splitlines()
            if not line.startswith("#")
        )
    return out


def snapshot(ns: Namespace) -> dict[str, str]:
    """Everything a firewall change could touch: ``nft list ruleset`` as text and as JSON
    (without handles, which a rebuilt scaffolding rule changes), and every iptables-save."""
    listing = json.loads(ns.run("nft", "-j", "list", "ruleset").stdout)["nftables"]
    items = [_no_handles(item) for item in listing if "metainfo" not in item]
    return {
        "nft": ns.run("nft", "list", "ruleset").stdout,
        "nft-json": "\n".join(json.dumps(item, sort_keys=True) for item in items),
        **_iptables(ns),
    }


def _no_handles(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_handles(v) for k, v in value.items() if k != "handle"}
    if isinstance(value, list):
        return [_no_handles(v) for v in value]
    return value


def without(snap: dict[str, str], own: list[str]) -> dict[str, str]:
    """The snapshot minus the pod's own objects: any chain, rule, line or map element that
    names one of ``own`` (its chains, the entries and elements jumping to them, its IPs).
    The nft text form cannot be cut this way; its JSON form stands for it."""
    pattern = re.compile("|".join(re.escape(o) for o in own))
    out = {}
    for key, text in snap.items():
        if key == "nft":
            continue
        if key == "nft-json":
            kept = []
            for line in text.splitlines():
                item = json.loads(line)
                kind, body = next(iter(item.items()))
                if kind == "chain" and pattern.search(json.dumps(body["name"])):
                    continue
                if kind in ("map", "set") and "elem" in body:
                    body["elem"] = [e for e in body["elem"] if not pattern.search(json.dumps(e))]
                    if not body["elem"]:  # as nft lists a set without elements
                        del body["elem"]
                elif pattern.search(line):
                    continue
                kept.append(json.dumps(item, sort_keys=True))
            out[key] = "\n".join(kept)
            continue
        out[key] = "\n".join(line for line in text.splitlines() if not pattern.search(line))
    return out


def call(
    ns: Namespace, plugin: str, command: str, stdin: bytes, cid: str = CID, fail_at: str = ""
) -> Any:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/nonexistent",
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    }
    if fail_at:
        env["PYCNI_TEST_FAIL_AT"] = fail_at
    with ns.entered():
        return skel.run(plugin, env, stdin)


def error_code(outcome: Any) -> int | None:
    if outcome.exit_code == 0:
        return None
    reply = json.loads(outcome.stdout)
    assert isinstance(reply.get("msg"), str) and reply["msg"]
    assert "Traceback" not in outcome.stdout.decode()
    return int(reply["code"])


def encode(conf: dict[str, Any]) -> bytes:
    """JSON bytes; strings with surrogate escapes become their raw (non-UTF-8) bytes."""
    return json.dumps(conf, ensure_ascii=False).encode("utf-8", "surrogateescape")


def attempt(
    ns: Namespace,
    plugin: str,
    conf: dict[str, Any],
    own: list[str],
    cleanup: dict[str, Any] | None = None,
) -> int | None:
    """ADD ``conf``; check the rulesets as the module doc says; DEL on success."""
    try:
        return _attempt(ns, plugin, conf, own, cleanup)
    finally:  # one failing example must not leave state that fails the next ones
        for backend in ("iptables", "nftables"):
            clean = (portmap_conf if plugin == "portmap" else firewall_conf)(backend)
            if plugin == "firewall":
                clean["dataDir"] = FIREWALL_DATA[0]
            call(ns, plugin, "DEL", encode(clean))


def _attempt(
    ns: Namespace,
    plugin: str,
    conf: dict[str, Any],
    own: list[str],
    cleanup: dict[str, Any] | None,
) -> int | None:
    before = snapshot(ns)
    stdin = encode(conf)
    outcome = call(ns, plugin, "ADD", stdin)
    code = error_code(outcome)
    after = snapshot(ns)
    if code is not None:
        allowed = {6, 7} if b"\xed" in stdin or not _utf8(stdin) else {7}
        assert code in allowed, outcome.stdout
        same(after, before, "a refused ADD changed the ruleset")
        return code
    same(without(after, own), without(before, own), "the ADD changed more than its own")
    done = call(ns, plugin, "DEL", encode(cleanup or conf))
    assert done.exit_code == 0, done.stdout
    same(snapshot(ns), before, "DEL did not restore the ruleset")
    return None


def same(got: dict[str, str], want: dict[str, str], what: str) -> None:
    """Assert equal snapshots, showing a unified diff of what differs."""
    if got == want:
        return
    diffs = []
    for key in want:
        if got.get(key) != want[key]:
            lines = difflib.unified_diff(
                want[key].splitlines(), got.get(key, "").splitlines(), key, key, lineterm=""
            )
            diffs.append("\n".join(lines))
    raise AssertionError(f"{what}:\n" + "\n".join(diffs))


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- portmap --------------------------------------------------------------------------------------


def portmap_conf(backend: str, cid_prev: dict[str, Any] = PREV, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": NET, "type": "portmap"}
    if backend:
        conf["backend"] = backend
    conf.update(extra)
    mappings = MAPPINGS if cid_prev is not BASE_PREV else BASE_MAPPINGS
    conf.setdefault("runtimeConfig", {"portMappings": mappings})
    conf["prevResult"] = cid_prev
    return conf


PORTMAP_OWN = [chain_name(NET, CID, "eth0"), dnat_chain(NET, CID)]


@pytest.fixture(scope="module")
def portmap_node(host: Namespace) -> Iterator[Namespace]:
    """The node with both backends' shared scaffolding made by a benign pod."""
    for backend in ("nftables", "iptables"):
        conf = portmap_conf(backend, BASE_PREV)
        assert call(host, "portmap", "ADD", encode(conf), BASE_CID).exit_code == 0
    yield host
    for backend in ("nftables", "iptables"):
        call(host, "portmap", "DEL", encode(portmap_conf(backend, BASE_PREV)), BASE_CID)


def _cond_examples(family: int) -> st.SearchStrategy[list[str]]:
    ip = "ip" if family == 4 else "ip6"
    prefixes = [[], ["-s"], ["!", "-d"], ["-i"], ["-m", "addrtype", "--dst-type"]]
    prefixes += [[ip, "saddr"], ["iifname"], ["fib", "daddr", "type"], [f"{ip} daddr !="]]
    return st.builds(
        lambda p, h, rest: [*p, h, *rest],
        st.sampled_from(prefixes),
        hostile_text,
        st.lists(hostile_text, max_size=2),
    )


FIELDS: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "conditionsV4": lambda: _cond_examples(4),
    "conditionsV6": lambda: _cond_examples(6),
    "externalSetMarkChain": lambda: hostile_text,
    "iptablesVariant": lambda: hostile_text,
    "backend": lambda: hostile_text,
}


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_portmap_string_fields(portmap_node: Namespace, backend: str, field: str) -> None:
    @EXAMPLES
    @given(FIELDS[field]())
    def check(value: Any) -> None:
        conf = portmap_conf(backend, **({} if field == "backend" else {field: value}))
        if field == "backend":
            conf["backend"] = value
        attempt(portmap_node, "portmap", conf, PORTMAP_OWN)

    check()


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
@pytest.mark.parametrize("key", ["hostIP", "protocol"])
def test_portmap_mapping_fields(portmap_node: Namespace, backend: str, key: str) -> None:
    @EXAMPLES
    @given(hostile_text)
    def check(value: str) -> None:
        mapping = {**MAPPINGS[0], key: value}
        conf = portmap_conf(backend, runtimeConfig={"portMappings": [mapping]})
        attempt(portmap_node, "portmap", conf, PORTMAP_OWN)

    check()


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
def test_portmap_numbers(portmap_node: Namespace, backend: str) -> None:
    numbers = st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([0, 65536, -1, 32, 1.5, True, "80", None, 1e300]),
    )

    @EXAMPLES
    @given(st.sampled_from(["hostPort", "containerPort", "markMasqBit"]), numbers)
    def check(key: str, value: Any) -> None:
        if type(value) is int and (
            (key == "markMasqBit" and 0 <= value <= 31 and value != 13)
            or (key == "hostPort" and value == BASE_MAPPINGS[0]["hostPort"])
        ):
            # another mark bit adds node-wide masquerade objects for it, and the benign
            # pod's port is taken: both tested elsewhere (test_portmap_chain)
            return
        if key == "markMasqBit":
            conf = portmap_conf(backend, markMasqBit=value)
        else:
            conf = portmap_conf(
                backend, runtimeConfig={"portMappings": [{**MAPPINGS[0], key: value}]}
            )
        attempt(portmap_node, "portmap", conf, PORTMAP_OWN)

    check()


def test_portmap_prev_result_names(portmap_node: Namespace) -> None:
    """prevResult interface names only select the container IP; they never reach a rule."""

    @EXAMPLES
    @given(hostile_text, st.sampled_from(["nftables", "iptables"]))
    def check(name: str, backend: str) -> None:
        prev = copy.deepcopy(PREV)
        prev["interfaces"][0]["name"] = name
        prev["interfaces"][2]["name"] = name
        attempt(portmap_node, "portmap", portmap_conf(backend, prev), PORTMAP_OWN)

    check()


@pytest.mark.parametrize(
    ("backend", "conditions"),
    [
        (
            "iptables",
            ["!", "-s", "10.0.0.0/8", "-i", "hbr+", "-m", "addrtype", "--dst-type", "LOCAL"],
        ),
        ("iptables", ["-d", "192.0.2.0/24", "!", "-o", "eth9"]),
        ("nftables", ["ip saddr != 10.0.0.0/8", "iifname", "hbr*", "fib daddr type local"]),
    ],
)
def test_portmap_grammar_is_accepted_by_the_kernel(
    portmap_node: Namespace, backend: str, conditions: list[str]
) -> None:
    conf = portmap_conf(backend, conditionsV4=conditions)
    assert attempt(portmap_node, "portmap", conf, PORTMAP_OWN) is None


def test_injection_examples_are_refused(portmap_node: Namespace) -> None:
    """The issue's reproductions: a newline in a condition or in externalSetMarkChain."""
    for conf in (
        portmap_conf("iptables", conditionsV4=["-s", "10.0.0.0/8\n-A INPUT -j ACCEPT"]),
        portmap_conf("iptables", externalSetMarkChain="KUBE-MARK-MASQ\n-A INPUT -j ACCEPT"),
        portmap_conf(
            "nftables",
            conditionsV4=[
                "ip saddr 10.0.0.0/8 accept ; add chain inet pycni_portmap x "
                "{ type filter hook input priority 0 ; policy drop ; }"
            ],
        ),
    ):
        assert attempt(portmap_node, "portmap", conf, PORTMAP_OWN) == 7


# --- firewall ---------------------------------------------------------------------------------


def firewall_conf(backend: str, prev: dict[str, Any] = PREV, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": NET, "type": "firewall"}
    conf["backend"] = backend
    conf.update(extra)
    conf["prevResult"] = prev
    return conf


FIREWALL_OWN = ["10.98.0.2/32", "fd00:98::2/128", '"10.98.0.2"', '"fd00:98::2"']


@pytest.fixture(scope="module")
def firewall_node(host: Namespace, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namespace]:
    data = str(tmp_path_factory.mktemp("fwdata"))
    for backend in ("nftables", "iptables"):
        conf = firewall_conf(backend, BASE_PREV, ingressPolicy="same-bridge", dataDir=data)
        assert call(host, "firewall", "ADD", encode(conf), BASE_CID).exit_code == 0
    FIREWALL_DATA[:] = [data]
    yield host
    for backend in ("nftables", "iptables"):
        conf = firewall_conf(backend, BASE_PREV, dataDir=data)
        call(host, "firewall", "DEL", encode(conf), BASE_CID)


FIREWALL_DATA: list[str] = []


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
@pytest.mark.parametrize("field", ["ingressPolicy", "backend", "firewalldZone"])
def test_firewall_string_fields(firewall_node: Namespace, backend: str, field: str) -> None:
    @EXAMPLES
    @given(hostile_text)
    def check(value: str) -> None:
        extra = {} if field == "backend" else {field: value}
        conf = firewall_conf(backend, dataDir=FIREWALL_DATA[0], **extra)
        if field == "backend":
            conf["backend"] = value
        if field == "ingressPolicy" and value in ("same-bridge", "isolated"):
            return  # per-bridge rules: see test_firewall_prev_result_bridge_name
        code = attempt(firewall_node, "firewall", conf, FIREWALL_OWN)
        if field == "backend" and code is None:
            assert value in ("", "iptables", "nftables")

    check()


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
def test_firewall_admin_chain_name(firewall_node: Namespace, backend: str) -> None:
    """A valid admin chain name is created (empty, with a jump to it) and stays after DEL, as
    in the reference: it is node-wide config. Anything else is code 7 and changes nothing."""

    @EXAMPLES
    @given(hostile_text)
    def check(value: str) -> None:
        conf = firewall_conf(backend, dataDir=FIREWALL_DATA[0], iptablesAdminChainName=value)
        before = snapshot(firewall_node)
        code = error_code(call(firewall_node, "firewall", "ADD", encode(conf)))
        if code is not None:
            assert code in (6, 7)
            assert snapshot(firewall_node) == before
            return
        if value in ("", "CNI-ADMIN", "admin"):
            assert call(firewall_node, "firewall", "DEL", encode(conf)).exit_code == 0
            assert snapshot(firewall_node) == before
            return
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,27}", value), value
        own = [*FIREWALL_OWN, f'"{value}"', f":{value} ", f"-j {value}", '"admin"']
        assert without(snapshot(firewall_node), own) == without(before, own)
        assert call(firewall_node, "firewall", "DEL", encode(conf)).exit_code == 0
        _drop_admin_chain(firewall_node, backend, value)
        assert snapshot(firewall_node) == before

    check()


def _drop_admin_chain(ns: Namespace, backend: str, name: str) -> None:
    """Put the node back: the default admin chain in the nft forward chain, no custom one."""
    if backend == "nftables":
        conf = firewall_conf(
            backend, BASE_PREV, dataDir=FIREWALL_DATA[0], ingressPolicy="same-bridge"
        )
        assert call(ns, "firewall", "ADD", encode(conf), BASE_CID).exit_code == 0
        gone = {"delete": {"chain": {"family": "inet", "table": "pycni_firewall", "name": name}}}
        ns.run("nft", "-j", "-f", "-", input=json.dumps({"nftables": [gone]}).encode())
        return
    for family in ("iptables", "ip6tables"):
        comment = "CNI firewall plugin admin overrides"
        ns.run(family, "-D", "CNI-FORWARD", "-m", "comment", "--comment", comment, "-j", name)
        ns.run(family, "-X", name)


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
def test_firewall_prev_result_bridge_name(firewall_node: Namespace, backend: str) -> None:
    """The bridge name of prevResult goes into isolation rules: it must be an interface name."""

    @EXAMPLES
    @given(hostile_text)
    def check(name: str) -> None:
        prev = copy.deepcopy(PREV)
        prev["interfaces"][0]["name"] = name
        conf = firewall_conf(backend, prev, ingressPolicy="same-bridge", dataDir=FIREWALL_DATA[0])
        before = snapshot(firewall_node)
        code = error_code(call(firewall_node, "firewall", "ADD", encode(conf)))
        if code is not None:
            assert code in (6, 7)
            assert snapshot(firewall_node) == before
            return
        # accepted: an interface name; its isolation rules are per bridge and shared, as in
        # the reference (they stay after DEL), so they count as this config's own here
        assert re.fullmatch(r"[A-Za-z0-9_.\-]{1,15}", name), name
        own = [*FIREWALL_OWN, f'"{name}"', f"-i {name} ", f"-o {name} ", f': {name}"']
        own += list(iso_names(name))  # its nftables chains under isolation_stage1/2
        assert without(snapshot(firewall_node), own) == without(before, own)
        assert call(firewall_node, "firewall", "DEL", encode(conf)).exit_code == 0

    check()


def test_non_utf8_stdin(portmap_node: Namespace) -> None:
    raw = encode(portmap_conf("iptables", externalSetMarkChain="X")).replace(b'"X"', b'"\xff\xfe"')
    code = error_code(call(portmap_node, "portmap", "ADD", raw))
    assert code in (6, 7)


@pytest.mark.parametrize("data_dir", ["relative/dir", "/tmp/../etc", "/tmp/x\n", "\udcff"])
def test_firewall_data_dir_must_be_a_clean_absolute_path(
    firewall_node: Namespace, data_dir: str
) -> None:
    conf = firewall_conf("iptables", dataDir=data_dir)
    assert attempt(firewall_node, "firewall", conf, FIREWALL_OWN) in (6, 7)


# --- rollback: a failed ADD leaves no rule anywhere -------------------------------------------


BUILTIN = {
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
}


def _register_tables(ns: Namespace) -> None:
    """iptables-nft makes a table and its builtin (empty, accepting) chains on first use and
    keeps them; make them first so the comparison is about rules."""
    script = "".join(
        f"*{table}\n" + "".join(f":{c} ACCEPT [0:0]\n" for c in chains) + "COMMIT\n"
        for table, chains in BUILTIN.items()
    )
    for tool in ("iptables-nft-restore", "ip6tables-nft-restore"):
        ns.run(tool, "--noflush", input=script.encode())


def _veth(ns: Namespace) -> None:
    ns.run("ip", "link", "add", "hbr0", "type", "veth", "peer", "name", "hbr1")
    ns.run("ip", "addr", "add", "10.98.0.1/24", "dev", "hbr0")
    ns.run("ip", "addr", "add", "fd00:98::1/64", "dev", "hbr0", "nodad")
    ns.run("ip", "link", "set", "hbr0", "up")


@pytest.mark.parametrize("fail_at", ["iptables6", "conntrack", "route_localnet"])
@pytest.mark.parametrize("first", [True, False])
def test_portmap_iptables_failed_add_leaves_nothing(
    node: Namespace, fail_at: str, first: bool
) -> None:
    """Also the scaffolding the failed ADD created (first pod), not only its own chain."""
    _veth(node)
    _register_tables(node)
    base = portmap_conf("iptables", BASE_PREV)
    if not first:
        assert call(node, "portmap", "ADD", encode(base), BASE_CID).exit_code == 0
    before = snapshot(node)
    outcome = call(node, "portmap", "ADD", encode(portmap_conf("iptables")), fail_at=fail_at)
    assert error_code(outcome) == 999 and b"injected" in outcome.stdout
    same(snapshot(node), before, f"a failed ADD (at {fail_at}) left rules behind")
    if not first:
        assert call(node, "portmap", "DEL", encode(base), BASE_CID).exit_code == 0


@pytest.mark.parametrize("fail_at", ["nftables", "route_localnet"])
def test_portmap_nftables_failed_add_leaves_nothing_of_its_own(
    node: Namespace, fail_at: str
) -> None:
    """nftables: one transaction. Failing after it removes the pod's chain and elements; the
    shared scaffolding (table, empty maps, hook chains) stays, as after a DEL."""
    _veth(node)
    base = portmap_conf("nftables", BASE_PREV)
    assert call(node, "portmap", "ADD", encode(base), BASE_CID).exit_code == 0
    before = snapshot(node)
    outcome = call(node, "portmap", "ADD", encode(portmap_conf("nftables")), fail_at=fail_at)
    assert error_code(outcome) == 999
    same(snapshot(node), before, f"a failed ADD (at {fail_at}) left rules behind")


@pytest.mark.parametrize("fail_at", ["iptables6", "record"])
@pytest.mark.parametrize("first", [True, False])
def test_firewall_failed_add_leaves_nothing(
    node: Namespace, tmp_path: Path, fail_at: str, first: bool
) -> None:
    _register_tables(node)
    base = firewall_conf("iptables", BASE_PREV, dataDir=str(tmp_path), ingressPolicy="isolated")
    if not first:
        assert call(node, "firewall", "ADD", encode(base), BASE_CID).exit_code == 0
    before = snapshot(node)
    conf = firewall_conf("iptables", dataDir=str(tmp_path), ingressPolicy="isolated")
    outcome = call(node, "firewall", "ADD", encode(conf), fail_at=fail_at)
    assert error_code(outcome) == 999
    same(snapshot(node), before, f"a failed ADD (at {fail_at}) left rules behind")
    assert not (tmp_path / NET / f"{CID}_eth0").exists()
    if not first:
        assert call(node, "firewall", "DEL", encode(base), BASE_CID).exit_code == 0
