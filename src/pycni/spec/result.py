"""CNI results for every spec version and the conversions between them.

One typed model (:class:`Result`) holds a result of any version. ``from_dict`` reads the JSON
shape of any version; ``as_version`` applies libcni's conversion rules (including the lossy
ones towards 0.1.0/0.2.0); ``to_dict``/``to_json`` write exactly what Go's result types marshal.

- ``Interface(name, mac="", mtu=0, sandbox="", socket_path="", pci_id="")``
- ``IPConfig(address, gateway=None, interface=None)``; ``address`` keeps the host bits
- ``Route(dst, gw=None, mtu=0, advmss=0, priority=0, table=None, scope=None)``
- ``DNS(nameservers=[], domain="", search=[], options=[])`` with ``is_empty()``
- ``Result(cni_version=CURRENT, interfaces=[], ips=[], routes=[], dns=DNS())``
- ``convert(data, to_version)``: libcni's ``Convert`` on raw JSON objects.

Decoding problems raise ``CNIError`` code 6 (an unsupported version: code 1); conversion
failures raise code 0 with libcni's message texts.
"""

from __future__ import annotations

import _json
from _socket import inet_ntoa as _inet_ntoa
from collections.abc import Callable, Mapping
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
)

from pycni.record import field, record, replace
from pycni.spec import jsoncodec
from pycni.spec.errors import DECODING_FAILURE, INCOMPATIBLE_CNI_VERSION, UNKNOWN, CNIError
from pycni.spec.version import CURRENT, LEGACY

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _T = TypeVar("_T")

__all__ = [
    "DNS",
    "IPAddress",
    "IPConfig",
    "IPInterface",
    "IPNetwork",
    "Interface",
    "Result",
    "Route",
    "convert",
    "go_json",
]

IPAddress = IPv4Address | IPv6Address
IPInterface = IPv4Interface | IPv6Interface
IPNetwork = IPv4Network | IPv6Network

# The three Go result types and the versions each one implements.
_LEGACY = "legacy"  # types020: ip4/ip6 objects
_LIST = "list"  # types040: ips[] with a version field
_MODERN = "modern"  # types100
_FAMILY: dict[str, str] = {
    **dict.fromkeys(LEGACY, _LEGACY),
    **dict.fromkeys(("0.3.0", "0.3.1", "0.4.0"), _LIST),
    **dict.fromkeys(("1.0.0", "1.1.0"), _MODERN),
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------------------------------------
# The model


@record
class Interface:
    """An interface the plugin created or configured (``mtu``/``socket_path``/``pci_id``: 1.1)."""

    name: str
    mac: str = ""
    mtu: int = 0
    sandbox: str = ""
    socket_path: str = ""
    pci_id: str = ""


@record
class IPConfig:
    """An address (with its prefix, host bits kept) and an optional gateway."""

    address: IPInterface
    gateway: IPAddress | None = None
    interface: int | None = None  # index into Result.interfaces
    # The ``version`` text a 0.3.x/0.4.0 result was read with: Go's types040 keeps it as
    # given (even "" when absent) until a conversion recomputes it from the address.
    stated_version: str | None = field(default=None, compare=False)

    @property
    def version(self) -> str:
        """The 0.3.x/0.4.0 ``version`` field: as read, else ``"4"``/``"6"`` by the address."""
        if self.stated_version is not None:
            return self.stated_version
        return "4" if _is_v4(self.address.ip) else "6"


@record
class Route:
    """A route; every field after ``gw`` is a 1.1 addition but all versions carry them."""

    dst: IPNetwork
    gw: IPAddress | None = None
    mtu: int = 0
    advmss: int = 0
    priority: int = 0
    table: int | None = None
    scope: int | None = None


@record
class DNS:
    """DNS settings; an empty one is left out of 1.x output."""

    nameservers: list[str] = field(default_factory=list)
    domain: str = ""
    search: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.nameservers or self.domain or self.search or self.options)

    def copy(self) -> DNS:
        return DNS(list(self.nameservers), self.domain, list(self.search), list(self.options))


