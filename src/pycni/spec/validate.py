"""Validation of names the runtime passes to plugins (pkg/utils/utils.go)."""

from __future__ import annotations

import re

from pycni.spec.errors import InvalidConfig, InvalidEnv, UnknownContainer

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
MAX_IFNAME_BYTES = 15


def container_id(value: str) -> None:
    if value == "":
        raise UnknownContainer("missing containerID")
    if not NAME_PATTERN.match(value) or value.endswith("\n"):
        raise InvalidEnv("invalid characters in containerID", value)


def network_name(value: str) -> None:
    if value == "":
        raise InvalidConfig("missing network name:")
    if not NAME_PATTERN.match(value) or value.endswith("\n"):
        raise InvalidConfig("invalid characters found in network name", value)


def interface_name(value: str) -> None:
    if value == "":
        raise InvalidEnv("interface name is empty")
    if len(value.encode()) > MAX_IFNAME_BYTES:
        raise InvalidEnv(
            "interface name is too long",
            "interface name should be less than 16 characters",
        )
    if value in (".", ".."):
        raise InvalidEnv("interface name is . or ..")
    if any(ch in "/:" or ch.isspace() for ch in value):
        raise InvalidEnv(
            "interface name contains / or : or whitespace characters",
        )


def plugin_type(value: str) -> None:
    """A plugin type names a file in CNI_PATH, so it must not contain a path separator."""
    if value == "":
        raise InvalidConfig("no plugin name provided")
    if "/" in value or "\\" in value:
        raise InvalidConfig(f"invalid plugin name: {value}")
