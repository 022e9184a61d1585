"""Hostile configs: every field of every plugin's config, of runtimeConfig, args.cni, CNI_ARGS
and prevResult, given a hostile value, is a CNI error naming a code the spec defines (7, or the
spec's own) or a success; never code 999, never a traceback on stdout.

Pure: each plugin's config loader runs behind skel (through ``run_plugin``) without touching the
kernel; tests/integration/test_hostile_configs.py runs the real plugins.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pycni.cluster.subnet import SubnetEnv
from pycni.plugins.ipam.dhcp import config as dhcp_config
from pycni.plugins.ipam.dhcp import daemon as dhcp_daemon
from pycni.plugins.ipam.host_local import config as host_local
from pycni.plugins.ipam.static import plugin as static
from pycni.plugins.main.bridge import plugin as bridge
from pycni.plugins.main.host_device import plugin as host_device
from pycni.plugins.main.ipvlan import plugin as ipvlan
from pycni.plugins.main.macvlan import plugin as macvlan
from pycni.plugins.main.ptp import plugin as ptp
from pycni.plugins.main.tap import plugin as tap
from pycni.plugins.main.vlan import plugin as vlan
from pycni.plugins.meta.bandwidth import plugin as bandwidth
from pycni.plugins.meta.flannel import plugin as flannel
from pycni.plugins.meta.sbr import plugin as sbr
from pycni.plugins.meta.tuning import conf as tuning
from pycni.skel import run as skel
from pycni.skel.base import Plugin, Request
from pycni.spec.errors import CNIError
from pycni.spec.result import IPConfig, Result

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c1",
    "CNI_NETNS": "/nonexistent/netns",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/nonexistent",
}
# codes a config can legitimately earn: version (1), unsupported field (2), env (4),
# decoding (6), invalid config (7)
ALLOWED_CODES = {1, 2, 4, 6, 7}

HOSTILE_TEXT = [
    "",
    " ",
    "a\nb",
    "eth0\n-A INPUT -j ACCEPT",
    'x" ; drop',
    "';--",
    "#comment",
    "{ }",
    "}]",
    "a\x00b",
    "\x1b[31m",
    "../../../etc/passwd",
    "/",
    "é" * 20,
    "x" * 5000,
    "9" * 400,
    "10.0.0.0/8\n",
    "02:00:00:00:00:00;",
]
hostile_text = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=30))
hostile_number = st.one_of(
    st.sampled_from([-1, 0, 2**31, 2**32, 2**32 + 1, 2**63, 2**64, -(2**63) - 1, 10**300]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


hostile = st.one_of(
    hostile_text,
    hostile_number,
    st.booleans(),
    st.none(),
    st.lists(st.one_of(hostile_text, hostile_number, st.none()), max_size=3),
    st.dictionaries(hostile_text, st.one_of(hostile_text, hostile_number), max_size=3),
    st.integers(min_value=1, max_value=80).map(_nested),
)

FieldPath = tuple[str | int, ...]


def put(config: dict[str, Any], path: FieldPath, value: Any) -> dict[str, Any]:
    """``config`` (deep-copied) with ``value`` at ``path``, creating what is missing."""
    out: dict[str, Any] = json.loads(json.dumps(config))
    node: Any = out
    for key, nxt in itertools.pairwise(path):
        if isinstance(node, dict):
            child = node.get(key)
            if not isinstance(child, dict | list):
                child = [] if isinstance(nxt, int) else {}
                node[key] = child
        else:
            assert isinstance(key, int)
            while len(node) <= key:
                node.append([] if isinstance(nxt, int) else {})
            child = node[key]
        node = child
    last = path[-1]
    if isinstance(node, list):
        assert isinstance(last, int)
        while len(node) <= last:
            node.append(None)
    node[last] = value
    return out


SUBNET_ENV = SubnetEnv(
    ipaddress.IPv4Network("10.244.0.0/16"), ipaddress.IPv4Network("10.244.3.0/24"), 1450, True
)


def _loopback(req: Request) -> None:
    """What loopback reads of its config before it enters the pod: the previous result."""
    req.prev_result()


def _dnsname(req: Request) -> None:
    from pycni.plugins.meta.dnsname import config as dnsname_config

    dnsname_config.parse(req)


def _static(req: Request) -> None:
    ipam = static.load_ipam(req)
    static.load_addresses(req, ipam)
    static._routes_and_dns(ipam)


def _dhcp(req: Request) -> None:
    ipam = req.config.get("ipam")
    conf = dhcp_config.load(ipam if isinstance(ipam, dict) else None)
    assert conf is not None
    dhcp_daemon.prepare_options(req.args, ipam if isinstance(ipam, dict) else {})


def _tuning(req: Request) -> None:
    conf = tuning.parse(req)
    for key in conf.sysctl:
        tuning.sysctl_path(key, req.ifname)


def _flannel(req: Request) -> None:
    flannel.delegate_config(req, SUBNET_ENV)
    flannel._paths(req)


def _ipvlan(req: Request) -> None:
    ipvlan.chained_master(req, ipvlan.load_conf(req))


def _vlan(req: Request) -> None:
    vlan.load_conf(req)
    vlan.ipam_type(req)


def _host_device(req: Request) -> None:
    try:
        host_device.load_conf(req)
    except CNIError as exc:
        # a well-formed PCI ID of a device this machine lacks is a runtime error (as the
        # reference); the ID itself was checked
        if not exc.msg.startswith("error with host device: no PCI or auxiliary device"):
            raise


# plugin type -> (loader, base config, fields to make hostile)
PLUGINS: dict[str, tuple[Callable[[Request], Any], dict[str, Any], list[FieldPath]]] = {
    "loopback": (
        _loopback,
        {"prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "10.9.0.2/24"}]}},
        [
            ("prevResult",),
            ("prevResult", "cniVersion"),
            ("prevResult", "ips", 0, "address"),
            ("prevResult", "interfaces", 0, "name"),
        ],
    ),
    "dnsname": (
        _dnsname,
        {"domainName": "dns.podman"},
        [
            ("name",),
            ("domainName",),
            ("runtimeConfig", "aliases"),
            ("runtimeConfig", "aliases", "net1"),
            ("runtimeConfig", "aliases", "net1", 0),
        ],
    ),
    "bridge": (
        bridge.load_conf,
        {"ipam": {"type": "host-local"}},
        [
            ("bridge",),
            ("isGateway",),
            ("isDefaultGateway",),
            ("forceAddress",),
            ("ipMasq",),
            ("ipMasqBackend",),
            ("mtu",),
            ("hairpinMode",),
            ("promiscMode",),
            ("vlan",),
            ("vlanTrunk",),
            ("vlanTrunk", 0),
            ("vlanTrunk", 0, "minID"),
            ("vlanTrunk", 0, "maxID"),
            ("vlanTrunk", 0, "id"),
            ("preserveDefaultVlan",),
            ("macspoofchk",),
            ("enabledad",),
            ("disableContainerInterface",),
            ("portIsolation",),
            ("ipam",),
            ("ipam", "type"),
            ("dns",),
            ("dns", "nameservers"),
            ("dns", "nameservers", 0),
            ("dns", "domain"),
            ("dns", "search", 0),
            ("dns", "options", 0),
            ("args",),
            ("args", "cni"),
            ("args", "cni", "mac"),
            ("runtimeConfig",),
            ("runtimeConfig", "mac"),
        ],
    ),
    "ptp": (
        ptp.load_conf,
        {"ipam": {"type": "host-local"}},
        [("ipam", "type"), ("ipMasq",), ("ipMasqBackend",), ("mtu",), ("dns", "domain")],
    ),
    "macvlan": (
        macvlan.load_conf,
        {"master": "eth0"},
        [
            ("master",),
            ("mode",),
            ("mtu",),
            ("bcqueuelen",),
            ("linkInContainer",),
            ("mac",),
            ("ipam", "type"),
            ("dns", "search"),
            ("runtimeConfig", "mac"),
        ],
    ),
    "ipvlan": (
        _ipvlan,
        {"master": "eth0"},
        [
            ("master",),
            ("mode",),
            ("flag",),
            ("mtu",),
            ("linkInContainer",),
            ("ipam", "type"),
            ("dns", "nameservers", 0),
        ],
    ),
    "ipvlan-chained": (
        _ipvlan,
        {"prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth1"}]}},
        [
            ("prevResult", "interfaces"),
            ("prevResult", "interfaces", 0, "name"),
            ("prevResult", "interfaces", 1),
            ("prevResult", "ips", 0, "address"),
            ("prevResult", "routes", 0, "dst"),
        ],
    ),
    "vlan": (
        _vlan,
        {"master": "eth0", "vlanId": 100, "ipam": {"type": "host-local"}},
        [
            ("master",),
            ("vlanId",),
            ("mtu",),
            ("linkInContainer",),
            ("ipam", "type"),
            ("dns", "search", 0),
        ],
    ),
    "host-device": (
        _host_device,
        {"device": "eth9"},
        [
            ("device",),
            ("hwaddr",),
            ("kernelpath",),
            ("pciBusID",),
            ("dataDir",),
            ("runtimeConfig", "deviceID"),
            ("ipam", "type"),
        ],
    ),
    "tap": (
        tap.load_conf,
        {},
        [
            ("multiQueue",),
            ("mtu",),
            ("owner",),
            ("group",),
            ("bridge",),
            ("mac",),
            ("runtimeConfig", "mac"),
        ],
    ),
    "host-local": (
        lambda req: host_local.load(req.config, req.args),
        {"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/16"}]]}},
        [
            ("ipam",),
            ("ipam", "ranges"),
            ("ipam", "ranges", 0),
            ("ipam", "ranges", 0, 0),
            ("ipam", "ranges", 0, 0, "subnet"),
            ("ipam", "ranges", 0, 0, "rangeStart"),
            ("ipam", "ranges", 0, 0, "rangeEnd"),
            ("ipam", "ranges", 0, 0, "gateway"),
            ("ipam", "subnet"),
            ("ipam", "routes"),
            ("ipam", "routes", 0, "dst"),
            ("ipam", "routes", 0, "gw"),
            ("ipam", "routes", 0, "mtu"),
            ("ipam", "routes", 0, "table"),
            ("ipam", "routes", 0, "scope"),
            ("ipam", "dataDir"),
            ("ipam", "resolvConf"),
            ("cniVersion",),
            ("runtimeConfig", "ips"),
            ("runtimeConfig", "ips", 0),
            ("runtimeConfig", "ipRanges"),
            ("runtimeConfig", "ipRanges", 0, 0, "subnet"),
            ("args", "cni", "ips", 0),
        ],
    ),
    "static": (
        _static,
        {"ipam": {"type": "static", "addresses": [{"address": "10.1.0.2/24"}]}},
        [
            ("ipam", "addresses"),
            ("ipam", "addresses", 0, "address"),
            ("ipam", "addresses", 0, "gateway"),
            ("ipam", "routes"),
            ("ipam", "routes", 0, "dst"),
            ("ipam", "routes", 0, "gw"),
            ("ipam", "dns"),
            ("ipam", "dns", "nameservers"),
            ("runtimeConfig", "ips"),
            ("args", "cni", "ips", 0),
        ],
    ),
    "dhcp": (
        _dhcp,
        {"ipam": {"type": "dhcp"}},
        [
            ("ipam", "daemonSocketPath"),
            ("ipam", "priority"),
            ("ipam", "provide"),
            ("ipam", "provide", 0, "option"),
            ("ipam", "provide", 0, "value"),
            ("ipam", "provide", 0, "fromArg"),
            ("ipam", "request", 0, "option"),
            ("ipam", "request", 0, "skipDefault"),
        ],
    ),
    "tuning": (
        _tuning,
        {},
        [
            ("dataDir",),
            ("sysctl",),
            ("sysctl", "net.ipv4.conf.IFNAME.rp_filter"),
            ("mac",),
            ("promisc",),
            ("mtu",),
            ("allmulti",),
            ("txQLen",),
            ("alias",),
            ("runtimeConfig", "mac"),
            ("args", "cni", "sysctl"),
            ("args", "cni", "mac"),
            ("args", "cni", "mtu"),
            ("args", "cni", "txQLen"),
        ],
    ),
    "bandwidth": (
        bandwidth.load_limits,
        {},
        [
            ("ingressRate",),
            ("ingressBurst",),
            ("egressRate",),
            ("egressBurst",),
            ("runtimeConfig", "bandwidth"),
            ("runtimeConfig", "bandwidth", "ingressRate"),
            ("runtimeConfig", "bandwidth", "egressBurst"),
        ],
    ),
    "flannel": (
        _flannel,
        {},
        [
            ("subnetFile",),
            ("dataDir",),
            ("delegate",),
            ("delegate", "type"),
            ("ipam",),
            ("ipam", "routes"),
        ],
    ),
    "sbr": (
        lambda req: (sbr.load_keys(req), req.prev_result()),
        {"prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}},
        [
            ("table",),
            ("prevResult",),
            ("prevResult", "interfaces"),
            ("prevResult", "interfaces", 0, "name"),
            ("prevResult", "interfaces", 0, "mac"),
            ("prevResult", "interfaces", 0, "sandbox"),
            ("prevResult", "ips", 0, "address"),
            ("prevResult", "ips", 0, "gateway"),
            ("prevResult", "ips", 0, "interface"),
            ("prevResult", "routes", 0, "dst"),
            ("prevResult", "routes", 0, "gw"),
            ("prevResult", "dns", "nameservers", 0),
            ("prevResult", "cniVersion"),
        ],
    ),
}
CASES = [(name, path) for name, (_, _, paths) in PLUGINS.items() for path in paths]


class LoaderOnly(Plugin):
    """A plugin whose ADD runs only a real plugin's config loading (no kernel)."""

    def __init__(self, loader: Callable[[Request], Any]) -> None:
        self.loader = loader

    def add(self, req: Request) -> Result:
        self.loader(req)
        # one address, so that the result converts to every version (0.1.0 needs one)
        return Result(ips=[IPConfig(address=ipaddress.ip_interface("10.9.0.2/24"))])