@record
class Result:
    """A CNI result; ``cni_version`` is the version it was read in or built for."""

    cni_version: str = CURRENT
    interfaces: list[Interface] = field(default_factory=list)
    ips: list[IPConfig] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    dns: DNS = field(default_factory=DNS)

    def copy(self) -> Result:
        """A deep copy: the records in its lists hold only immutable values (strings, numbers,
        ipaddress objects), so copying each record is enough (``copy.deepcopy`` costs the
        import of ``copy`` and ``weakref`` on every one-shot call)."""
        return Result(
            self.cni_version,
            [replace(i) for i in self.interfaces],
            [replace(ip) for ip in self.ips],
            [replace(r) for r in self.routes],
            self.dns.copy(),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default_version: str | None = None) -> Result:
        """Decode a result of any version; a missing ``cniVersion`` means ``default_version``
        (or 0.1.0, as libcni). Keys match case-insensitively, as Go's encoding/json."""
        if not isinstance(data, Mapping):
            raise _decode_error("", f"expected a JSON object, got {_kind(data)}")
        version = _get_str(data, "cniVersion", "")
        if version == "":
            version = default_version or "0.1.0"
        family = _FAMILY.get(version)
        if family is None:
            raise CNIError(INCOMPATIBLE_CNI_VERSION, f'unsupported CNI result version "{version}"')
        decoder = {_LEGACY: _decode_legacy, _LIST: _decode_list, _MODERN: _decode_modern}[family]
        return decoder(data, version)

    @classmethod
    def from_json(cls, text: str | bytes, default_version: str | None = None) -> Result:
        """Decode a result from JSON text (stdout of a plugin, a cache file)."""
        try:
            data = jsoncodec.loads(text)
        except (ValueError, UnicodeDecodeError) as err:
            raise CNIError(DECODING_FAILURE, f"failed to decode CNI result: {err}") from None
        return cls.from_dict(data, default_version)

    def as_version(self, version: str) -> Result:
        """This result converted to ``version`` as libcni's ``GetAsVersion`` does.

        The returned model holds only what that version's Go type can hold, so
        ``Result.from_dict(r.to_dict(v)) == r.as_version(v)``.
        """
        source = self.cni_version or CURRENT
        target = version or "0.1.0"
        if source not in _FAMILY or target not in _FAMILY:
            raise CNIError(UNKNOWN, f"no converter for CNI result version {source} to {target}")
        from_family, to_family = _FAMILY[source], _FAMILY[target]
        shaped = _SHAPERS[from_family](self)
        if from_family == to_family:
            return replace(shaped, cni_version=target)
        if from_family == _LIST and to_family == _MODERN:
            for ip in shaped.ips:  # types100 has no version; back at 0.4.0 it is recomputed
                ip.stated_version = None
        if from_family == _LEGACY:
            # 0.1/0.2 -> 0.4.0 -> 1.x: the shaped legacy model already is the up-converted one
            return replace(shaped, cni_version=target)
        as_list = _shape_list(shaped)  # 1.x -> 0.4.0 drops the 1.1 interface fields
        if to_family == _LEGACY:
            return _list_to_legacy(as_list, target)
        return replace(as_list, cni_version=target)

    def to_dict(self, version: str | None = None) -> dict[str, Any]:
        """The JSON object Go marshals for this result converted to ``version``."""
        target = (self.cni_version or CURRENT) if version is None else version
        if _FAMILY.get(self.cni_version or CURRENT) == _MODERN == _FAMILY.get(target):
            # the plugin's own result to its config's version (every 1.x ADD): the encoder
            # only reads, so as_version's deep copy of every record is not needed
            return _encode_modern(replace(self, cni_version=target))
        converted = self.as_version(target)
        encoder = {_LEGACY: _encode_legacy, _LIST: _encode_list, _MODERN: _encode_modern}
        return encoder[_FAMILY[converted.cni_version]](converted)

    def to_json(self, version: str | None = None) -> str:
        """Go's ``Print()``: 4-space indent, Go's escaping, no trailing newline."""
        target = (self.cni_version or CURRENT) if version is None else version
        writer = _WRITERS.get((_FAMILY.get(self.cni_version or CURRENT), _FAMILY.get(target)))
        if writer is not None:
            # every ADD of a 1.x or 0.3/0.4 config: the text written straight from the records
            try:
                return _go_escape(writer(self, target))
            except Exception:  # a value of a type the records do not declare
                pass  # the generic path below writes it, or raises its own error
        return go_json(self.to_dict(version))


