"""flannel's ``net-conf.json``, read with flannel's meaning, for ``pycni agent --net-conf``.

An operator moving from flannel keeps the ConfigMap's ``net-conf.json``: each key means
what flannel makes of it (pkg/subnet/config.go and the backends' config structs):
keys match case-insensitively (Go's encoding/json), SubnetLen defaults to /24 (or the
network's length + 2 when that is too long), SubnetMin/SubnetMax are addresses on a
subnet boundary, a backend's ``MTU`` is the link MTU to assume (pods get it less the
backend's overhead). What pycni cannot do the same way is refused by name with what to do
instead, never ignored; keys flannel does not know are ignored by flannel, and reported here
as warnings. Every value is hostile: only typed, range-checked values leave this module, and
messages show a string only bounded and escaped.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from pycni.cluster import subnet as sn
from pycni.record import record

MAX_FILE_BYTES = 64 << 10
BACKENDS = ("vxlan", "host-gw", "wireguard", "ipip")
# flannel's other backends (current and removed ones): refused by name
FLANNEL_ONLY_BACKENDS = (
    "udp", "ipsec", "alloc", "extension", "tencent-vpc", "aws-vpc", "gce", "ali-vpc",
)  # fmt: skip
TOP_KEYS = (
    "EnableIPv4",
    "EnableIPv6",
    "EnableNFTables",
    "Network",
    "IPv6Network",
    "SubnetMin",
    "SubnetMax",
    "IPv6SubnetMin",
    "IPv6SubnetMax",
    "SubnetLen",
    "IPv6SubnetLen",
    "Backend",
)
BACKEND_KEYS = {
    "vxlan": ("Type", "VNI", "Port", "MTU", "GBP", "Learning", "DirectRouting", "MacPrefix"),
    "host-gw": ("Type",),
    "ipip": ("Type", "DirectRouting"),
    "wireguard": (
        "Type",
        "ListenPort",
        "ListenPortV6",
        "MTU",
        "PSK",
        "PersistentKeepaliveInterval",
        "Mode",
    ),
}
VXLAN_KERNEL_PORT = 8472  # what flannel's Port 0 leaves the kernel to pick
WG_PORT, WG_PORT_V6 = 51820, 51821
MAX_VNI = (1 << 24) - 1
CIDR_RE = re.compile(r"\A[0-9A-Fa-f:.]+/(0|[1-9][0-9]{0,2})\Z")


class NetConfError(ValueError):
    """The file cannot be used; ``problems`` has one line per reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@record(frozen=True)
class NetConf:
    """What the agent takes from a net-conf file (flag names in the comments)."""

    network: sn.ClusterConfig  # --network/--subnet-len, --ipv6-network/--ipv6-subnet-len
    backend: str  # --backend
    vni: int = 1  # --vni
    vxlan_port: int = VXLAN_KERNEL_PORT
    underlay_mtu: int = 0  # Backend.MTU: the link MTU to assume (0: the link's own)
    wireguard_port: int = 0  # --wireguard-listen-port (0: 51820 / 51821 per family)
    wireguard_keepalive: int = 0  # --wireguard-keepalive
    warnings: tuple[str, ...] = ()


def show(value: object) -> str:
    """A hostile value as a message may quote it: escaped and bounded."""
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, str) else repr(value)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    """One JSON object's keys, looked up as Go does (ASCII case folded), noting problems."""

    def __init__(self, where: str, data: dict[str, Any], known: tuple[str, ...]) -> None:
        self.where = where
        self.values: dict[str, Any] = {}
        self.problems: list[str] = []
        self.warnings: list[str] = []
        canonical = {k.lower(): k for k in known}
        for key, value in data.items():
            name = canonical.get(key.lower()) if key.isascii() else None
            if name is None:
                self.warnings.append(
                    f"{where}key {show(key)} is not one of flannel's: ignored (a typo?)"
                )
                continue
            if name in self.values:
                self.problems.append(f"{where}{name} is given twice (keys match in any case)")
                continue
            if value is not None:  # Go leaves a field at its default for null
                self.values[name] = value

    def has(self, name: str) -> bool:
        return name in self.values

    def boolean(self, name: str, default: bool) -> bool:
        value = self.values.get(name, default)
        if not isinstance(value, bool):
            self.problems.append(f"{self.where}{name} must be true or false, not {show(value)}")
            return default
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        value = self.values.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problems.append(
                f"{self.where}{name} must be an integer {low}..{high}, not {show(value)}"
            )
            return default
        return value

    def string(self, name: str) -> str:
        value = self.values.get(name, "")
        if not isinstance(value, str):
            self.problems.append(f"{self.where}{name} must be a string, not {show(value)}")
            return ""
        return value


