"""Validation of every string dnsname writes into a path, dnsmasq.conf or the hosts file.

The network name becomes a directory under the dnsname base dir; the container name and its
aliases become fields of an ``addnhosts`` line; the domain becomes ``local=/…/`` and
``domain=…`` lines; the bridge name becomes ``interface=…``. Each is checked against a small
allow-list so that none of them can name another directory, start a new line or field, or
smuggle a dnsmasq option. Failures are code 7 naming the field.
"""

from __future__ import annotations

import re

from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError
from pycni.spec.validate import MAX_IFNAME_BYTES, is_name

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_IFNAME = re.compile(r"[A-Za-z0-9_.@+-]+")
MAX_HOST_NAME = 253
MAX_NETWORK_NAME = 200


def _fail(field: str, value: object, allowed: str) -> CNIError:
    return CNIError(INVALID_NETWORK_CONFIG, f"dnsname: invalid {field} {value!r}: {allowed}")


def network_name(value: str, field: str = "name") -> str:
    """A network name, used as a directory name: CNI's name pattern, no path separators."""
    if not value or len(value) > MAX_NETWORK_NAME or not is_name(value):
        raise _fail(
            field,
            value,
            f"a network name is 1-{MAX_NETWORK_NAME} of [A-Za-z0-9_.-], starting with a letter "
            "or digit",
        )
    return value


def is_host_name(value: str) -> bool:
    """A DNS name for the hosts file: dot-separated labels of letters, digits, '-' and '_'."""
    if not value or len(value) > MAX_HOST_NAME or not value.isascii():
        return False
    return all(_LABEL.fullmatch(label) is not None for label in value.split("."))


_HOST_RULE = (
    f"a name is at most {MAX_HOST_NAME} characters of dot-separated labels of letters, digits, "
    "'-' and '_' (1-63 each, starting with a letter or digit)"
)


def host_name(value: str, field: str) -> str:
    if not is_host_name(value):
        raise _fail(field, value, _HOST_RULE)
    return value


def domain_name(value: str) -> str:
    """``domainName``: empty (as the reference allows) or a DNS name."""
    if value and not is_host_name(value):
        raise _fail("domainName", value, _HOST_RULE)
    return value


def interface_name(value: str, field: str) -> str:
    """The bridge name from prevResult: a Linux interface name without odd characters."""
    if (
        not value
        or len(value.encode()) > MAX_IFNAME_BYTES
        or value in (".", "..")
        or _IFNAME.fullmatch(value) is None
    ):
        raise _fail(field, value, f"an interface name is 1-{MAX_IFNAME_BYTES} of [A-Za-z0-9_.@+-]")
    return value