def config_for(plugin_type: str, path: FieldPath, value: Any) -> dict[str, Any]:
    base = {"cniVersion": "1.0.0", "name": "net1", "type": plugin_type, **PLUGINS[plugin_type][1]}
    return put(base, path, value)


def assert_cni_outcome(outcome: skel.Outcome, what: str) -> None:
    """Exit 0, or exit 1 with an error JSON whose code a config may earn."""
    assert b"Traceback" not in outcome.stdout, what
    if outcome.exit_code == 0:
        return
    assert outcome.exit_code == 1, what
    body = json.loads(outcome.stdout)
    assert body["code"] in ALLOWED_CODES, (what, body)
    assert isinstance(body["msg"], str) and body["msg"], (what, body)


@pytest.mark.parametrize(("plugin_type", "path"), CASES, ids=[f"{n}:{p}" for n, p in CASES])
@SETTINGS
@given(value=hostile)
def test_hostile_value_through_skel(plugin_type: str, path: FieldPath, value: Any) -> None:
    loader = PLUGINS[plugin_type][0]
    stdin = json.dumps(config_for(plugin_type, path, value)).encode()
    outcome = skel.run_plugin(LoaderOnly(loader), ENV, stdin)
    assert_cni_outcome(outcome, f"{plugin_type} {path}={value!r:.80}")


