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
from dataclasses import dataclass

from pycni.fsutil import write_atomic

Net = ipaddress.IPv4Network

DEFAULT_SUBNET_LEN = 24
MAX_CANDIDATES = 100  # pick randomly among the first free ones, as flannel does


class SubnetError(ValueError):
    """A bad network / subnet length, or no subnet left."""


@dataclass(frozen=True)
class NetworkConfig:
    """The cluster network and how it is cut into node subnets."""

    network: Net
    subnet_len: int = DEFAULT_SUBNET_LEN
    subnet_min: Net | None = None
    subnet_max: Net | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.network, ipaddress.IPv4Network):
            raise SubnetError("the cluster network must be IPv4")
        if not self.network.prefixlen < self.subnet_len <= 30:
            raise SubnetError(
                f"subnet length {self.subnet_len} must be longer than the network's "
                f"/{self.network.prefixlen} and at most 30"
            )
        for bound in (self.subnet_min, self.subnet_max):
            if bound is not None and (
                bound.prefixlen != self.subnet_len or not bound.subnet_of(self.network)
            ):
                raise SubnetError(f"{bound} is not a /{self.subnet_len} inside {self.network}")

    @classmethod
    def parse(cls, network: str, subnet_len: int = DEFAULT_SUBNET_LEN) -> NetworkConfig:
        try:
            net = ipaddress.ip_network(network, strict=True)
        except ValueError as exc:
            raise SubnetError(f"bad cluster network {network!r}: {exc}") from None
        if not isinstance(net, ipaddress.IPv4Network):
            raise SubnetError(f"the cluster network must be IPv4, not {network}")
        return cls(net, subnet_len)

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
        size = 1 << (32 - self.subnet_len)
        start, end = int(self.first.network_address), int(self.last.network_address)
        for base in range(start, end + 1, size):
            yield ipaddress.IPv4Network((base, self.subnet_len))

    def contains(self, subnet: Net) -> bool:
        return (
            subnet.prefixlen == self.subnet_len
            and self.first.network_address <= subnet.network_address <= self.last.network_address
        )

    def to_json(self) -> dict[str, object]:
        return {"Network": str(self.network), "SubnetLen": self.subnet_len}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> NetworkConfig:
        length = data.get("SubnetLen", DEFAULT_SUBNET_LEN)
        if not isinstance(length, int):
            raise SubnetError("SubnetLen must be an integer")
        return cls.parse(str(data.get("Network", "")), length)


def _nth(network: Net, length: int, index: int) -> Net:
    base = int(network.network_address) + (index << (32 - length))
    return ipaddress.IPv4Network((base, length))


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
    """The subnet named by a key's last part, or None when it is not one of ours."""
    base = name.rsplit("/", 1)[-1]
    address, sep, length = base.partition("-")
    if not sep or not length.isdigit():
        return None
    try:
        return ipaddress.IPv4Network(f"{address}/{length}", strict=True)
    except ValueError:
        return None


# --- subnet.env -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubnetEnv:
    """What the agent tells the CNI meta plugin about this node."""

    network: Net
    subnet: Net
    mtu: int
    ipmasq: bool
    fresh_for: int = 0  # seconds the file stays valid after its last touch; 0: no limit

    @property
    def gateway(self) -> ipaddress.IPv4Interface:
        """The node's address in its subnet (the bridge's), written as FLANNEL_SUBNET."""
        return ipaddress.IPv4Interface(
            (int(self.subnet.network_address) + 1, self.subnet.prefixlen)
        )

    def render(self) -> str:
        return (
            f"FLANNEL_NETWORK={self.network}\n"
            f"FLANNEL_SUBNET={self.gateway}\n"
            f"FLANNEL_MTU={self.mtu}\n"
            f"FLANNEL_IPMASQ={'true' if self.ipmasq else 'false'}\n"
            + (f"PYCNI_FRESH_FOR={self.fresh_for}\n" if self.fresh_for else "")
        )

    @classmethod
    def parse(cls, text: str) -> SubnetEnv:
        values: dict[str, str] = {}
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise SubnetError(f"subnet file line {line!r} is not KEY=VALUE")
            values[key.strip()] = value.strip().strip('"')
        missing = [
            k
            for k in ("FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU", "FLANNEL_IPMASQ")
            if k not in values
        ]
        if missing:
            raise SubnetError(f"subnet file is missing {', '.join(missing)}")
        try:
            network = ipaddress.IPv4Network(values["FLANNEL_NETWORK"], strict=False)
            subnet = ipaddress.IPv4Network(values["FLANNEL_SUBNET"], strict=False)
            mtu = int(values["FLANNEL_MTU"])
        except ValueError as exc:
            raise SubnetError(f"subnet file has a bad value: {exc}") from None
        if values["FLANNEL_IPMASQ"] not in ("true", "false"):
            raise SubnetError(
                f"FLANNEL_IPMASQ must be true or false, not {values['FLANNEL_IPMASQ']!r}"
            )
        fresh = values.get("PYCNI_FRESH_FOR", "0")
        if not fresh.isascii() or not fresh.isdigit():
            raise SubnetError(f"PYCNI_FRESH_FOR must be a number of seconds, not {fresh!r}")
        if not 68 <= mtu <= 65535:
            raise SubnetError(f"FLANNEL_MTU {mtu} is not between 68 and 65535")
        return cls(network, subnet, mtu, values["FLANNEL_IPMASQ"] == "true", int(fresh))


def read_subnet_env(path: str) -> SubnetEnv:
    with open(path, encoding="utf-8") as f:
        return SubnetEnv.parse(f.read())


def write_subnet_env(path: str, env: SubnetEnv) -> None:
    """Atomically (temp file + rename), so the plugin never reads half a file."""
    write_atomic(path, env.render(), mode=0o644, dir_mode=0o755, fsync=False, prefix=".subnet.")


@dataclass(frozen=True)
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
    return Readiness(True, f"node subnet {env.subnet} of {env.network}, mtu {env.mtu}", env)