def convert(data: Mapping[str, Any], to_version: str) -> dict[str, Any]:
    """libcni's ``Convert`` on a raw result object.

    The input is decoded first (so bad data fails). An empty target means 0.1.0; when the
    result already has the target version it is returned unchanged (a deep copy).
    """
    result = Result.from_dict(data)
    target = to_version or "0.1.0"
    if result.cni_version == target:
        import copy  # the runtime's conversions only, not a plugin's call

        return copy.deepcopy(dict(data))
    return result.to_dict(target)


def go_json(data: Any) -> str:
    """``json.MarshalIndent(v, "", "    ")``: Go escapes <, >, & and U+2028/9, not non-ASCII."""
    return _go_escape(jsoncodec.dumps(data, indent=4, ensure_ascii=False))


def _go_escape(text: str) -> str:
    for raw, escaped in _GO_ESCAPES:
        text = text.replace(raw, escaped)
    return text


_GO_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


# ---------------------------------------------------------------------------------------------
# Conversions: each "shaper" keeps only what one Go type can hold


def _shape_modern(result: Result) -> Result:
    return result.copy()


def _shape_list(result: Result) -> Result:
    """types040 has no interface mtu/socketPath/pciID."""
    shaped = result.copy()
    shaped.interfaces = [Interface(i.name, mac=i.mac, sandbox=i.sandbox) for i in shaped.interfaces]
    return shaped


def _shape_legacy(result: Result) -> Result:
    """types020 holds one IP per family, routes inside them (by dst family), no interfaces."""
    ip4 = next((ip for ip in result.ips if ip.version == "4"), None)
    ip6 = next((ip for ip in result.ips if ip.version == "6"), None)
    ips = [IPConfig(ip.address, ip.gateway) for ip in (ip4, ip6) if ip is not None]
    routes = [replace(r) for r in result.routes if ip4 is not None and _is_v4(r.dst)]
    routes += [replace(r) for r in result.routes if ip6 is not None and not _is_v4(r.dst)]
    return Result(result.cni_version, [], ips, routes, result.dns.copy())


_SHAPERS: dict[str, Callable[[Result], Result]] = {
    _LEGACY: _shape_legacy,
    _LIST: _shape_list,
    _MODERN: _shape_modern,
}


def _list_to_legacy(result: Result, version: str) -> Result:
    """The lossy 0.3.x/0.4.0 -> 0.1.0/0.2.0 rule: first v4 and first v6 IP, routes reduced to
    dst and gw and kept only when their family has an IP."""
    legacy = _shape_legacy(result)
    if not legacy.ips:
        raise CNIError(UNKNOWN, "cannot convert: no valid IP addresses")
    legacy.routes = [Route(r.dst, r.gw) for r in legacy.routes]
    legacy.cni_version = version
    return legacy


# ---------------------------------------------------------------------------------------------
# Encoding (field order and omitempty rules of the Go structs)


def _encode_legacy(result: Result) -> dict[str, Any]:
    out: dict[str, Any] = {"cniVersion": result.cni_version}
    for key, want_v4 in (("ip4", True), ("ip6", False)):
        ip = next((i for i in result.ips if _is_v4(i.address.ip) == want_v4), None)
        if ip is None:
            continue
        block: dict[str, Any] = {"ip": _cidr_text(ip.address)}
        if ip.gateway is not None:
            block["gateway"] = _ip_text(ip.gateway)
        routes = [_encode_route(r) for r in result.routes if _is_v4(r.dst) == want_v4]
        if routes:
            block["routes"] = routes
        out[key] = block
    out["dns"] = _encode_dns(result.dns)  # a non-pointer struct: always printed
    return out


