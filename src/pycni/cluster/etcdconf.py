"""The cluster config in etcd's ``<prefix>/config``, read as flanneld's etcd mode reads it.

flanneld in etcd mode takes its whole net-conf (Network, SubnetLen, SubnetMin/Max, IPv6,
Backend and its options) from that key, so this module reads it through ``netconf``'s
parser: the same meaning, the same refusals by name, the same warnings. An agent given its
network by flags or ``--net-conf`` publishes it there in the same form when the key is
absent, and refuses to start when the key says something else (both sources named), so
one cluster never runs two configs. A key written by an older pycni agent holds only the
network (no Backend): it is still accepted next to flags that agree on the network.

The value is hostile (anyone with etcd write access writes it): its size is capped before
it is decoded, and only netconf's typed, range-checked values leave this module.
"""

from __future__ import annotations

import json

from pycni.cluster import netconf
from pycni.cluster import subnet as sn
from pycni.cluster.etcd import Etcd, EtcdResponseTooLarge

MAX_VALUE = netconf.MAX_FILE_BYTES  # what a net-conf file may hold, the key may hold
MAX_ANSWER = 2 * MAX_VALUE + 4096  # etcd's JSON answer: the value in base64, and the rest


class ConfigError(ValueError):
    """The key's config cannot be used, or disagrees with the agent's; one line per reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class ConfigMissing(LookupError):
    """The config key does not exist (yet)."""


def decode(raw: bytes, key: str, require_backend: bool = True) -> netconf.NetConf:
    """The config ``raw`` holds (the value of ``key``); ConfigError says what is wrong."""
    if len(raw) > MAX_VALUE:
        raise ConfigError([f"{key}: the value is larger than {MAX_VALUE} bytes"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([f"{key}: the value is not UTF-8"]) from None
    try:
        return netconf.parse(text, require_backend=require_backend)
    except netconf.NetConfError as exc:
        raise ConfigError([f"{key}: {p}" for p in exc.problems]) from None


def read(etcd: Etcd, key: str, require_backend: bool = True) -> netconf.NetConf:
    """The config at ``key`` (ConfigMissing when there is none; EtcdError passes)."""
    try:
        kv = etcd.get(key, limit=MAX_ANSWER)
    except EtcdResponseTooLarge:
        raise ConfigError([f"{key}: the value is larger than {MAX_VALUE} bytes"]) from None
    if kv is None:
        raise ConfigMissing(key)
    return decode(kv.value, key, require_backend)


def _family_json(network: sn.NetworkConfig, v6: bool) -> dict[str, object]:
    pre = "IPv6" if v6 else ""
    out: dict[str, object] = {
        f"{pre}Network": str(network.network),
        f"{pre}SubnetLen": network.subnet_len,
    }
    if network.subnet_min is not None:
        out[f"{pre}SubnetMin"] = str(network.subnet_min.network_address)
    if network.subnet_max is not None:
        out[f"{pre}SubnetMax"] = str(network.subnet_max.network_address)
    return out


def _wg_ports(conf: netconf.NetConf) -> str:
    """The wireguard port of each family a node of ``conf`` listens on."""
    port = conf.wireguard_port
    ports = []
    if conf.network.ipv4 is not None:
        ports.append(port or netconf.WG_PORT)
    if conf.network.ipv6 is not None:
        ports.append(port or netconf.WG_PORT_V6)
    return "/".join(map(str, ports))


def encode(conf: netconf.NetConf) -> str:
    """``conf`` as flannel's net-conf JSON: what an agent publishes in the config key
    (flanneld reading it gets the same network and backend)."""
    out: dict[str, object] = {}
    network = conf.network
    if network.ipv4 is not None:
        out.update(_family_json(network.ipv4, False))
    else:
        out["EnableIPv4"] = False
    if network.ipv6 is not None:
        out["EnableIPv6"] = True
        out.update(_family_json(network.ipv6, True))
    backend: dict[str, object] = {"Type": conf.backend}
    if conf.backend == "vxlan":
        backend.update(VNI=conf.vni, Port=conf.vxlan_port)
    elif conf.backend == "wireguard":
        if network.ipv6 is None:  # dual-stack: always the default ports
            backend["ListenPort"] = conf.wireguard_port or netconf.WG_PORT
        elif network.ipv4 is None:
            backend["ListenPortV6"] = conf.wireguard_port or netconf.WG_PORT_V6
        if conf.wireguard_keepalive:
            backend["PersistentKeepaliveInterval"] = conf.wireguard_keepalive
    if conf.underlay_mtu and conf.backend in ("vxlan", "wireguard"):
        backend["MTU"] = conf.underlay_mtu
    if conf.backend:
        out["Backend"] = backend
    return json.dumps(out, sort_keys=True)


def _shape(network: sn.NetworkConfig | None) -> str:
    if network is None:
        return "off"
    text = f"{network.network} in /{network.subnet_len} subnets"
    if network.subnet_min is not None or network.subnet_max is not None:
        text += f" from {network.first.network_address} to {network.last.network_address}"
    return text


def differences(stored: netconf.NetConf, mine: netconf.NetConf) -> list[tuple[str, str, str]]:
    """Where ``mine`` says something else than the key's ``stored``: (setting, the key's
    value, mine). A stored config without a backend (an older pycni's) states none."""
    out: list[tuple[str, str, str]] = []
    for name, a, b in (
        ("the IPv4 network", stored.network.ipv4, mine.network.ipv4),
        ("the IPv6 network", stored.network.ipv6, mine.network.ipv6),
    ):
        if _shape(a) != _shape(b):
            out.append((name, _shape(a), _shape(b)))
    if not stored.backend:
        return out
    pairs: list[tuple[str, object, object]] = [("Backend.Type", stored.backend, mine.backend)]
    if stored.backend == mine.backend == "vxlan":
        pairs += [
            ("Backend.VNI", stored.vni, mine.vni),
            ("Backend.Port", stored.vxlan_port, mine.vxlan_port),
        ]
    if stored.backend == mine.backend == "wireguard":
        pairs += [
            ("Backend.ListenPort/ListenPortV6", _wg_ports(stored), _wg_ports(mine)),
            (
                "Backend.PersistentKeepaliveInterval",
                stored.wireguard_keepalive,
                mine.wireguard_keepalive,
            ),
        ]
    if stored.backend == mine.backend:
        pairs.append(("Backend.MTU", stored.underlay_mtu or "unset", mine.underlay_mtu or "unset"))
    out += [(name, str(a), str(b)) for name, a, b in pairs if a != b]
    return out


def ensure(etcd: Etcd, key: str, mine: netconf.NetConf, source: str) -> netconf.NetConf:
    """Publish ``mine`` at ``key`` when the key is absent; else check the key agrees with
    it (ConfigError naming both ``source`` and the key when not). Returns the key's config."""
    if etcd.create(key, encode(mine)):
        return mine
    try:
        stored = read(etcd, key, require_backend=False)
    except ConfigMissing:  # deleted between the two calls: once more
        etcd.create(key, encode(mine))
        return mine
    found = differences(stored, mine)
    if found:
        lines = [f"{n} is {a} in etcd's {key}, {b} in {source}" for n, a, b in found]
        lines.append(
            f"make {source} and etcd's {key} agree, or give neither network flags nor "
            "--net-conf and the agent takes etcd's config"
        )
        raise ConfigError(lines)
    return stored