@pytest.mark.parametrize(("plugin_type", "path"), CASES, ids=[f"{n}:{p}" for n, p in CASES])
@SETTINGS
@given(value=st.sampled_from(["\ud800", "a\udcffb", "\x00", "x" * 10_000]))
def test_text_skel_cannot_pass_is_refused_by_the_loader(
    plugin_type: str, path: FieldPath, value: str
) -> None:
    """Values that never survive skel's parse (lone surrogates) or are huge, handed straight to
    the loader as the daemon's or a test's Request could: a CNI error or success, no crash."""
    loader = PLUGINS[plugin_type][0]
    config = config_for(plugin_type, path, value)
    req = Request("ADD", "c1", "/nonexistent", "eth0", "", [], config, b"", {})
    try:
        loader(req)
    except CNIError as exc:
        assert exc.code in ALLOWED_CODES, exc


CNI_ARGS_VALUES = st.one_of(
    hostile_text.filter(lambda t: "\x00" not in t),
    st.builds(
        lambda k, v: f"{k}={v}", st.sampled_from(["IP", "MAC", "GATEWAY", "K8S_X"]), hostile_text
    ),
    st.sampled_from(["IgnoreUnknown=maybe", "IP=1=2", ";;", "=", "IgnoreUnknown=1;IP=x"]),
)


