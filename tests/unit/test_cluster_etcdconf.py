"""etcd's ``<prefix>/config`` read as flanneld's etcd mode reads it (netconf's parser), what
an agent publishes there, and what it does when its flags or file say something else."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pycni.cli.main import main
from pycni.cluster import etcdconf, netconf
from pycni.cluster import subnet as sn
from pycni.cluster.etcd import Etcd, EtcdResponseTooLarge, KeyValue

KEY = "/coreos.com/network/config"
FLANNEL = {"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4, "Port": 4789}}


class MemoryEtcd(Etcd):
    """One etcd key space in memory: create-if-absent and get, as the config needs."""

    def __init__(self, keys: dict[str, bytes] | None = None) -> None:
        super().__init__("http://127.0.0.1:1")
        self.keys = dict(keys or {})

    def create(self, key: str, value: bytes | str, lease: int = 0) -> bool:
        if key in self.keys:
            return False
        self.keys[key] = value.encode() if isinstance(value, str) else value
        return True

    def get(
        self, key: str, *, limit: int = 0, keys_only: bool = False, revision: int = 0
    ) -> KeyValue | None:
        value = self.keys.get(key)
        if value is None:
            return None
        if limit and len(value) * 4 // 3 > limit:
            raise EtcdResponseTooLarge("too large")
        return KeyValue(key, value, 1, 1, 0)


def stored(data: Any) -> MemoryEtcd:
    return MemoryEtcd({KEY: json.dumps(data).encode()})


def flags(network: str = "10.244.0.0/16", length: int = 24, **kw: Any) -> netconf.NetConf:
    """What an agent started with ``--network`` (and defaults) says, as the agent builds it."""
    kw.setdefault("backend", "vxlan")
    return netconf.NetConf(sn.ClusterConfig(sn.NetworkConfig.parse(network, length)), **kw)


def test_a_flannel_key_means_what_it_means_to_flanneld() -> None:
    conf = etcdconf.read(stored({**FLANNEL, "SubnetMin": "10.244.8.0"}), KEY)
    v4 = conf.network.ipv4
    assert v4 is not None and (v4.subnet_len, str(v4.first)) == (24, "10.244.8.0/24")
    assert (conf.backend, conf.vni, conf.vxlan_port) == ("vxlan", 4, 4789)
    # flannel's SubnetLen rule, not pycni's flag default: a /23 is cut into /25s
    small = etcdconf.read(stored({"Network": "10.9.0.0/23", "Backend": {"Type": "host-gw"}}), KEY)
    assert small.network.ipv4 is not None and small.network.ipv4.subnet_len == 25


def test_the_key_is_refused_by_name_and_warned_about_like_a_file() -> None:
    with pytest.raises(etcdconf.ConfigError) as caught:
        etcdconf.read(stored({"Network": "10.244.0.0/16"}), KEY)  # flannel would run udp
    assert caught.value.problems[0].startswith(f"{KEY}: Backend is missing")
    with pytest.raises(etcdconf.ConfigError) as caught:
        etcdconf.read(stored({**FLANNEL, "Backend": {"Type": "vxlan", "GBP": True}}), KEY)
    assert "Backend.GBP" in str(caught.value)
    conf = etcdconf.read(stored({**FLANNEL, "Typo": 1}), KEY)
    assert conf.warnings and "'Typo'" in conf.warnings[0]
    with pytest.raises(etcdconf.ConfigMissing):
        etcdconf.read(MemoryEtcd(), KEY)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b" " * (etcdconf.MAX_VALUE + 1), "larger than"),
        (b"[" * 50_000, "nested too deeply"),
        (b'{"Network": NaN}', "NaN is not JSON"),
    ],
)
def test_hostile_values_are_refused_with_a_reason(raw: bytes, why: str) -> None:
    with pytest.raises(etcdconf.ConfigError) as caught:
        etcdconf.read(MemoryEtcd({KEY: raw}), KEY)
    assert why in str(caught.value) and str(caught.value).startswith(KEY)


def test_an_answer_over_the_cap_is_not_read() -> None:
    huge = MemoryEtcd({KEY: b" " * (4 * etcdconf.MAX_VALUE)})
    with pytest.raises(etcdconf.ConfigError, match="larger than"):
        etcdconf.read(huge, KEY)


def test_an_agent_publishes_its_config_in_flannels_form_when_the_key_is_absent() -> None:
    etcd = MemoryEtcd()
    mine = flags(backend="vxlan", vni=9, vxlan_port=4790, underlay_mtu=1400)
    assert etcdconf.ensure(etcd, KEY, mine, "the flags") is mine
    data = json.loads(etcd.keys[KEY])
    assert data == {
        "Network": "10.244.0.0/16",
        "SubnetLen": 24,
        "Backend": {"Type": "vxlan", "VNI": 9, "Port": 4790, "MTU": 1400},
    }
    # flanneld (and a flag-less agent) reading it get the same settings
    back = etcdconf.read(etcd, KEY)
    assert etcdconf.differences(back, mine) == []


def test_a_key_an_older_pycni_wrote_still_works_with_agreeing_flags() -> None:
    """Before the key carried the backend, agents wrote the network alone."""
    old = {"Network": "10.244.0.0/16", "SubnetLen": 24}
    for backend in ("vxlan", "host-gw"):
        etcd = stored(old)
        kept = etcdconf.ensure(etcd, KEY, flags(backend=backend), "the flags")
        assert kept.backend == "" and json.loads(etcd.keys[KEY]) == old  # left as it was
    dual = {"Network": "10.244.0.0/16", "SubnetLen": 24, "EnableIPv6": True,
            "IPv6Network": "fd10:244::/56", "IPv6SubnetLen": 64}  # fmt: skip
    both = sn.ClusterConfig(
        sn.NetworkConfig.parse("10.244.0.0/16"),
        sn.NetworkConfig.parse("fd10:244::/56", 64, version=6),
    )
    etcdconf.ensure(stored(dual), KEY, netconf.NetConf(both, "vxlan"), "the flags")
    with pytest.raises(etcdconf.ConfigError, match=r"the IPv4 network is 10\.244\.0\.0/16 in /24"):
        etcdconf.ensure(stored(old), KEY, flags(length=26), "the flags")


@pytest.mark.parametrize(
    ("key", "mine", "named"),
    [
        (FLANNEL, flags(backend="host-gw"), "Backend.Type is vxlan in etcd's"),
        (FLANNEL, flags(backend="vxlan", vni=1, vxlan_port=4789), "Backend.VNI is 4"),
        (FLANNEL, flags(backend="vxlan", vni=4), "Backend.Port is 4789"),
        ({**FLANNEL, "SubnetMin": "10.244.8.0"}, flags(backend="vxlan", vni=4, vxlan_port=4789),
         "from 10.244.8.0 to 10.244.255.0 in etcd's"),
        ({"Network": "10.9.0.0/23", "Backend": {"Type": "host-gw"}},
         flags("10.9.0.0/23", 24, backend="host-gw"), "in /25 subnets in etcd's"),
        ({"Network": "10.1.0.0/16", "Backend": {"Type": "wireguard", "ListenPort": 5000}},
         flags("10.1.0.0/16", backend="wireguard"), "ListenPortV6 is 5000 in etcd's"),
    ],
)  # fmt: skip
def test_a_disagreement_names_the_setting_and_both_sources(
    key: dict[str, Any], mine: netconf.NetConf, named: str
) -> None:
    etcd = stored(key)
    with pytest.raises(etcdconf.ConfigError) as caught:
        etcdconf.ensure(etcd, KEY, mine, "net-conf '/etc/kube-flannel/net-conf.json'")
    text = "\n".join(caught.value.problems)
    assert named in text and KEY in text and "net-conf '/etc/kube-flannel" in text, text
    assert json.loads(etcd.keys[KEY]) == key  # never overwritten


def test_wireguards_default_ports_agree_however_they_are_spelt() -> None:
    key = {"Network": "10.1.0.0/16", "Backend": {"Type": "wireguard", "ListenPort": 51820}}
    etcdconf.ensure(stored(key), KEY, flags("10.1.0.0/16", backend="wireguard"), "the flags")


FAMILY = st.tuples(st.integers(8, 20), st.integers(2, 6), st.booleans())


def _network(version: int, spec: tuple[int, int, bool]) -> sn.NetworkConfig:
    prefix, more, bounded = spec
    if version == 6:
        prefix, more = prefix + 40, more + 4
    base = "10.0.0.0" if version == 4 else "fd00::"
    net = ipaddress.ip_network(f"{base}/{prefix}")
    length = prefix + more
    low = high = None
    if bounded:
        subnets = list(net.subnets(new_prefix=length))
        low, high = subnets[1], subnets[-2]
    return sn.NetworkConfig(net, length, low, high)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    v4=st.one_of(st.none(), FAMILY),
    v6=st.one_of(st.none(), FAMILY),
    backend=st.sampled_from(netconf.BACKENDS),
    vni=st.integers(0, netconf.MAX_VNI),
    port=st.integers(1, 65535),
    mtu=st.sampled_from([0, 1280, 1400, 9000]),
    keepalive=st.integers(0, 65535),
)
def test_what_an_agent_publishes_reads_back_the_same(
    v4: tuple[int, int, bool] | None,
    v6: tuple[int, int, bool] | None,
    backend: str,
    vni: int,
    port: int,
    mtu: int,
    keepalive: int,
) -> None:
    if (v4 is None and v6 is None) or (backend == "ipip" and v6 is not None):
        return
    network = sn.ClusterConfig(_network(4, v4) if v4 else None, _network(6, v6) if v6 else None)
    dual = v4 is not None and v6 is not None
    mine = netconf.NetConf(
        network,
        backend,
        vni=vni,
        vxlan_port=port,
        underlay_mtu=mtu if backend in ("vxlan", "wireguard") else 0,
        wireguard_port=0 if dual else port,
        wireguard_keepalive=keepalive,
    )
    etcd = MemoryEtcd()
    etcdconf.ensure(etcd, KEY, mine, "the flags")
    back = etcdconf.read(etcd, KEY)
    assert back.warnings == () and etcdconf.differences(back, mine) == []
    for family, other in ((back.network.ipv4, network.ipv4), (back.network.ipv6, network.ipv6)):
        assert (family is None) == (other is None)
        if family is not None and other is not None:
            assert (family.first, family.last) == (other.first, other.last)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
KEYS = st.sampled_from([*netconf.TOP_KEYS, "Type", "VNI", "Port", "MTU", "ListenPort", "Mode"])


@settings(max_examples=120, deadline=None)
@given(
    top=st.dictionaries(KEYS | st.text(max_size=10), JSON, max_size=8),
    backend=st.dictionaries(KEYS, JSON, max_size=5),
    raw=st.binary(max_size=64),
    as_bytes=st.booleans(),
)
def test_any_value_gives_a_typed_config_or_a_config_error(
    top: dict[str, Any], backend: dict[str, Any], raw: bytes, as_bytes: bool
) -> None:
    value = raw if as_bytes else json.dumps({**top, "Backend": backend}).encode()
    try:
        conf = etcdconf.decode(value, KEY)
    except etcdconf.ConfigError as exc:
        assert exc.problems and all(p.startswith(f"{KEY}: ") for p in exc.problems)
        assert all(len(p) < 400 for p in exc.problems)  # hostile strings are bounded
        return
    # what leaves is typed and checked: networks, a known backend, integers in range
    assert conf.backend in netconf.BACKENDS
    assert all(isinstance(f, sn.NetworkConfig) for f in conf.network.families)
    assert 0 <= conf.vni <= netconf.MAX_VNI and 0 < conf.vxlan_port <= 65535
    assert all(type(v) is int for v in (conf.vni, conf.underlay_mtu, conf.wireguard_port))


def agent(*argv: str) -> int:
    return main(["agent", *argv], modules=("pycni.cli.agent_cmd",))


@pytest.mark.parametrize("flag", [["--backend", "host-gw"], ["--subnet-len", "26"], ["--vni", "3"]])
def test_network_options_without_a_network_are_refused(
    capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    """Without --network the key defines the network: a lone option would be a second source."""
    assert agent(*flag, "--check-config", "--etcd-endpoints", "http://127.0.0.1:1") == 2
    err = capsys.readouterr().err
    assert f"{flag[0]} without --network/--ipv6-network" in err, err
