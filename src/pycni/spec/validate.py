"""Validation of names the runtime passes to plugins (pkg/utils/utils.go)."""

from __future__ import annotations

import re

from pycni.spec.errors import (
    INVALID_ENVIRONMENT_VARIABLES,
    INVALID_NETWORK_CONFIG,
    UNKNOWN_CONTAINER,
    CNIError,
)

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
MAX_IFNAME_BYTES = 15


def container_id(value: str) -> None:
    if value == "":
        raise CNIError(UNKNOWN_CONTAINER, "missing containerID")
    if not NAME_PATTERN.match(value) or value.endswith("\n"):
        raise CNIError(INVALID_ENVIRONMENT_VARIABLES, "invalid characters in containerID", value)


def network_name(value: str) -> None:
    if value == "":
        raise CNIError(INVALID_NETWORK_CONFIG, "missing network name:")
    if not NAME_PATTERN.match(value) or value.endswith("\n"):
        raise CNIError(INVALID_NETWORK_CONFIG, "invalid characters found in network name", value)


def interface_name(value: str) -> None:
    if value == "":
        raise CNIError(INVALID_ENVIRONMENT_VARIABLES, "interface name is empty")
    if len(value.encode()) > MAX_IFNAME_BYTES:
        raise CNIError(
            INVALID_ENVIRONMENT_VARIABLES,
            "interface name is too long",
            "interface name should be less than 16 characters",
        )
    if value in (".", ".."):
        raise CNIError(INVALID_ENVIRONMENT_VARIABLES, "interface name is . or ..")
    if any(ch in "/:" or ch.isspace() for ch in value):
        raise CNIError(
            INVALID_ENVIRONMENT_VARIABLES,
            "interface name contains / or : or whitespace characters",
        )


def plugin_type(value: str) -> None:
    """A plugin type names a file in CNI_PATH, so it must not contain a path separator."""
    if value == "":
        raise CNIError(INVALID_NETWORK_CONFIG, "no plugin name provided")
    if "/" in value or "\\" in value:
        raise CNIError(INVALID_NETWORK_CONFIG, f"invalid plugin name: {value}")