def _encode_list(result: Result) -> dict[str, Any]:
    out: dict[str, Any] = {"cniVersion": result.cni_version}
    if result.interfaces:
        out["interfaces"] = [_encode_interface(i, modern=False) for i in result.interfaces]
    if result.ips:
        out["ips"] = [_encode_ip(ip, with_version=True) for ip in result.ips]
    if result.routes:
        out["routes"] = [_encode_route(r) for r in result.routes]
    out["dns"] = _encode_dns(result.dns)
    return out


def _encode_modern(result: Result) -> dict[str, Any]:
    out: dict[str, Any] = {"cniVersion": result.cni_version}
    if result.interfaces:
        out["interfaces"] = [_encode_interface(i, modern=True) for i in result.interfaces]
    if result.ips:
        out["ips"] = [_encode_ip(ip, with_version=False) for ip in result.ips]
    if result.routes:
        out["routes"] = [_encode_route(r) for r in result.routes]
    if not result.dns.is_empty():
        out["dns"] = _encode_dns(result.dns)
    # types100 marshals through a map to drop an empty dns, so Go sorts every key.
    sorted_out: dict[str, Any] = _sort_keys(out)
    return sorted_out


def _encode_interface(intf: Interface, *, modern: bool) -> dict[str, Any]:
    fields: list[tuple[str, Any]] = [("name", intf.name), ("mac", intf.mac)]
    if modern:
        fields.append(("mtu", intf.mtu))
    fields.append(("sandbox", intf.sandbox))
    if modern:
        fields += [("socketPath", intf.socket_path), ("pciID", intf.pci_id)]
    return {key: value for key, value in fields if key == "name" or value}


def _encode_ip(ip: IPConfig, *, with_version: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"version": ip.version} if with_version else {}
    if ip.interface is not None:
        out["interface"] = ip.interface
    out["address"] = _cidr_text(ip.address)
    if ip.gateway is not None:
        out["gateway"] = _ip_text(ip.gateway)
    return out


def _encode_route(route: Route) -> dict[str, Any]:
    out: dict[str, Any] = {"dst": _cidr_text(route.dst)}
    if route.gw is not None:
        out["gw"] = _ip_text(route.gw)
    for key, number in (("mtu", route.mtu), ("advmss", route.advmss), ("priority", route.priority)):
        if number:
            out[key] = number
    if route.table is not None:
        out["table"] = route.table
    if route.scope is not None:
        out["scope"] = route.scope
    return out