def _default_len(prefix: int, host: int, longest: int) -> int | None:
    """flannel's SubnetLen when none is given: host's default length (/24, /64) when the
    network holds four of them, else four subnets; None when the network is too small."""
    if prefix > longest:
        return None
    return host if prefix <= host - 2 else prefix + 2


def _family(r: _Reader, version: int) -> sn.NetworkConfig | None:
    """The IPv``version`` network of the file (None after a problem)."""
    v6 = version == 6
    net_key, len_key = ("IPv6Network", "IPv6SubnetLen") if v6 else ("Network", "SubnetLen")
    min_key, max_key = ("IPv6SubnetMin", "IPv6SubnetMax") if v6 else ("SubnetMin", "SubnetMax")
    bits = 128 if v6 else 32
    text = r.string(net_key)
    if not text:
        r.problems.append(f"{net_key} is missing: give the cluster's IPv{version} pod network")
        return None
    try:
        if not CIDR_RE.match(text):  # Go's ParseCIDR: a decimal length, no netmask form
            raise ValueError(text)
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        r.problems.append(f"{net_key} {show(text)} is not an IPv{version} network (a.b.c.d/n)")
        return None
    if network.version != version:
        r.problems.append(f"{net_key} {show(text)} is not an IPv{version} network")
        return None
    if str(network) != text:
        r.warnings.append(f"{net_key} {show(text)} is taken as {network}, as flannel does")
    length = r.integer(len_key, 0, 0, bits)
    if length == 0:
        found = _default_len(network.prefixlen, 64 if v6 else 24, bits - 4)
        if found is None:
            r.problems.append(f"{net_key} {network} is too small: the least is a /{bits - 4}")
            return None
        length = found
    elif length > bits - 2:
        r.problems.append(f"{len_key} {length} must be at most {bits - 2}")
        return None
    elif length < network.prefixlen + 2:
        r.problems.append(
            f"{len_key} {length}: {network} must hold at least four subnets "
            f"(give {network.prefixlen + 2} or more)"
        )
        return None
    bounds: list[sn.Net | None] = []
    for key in (min_key, max_key):
        bounds.append(_bound(r, key, network, length))
    low, high = bounds
    if low is not None and high is not None and int(low[0]) > int(high[0]):
        r.problems.append(f"{min_key} {low.network_address} is above {max_key}")
        return None
    try:
        return sn.NetworkConfig(network, length, low, high)
    except sn.SubnetError as exc:
        r.problems.append(f"{net_key}: {exc}")
        return None


def _bound(r: _Reader, key: str, network: sn.Net, length: int) -> sn.Net | None:
    """SubnetMin/SubnetMax: an address (flannel's form) on a subnet boundary, or unset."""
    text = r.string(key)
    if not text:
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        r.problems.append(f"{key} {show(text)} is not an IPv{network.version} address")
        return None
    if address.is_unspecified:  # flannel's zero value: unset
        return None
    if address.version != network.version or address not in network:
        r.problems.append(f"{key} {address} is not inside {network}")
        return None
    bound = ipaddress.ip_network(f"{address}/{length}", strict=False)
    if bound.network_address != address:
        r.problems.append(f"{key} {address} is not on a /{length} boundary")
        return None
    return bound


def _backend_type(data: object, problems: list[str], required: bool = True) -> str:
    if data is None and not required:
        return ""
    if data is None:
        problems.append(
            "Backend is missing: flannel then runs its udp backend, which pycni does not "
            'have; give "Backend": {"Type": "vxlan"} (or host-gw, wireguard, ipip)'
        )
        return ""
    if not isinstance(data, dict):
        problems.append(f"Backend must be an object, not {show(data)}")
        return ""
    kind = next((v for k, v in data.items() if k.lower() == "type"), "")
    if kind in BACKENDS:
        return str(kind)
    choose = f"use one of {', '.join(BACKENDS)}"
    if kind in FLANNEL_ONLY_BACKENDS:
        problems.append(f"Backend.Type {kind}: flannel's {kind} backend is not in pycni; {choose}")
    else:
        problems.append(f"Backend.Type {show(kind)} is not a backend (names are exact); {choose}")
    return ""


def _refuse_true(r: _Reader, name: str, advice: str) -> None:
    if r.boolean(name, False):
        r.problems.append(f"Backend.{name} true is not supported by pycni: {advice}")


def _vxlan(r: _Reader) -> dict[str, int]:
    vni = r.integer("VNI", 1, 0, MAX_VNI)
    port = r.integer("Port", 0, 0, 65535) or VXLAN_KERNEL_PORT
    _refuse_true(r, "GBP", "remove it (pycni's vxlan carries no group policy IDs)")
    _refuse_true(r, "Learning", "remove it (pycni programs every FDB entry itself)")
    _refuse_true(
        r,
        "DirectRouting",
        'remove it, or use "Type": "host-gw" when every node shares one L2 network',
    )
    if r.string("MacPrefix"):
        r.problems.append("Backend.MacPrefix is flannel's Windows-only option: remove it")
    return {"vni": vni, "vxlan_port": port, "underlay_mtu": _mtu(r)}


