"""flannel's net-conf.json read with flannel's meaning (pkg/subnet/config.go and the
backends' config structs), what pycni refuses by name, and ``pycni agent --check-config``."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.cli.main import main
from pycni.cluster import netconf
from pycni.cluster.netconf import NetConf, NetConfError

KUBE_FLANNEL = {  # the net-conf.json of flannel's kube-flannel.yml
    "Network": "10.244.0.0/16",
    "EnableNFTables": False,
    "Backend": {"Type": "vxlan"},
}


def parse(data: Any) -> NetConf:
    return netconf.parse(json.dumps(data))


def problems(data: Any) -> list[str]:
    with pytest.raises(NetConfError) as caught:
        parse(data)
    return caught.value.problems


def test_kube_flannels_own_net_conf_means_what_it_means_to_flannel() -> None:
    conf = parse(KUBE_FLANNEL)
    v4 = conf.network.ipv4
    assert v4 is not None and conf.network.ipv6 is None
    assert (str(v4.network), v4.subnet_len) == ("10.244.0.0/16", 24)
    assert (str(v4.first), str(v4.last)) == ("10.244.1.0/24", "10.244.255.0/24")
    assert (conf.backend, conf.vni, conf.vxlan_port, conf.underlay_mtu) == ("vxlan", 1, 8472, 0)
    assert conf.warnings == ()


@pytest.mark.parametrize(
    ("network", "length"),
    [("10.0.0.0/8", 24), ("10.244.0.0/22", 24), ("10.244.0.0/23", 25), ("10.244.0.0/28", 30)],
)
def test_subnet_len_defaults_as_flannels(network: str, length: int) -> None:
    v4 = parse({**KUBE_FLANNEL, "Network": network}).network.ipv4
    assert v4 is not None and v4.subnet_len == length


@pytest.mark.parametrize(
    ("network", "length"),
    [("fd00::/48", 64), ("fd00::/62", 64), ("fd00::/63", 65), ("fd00::/124", 126)],
)
def test_ipv6_subnet_len_defaults_as_flannels(network: str, length: int) -> None:
    conf = parse(
        {
            "EnableIPv4": False,
            "EnableIPv6": True,
            "IPv6Network": network,
            "Backend": {"Type": "vxlan"},
        }
    )
    assert conf.network.ipv4 is None
    assert conf.network.ipv6 is not None and conf.network.ipv6.subnet_len == length


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"Network": "10.244.0.0/29"}, "too small"),
        ({"SubnetLen": 31}, "SubnetLen 31 must be at most 30"),
        ({"SubnetLen": 17}, "at least four subnets"),
        ({"SubnetLen": "24"}, "SubnetLen must be an integer"),
        ({"SubnetLen": 24.0}, "SubnetLen must be an integer"),
        ({"SubnetLen": True}, "SubnetLen must be an integer"),
        ({"SubnetLen": -24}, "SubnetLen must be an integer"),
        ({"Network": "10.244.0.0"}, None),  # a /32: too small
        ({"Network": "fd00::/48"}, "not an IPv4 network"),
        ({"Network": "10.244.0.0/16; reboot"}, "is not an IPv4 network"),
        ({"Network": "10.244.0.0/255.255.0.0"}, "is not an IPv4 network"),
        ({"Network": "10.244.0.0/016"}, "is not an IPv4 network"),
        ({"Network": "10.244.0.0/16\n"}, "is not an IPv4 network"),
        ({"Network": ""}, "Network is missing"),
        ({"Network": None}, "Network is missing"),  # Go: null leaves the default
        ({"EnableIPv4": "false"}, "EnableIPv4 must be true or false"),
        ({"EnableIPv4": False}, "both false"),
        ({"EnableIPv6": True}, "IPv6Network is missing"),
        ({"SubnetMin": "10.245.0.0"}, "SubnetMin 10.245.0.0 is not inside 10.244.0.0/16"),
        ({"SubnetMin": "10.244.1.1"}, "SubnetMin 10.244.1.1 is not on a /24 boundary"),
        ({"SubnetMax": "10.244.1"}, "SubnetMax '10.244.1' is not an IPv4 address"),
        ({"SubnetMin": "10.244.9.0", "SubnetMax": "10.244.3.0"}, "above SubnetMax"),
        ({"SubnetLen": 24, "subnetlen": 25}, "SubnetLen is given twice"),
    ],
)
def test_bad_network_settings_are_refused_naming_the_key(
    change: dict[str, Any], needle: str | None
) -> None:
    found = problems({**KUBE_FLANNEL, **change})
    assert needle is None or any(needle in p for p in found), found


def test_subnet_min_and_max_are_flannels_addresses_on_a_boundary() -> None:
    conf = parse(
        {**KUBE_FLANNEL, "SubnetLen": 26, "SubnetMin": "10.244.1.0", "SubnetMax": "10.244.2.0"}
    )
    v4 = conf.network.ipv4
    assert v4 is not None
    subnets = [str(s) for s in v4.subnets()]
    assert subnets[0] == "10.244.1.0/26" and subnets[-1] == "10.244.2.0/26" and len(subnets) == 5
    unset = parse({**KUBE_FLANNEL, "SubnetMin": "0.0.0.0"}).network.ipv4  # Go's zero value
    assert unset is not None and str(unset.first) == "10.244.1.0/24"


def test_dual_stack_and_ipv6_bounds() -> None:
    conf = parse(
        {
            **KUBE_FLANNEL,
            "EnableIPv6": True,
            "IPv6Network": "fd10:244::/56",
            "IPv6SubnetLen": 64,
            "IPv6SubnetMin": "fd10:244:0:10::",
            "IPv6SubnetMax": "fd10:244:0:1f::",
        }
    )
    v6 = conf.network.ipv6
    assert conf.network.ipv4 is not None and v6 is not None
    assert (str(v6.first), str(v6.last)) == ("fd10:244:0:10::/64", "fd10:244:0:1f::/64")


def test_keys_match_in_any_case_as_in_go() -> None:
    conf = parse({"network": "10.244.0.0/16", "subnetlen": 25, "backend": {"type": "host-gw"}})
    assert conf.backend == "host-gw" and conf.warnings == ()
    assert conf.network.ipv4 is not None and conf.network.ipv4.subnet_len == 25


def test_unknown_keys_are_ignored_as_flannel_does_but_warned_about() -> None:
    conf = parse({**KUBE_FLANNEL, "SubnetLne": 26, "Backend": {"Type": "host-gw", "VNI": 4}})
    assert conf.network.ipv4 is not None and conf.network.ipv4.subnet_len == 24
    assert len(conf.warnings) == 2
    assert "'SubnetLne'" in conf.warnings[0] and "Backend.key 'VNI'" in conf.warnings[1]


def test_a_network_with_host_bits_is_taken_as_flannel_takes_it() -> None:
    conf = parse({**KUBE_FLANNEL, "Network": "10.244.7.9/16"})
    assert conf.network.ipv4 is not None and str(conf.network.ipv4.network) == "10.244.0.0/16"
    assert any("taken as 10.244.0.0/16" in w for w in conf.warnings)


def test_vxlan_options() -> None:
    conf = parse(
        {
            **KUBE_FLANNEL,
            "Backend": {
                "Type": "vxlan", "VNI": 4096, "Port": 4789, "MTU": 1400,
                "GBP": False, "Learning": False, "DirectRouting": False,
            },
        }
    )  # fmt: skip
    assert (conf.vni, conf.vxlan_port, conf.underlay_mtu) == (4096, 4789, 1400)
    assert parse({**KUBE_FLANNEL, "Backend": {"Type": "vxlan", "Port": 0}}).vxlan_port == 8472


def test_wireguard_options_per_family() -> None:
    backend = {
        "Type": "wireguard", "ListenPort": 5000, "ListenPortV6": 5001,
        "PersistentKeepaliveInterval": 25, "MTU": 1420, "Mode": "separate", "PSK": "",
    }  # fmt: skip
    conf = parse({**KUBE_FLANNEL, "Backend": backend})
    assert (conf.wireguard_port, conf.wireguard_keepalive, conf.underlay_mtu) == (5000, 25, 1420)
    v6 = parse(
        {"EnableIPv4": False, "EnableIPv6": True, "IPv6Network": "fd00::/48", "Backend": backend}
    )
    assert v6.wireguard_port == 5001
    dual = {**KUBE_FLANNEL, "EnableIPv6": True, "IPv6Network": "fd00::/48"}
    assert parse({**dual, "Backend": {"Type": "wireguard"}}).wireguard_port == 0  # 51820/51821


@pytest.mark.parametrize(
    ("backend", "needle"),
    [
        ({"Type": "vxlan", "GBP": True}, "Backend.GBP"),
        ({"Type": "vxlan", "Learning": True}, "Backend.Learning"),
        ({"Type": "vxlan", "DirectRouting": True}, "Backend.DirectRouting"),
        ({"Type": "vxlan", "MacPrefix": "0E-2A"}, "Backend.MacPrefix"),
        ({"Type": "vxlan", "VNI": 1 << 24}, "Backend.VNI"),
        ({"Type": "vxlan", "VNI": "1"}, "Backend.VNI"),
        ({"Type": "vxlan", "Port": 65536}, "Backend.Port"),
        ({"Type": "vxlan", "MTU": -1}, "Backend.MTU"),
        ({"Type": "ipip", "DirectRouting": True}, "Backend.DirectRouting"),
        ({"Type": "wireguard", "PSK": "c2VjcmV0"}, "Backend.PSK"),
        ({"Type": "wireguard", "Mode": "auto"}, "Backend.Mode auto"),
        ({"Type": "wireguard", "Mode": "ipv6"}, "Backend.Mode ipv6"),
        ({"Type": "wireguard", "Mode": "\x1b[2J"}, "Backend.Mode '\\x1b[2J'"),
        ({"Type": "wireguard", "ListenPort": 0}, "Backend.ListenPort"),
        ({"Type": "wireguard", "PersistentKeepaliveInterval": 1.5}, "PersistentKeepaliveInterval"),
        ({"Type": "udp"}, "flannel's udp backend is not in pycni"),
        ({"Type": "ipsec"}, "flannel's ipsec backend"),
        ({"Type": "alloc"}, "flannel's alloc backend"),
        ({"Type": "extension"}, "flannel's extension backend"),
        ({"Type": "VXLAN"}, "'VXLAN' is not a backend"),
        ({}, "'' is not a backend"),
        ("vxlan", "Backend must be an object"),
        (None, "flannel then runs its udp backend"),
    ],
)
def test_unsupported_backends_and_options_are_refused_by_name(backend: Any, needle: str) -> None:
    found = problems({**KUBE_FLANNEL, "Backend": backend})
    assert any(needle in p for p in found), found


def test_dual_stack_refusals() -> None:
    dual = {**KUBE_FLANNEL, "EnableIPv6": True, "IPv6Network": "fd00::/48"}
    assert any(
        "ipip carries IPv4 only" in p for p in problems({**dual, "Backend": {"Type": "ipip"}})
    )
    found = problems({**dual, "Backend": {"Type": "wireguard", "ListenPort": 6000}})
    assert any("ListenPort/ListenPortV6" in p for p in found), found


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        {
            "Network": "10.244.0.0/16",
            "SubnetLen": 40,
            "Backend": {"Type": "vxlan", "GBP": True, "Learning": True},
        }
    )
    assert len(found) == 3, found


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[1]", "JSON object"),
        ("{", "not JSON"),
        ('{"Network": NaN}', "NaN is not JSON"),
        ('{"Network": "10.244.0.0/16", "Network": "10.0.0.0/8"}', "appears twice"),
        ("[" * 100000, None),
        ('{"Network": "\\ud800"}', "not an IPv4 network"),
        (" " * (netconf.MAX_FILE_BYTES + 1), "larger than"),
    ],
)
def test_malformed_files(text: str, needle: str | None) -> None:
    with pytest.raises(NetConfError) as caught:
        netconf.parse(text)
    assert needle is None or needle in str(caught.value), caught.value.problems


def test_load_refuses_unreadable_huge_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(NetConfError, match="cannot read"):
        netconf.load(str(tmp_path / "absent.json"))
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (netconf.MAX_FILE_BYTES + 10))
    with pytest.raises(NetConfError, match="larger than"):
        netconf.load(str(huge))
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"Network": "\xff"}')
    with pytest.raises(NetConfError, match="not UTF-8"):
        netconf.load(str(binary))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
TOP = st.sampled_from([*netconf.TOP_KEYS, "network", "ENABLEIPV6", "x"])
BACKEND = st.fixed_dictionaries(
    {"Type": st.sampled_from([*netconf.BACKENDS, "udp", "", "vx\x00lan"])},
    optional={
        k: JSON | st.integers(-2, 70000) | st.booleans()
        for k in ("VNI", "Port", "MTU", "GBP", "DirectRouting", "ListenPort", "Mode", "PSK")
    },
)
NETWORKS = st.sampled_from(
    [
        "10.244.0.0/16",
        "10.0.0.0/30",
        "fd00::/48",
        "10.244.0.0/16\n",
        "1.2.3.4/33",
        "::/0",
        "0.0.0.0/0",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(TOP, JSON | NETWORKS | st.integers(0, 140), max_size=6),
    BACKEND | JSON,
)
def test_hostile_net_conf_gives_a_net_conf_error_or_typed_values(
    top: dict[str, Any], backend: Any
) -> None:
    data = {**top, "Backend": backend}
    try:
        conf = parse(data)
    except NetConfError as exc:
        assert exc.problems
        for line in exc.problems:  # bounded, and no raw control character reaches a terminal
            assert line.isprintable() and len(line) < 400, line
        return
    assert conf.backend in netconf.BACKENDS
    for family in conf.network.families:
        assert isinstance(family.network, ipaddress.IPv4Network | ipaddress.IPv6Network)
        assert family.network.prefixlen + 2 <= family.subnet_len <= family.network.max_prefixlen - 2
        assert family.contains(family.first) and family.contains(family.last)
    for value in (
        conf.vni,
        conf.vxlan_port,
        conf.underlay_mtu,
        conf.wireguard_port,
        conf.wireguard_keepalive,
    ):
        assert type(value) is int and 0 <= value < 1 << 24
    assert all(w.isprintable() for w in conf.warnings)


# --- pycni agent --net-conf / --check-config ------------------------------------------------------


def agent(*argv: str) -> int:
    return main(["agent", *argv], modules=("pycni.cli.agent_cmd",))


def write(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "net-conf.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_check_config_accepts_a_good_file_without_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {**KUBE_FLANNEL, "Backend": {"Type": "vxlan", "VNI": 7, "Port": 4790}})
    # an etcd nobody listens on: checking never contacts it
    assert (
        agent("--net-conf", path, "--check-config", "--etcd-endpoints", "http://127.0.0.1:1") == 0
    )
    out = capsys.readouterr()
    assert out.out == "ok: 10.244.0.0/16 with /24 node subnets; backend vxlan (VNI 7, port 4790)\n"
    assert out.err == ""


def test_check_config_shows_the_leasable_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {**KUBE_FLANNEL, "SubnetMin": "10.244.8.0", "Backend": {"Type": "ipip"}})
    assert agent("--net-conf", path, "--check-config") == 0
    assert capsys.readouterr().out == (
        "ok: 10.244.0.0/16 with /24 node subnets (IPv4 leases 10.244.8.0/24 to "
        "10.244.255.0/24); backend ipip\n"
    )


def test_check_config_lists_every_problem_and_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        {**KUBE_FLANNEL, "Typo": 1, "Backend": {"Type": "vxlan", "GBP": True, "Learning": True}},
    )
    assert agent("--net-conf", path, "--check-config") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "Backend.GBP" in err[0] and "Backend.Learning" in err[1], err
    path = write(tmp_path, {**KUBE_FLANNEL, "Typo": 1})
    assert agent("--net-conf", path, "--check-config") == 0
    assert "warning: net-conf: key 'Typo'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag",
    [["--network", "10.244.0.0/16"], ["--subnet-len", "24"], ["--backend", "vxlan"], ["--vni", "1"],
     ["--ipv6-network", "fd00::/48"], ["--wireguard-listen-port", "1"]],
)  # fmt: skip
def test_network_flags_and_net_conf_never_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    path = write(tmp_path, KUBE_FLANNEL)
    assert agent("--net-conf", path, *flag, "--check-config") == 2
    assert f"{flag[0]} and --net-conf both define the network" in capsys.readouterr().err


def test_net_conf_from_flannels_environment_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "FLANNELD_NET_CONFIG_PATH",
        write(tmp_path, {**KUBE_FLANNEL, "Backend": {"Type": "host-gw"}}),
    )
    assert agent("--check-config") == 0
    assert "backend host-gw" in capsys.readouterr().out


def test_flags_alone_keep_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent("--network", "10.9.0.0/16", "--check-config") == 0
    assert (
        capsys.readouterr().out
        == "ok: 10.9.0.0/16 with /24 node subnets; backend vxlan (VNI 1, port 8472)\n"
    )
    # no flags: etcd's config key (flannel's etcd mode); none listens here
    assert agent("--check-config", "--etcd-endpoints", "http://127.0.0.1:1") == 2
    err = capsys.readouterr().err
    assert "--net-conf FILE" in err and "/pycni.dev/network/config" in err, err
    assert agent("--network", "10.9.0.0/16", "--vni", "16777216", "--check-config") == 2
    assert "--vni takes 0..16777215" in capsys.readouterr().err