def _encode_dns(dns: DNS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if dns.nameservers:
        out["nameservers"] = list(dns.nameservers)
    if dns.domain:
        out["domain"] = dns.domain
    if dns.search:
        out["search"] = list(dns.search)
    if dns.options:
        out["options"] = list(dns.options)
    return out


# The text written straight from the records, byte for byte what go_json(to_dict(...))
# writes (1.x keys sorted, 0.3/0.4 in struct order, the same omissions; a property test
# compares the two): for a bridge ADD result 8 µs instead of 50 µs (1.x) and 9 µs instead
# of 63 µs (0.4.0), as it copies no records, builds no dicts, sorts nothing and walks no
# generic tree. Strings go through json's C quoting (which refuses a non-str, as _int
# refuses a non-int: to_json then takes the generic path).

_quote = _json.encode_basestring
_ITEM = ",\n            "  # between the fields of an object inside a top-level list
_NEXT = ",\n        {\n            "  # between the objects of a top-level list
_CLOSE = "\n        }"


def _int(value: int) -> str:
    if type(value) is not int:
        raise TypeError(type(value).__name__)
    return int.__repr__(value)


def _modern_json(result: Result, version: str) -> str:
    out = ['{\n    "cniVersion": ', _quote(version)]
    if not result.dns.is_empty():
        out.append(',\n    "dns": ' + _dns_json(result.dns, modern=True))
    if result.interfaces:
        separator = ',\n    "interfaces": [\n        {\n            '
        for intf in result.interfaces:
            out.append(separator)
            separator = _NEXT
            if intf.mac:
                out.append('"mac": ' + _quote(intf.mac) + _ITEM)
            if intf.mtu:
                out.append('"mtu": ' + _int(intf.mtu) + _ITEM)
            out.append('"name": ' + _quote(intf.name))
            if intf.pci_id:
                out.append(_ITEM + '"pciID": ' + _quote(intf.pci_id))
            if intf.sandbox:
                out.append(_ITEM + '"sandbox": ' + _quote(intf.sandbox))
            if intf.socket_path:
                out.append(_ITEM + '"socketPath": ' + _quote(intf.socket_path))
            out.append(_CLOSE)
        out.append("\n    ]")
    if result.ips:
        separator = ',\n    "ips": [\n        {\n            '
        for ip in result.ips:
            out.append(separator)
            separator = _NEXT
            out.append('"address": ' + _quote(_cidr_text(ip.address)))
            if ip.gateway is not None:
                out.append(_ITEM + '"gateway": ' + _quote(_ip_text(ip.gateway)))
            if ip.interface is not None:
                out.append(_ITEM + '"interface": ' + _int(ip.interface))
            out.append(_CLOSE)
        out.append("\n    ]")
    if result.routes:
        separator = ',\n    "routes": [\n        {\n            '
        for route in result.routes:
            out.append(separator)
            separator = _NEXT
            if route.advmss:
                out.append('"advmss": ' + _int(route.advmss) + _ITEM)
            out.append('"dst": ' + _quote(_cidr_text(route.dst)))
            if route.gw is not None:
                out.append(_ITEM + '"gw": ' + _quote(_ip_text(route.gw)))
            if route.mtu:
                out.append(_ITEM + '"mtu": ' + _int(route.mtu))
            if route.priority:
                out.append(_ITEM + '"priority": ' + _int(route.priority))
            if route.scope is not None:
                out.append(_ITEM + '"scope": ' + _int(route.scope))
            if route.table is not None:
                out.append(_ITEM + '"table": ' + _int(route.table))
            out.append(_CLOSE)
        out.append("\n    ]")
    out.append("\n}")
    return "".join(out)


def _list_json(result: Result, version: str) -> str:
    """types040's text (struct order, an empty dns printed) of a 1.x or 0.3/0.4 result:
    what ``go_json(_encode_list(result.as_version(version)))`` writes, without the copy."""
    out = ['{\n    "cniVersion": ', _quote(version)]
    if result.interfaces:
        separator = ',\n    "interfaces": [\n        {\n            '
        for intf in result.interfaces:
            out.append(separator)
            separator = _NEXT
            out.append('"name": ' + _quote(intf.name))
            if intf.mac:
                out.append(_ITEM + '"mac": ' + _quote(intf.mac))
            if intf.sandbox:
                out.append(_ITEM + '"sandbox": ' + _quote(intf.sandbox))
            out.append(_CLOSE)
        out.append("\n    ]")
    if result.ips:
        separator = ',\n    "ips": [\n        {\n            '
        for ip in result.ips:
            out.append(separator)
            separator = _NEXT
            out.append('"version": ' + _quote(ip.version))
            if ip.interface is not None:
                out.append(_ITEM + '"interface": ' + _int(ip.interface))
            out.append(_ITEM + '"address": ' + _quote(_cidr_text(ip.address)))
            if ip.gateway is not None:
                out.append(_ITEM + '"gateway": ' + _quote(_ip_text(ip.gateway)))
            out.append(_CLOSE)
        out.append("\n    ]")
    if result.routes:
        separator = ',\n    "routes": [\n        {\n            '
        for route in result.routes:
            out.append(separator)
            separator = _NEXT
            out.append('"dst": ' + _quote(_cidr_text(route.dst)))
            if route.gw is not None:
                out.append(_ITEM + '"gw": ' + _quote(_ip_text(route.gw)))
            if route.mtu:
                out.append(_ITEM + '"mtu": ' + _int(route.mtu))
            if route.advmss:
                out.append(_ITEM + '"advmss": ' + _int(route.advmss))
            if route.priority:
                out.append(_ITEM + '"priority": ' + _int(route.priority))
            if route.table is not None:
                out.append(_ITEM + '"table": ' + _int(route.table))
            if route.scope is not None:
                out.append(_ITEM + '"scope": ' + _int(route.scope))
            out.append(_CLOSE)
        out.append("\n    ]")
    out.append(',\n    "dns": ' + _dns_json(result.dns, modern=False))
    out.append("\n}")
    return "".join(out)


def _dns_json(dns: DNS, *, modern: bool) -> str:
    """The dns object (at depth 1): keys sorted in 1.x, in the struct's order before."""
    fields: list[tuple[str, str]] = []
    if dns.nameservers:
        fields.append(("nameservers", _names_json(dns.nameservers)))
    if dns.domain:
        fields.append(("domain", _quote(dns.domain)))
    if dns.search:
        fields.append(("search", _names_json(dns.search)))
    if dns.options:
        fields.append(("options", _names_json(dns.options)))
    if not fields:
        return "{}"
    if modern:
        fields.sort()
    return "{" + ",".join([f'\n        "{key}": {text}' for key, text in fields]) + "\n    }"


def _names_json(names: list[str]) -> str:
    return "[\n            " + ",\n            ".join([_quote(n) for n in names]) + "\n        ]"


_WRITERS: dict[tuple[str | None, str | None], Callable[[Result, str], str]] = {
    (_MODERN, _MODERN): _modern_json,
    (_MODERN, _LIST): _list_json,
    (_LIST, _LIST): _list_json,
}


def _sort_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sort_keys(item) for item in value]
    return value


