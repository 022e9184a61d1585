"""portmap's configuration: the port mappings, the options, and the container IPs.

Parsing is strict where the reference is loose in a harmful way (ports must be 1..65535,
the protocol must be one the kernel can NAT, conditions must fit the grammar of
net/rule_matches.py, chain names are tokens checked by net/rule_tokens.py) and otherwise
follows the reference's rules: backend/option conflicts are rejected, the first token of a
condition list decides its syntax (``-``/``!`` = iptables), and the container IPs are the
first IPv4 and IPv6 addresses of prevResult that belong to CNI_IFNAME in the sandbox (or to
no interface).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from pycni.net import rule_matches, rule_tokens
from pycni.net.rule_matches import Match
from pycni.plugin.base import Request
from pycni.plugin.config import field as config_field
from pycni.spec.decode import lookup
from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError
from pycni.spec.result import Result

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

NFTABLES = "nftables"
IPTABLES = "iptables"
BACKENDS = (NFTABLES, IPTABLES)
PROTOCOLS = ("tcp", "udp", "sctp")
DEFAULT_MARK_BIT = 13


@dataclass(frozen=True)
class PortMapping:
    """One ``runtimeConfig.portMappings`` entry; ``host_ip`` None means every local address."""

    host_port: int
    container_port: int
    protocol: str
    host_ip: IPAddress | None = None

    def applies_to(self, family: int) -> bool:
        """A hostIP of the other family skips the mapping for this family (as the reference)."""
        return self.host_ip is None or self.host_ip.version == family

    def host_match(self, family: int) -> IPAddress | None:
        """The destination address to match, None for any (``0.0.0.0``/``::`` mean any)."""
        if self.host_ip is None or self.host_ip.version != family or self.host_ip.is_unspecified:
            return None
        return self.host_ip


@dataclass
class PortMapConfig:
    """Everything one call needs, already validated."""

    network: str
    container_id: str
    ifname: str
    mappings: list[PortMapping]
    backend: str
    snat: bool = True
    masq_all: bool = False
    mark_bit: int = DEFAULT_MARK_BIT
    external_mark_chain: str = ""
    conditions_v4: list[Match] = field(default_factory=list)
    conditions_v6: list[Match] = field(default_factory=list)
    iptables_variant: str | None = None
    container_ips: dict[int, IPInterface] = field(default_factory=dict)
    mappings_given: bool = True  # runtimeConfig.portMappings was present (maybe empty)

    @property
    def has_conditions(self) -> bool:
        return bool(self.conditions_v4 or self.conditions_v6)

    @property
    def mark(self) -> int:
        return 1 << self.mark_bit

    def conditions(self, family: int) -> list[Match]:
        return self.conditions_v4 if family == 4 else self.conditions_v6

    def mappings_for(self, family: int) -> list[PortMapping]:
        return [m for m in self.mappings if m.applies_to(family)]


def _fail(msg: str) -> CNIError:
    return CNIError(INVALID_NETWORK_CONFIG, msg)


def _port(entry: dict[str, Any], key: str, index: int) -> int:
    value = config_field(entry, key, int, 0, where=f"runtimeConfig.portMappings[{index}]")
    if not 0 < value <= 65535:
        raise _fail(
            f"Invalid {key} number: {value} (runtimeConfig.portMappings[{index}]; "
            "ports must be 1-65535)"
        )
    return value


def parse_mappings(raw: object) -> list[PortMapping]:
    """Validate ``runtimeConfig.portMappings``."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail("invalid config: runtimeConfig.portMappings must be a list")
    out: list[PortMapping] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _fail(f"invalid config: runtimeConfig.portMappings[{index}] must be an object")
        where = f"runtimeConfig.portMappings[{index}]"
        protocol = config_field(entry, "protocol", str, "tcp", where=where).lower() or "tcp"
        rule_tokens.choice(f"{where}.protocol", protocol, PROTOCOLS)
        host_ip_text = config_field(entry, "hostIP", str, "", where=where)
        host_ip: IPAddress | None = None
        if host_ip_text:
            host_ip = rule_tokens.address(f"{where}.hostIP", host_ip_text)
        out.append(
            PortMapping(
                host_port=_port(entry, "hostPort", index),
                container_port=_port(entry, "containerPort", index),
                protocol=protocol,
                host_ip=host_ip,
            )
        )
    return out


