"""DHCPv4 messages (RFC 2131/2132): encode, decode, and the options the plugin uses.

Only what a client needs: the fixed BOOTP header, the option TLVs (no option overload into
``sname``/``file``), option names as the reference's ``provide``/``request`` config spells
them, and the route options 121 (RFC 3442) and 33.
"""

from __future__ import annotations

import ipaddress
import os
import struct

from pycni.record import field, record

IPv4 = ipaddress.IPv4Address
ZERO = IPv4(0)

BOOTREQUEST, BOOTREPLY = 1, 2
MAGIC = b"\x63\x82\x53\x63"
HEADER = struct.Struct("!BBBBIHH4s4s4s4s16s64s128s4s")  # 240 bytes with the magic cookie
FLAG_BROADCAST = 0x8000

DISCOVER, OFFER, REQUEST, DECLINE, ACK, NAK, RELEASE, INFORM = range(1, 9)
TYPE_NAMES = {
    DISCOVER: "DHCPDISCOVER",
    OFFER: "DHCPOFFER",
    REQUEST: "DHCPREQUEST",
    DECLINE: "DHCPDECLINE",
    ACK: "DHCPACK",
    NAK: "DHCPNAK",
    RELEASE: "DHCPRELEASE",
    INFORM: "DHCPINFORM",
}

OPT_PAD = 0
OPT_SUBNET_MASK = 1
OPT_ROUTER = 3
OPT_HOST_NAME = 12
OPT_STATIC_ROUTES = 33
OPT_REQUESTED_IP = 50
OPT_LEASE_TIME = 51
OPT_MESSAGE_TYPE = 53
OPT_SERVER_ID = 54
OPT_PARAM_REQUEST_LIST = 55
OPT_RENEWAL_TIME = 58
OPT_REBINDING_TIME = 59
OPT_VENDOR_CLASS = 60
OPT_CLIENT_ID = 61
OPT_USER_CLASS = 77
OPT_CLASSLESS_ROUTES = 121
OPT_END = 255

OPTION_NAMES = {
    "dhcp-client-identifier": OPT_CLIENT_ID,
    "subnet-mask": OPT_SUBNET_MASK,
    "routers": OPT_ROUTER,
    "host-name": OPT_HOST_NAME,
    "user-class": OPT_USER_CLASS,
    "vendor-class-identifier": OPT_VENDOR_CLASS,
}


class MessageError(ValueError):
    """A packet that is not a well-formed DHCP message."""


def parse_option_name(name: str) -> int:
    """An option code from its config name or its decimal number (1..254)."""
    code = OPTION_NAMES.get(name)
    if code is not None:
        return code
    try:
        number = int(name, 10)
    except ValueError:
        raise ValueError(f"unknown option name {name!r}") from None
    if not 0 <= number <= 255:
        raise ValueError(f"option code {number} out of range 0..255")
    return number