# Go prints an IPv4-mapped IPv6 address as plain IPv4 (net.IP.To4), with the prefix of the
# last 32 mask bits.


def _is_v4(value: IPAddress | IPNetwork) -> bool:
    """True for IPv4 and IPv4-mapped IPv6 (interfaces are addresses too)."""
    address = value.network_address if isinstance(value, IPv4Network | IPv6Network) else value
    return isinstance(address, IPv4Address) or address.ipv4_mapped is not None


def _ip_text(address: IPAddress) -> str:
    if type(address) is IPv4Address:
        return _inet_ntoa(address.packed)  # str()'s text in 0.8 µs instead of 1.8 µs
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _cidr_text(value: IPInterface | IPNetwork) -> str:
    if type(value) is IPv4Interface:  # the common case in C: 1.3 µs instead of 3.8 µs
        return f"{_inet_ntoa(value.packed)}/{value.network.prefixlen}"
    if type(value) is IPv4Network:
        return f"{_inet_ntoa(value.network_address.packed)}/{value.prefixlen}"
    if isinstance(value, IPv4Network | IPv6Network):
        address: IPAddress = value.network_address
        prefix = value.prefixlen
    else:
        address, prefix = value.ip, value.network.prefixlen
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        prefix = max(prefix - 96, 0)
    return f"{_ip_text(address)}/{prefix}"


# ---------------------------------------------------------------------------------------------
# Decoding


def _decode_legacy(data: Mapping[str, Any], version: str) -> Result:
    result = Result(version)
    for key, want_v4 in (("ip4", True), ("ip6", False)):
        block = _get_object(data, key, "")
        if block is None:
            continue
        address = _parse_interface(_get_required_str(block, "ip", key), f"{key}.ip")
        if _is_v4(address) != want_v4:
            raise _decode_error(f"{key}.ip", f"expected an IPv{4 if want_v4 else 6} address")
        gateway = _get_ip(block, "gateway", key)
        result.ips.append(IPConfig(address, gateway))
        result.routes += _get_list(block, "routes", key, _decode_route)
    result.dns = _decode_dns(data)
    return result


