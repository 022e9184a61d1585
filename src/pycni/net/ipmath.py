"""IP address arithmetic and Go-compatible parsing, shared by the IPAM plugins.

Go's ``net`` package treats an IPv4-mapped IPv6 address as IPv4 and prints it dotted;
our parsers do the same so that file names and results match the reference byte for byte.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network


def parse_ip(text: str) -> IPAddress:
    """Go's ``net.ParseIP``: dotted quad or IPv6 text, no zone; IPv4-mapped becomes IPv4.

    Raises ValueError on anything else.
    """
    if not isinstance(text, str) or not text.isascii() or "%" in text or text == "":
        raise ValueError(f"invalid IP address {text}")
    try:
        if ":" in text:
            address = IPv6Address(text)
            return address.ipv4_mapped or address
        return IPv4Address(text)
    except ValueError:
        raise ValueError(f"invalid IP address {text}") from None


def parse_cidr(text: str) -> tuple[IPAddress, int, bool]:
    """Go's ``net.ParseCIDR`` keeping the host bits: (address, prefix, written_as_v6).

    ``written_as_v6`` is True for an IPv4-mapped address written in IPv6 form, whose
    prefix then counts 128 bits (Go's mask length differs from the address length).
    """
    address_text, slash, prefix_text = text.rpartition("/")
    if not slash or not prefix_text.isascii() or not prefix_text.isdigit() or len(prefix_text) > 3:
        raise ValueError(f"invalid CIDR address: {text}")
    try:
        address = parse_ip(address_text)
    except ValueError:
        raise ValueError(f"invalid CIDR address: {text}") from None
    written_as_v6 = ":" in address_text
    prefix = int(prefix_text)
    if prefix > (128 if written_as_v6 else 32):
        raise ValueError(f"invalid CIDR address: {text}")
    return address, prefix, written_as_v6 and isinstance(address, IPv4Address)


def parse_ip_or_cidr(text: str) -> IPAddress:
    """An address given as ``a.b.c.d`` or ``a.b.c.d/nn`` (the prefix is ignored)."""
    if "/" in text:
        try:
            return parse_cidr(text)[0]
        except ValueError:
            raise ValueError(f"invalid IP address {text}") from None
    return parse_ip(text)


def bits(address: IPAddress) -> int:
    return 32 if isinstance(address, IPv4Address) else 128


def make_ip(value: int, family_bits: int) -> IPAddress:
    if family_bits == 32:
        return IPv4Address(value)
    return IPv6Address(value)


def next_ip(address: IPAddress) -> IPAddress:
    """The following address, wrapping from all-ones to zero (Go's ``ip.NextIP``)."""
    width = bits(address)
    return make_ip((int(address) + 1) % (1 << width), width)


def prev_ip(address: IPAddress) -> IPAddress:
    """The preceding address, wrapping from zero to all-ones (Go's ``ip.PrevIP``)."""
    width = bits(address)
    return make_ip((int(address) - 1) % (1 << width), width)


def network_of(address: IPAddress, prefix: int) -> IPNetwork:
    """The network that ``address/prefix`` belongs to (host bits cleared)."""
    if isinstance(address, IPv4Address):
        return IPv4Network((address, prefix), strict=False)
    return IPv6Network((address, prefix), strict=False)


def last_usable(network: IPNetwork) -> IPAddress:
    """The last address of ``network``; for IPv4 the one before the broadcast address."""
    last = network.broadcast_address
    return prev_ip(last) if isinstance(last, IPv4Address) else last


def in_network(address: IPAddress, network: IPNetwork) -> bool:
    return address.version == network.version and address in network


def span(start: IPAddress, end: IPAddress) -> int:
    """How many addresses ``start..end`` holds, both inclusive (0 when end < start)."""
    return max(int(end) - int(start) + 1, 0)
