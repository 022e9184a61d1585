"""Pure subnet logic: carving node subnets out of the cluster network, lease keys, subnet.env.

The names follow flannel so its tools and its CNI plugin config read ours: a lease key is
``<prefix>/subnets/10.244.1.0-24``, the node's subnet file carries FLANNEL_NETWORK,
FLANNEL_SUBNET (the node's first address with the subnet's length, e.g. 10.244.1.1/24),
FLANNEL_MTU and FLANNEL_IPMASQ. pycni's agent adds PYCNI_FRESH_FOR: it touches the file
while it holds its lease, and a file not touched for that many seconds is stale (the agent
is gone); flannel's plugin ignores the key.
"""

from __future__ import annotations

import ipaddress
import os
import random
import time
from collections.abc import Iterable, Iterator

from pycni.fsutil import write_atomic
from pycni.record import record

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

DEFAULT_SUBNET_LEN = 24
DEFAULT_IPV6_SUBNET_LEN = 64
MAX_CANDIDATES = 100  # pick randomly among the first free ones, as flannel does


class SubnetError(ValueError):
    """A bad network / subnet length, or no subnet left."""


@record(frozen=True)
class NetworkConfig:
    """The cluster network and how it is cut into node subnets."""

    network: Net
    subnet_len: int = DEFAULT_SUBNET_LEN
    subnet_min: Net | None = None
    subnet_max: Net | None = None

    def __post_init__(self) -> None:
        longest = self.network.max_prefixlen - 2
        if not self.network.prefixlen < self.subnet_len <= longest:
            raise SubnetError(
                f"subnet length {self.subnet_len} must be longer than the network's "
                f"/{self.network.prefixlen} and at most {longest}"
            )
        for bound in (self.subnet_min, self.subnet_max):
            if bound is not None and (
                bound.prefixlen != self.subnet_len
                or bound.version != self.network.version
                or not bound.subnet_of(self.network)  # type: ignore[arg-type]
            ):
                raise SubnetError(f"{bound} is not a /{self.subnet_len} inside {self.network}")

    @classmethod
    def parse(
        cls, network: str, subnet_len: int = DEFAULT_SUBNET_LEN, version: int = 4
    ) -> NetworkConfig:
        try:
            net = ipaddress.ip_network(network, strict=True)
        except ValueError as exc:
            raise SubnetError(f"bad cluster network {network!r}: {exc}") from None
        if net.version != version:
            raise SubnetError(f"the cluster network must be IPv{version}, not {network}")
        return cls(net, subnet_len)

    @property
    def version(self) -> int:
        return self.network.version

    @property
    def first(self) -> Net:
        """The lowest subnet handed out; like flannel we keep the network's first one free."""
        if self.subnet_min is not None:
            return self.subnet_min
        return _nth(self.network, self.subnet_len, 1)

    @property
    def last(self) -> Net:
        if self.subnet_max is not None:
            return self.subnet_max
        return _nth(self.network, self.subnet_len, self.count_in_network() - 1)

    def count_in_network(self) -> int:
        return 1 << (self.subnet_len - self.network.prefixlen)

    def subnets(self) -> Iterator[Net]:
        """Every subnet that may be leased, lowest first."""
        size = 1 << (self.network.max_prefixlen - self.subnet_len)
        start, end = int(self.first.network_address), int(self.last.network_address)
        for base in range(start, end + 1, size):
            yield _net(self.version, base, self.subnet_len)

    def contains(self, subnet: Net) -> bool:
        return (
            subnet.version == self.version
            and subnet.prefixlen == self.subnet_len
            and int(self.first.network_address)
            <= int(subnet.network_address)
            <= int(self.last.network_address)
        )

    def to_json(self) -> dict[str, object]:
        return {"Network": str(self.network), "SubnetLen": self.subnet_len}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> NetworkConfig:
        length = data.get("SubnetLen", DEFAULT_SUBNET_LEN)
        if not isinstance(length, int):
            raise SubnetError("SubnetLen must be an integer")
        return cls.parse(str(data.get("Network", "")), length)


def _net(version: int, base: int, length: int) -> Net:
    if version == 4:
        return ipaddress.IPv4Network((base, length))
    return ipaddress.IPv6Network((base, length))


def _nth(network: Net, length: int, index: int) -> Net:
    base = int(network.network_address) + (index << (network.max_prefixlen - length))
    return _net(network.version, base, length)


def _first_host(subnet: Net) -> Interface:
    """The node's own address in its subnet (the bridge's): the first one."""
    if subnet.version == 4:
        return ipaddress.IPv4Interface((int(subnet.network_address) + 1, subnet.prefixlen))
    return ipaddress.IPv6Interface((int(subnet.network_address) + 1, subnet.prefixlen))