def _decode_list(data: Mapping[str, Any], version: str) -> Result:
    # "ip" is the key the 0.3.0 spec text shows (a typo); Go only reads "ips".
    ips_key = "ips" if _lookup(data, "ips") is not None else "ip"
    return Result(
        version,
        _get_list(data, "interfaces", "", lambda o, p: _decode_interface(o, p, modern=False)),
        _get_list(data, ips_key, "", _decode_stated_ip),
        _get_list(data, "routes", "", _decode_route),
        _decode_dns(data),
    )


def _decode_stated_ip(obj: Mapping[str, Any], path: str) -> IPConfig:
    ip = _decode_ip(obj, path)
    ip.stated_version = _get_str(obj, "version", path)
    return ip


def _decode_modern(data: Mapping[str, Any], version: str) -> Result:
    return Result(
        version,
        _get_list(data, "interfaces", "", lambda o, p: _decode_interface(o, p, modern=True)),
        _get_list(data, "ips", "", _decode_ip),
        _get_list(data, "routes", "", _decode_route),
        _decode_dns(data),
    )


def _decode_interface(obj: Mapping[str, Any], path: str, *, modern: bool) -> Interface:
    intf = Interface(
        _get_str(obj, "name", path),
        mac=_get_str(obj, "mac", path),
        sandbox=_get_str(obj, "sandbox", path),
    )
    if modern:
        intf.mtu = _get_int(obj, "mtu", path) or 0
        intf.socket_path = _get_str(obj, "socketPath", path)
        intf.pci_id = _get_str(obj, "pciID", path)
    return intf


def _decode_ip(obj: Mapping[str, Any], path: str) -> IPConfig:
    address = _parse_interface(_get_required_str(obj, "address", path), _join(path, "address"))
    index = _get_int(obj, "interface", path)
    if index is not None and index < 0:
        raise _decode_error(_join(path, "interface"), f"index must not be negative, got {index}")
    return IPConfig(address, _get_ip(obj, "gateway", path), index)


def _decode_route(obj: Mapping[str, Any], path: str) -> Route:
    return Route(
        _parse_network(_get_required_str(obj, "dst", path), _join(path, "dst")),
        gw=_get_ip(obj, "gw", path),
        mtu=_get_int(obj, "mtu", path) or 0,
        advmss=_get_int(obj, "advmss", path) or 0,
        priority=_get_int(obj, "priority", path) or 0,
        table=_get_int(obj, "table", path),
        scope=_get_int(obj, "scope", path),
    )


def _decode_dns(data: Mapping[str, Any]) -> DNS:
    obj = _get_object(data, "dns", "")
    if obj is None:
        return DNS()
    return DNS(
        nameservers=_get_strings(obj, "nameservers", "dns"),
        domain=_get_str(obj, "domain", "dns"),
        search=_get_strings(obj, "search", "dns"),
        options=_get_strings(obj, "options", "dns"),
    )


# Typed, case-insensitive field access. JSON null means "absent", as in Go.


def _lookup(obj: Mapping[str, Any], name: str) -> Any:
    """The value of ``name`` matched case-insensitively; the last matching key wins (Go)."""
    folded = name.lower()
    found: Any = None
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == folded:
            found = value
    return found


