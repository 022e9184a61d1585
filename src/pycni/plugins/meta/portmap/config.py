"""portmap's configuration: the port mappings, the options, and the container IPs.

Parsing is strict where the reference is loose in a harmful way (ports must be 1..65535,
the protocol must be one the kernel can NAT, conditions must fit the grammar of
netfilter/rule_matches.py, chain names are tokens checked by netfilter/rule_tokens.py) and otherwise
follows the reference's rules: backend/option conflicts are rejected, the first token of a
condition list decides its syntax (``-``/``!`` = iptables), and the container IPs are the
first IPv4 and IPv6 addresses of prevResult that belong to CNI_IFNAME in the sandbox (or to
no interface).
"""

from __future__ import annotations

import ipaddress

from pycni.net.netfilter import rule_matches, rule_tokens
from pycni.net.netfilter.rule_matches import Match
from pycni.record import field, record
from pycni.skel.base import Request
from pycni.spec.decode import Bool, Int, ListOf, Obj, Raw, Str, decode, lookup, option
from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError
from pycni.spec.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

NFTABLES = "nftables"
IPTABLES = "iptables"
BACKENDS = (NFTABLES, IPTABLES)
PROTOCOLS = ("tcp", "udp", "sctp")
DEFAULT_MARK_BIT = 13


@record(frozen=True)
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


@record
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


_PORT_MESSAGE = "Invalid {key} number: {{value}} ({{path}}; ports must be 1-65535)"


@record(frozen=True)
class MappingConf:
    """One ``runtimeConfig.portMappings`` entry as written (checked further by ``_mapping``)."""

    host_port: int = option("hostPort", Int(1, 65535, _PORT_MESSAGE.format(key="hostPort")), 0)
    container_port: int = option(
        "containerPort", Int(1, 65535, _PORT_MESSAGE.format(key="containerPort")), 0
    )
    protocol: str = option("protocol", Str(max_len=16), "")
    host_ip: str = option("hostIP", Str(max_len=64), "")


@record(frozen=True)
class RuntimeConf:
    """``runtimeConfig``: the mappings the runtime asks for."""

    port_mappings: list[MappingConf] = option(
        "portMappings", ListOf(Obj(MappingConf)), factory=list
    )


@record(frozen=True)
class PortMapOptions:
    """The plugin's own config keys as written (their combinations are checked by ``parse``)."""

    backend: str = option(
        "backend",
        Str(
            max_len=64,
            choices=BACKENDS,
            message='Invalid backend {value}: use "iptables" or "nftables" ({path})',
        ),
        "",
    )
    snat: bool = option("snat", Bool(), True)
    masq_all: bool = option("masqAll", Bool(), False)
    mark_masq_bit: int = option(
        "markMasqBit",
        Int(0, 31, "MasqMarkBit must be between 0 and 31, got {value} (config field {path})"),
        -1,
    )
    external_set_mark_chain: str = option("externalSetMarkChain", Str(max_len=256), "")
    conditions_v4: Any = option("conditionsV4", Raw((list,), "a list of strings"), None)
    conditions_v6: Any = option("conditionsV6", Raw((list,), "a list of strings"), None)
    iptables_variant: str = option(
        "iptablesVariant",
        Str(
            max_len=64,
            choices=("legacy", "nft"),
            message='Invalid iptablesVariant {value}: use "legacy" or "nft" ({path})',
        ),
        "",
    )


def _mapping(entry: MappingConf, index: int) -> PortMapping:
    where = f"runtimeConfig.portMappings[{index}]"
    for key, value in (("hostPort", entry.host_port), ("containerPort", entry.container_port)):
        if value == 0:
            raise _fail(f"Invalid {key} number: missing ({where}.{key}; ports must be 1-65535)")
    protocol = entry.protocol.lower() or "tcp"
    rule_tokens.choice(f"{where}.protocol", protocol, PROTOCOLS)
    host_ip: IPAddress | None = None
    if entry.host_ip:
        host_ip = rule_tokens.address(f"{where}.hostIP", entry.host_ip)
    return PortMapping(entry.host_port, entry.container_port, protocol, host_ip)


def parse_mappings(raw: object) -> list[PortMapping]:
    """Validate ``runtimeConfig.portMappings``."""
    if raw is None:
        return []
    conf = decode(RuntimeConf, {"portMappings": raw}, "runtimeConfig")
    return [_mapping(entry, index) for index, entry in enumerate(conf.port_mappings)]


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
    found, raw_mappings = lookup(req.runtime_config, "portMappings")
    mappings = parse_mappings(raw_mappings)
    opts = decode(PortMapOptions, config)
    backend_raw, snat, masq_all = opts.backend, opts.snat, opts.masq_all
    mark_bit_value = opts.mark_masq_bit
    external = opts.external_set_mark_chain
    if external:
        rule_tokens.chain_name("externalSetMarkChain", external)
    cond4, syntax4 = rule_matches.parse("conditionsV4", opts.conditions_v4, 4)
    cond6, syntax6 = rule_matches.parse("conditionsV6", opts.conditions_v6, 6)
    variant = opts.iptables_variant or None

    if mark_bit_value != -1 and external:
        raise _fail("MasqMarkBit and ExternalSetMarkChain cannot both be set")
    mark_bit = DEFAULT_MARK_BIT if mark_bit_value == -1 else mark_bit_value

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
        mappings_given=found and raw_mappings is not None,
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