@record(frozen=True)
class ClusterConfig:
    """The cluster's pod networks: IPv4, IPv6 or both (flannel's EnableIPv4/EnableIPv6)."""

    ipv4: NetworkConfig | None
    ipv6: NetworkConfig | None = None

    def __post_init__(self) -> None:
        if self.ipv4 is None and self.ipv6 is None:
            raise SubnetError("give an IPv4 network, an IPv6 network or both")
        if self.ipv4 is not None and self.ipv4.version != 4:
            raise SubnetError("the IPv4 cluster network must be IPv4")
        if self.ipv6 is not None and self.ipv6.version != 6:
            raise SubnetError("the IPv6 cluster network must be IPv6")

    @property
    def families(self) -> list[NetworkConfig]:
        return [n for n in (self.ipv4, self.ipv6) if n is not None]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.ipv4 is not None:
            out.update(self.ipv4.to_json())
        else:
            out["EnableIPv4"] = False
        if self.ipv6 is not None:
            out["EnableIPv6"] = True
            out["IPv6Network"] = str(self.ipv6.network)
            out["IPv6SubnetLen"] = self.ipv6.subnet_len
        return out

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ClusterConfig:
        ipv4 = None if data.get("EnableIPv4") is False else NetworkConfig.from_json(data)
        ipv6 = None
        if data.get("EnableIPv6") is True:
            length = data.get("IPv6SubnetLen", DEFAULT_IPV6_SUBNET_LEN)
            if not isinstance(length, int):
                raise SubnetError("IPv6SubnetLen must be an integer")
            ipv6 = NetworkConfig.parse(str(data.get("IPv6Network", "")), length, version=6)
        return cls(ipv4, ipv6)

    def same_as(self, other: ClusterConfig) -> bool:
        def shape(n: NetworkConfig | None) -> tuple[object, ...] | None:
            return None if n is None else (n.network, n.subnet_len)

        return (shape(self.ipv4), shape(self.ipv6)) == (shape(other.ipv4), shape(other.ipv6))

    def describe(self) -> str:
        return " and ".join(f"{n.network} with /{n.subnet_len} node subnets" for n in self.families)


def choose_free(
    config: NetworkConfig, taken: Iterable[Net], rng: random.Random | None = None
) -> Net:
    """A free subnet, chosen at random among the first free ones (fewer collisions when
    many nodes start together; the etcd transaction settles the rest)."""
    used = set(taken)
    free: list[Net] = []
    for candidate in config.subnets():
        if candidate not in used:
            free.append(candidate)
            if len(free) >= MAX_CANDIDATES:
                break
    if not free:
        raise SubnetError(f"no free /{config.subnet_len} left in {config.network}")
    return (rng or random).choice(free)


# --- lease keys -----------------------------------------------------------------------------------


def key_of(subnet: Net) -> str:
    """flannel's key form: ``10.244.1.0-24``."""
    return f"{subnet.network_address}-{subnet.prefixlen}"


def subnet_of_key(name: str) -> Net | None:
    """The subnet named by a key's last part (``10.244.1.0-24``, ``fd10:244:0:1::-64``),
    or None when it is not one of ours."""
    base = name.rsplit("/", 1)[-1]
    address, sep, length = base.partition("-")
    if not sep or not length.isascii() or not length.isdigit() or len(length) > 3:
        return None
    try:
        return ipaddress.ip_network(f"{address}/{length}", strict=True)
    except ValueError:
        return None


# --- subnet.env -----------------------------------------------------------------------------------