def _get_str(obj: Mapping[str, Any], name: str, path: str) -> str:
    value = _lookup(obj, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _decode_error(_join(path, name), f"expected a string, got {_kind(value)}")
    return value


def _get_required_str(obj: Mapping[str, Any], name: str, path: str) -> str:
    value = _get_str(obj, name, path)
    if value == "":
        raise _decode_error(_join(path, name), "missing")
    return value


def _get_int(obj: Mapping[str, Any], name: str, path: str) -> int | None:
    value = _lookup(obj, name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _decode_error(_join(path, name), f"expected an integer, got {_kind(value)}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _decode_error(_join(path, name), f"integer {value} out of range")
    return value


def _get_ip(obj: Mapping[str, Any], name: str, path: str) -> IPAddress | None:
    text = _get_str(obj, name, path)
    return _parse_ip(text, _join(path, name)) if text else None


def _get_strings(obj: Mapping[str, Any], name: str, path: str) -> list[str]:
    value = _lookup(obj, name)
    if value is None:
        return []
    where = _join(path, name)
    if not isinstance(value, list):
        raise _decode_error(where, f"expected an array of strings, got {_kind(value)}")
    out: list[str] = []
    for index, item in enumerate(value):
        if item is not None and not isinstance(item, str):
            raise _decode_error(f"{where}[{index}]", f"expected a string, got {_kind(item)}")
        out.append(item or "")
    return out


def _get_object(obj: Mapping[str, Any], name: str, path: str) -> Mapping[str, Any] | None:
    value = _lookup(obj, name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _decode_error(_join(path, name), f"expected an object, got {_kind(value)}")
    return value


def _get_list(
    obj: Mapping[str, Any],
    name: str,
    path: str,
    decode: Callable[[Mapping[str, Any], str], _T],
) -> list[_T]:
    value = _lookup(obj, name)
    if value is None:
        return []
    where = _join(path, name)
    if not isinstance(value, list):
        raise _decode_error(where, f"expected an array, got {_kind(value)}")
    out: list[_T] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _decode_error(f"{where}[{index}]", f"expected an object, got {_kind(item)}")
        out.append(decode(item, f"{where}[{index}]"))
    return out


def _parse_ip(text: str, where: str) -> IPAddress:
    """Go's ``net.ParseIP``: dotted quad or IPv6 text, no zone; IPv4-mapped becomes IPv4."""
    try:
        if not text.isascii() or "%" in text:
            raise ValueError(text)
        if ":" in text:
            address = IPv6Address(text)
            return address.ipv4_mapped or address
        return IPv4Address(text)
    except ValueError:
        raise _address_error(where, "IP", text) from None


def _split_cidr(text: str, where: str) -> tuple[IPAddress, int]:
    """Go's ``net.ParseCIDR``: ``address/prefix`` with a decimal prefix length."""
    address_text, slash, prefix_text = text.rpartition("/")
    bad = _address_error(where, "CIDR", text)
    if not slash or not prefix_text.isascii() or not prefix_text.isdigit():
        raise bad
    try:
        address = _parse_ip(address_text, where)
    except CNIError:
        raise bad from None
    prefix = int(prefix_text)
    is_mapped = ":" in address_text and isinstance(address, IPv4Address)
    bits = 128 if ":" in address_text else 32
    if prefix > bits:
        raise bad
    if is_mapped:
        prefix = max(prefix - 96, 0)
    return address, prefix


def _parse_interface(text: str, where: str) -> IPInterface:
    address, prefix = _split_cidr(text, where)
    if isinstance(address, IPv4Address):
        return IPv4Interface((address, prefix))
    return IPv6Interface((address, prefix))


def _parse_network(text: str, where: str) -> IPNetwork:
    """A route destination; host bits are cleared (the kernel rejects them anyway)."""
    address, prefix = _split_cidr(text, where)
    if isinstance(address, IPv4Address):
        return IPv4Network((address, prefix), strict=False)
    return IPv6Network((address, prefix), strict=False)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    if value is None:
        return "null"
    return type(value).__name__


def _address_error(where: str, kind: str, text: str) -> CNIError:
    """A bad address, worded for the plugins (field and value); ``go_text`` holds Go's own
    ``net.ParseError`` text, which libcni (and so pycni's runtime) reports instead."""
    err = _decode_error(where, f'invalid {kind} address "{text}"')
    err.go_text = f"invalid {kind} address: {text}"  # type: ignore[attr-defined]
    return err


def _decode_error(where: str, problem: str) -> CNIError:
    prefix = f"{where}: " if where else ""
    return CNIError(DECODING_FAILURE, f"failed to decode CNI result: {prefix}{problem}")
