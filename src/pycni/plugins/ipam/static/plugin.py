"""static IPAM: hand back the addresses, routes and DNS the config (or the runtime) names.

Where addresses come from, in the reference's order: ``ipam.addresses``; CNI_ARGS ``IP=``
(comma-separated CIDRs, appended) with ``GATEWAY=`` (each given to the ``IP=`` addresses whose
subnet contains it); ``args.cni.ips`` (replaces the list); ``runtimeConfig.ips`` (replaces it again,
so it wins). Nothing is allocated, so DEL has nothing to do. See docs/plugins/static.md.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.spec import version
from pycni.spec.args import load_args
from pycni.spec.decode import ListOf, Obj, Raw, Str, decode, lookup, option, shown
from pycni.spec.errors import CNIError, InternalError, InvalidConfig
from pycni.spec.result import DNS, IPConfig, Result

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CIDR = re.compile(r"^[0-9A-Fa-f.:]+/\d{1,3}$")


@record
class Address:
    address: IPInterface
    gateway: IPAddress | None = None


@record(frozen=True)
class AddressConf:
    """One ``ipam.addresses`` entry (parsed below, with the reference's messages)."""

    address: str = option("address", Str(max_len=64), "")
    gateway: str = option("gateway", Str(max_len=64), "")


_IPS = ListOf(Str(max_len=64))


@record(frozen=True)
class StaticIPAM:
    """The ``ipam`` section static reads; routes and dns are decoded by the result model."""

    addresses: list[AddressConf] = option("addresses", ListOf(Obj(AddressConf)), factory=list)
    routes: list[Any] = option("routes", Raw((list,), "a list of route objects"), factory=list)
    dns: dict[str, Any] = option("dns", Raw((dict,), "an object"), factory=dict)


@record(frozen=True)
class IPsArg:
    """``ips`` as ``args.cni`` and ``runtimeConfig`` carry it."""

    ips: list[str] = option("ips", _IPS, factory=list)


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


def load_addresses(req: Request, ipam: StaticIPAM) -> list[Address]:
    """The final address list, following the reference's sources and precedence."""
    addresses: list[Address] = []
    for i, item in enumerate(ipam.addresses):
        text = item.address
        parsed = parse_cidr(text)
        if parsed is None:
            raise InvalidConfig(
                f"the 'address' field is expected to be in CIDR notation, got: '{text}'"
            )
        gw_text = item.gateway
        gateway = _parse_ip(gw_text) if gw_text else None
        if gw_text and gateway is None:
            raise InvalidConfig(
                f"invalid config: ipam.addresses[{i}].gateway: invalid IP {gw_text!r}"
            )
        addresses.append(Address(parsed, gateway))

    env = load_args(req.args, known=["IP", "GATEWAY"])
    from_args: list[Address] = []
    for arg in env.get("IP", "").split(",") if env.get("IP") else []:
        text = arg.strip()
        parsed = parse_cidr(text)
        if parsed is None:
            raise InvalidConfig(f"the 'ip' field is expected to be in CIDR notation, got: '{text}'")
        from_args.append(Address(parsed))
    addresses += from_args
    for arg in env.get("GATEWAY", "").split(",") if env.get("GATEWAY") else []:
        gateway = _parse_ip(arg)
        if gateway is None:
            raise InvalidConfig(f"invalid gateway address: {arg}")
        # as the reference: only CNI_ARGS addresses get it (config ones are not parsed yet there)
        for addr in from_args:
            if gateway in addr.address.network:
                addr.gateway = gateway

    for texts in (
        decode(IPsArg, req.cni_args, "args.cni").ips,
        decode(IPsArg, req.runtime_config, "runtimeConfig").ips,
    ):
        if texts:
            addresses = []
            for text in texts:
                parsed = parse_cidr(text)
                if parsed is None:
                    raise InvalidConfig(
                        f"an entry in the 'ips' field is NOT in CIDR notation, got: '{text}'"
                    )
                addresses.append(Address(parsed))

    v4 = sum(1 for a in addresses if a.address.version == 4)
    if (v4 > 1 or len(addresses) - v4 > 1) and req.cni_version in (*version.LEGACY, ""):
        raise InvalidConfig(
            f"CNI version {req.cni_version} does not support more than 1 address per family"
        )
    return addresses


def load_ipam(req: Request) -> StaticIPAM:
    found, ipam = lookup(req.config, "ipam")
    if not found or ipam is None:
        raise InvalidConfig("IPAM config missing 'ipam' key")
    if not isinstance(ipam, dict):
        raise InvalidConfig(f"invalid config: ipam must be an object, got {shown(ipam)}")
    return decode(StaticIPAM, ipam, "ipam")


def _routes_and_dns(ipam: StaticIPAM) -> Result:
    """ipam.routes and ipam.dns decoded by the result model (the rules of any result);
    a problem is a config error (code 7) naming the ipam section."""
    try:
        return Result.from_dict({"cniVersion": "1.1.0", "routes": ipam.routes, "dns": ipam.dns})
    except CNIError as exc:
        text = exc.msg.removeprefix("failed to decode CNI result: ")
        raise InvalidConfig(f"invalid config: ipam.{text}") from None


class Static(Plugin):
    about = "pycni static: IPAM that returns the addresses the config names"

    def add(self, req: Request) -> Result:
        ipam = load_ipam(req)
        addresses = load_addresses(req, ipam)
        shell = _routes_and_dns(ipam)
        return Result(
            cni_version=req.cni_version,
            ips=[IPConfig(address=a.address, gateway=a.gateway) for a in addresses],
            routes=shell.routes,
            dns=shell.dns if isinstance(shell.dns, DNS) else DNS(),
        )

    def check(self, req: Request) -> None:
        ipam = load_ipam(req)
        addresses = load_addresses(req, ipam)
        prev = req.prev_result()
        if prev is None:
            raise InternalError("Required prevResult missing")
        for addr in addresses:
            for ip in prev.ips:
                if ip.address.ip != addr.address.ip:
                    continue
                if addr.gateway is None or addr.gateway == ip.gateway:
                    break
                raise InternalError(
                    f"static: Failed to match addr {ip.address.ip} on interface {req.ifname}",
                )


PLUGIN = Static()