@record(frozen=True)
class SubnetEnv:
    """What the agent tells the CNI meta plugin about this node (flannel's names; an
    IPv6-only node has no FLANNEL_NETWORK/FLANNEL_SUBNET, only the FLANNEL_IPV6_ ones)."""

    network: Net | None
    subnet: Net | None
    mtu: int
    ipmasq: bool
    fresh_for: int = 0  # seconds the file stays valid after its last touch; 0: no limit
    ipv6_network: Net | None = None
    ipv6_subnet: Net | None = None

    @property
    def gateway(self) -> Interface:
        """The node's address in its (first family's) subnet, the bridge's."""
        return _first_host(self.primary_subnet)

    @property
    def primary_subnet(self) -> Net:
        subnet = self.subnet or self.ipv6_subnet
        assert subnet is not None  # parse and the agent always give one
        return subnet

    @property
    def pairs(self) -> list[tuple[Net, Net]]:
        """(cluster network, node subnet) per family, IPv4 first."""
        out = []
        if self.network is not None and self.subnet is not None:
            out.append((self.network, self.subnet))
        if self.ipv6_network is not None and self.ipv6_subnet is not None:
            out.append((self.ipv6_network, self.ipv6_subnet))
        return out

    def render(self) -> str:
        lines = []
        if self.network is not None and self.subnet is not None:
            lines.append(f"FLANNEL_NETWORK={self.network}")
            lines.append(f"FLANNEL_SUBNET={_first_host(self.subnet)}")
        if self.ipv6_network is not None and self.ipv6_subnet is not None:
            lines.append(f"FLANNEL_IPV6_NETWORK={self.ipv6_network}")
            lines.append(f"FLANNEL_IPV6_SUBNET={_first_host(self.ipv6_subnet)}")
        lines.append(f"FLANNEL_MTU={self.mtu}")
        lines.append(f"FLANNEL_IPMASQ={'true' if self.ipmasq else 'false'}")
        if self.fresh_for:
            lines.append(f"PYCNI_FRESH_FOR={self.fresh_for}")
        return "".join(line + "\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> SubnetEnv:
        values: dict[str, str] = {}
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise SubnetError(f"subnet file line {line[:80]!r} is not KEY=VALUE")
            if value.strip().strip('"'):  # flannel writes empty values for absent ones
                values[key.strip()] = value.strip().strip('"')
        has_v6 = "FLANNEL_IPV6_NETWORK" in values or "FLANNEL_IPV6_SUBNET" in values
        needed = ["FLANNEL_MTU", "FLANNEL_IPMASQ"]
        if not has_v6 or "FLANNEL_NETWORK" in values or "FLANNEL_SUBNET" in values:
            needed = ["FLANNEL_NETWORK", "FLANNEL_SUBNET", *needed]
        if has_v6:
            needed += ["FLANNEL_IPV6_NETWORK", "FLANNEL_IPV6_SUBNET"]
        missing = [k for k in needed if k not in values]
        if missing:
            raise SubnetError(f"subnet file is missing {', '.join(missing)}")

        def pair(net_key: str, sub_key: str, version: int) -> tuple[Net | None, Net | None]:
            if net_key not in values:
                return None, None
            network = ipaddress.ip_network(values[net_key], strict=False)
            subnet = ipaddress.ip_network(values[sub_key], strict=False)
            if network.version != version or subnet.version != version:
                raise ValueError(f"{net_key}/{sub_key} must be IPv{version}")
            if not subnet.subnet_of(network):  # type: ignore[arg-type]
                raise ValueError(f"{sub_key} {subnet} is not inside {network}")
            return network, subnet

        try:
            network, subnet = pair("FLANNEL_NETWORK", "FLANNEL_SUBNET", 4)
            network6, subnet6 = pair("FLANNEL_IPV6_NETWORK", "FLANNEL_IPV6_SUBNET", 6)
            mtu = int(values["FLANNEL_MTU"])
        except ValueError as exc:
            raise SubnetError(f"subnet file has a bad value: {exc}") from None
        if values["FLANNEL_IPMASQ"] not in ("true", "false"):
            raise SubnetError(
                f"FLANNEL_IPMASQ must be true or false, not {values['FLANNEL_IPMASQ'][:20]!r}"
            )
        fresh = values.get("PYCNI_FRESH_FOR", "0")
        if not fresh.isascii() or not fresh.isdigit():
            raise SubnetError(f"PYCNI_FRESH_FOR must be a number of seconds, not {fresh[:20]!r}")
        if not 68 <= mtu <= 65535:
            raise SubnetError(f"FLANNEL_MTU {mtu} is not between 68 and 65535")
        return cls(
            network,
            subnet,
            mtu,
            values["FLANNEL_IPMASQ"] == "true",
            int(fresh),
            network6,
            subnet6,
        )


def read_subnet_env(path: str) -> SubnetEnv:
    with open(path, encoding="utf-8") as f:
        return SubnetEnv.parse(f.read())


def write_subnet_env(path: str, env: SubnetEnv) -> None:
    """Atomically (temp file + rename), so the plugin never reads half a file."""
    write_atomic(path, env.render(), mode=0o644, dir_mode=0o755, fsync=False, prefix=".subnet.")


@record(frozen=True)
class Readiness:
    """Whether pods can be attached on this node now, and why (not)."""

    ready: bool
    reason: str
    env: SubnetEnv | None = None
    problem: str = ""  # "missing", "unusable", "stale" or "" when ready


def readiness(path: str, now: float | None = None) -> Readiness:
    """Ready when the agent's subnet file is there, parses, and (when the agent said how
    long it stays valid) was touched recently enough: the agent holds its lease and has
    programmed its routes. A file written by flannel itself carries no freshness: present
    is ready."""
    try:
        with open(path, encoding="utf-8") as f:
            stamp = os.fstat(f.fileno()).st_mtime
            env = SubnetEnv.parse(f.read(64 << 10))
    except FileNotFoundError:
        return Readiness(
            False,
            f"no subnet file {path}: the node agent (`pycni agent`) has no lease yet "
            "or is not running",
            problem="missing",
        )
    except (OSError, UnicodeDecodeError, SubnetError) as exc:
        return Readiness(False, f"subnet file {path} is unusable: {exc}", problem="unusable")
    age = (time.time() if now is None else now) - stamp
    if env.fresh_for and age > env.fresh_for:
        return Readiness(
            False,
            f"subnet file {path} was last refreshed {age:.0f}s ago (valid for "
            f"{env.fresh_for}s): the node agent is not running or has lost its lease",
            env,
            "stale",
        )
    subnets = " and ".join(f"{sub} of {net}" for net, sub in env.pairs)
    return Readiness(True, f"node subnet {subnets}, mtu {env.mtu}", env)