@pytest.mark.parametrize(
    "plugin_type", ["bridge", "macvlan", "tap", "host-local", "static", "tuning", "dhcp"]
)
@SETTINGS
@given(args=CNI_ARGS_VALUES)
def test_hostile_cni_args(plugin_type: str, args: str) -> None:
    loader = PLUGINS[plugin_type][0]
    stdin = json.dumps(config_for(plugin_type, ("x",), 1)).encode()
    outcome = skel.run_plugin(LoaderOnly(loader), {**ENV, "CNI_ARGS": args}, stdin)
    assert_cni_outcome(outcome, f"{plugin_type} CNI_ARGS={args!r:.80}")


@SETTINGS
@given(
    name=st.sampled_from(["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]),
    value=st.one_of(
        st.sampled_from(["", "a\x00b", "\udcff", "x" * 2_000_000, "ADD\n", "../x", "a b"]),
        st.text(max_size=40),
    ),
)
def test_hostile_environment(name: str, value: str) -> None:
    stdin = json.dumps(config_for("bridge", ("x",), 1)).encode()
    outcome = skel.run_plugin(LoaderOnly(bridge.load_conf), {**ENV, name: value}, stdin)
    assert b"Traceback" not in outcome.stdout
    if outcome.exit_code:
        body = json.loads(outcome.stdout)
        assert body["code"] in {3, 4, 6, 7}, body


@SETTINGS
@given(
    stdin=st.one_of(
        st.binary(max_size=200),
        st.sampled_from(
            [
                b"[" * 200_000,
                b'{"name":"n","x":' + b"[" * 5000 + b"]" * 5000 + b"}",
                b'{"name":"n","x":' + b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"}",
                b'{"name":"n\xff\xfe"}',
                b'{"name":"n","cniVersion":"\\ud800"}',
                b'{"name":"n","mtu":' + b"9" * 5000 + b"}",
                b'{"name":"n","mtu":1e999}',
                b'{"name":"n","mtu":NaN}',
                b"\x00" * 100,
                b'{"name":"' + b"a" * 300 + b'"}',
            ]
        ),
    )
)
def test_any_bytes_on_stdin(stdin: bytes) -> None:
    outcome = skel.run_plugin(LoaderOnly(bridge.load_conf), ENV, stdin)
    assert b"Traceback" not in outcome.stdout
    if outcome.exit_code:
        body = json.loads(outcome.stdout)
        assert body["code"] in {1, 6, 7}, body


def test_known_999s_are_now_config_errors() -> None:
    """The two reproduced in issue 12: an MTU above 2^32, an over-long bridge name."""
    for path, value, words in (
        (("mtu",), 2**32 + 5, "invalid MTU 4294967301"),
        (("bridge",), "b" * 40, "bridge must be a string naming an interface"),
    ):
        stdin = json.dumps(config_for("bridge", path, value)).encode()
        outcome = skel.run_plugin(LoaderOnly(bridge.load_conf), ENV, stdin)
        body = json.loads(outcome.stdout)
        assert outcome.exit_code == 1 and body["code"] == 7 and words in body["msg"], body


def test_unknown_type_and_deep_nesting_through_run() -> None:
    unknown = skel.run("no-such-plugin", ENV, b'{"name":"n","cniVersion":"1.0.0"}')
    body = json.loads(unknown.stdout)
    assert unknown.exit_code == 1 and body["code"] == 7 and "no-such-plugin" in body["msg"]
    assert body["cniVersion"] == "1.0.0"
    deep = skel.run("bridge", ENV, b"[" * 100_000 + b"]" * 100_000)
    assert deep.exit_code == 1 and json.loads(deep.stdout)["code"] == 6


@SETTINGS
@given(
    rate=st.one_of(st.integers(1, 2**64 - 1), st.sampled_from([8, 2**35, 2**64 - 1])),
    burst=st.one_of(st.integers(1, 8 * 2**32), st.sampled_from([1, 7, 8, 8 * (2**32 - 2)])),
)
def test_bandwidth_any_uint64_rate_and_burst_is_accepted_or_code_7(rate: int, burst: int) -> None:
    """Rates of 2^32 bytes/s and more are no longer refused, and a burst too small for its
    rate (the kernel's EINVAL) is code 7 naming the field, never 999 from the tbf arithmetic."""
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "bandwidth"}
    stdin = json.dumps({**conf, "egressRate": rate, "egressBurst": burst}).encode()
    outcome = skel.run_plugin(LoaderOnly(bandwidth.load_limits), ENV, stdin)
    if outcome.exit_code:
        body = json.loads(outcome.stdout)
        assert body["code"] == 7, body
        assert "egress" in body["msg"] or body["msg"] == "burst cannot be more than 4GB", body