def _conditions(config: dict[str, Any], key: str, family: int) -> tuple[list[Match], str]:
    """The parsed matches and their syntax (``iptables``, ``nftables`` or ``""`` when empty)."""
    found, raw = lookup(config, key)
    return rule_matches.parse(key, raw if found else None, family)


def container_ips(prev: Result, ifname: str) -> dict[int, IPInterface]:
    """First IPv4 and first IPv6 of prevResult belonging to ``ifname`` in a sandbox."""
    found: dict[int, IPInterface] = {}
    for ip in prev.ips:
        family = ip.address.version
        if family in found:
            continue
        idx = ip.interface
        if idx is not None and 0 <= idx < len(prev.interfaces):
            iface = prev.interfaces[idx]
            if iface.name != ifname or not iface.sandbox:
                continue
        found[family] = ip.address
    return found


def parse(req: Request, *, need_prev: bool) -> PortMapConfig:
    """Build the config of one call; ``need_prev`` for ADD and CHECK."""
    config = req.config
    mappings = parse_mappings(req.runtime_config.get("portMappings"))

    backend_raw = config_field(config, "backend", str, "")
    if backend_raw and backend_raw not in BACKENDS:
        raise _fail(
            f'Invalid backend "{rule_tokens.shown(backend_raw)}": use "iptables" or "nftables"'
        )
    snat = config_field(config, "snat", bool, True)
    masq_all = config_field(config, "masqAll", bool, False)
    mark_bit_value = config_field(config, "markMasqBit", int, -1)
    external = config_field(config, "externalSetMarkChain", str, "")
    if external:
        rule_tokens.chain_name("externalSetMarkChain", external)
    cond4, syntax4 = _conditions(config, "conditionsV4", 4)
    cond6, syntax6 = _conditions(config, "conditionsV6", 6)
    variant = config_field(config, "iptablesVariant", str, "") or None
    if variant is not None and variant not in ("legacy", "nft"):
        raise _fail(
            f'Invalid iptablesVariant "{rule_tokens.shown(variant)}": use "legacy" or "nft"'
        )

    if mark_bit_value != -1 and external:
        raise _fail("MasqMarkBit and ExternalSetMarkChain cannot both be set")
    mark_bit = DEFAULT_MARK_BIT if mark_bit_value == -1 else mark_bit_value
    if not 0 <= mark_bit <= 31:
        raise _fail(
            f"MasqMarkBit must be between 0 and 31, got {mark_bit} (config field markMasqBit)"
        )

    iptables_only = [k for k, on in (("externalSetMarkChain", bool(external)),) if on]
    iptables_only += [
        k for k, s in (("conditionsV4", syntax4), ("conditionsV6", syntax6)) if s == IPTABLES
    ]
    iptables_only += ["iptablesVariant"] if variant else []
    nftables_only = [
        k for k, s in (("conditionsV4", syntax4), ("conditionsV6", syntax6)) if s == NFTABLES
    ]
    backend = backend_raw or (IPTABLES if iptables_only and not nftables_only else NFTABLES)
    wrong = iptables_only if backend == NFTABLES else nftables_only
    if wrong:
        other = IPTABLES if backend == NFTABLES else NFTABLES
        raise _fail(
            f"{backend} backend was requested but configuration contains {other}-specific "
            f"options {wrong}"
        )

    cfg = PortMapConfig(
        network=req.name,
        container_id=req.container_id,
        ifname=req.ifname,
        mappings=mappings,
        backend=backend,
        snat=snat,
        masq_all=masq_all,
        mark_bit=mark_bit,
        external_mark_chain=external,
        conditions_v4=cond4,
        conditions_v6=cond6,
        iptables_variant=variant,
        mappings_given=lookup(req.runtime_config, "portMappings")[0],
    )
    if need_prev:
        prev = req.prev_result()
        if prev is None:
            raise _fail("must be called as chained plugin")
        cfg.container_ips = container_ips(prev, req.ifname)
    else:  # DEL/GC: the addresses help DEL find its elements by key; without them it searches
        try:
            prev = req.prev_result()
        except CNIError:
            prev = None
        if prev is not None:
            cfg.container_ips = container_ips(prev, req.ifname)
    return cfg
