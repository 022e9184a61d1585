"""The CNI error type and the well-known error codes (spec §5, Go's types.Error)."""

from __future__ import annotations

import json
from typing import Any

UNKNOWN = 0
INCOMPATIBLE_CNI_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENVIRONMENT_VARIABLES = 4
IO_FAILURE = 5
DECODING_FAILURE = 6
INVALID_NETWORK_CONFIG = 7
INVALID_NETNS = 8
TRY_AGAIN_LATER = 11
PLUGIN_NOT_AVAILABLE = 50
LIMITED_CONNECTIVITY = 51
INTERNAL = 999

CODE_NAMES: dict[int, str] = {
    UNKNOWN: "unknown",
    INCOMPATIBLE_CNI_VERSION: "incompatible CNI version",
    UNSUPPORTED_FIELD: "unsupported field in network configuration",
    UNKNOWN_CONTAINER: "container unknown or does not exist",
    INVALID_ENVIRONMENT_VARIABLES: "invalid necessary environment variables",
    IO_FAILURE: "I/O failure",
    DECODING_FAILURE: "failed to decode content",
    INVALID_NETWORK_CONFIG: "invalid network config",
    INVALID_NETNS: "invalid network namespace",
    TRY_AGAIN_LATER: "try again later",
    PLUGIN_NOT_AVAILABLE: "plugin not available",
    LIMITED_CONNECTIVITY: "plugin not available, connectivity may be limited",
    INTERNAL: "internal error",
}


class CNIError(Exception):
    """A CNI error: what a plugin prints on failure and what the runtime raises.

    ``str(err)`` is ``msg`` or ``msg; details``, as Go's ``types.Error.Error()``.
    """

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def __str__(self) -> str:
        return f"{self.msg}; {self.details}" if self.details else self.msg

    def __repr__(self) -> str:
        return f"CNIError(code={self.code}, msg={self.msg!r}, details={self.details!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CNIError):
            return NotImplemented
        return (self.code, self.msg, self.details) == (other.code, other.msg, other.details)

    def __hash__(self) -> int:
        return hash((self.code, self.msg, self.details))

    def to_dict(self, cni_version: str | None = None) -> dict[str, Any]:
        """The error object; ``cniVersion`` is included when given (skel prints it)."""
        out: dict[str, Any] = {}
        if cni_version is not None:
            out["cniVersion"] = cni_version
        out["code"] = self.code
        out["msg"] = self.msg
        if self.details:
            out["details"] = self.details
        return out

    def to_json(self, cni_version: str | None = None) -> str:
        return json.dumps(self.to_dict(cni_version), indent=4)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CNIError:
        """Decode an error object the way libcni does (missing fields are zero values)."""
        code = data.get("code", 0)
        if not isinstance(code, int) or isinstance(code, bool):
            code = 0
        msg = data.get("msg", "")
        details = data.get("details", "")
        return cls(
            code,
            msg if isinstance(msg, str) else str(msg),
            details if isinstance(details, str) else str(details),
        )
