"""static IPAM: hand back the addresses, routes and DNS the config (or the runtime) names.

Where addresses come from, in the reference's order: ``ipam.addresses``; CNI_ARGS ``IP=``
(comma-separated CIDRs, appended) with ``GATEWAY=`` (each given to the ``IP=`` addresses whose
subnet contains it); ``args.cni.ips`` (replaces the list); ``runtimeConfig.ips`` (replaces it again,
so it wins). Nothing is allocated, so DEL has nothing to do. See docs/plugins/static.md.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from pycni.plugin.base import Plugin, Request
from pycni.plugin.config import field, lookup
from pycni.spec import version
from pycni.spec.args import load_args
from pycni.spec.errors import INTERNAL, INVALID_NETWORK_CONFIG, CNIError
from pycni.spec.result import DNS, IPConfig, Result

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CIDR = re.compile(r"^[0-9A-Fa-f.:]+/\d{1,3}$")


@dataclass
class Address:
    address: IPInterface
    gateway: IPAddress | None = None


def invalid(msg: str) -> CNIError:
    return CNIError(INVALID_NETWORK_CONFIG, msg)


def parse_cidr(text: str) -> IPInterface | None:
    """Go's net.ParseCIDR: ``addr/prefix`` only (no bare address, no netmask form)."""
    if not _CIDR.match(text):
        return None
    try:
        return ipaddress.ip_interface(text)
    except ValueError:
        return None


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _string_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(f"invalid config: {where} must be a list of strings")
    return list(value)


def load_addresses(req: Request, ipam: dict[str, Any]) -> list[Address]:
    """The final address list, following the reference's sources and precedence."""
    raw = field(ipam, "addresses", list, [], "ipam")
    addresses: list[Address] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise invalid(f"invalid config: ipam.addresses[{i}] must be an object")
        text = field(item, "address", str, "", f"ipam.addresses[{i}]")
        parsed = parse_cidr(text)
        if parsed is None:
            raise invalid(f"the 'address' field is expected to be in CIDR notation, got: '{text}'")
        gw_text = field(item, "gateway", str, "", f"ipam.addresses[{i}]")
        gateway = _parse_ip(gw_text) if gw_text else None
        if gw_text and gateway is None:
            raise invalid(f"invalid config: ipam.addresses[{i}].gateway: invalid IP {gw_text!r}")
        addresses.append(Address(parsed, gateway))

    env = load_args(req.args, known=["IP", "GATEWAY"])
    from_args: list[Address] = []
    for item in env.get("IP", "").split(",") if env.get("IP") else []:
        text = item.strip()
        parsed = parse_cidr(text)
        if parsed is None:
            raise invalid(f"the 'ip' field is expected to be in CIDR notation, got: '{text}'")
        from_args.append(Address(parsed))
    addresses += from_args
    for item in env.get("GATEWAY", "").split(",") if env.get("GATEWAY") else []:
        gateway = _parse_ip(item)
        if gateway is None:
            raise invalid(f"invalid gateway address: {item}")
        # as the reference: only CNI_ARGS addresses get it (config ones are not parsed yet there)
        for addr in from_args:
            if gateway in addr.address.network:
                addr.gateway = gateway

    found, cni_args = lookup(req.config, "args")
    cni = lookup(cni_args, "cni")[1] if found and isinstance(cni_args, dict) else None
    for source, value in (
        ("args.cni.ips", lookup(cni, "ips")[1] if isinstance(cni, dict) else None),
        ("runtimeConfig.ips", lookup(req.runtime_config, "ips")[1]),
    ):
        texts = _string_list(value, source)
        if texts:
            addresses = []
            for text in texts:
                parsed = parse_cidr(text)
                if parsed is None:
                    raise invalid(
                        f"an entry in the 'ips' field is NOT in CIDR notation, got: '{text}'"
                    )
                addresses.append(Address(parsed))

    v4 = sum(1 for a in addresses if a.address.version == 4)
    if (v4 > 1 or len(addresses) - v4 > 1) and req.cni_version in (*version.LEGACY, ""):
        raise invalid(
            f"CNI version {req.cni_version} does not support more than 1 address per family"
        )
    return addresses


def _ipam(req: Request) -> dict[str, Any]:
    found, ipam = lookup(req.config, "ipam")
    if not found or ipam is None:
        raise invalid("IPAM config missing 'ipam' key")
    if not isinstance(ipam, dict):
        raise invalid("invalid config: ipam must be an object")
    return ipam


class Static(Plugin):
    about = "pycni static: IPAM that returns the addresses the config names"

    def add(self, req: Request) -> Result:
        ipam = _ipam(req)
        addresses = load_addresses(req, ipam)
        routes = field(ipam, "routes", list, [], "ipam")
        dns = field(ipam, "dns", dict, {}, "ipam")
        # routes and dns are decoded by the result model (same rules as any plugin's result)
        shell = Result.from_dict({"cniVersion": "1.1.0", "routes": routes, "dns": dns})
        return Result(
            cni_version=req.cni_version,
            ips=[IPConfig(address=a.address, gateway=a.gateway) for a in addresses],
            routes=shell.routes,
            dns=shell.dns if isinstance(shell.dns, DNS) else DNS(),
        )

    def check(self, req: Request) -> None:
        ipam = _ipam(req)
        addresses = load_addresses(req, ipam)
        prev = req.prev_result()
        if prev is None:
            raise CNIError(INTERNAL, "Required prevResult missing")
        for addr in addresses:
            for ip in prev.ips:
                if ip.address.ip != addr.address.ip:
                    continue
                if addr.gateway is None or addr.gateway == ip.gateway:
                    break
                raise CNIError(
                    INTERNAL,
                    f"static: Failed to match addr {ip.address.ip} on interface {req.ifname}",
                )


PLUGIN = Static()