@record
class Message:
    op: int
    xid: int
    chaddr: bytes
    ciaddr: IPv4 = ZERO
    yiaddr: IPv4 = ZERO
    siaddr: IPv4 = ZERO
    giaddr: IPv4 = ZERO
    flags: int = 0
    secs: int = 0
    options: dict[int, bytes] = field(default_factory=dict)

    @property
    def type(self) -> int:
        raw = self.options.get(OPT_MESSAGE_TYPE, b"")
        return raw[0] if len(raw) == 1 else 0

    def encode(self) -> bytes:
        head = HEADER.pack(
            self.op,
            1,  # htype ethernet
            6,
            0,
            self.xid,
            self.secs,
            self.flags,
            self.ciaddr.packed,
            self.yiaddr.packed,
            self.siaddr.packed,
            self.giaddr.packed,
            self.chaddr.ljust(16, b"\0"),
            b"",
            b"",
            MAGIC,
        )
        body = bytearray()
        # the message type first, as servers and captures expect
        for code in sorted(self.options, key=lambda c: (c != OPT_MESSAGE_TYPE, 0)):
            value = self.options[code]
            for start in range(0, max(len(value), 1), 255):  # RFC 3396 split of long values
                chunk = value[start : start + 255]
                body += bytes((code, len(chunk))) + chunk
        body.append(OPT_END)
        out = head + bytes(body)
        return out.ljust(300, b"\0")  # BOOTP minimum, some relays drop shorter frames

    @classmethod
    def decode(cls, data: bytes) -> Message:
        if len(data) < HEADER.size:
            raise MessageError(f"short DHCP message ({len(data)} bytes)")
        f = HEADER.unpack_from(data)
        if f[14] != MAGIC:
            raise MessageError("missing DHCP magic cookie")
        hlen = min(f[2], 16)
        msg = cls(
            op=f[0],
            xid=f[4],
            secs=f[5],
            flags=f[6],
            ciaddr=IPv4(f[7]),
            yiaddr=IPv4(f[8]),
            siaddr=IPv4(f[9]),
            giaddr=IPv4(f[10]),
            chaddr=f[11][:hlen],
        )
        msg.options = decode_options(data[HEADER.size :])
        return msg

    # -- typed views of the options a lease needs --------------------------------------------

    def addr_option(self, code: int) -> IPv4 | None:
        raw = self.options.get(code, b"")
        return IPv4(raw[:4]) if len(raw) >= 4 else None

    def addrs_option(self, code: int) -> list[IPv4]:
        raw = self.options.get(code, b"")
        return [IPv4(raw[i : i + 4]) for i in range(0, len(raw) - len(raw) % 4, 4)]

    def seconds_option(self, code: int) -> int | None:
        raw = self.options.get(code, b"")
        return struct.unpack("!I", raw[:4])[0] if len(raw) >= 4 else None

    @property
    def server_id(self) -> IPv4 | None:
        return self.addr_option(OPT_SERVER_ID)

    @property
    def subnet_mask(self) -> IPv4 | None:
        return self.addr_option(OPT_SUBNET_MASK)


def decode_options(data: bytes) -> dict[int, bytes]:
    """Option TLVs until END; repeated codes are concatenated (RFC 3396)."""
    out: dict[int, bytes] = {}
    i = 0
    while i < len(data):
        code = data[i]
        if code == OPT_END:
            break
        if code == OPT_PAD:
            i += 1
            continue
        if i + 1 >= len(data):
            raise MessageError("truncated DHCP option")
        length = data[i + 1]
        value = data[i + 2 : i + 2 + length]
        if len(value) != length:
            raise MessageError(f"truncated DHCP option {code}")
        out[code] = out.get(code, b"") + value
        i += 2 + length
    return out


def new_xid() -> int:
    return int.from_bytes(os.urandom(4), "big")


@record(frozen=True)
class StaticRoute:
    dst: ipaddress.IPv4Network
    gateway: IPv4


def classless_routes(raw: bytes) -> list[StaticRoute]:
    """Option 121: (prefix length, significant octets of the destination, router)*."""
    out: list[StaticRoute] = []
    i = 0
    while i < len(raw):
        width = raw[i]
        if width > 32:
            raise MessageError(f"option 121: bad prefix length {width}")
        octets = (width + 7) // 8
        end = i + 1 + octets + 4
        if end > len(raw):
            raise MessageError("option 121: truncated route")
        dst = raw[i + 1 : i + 1 + octets].ljust(4, b"\0")
        net = ipaddress.IPv4Network((IPv4(dst), width), strict=False)
        out.append(StaticRoute(net, IPv4(raw[end - 4 : end])))
        i = end
    return out


def classful_routes(raw: bytes) -> list[StaticRoute]:
    """Option 33: (destination host, router)* with the destination's classful mask."""
    out: list[StaticRoute] = []
    for i in range(0, len(raw) - len(raw) % 8, 8):
        dst, gw = IPv4(raw[i : i + 4]), IPv4(raw[i + 4 : i + 8])
        first = dst.packed[0]
        width = 8 if first < 128 else 16 if first < 192 else 24  # Go's IP.DefaultMask
        out.append(StaticRoute(ipaddress.IPv4Network((dst, width), strict=False), gw))
    return out