def _mtu(r: _Reader) -> int:
    return r.integer("MTU", 0, 0, 65535) if r.has("MTU") else 0


def _wireguard(r: _Reader, network: sn.ClusterConfig | None) -> dict[str, int]:
    port4 = r.integer("ListenPort", WG_PORT, 1, 65535)
    port6 = r.integer("ListenPortV6", WG_PORT_V6, 1, 65535)
    keepalive = r.integer("PersistentKeepaliveInterval", 0, 0, 65535)
    if r.string("PSK"):
        r.problems.append("Backend.PSK: pycni's wireguard has no preshared key; remove PSK")
    mode = r.string("Mode") or "separate"
    if mode in ("auto", "ipv4", "ipv6"):
        r.problems.append(
            f'Backend.Mode {mode}: pycni runs one device per family (flannel\'s "separate"); '
            'remove Mode or give "separate"'
        )
    elif mode != "separate":
        r.problems.append(f"Backend.Mode {show(mode)} is not one of separate, auto, ipv4, ipv6")
    port = 0
    if network is not None and network.ipv4 is not None and network.ipv6 is not None:
        if (port4, port6) != (WG_PORT, WG_PORT_V6):
            r.problems.append(
                "Backend.ListenPort/ListenPortV6: a dual-stack pycni node listens on "
                f"{WG_PORT} and {WG_PORT_V6}; remove both"
            )
    elif network is not None:
        port = port6 if network.ipv4 is None else port4
    return {"wireguard_port": port, "wireguard_keepalive": keepalive, "underlay_mtu": _mtu(r)}


def _decode(text: str) -> dict[str, Any]:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise NetConfError([f"key {show(key)} appears twice"])
            out[key] = value
        return out

    def constant(name: str) -> None:
        raise NetConfError([f"{name} is not JSON"])

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        raise NetConfError(["the JSON is nested too deeply"]) from None
    except ValueError as exc:
        if isinstance(exc, NetConfError):
            raise
        raise NetConfError([f"not JSON: {exc}"]) from None
    if not isinstance(data, dict):
        raise NetConfError(["the file must hold a JSON object"])
    return data


def parse(text: str, require_backend: bool = True) -> NetConf:
    """The net-conf in ``text``; NetConfError lists every problem found. Without
    ``require_backend`` a missing Backend gives ``backend == ""`` (a config key written by
    an older pycni agent holds the network alone) instead of flannel's udp refusal."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise NetConfError([f"larger than {MAX_FILE_BYTES} bytes"])
    top = _Reader("", _decode(text), TOP_KEYS)
    v4 = top.boolean("EnableIPv4", True)
    v6 = top.boolean("EnableIPv6", False)
    top.boolean("EnableNFTables", False)  # pycni masquerades with nftables either way
    ipv4 = _family(top, 4) if v4 else None
    ipv6 = _family(top, 6) if v6 else None
    network = None
    if not v4 and not v6:
        top.problems.append("EnableIPv4 and EnableIPv6 are both false: enable one")
    elif ipv4 is not None or ipv6 is not None:
        if (v4 and ipv4 is None) or (v6 and ipv6 is None):
            network = None
        else:
            network = sn.ClusterConfig(ipv4, ipv6)
    backend_data = top.values.get("Backend")
    kind = _backend_type(backend_data, top.problems, require_backend)
    options: dict[str, int] = {}
    warnings = list(top.warnings)
    if kind:
        assert isinstance(backend_data, dict)
        be = _Reader("Backend.", backend_data, BACKEND_KEYS[kind])
        if kind == "vxlan":
            options = _vxlan(be)
        elif kind == "wireguard":
            options = _wireguard(be, network)
        elif kind == "ipip":
            _refuse_true(be, "DirectRouting", 'remove it, or use "Type": "host-gw" on one L2')
            if v6:
                be.problems.append("Backend.Type ipip carries IPv4 only: use vxlan or wireguard")
        top.problems += be.problems
        warnings += be.warnings
    if top.problems or network is None:
        raise NetConfError(top.problems or ["no usable network"])
    return NetConf(network, kind, warnings=tuple(warnings), **options)


def load(path: str) -> NetConf:
    """The net-conf file at ``path`` (NetConfError when unreadable, too large or bad)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise NetConfError([f"cannot read {show(path)}: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise NetConfError([f"{show(path)} is larger than {MAX_FILE_BYTES} bytes"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NetConfError([f"{show(path)} is not UTF-8"]) from None
    return parse(text)
