"""The CNI error type, the well-known error codes (spec §5, Go's types.Error) and one class
per code, so code says what went wrong (``raise InvalidConfig("...")``) instead of a bare number.

Every class is a :class:`CNIError`: callers that catch ``CNIError`` or read ``.code`` keep
working, and ``except InvalidConfig`` catches exactly the code-7 errors.
"""

from __future__ import annotations

from pycni.spec import jsoncodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = [
    "DECODING_FAILURE",
    "INCOMPATIBLE_CNI_VERSION",
    "INTERNAL",
    "INVALID_ENVIRONMENT_VARIABLES",
    "INVALID_NETNS",
    "INVALID_NETWORK_CONFIG",
    "IO_FAILURE",
    "LIMITED_CONNECTIVITY",
    "PLUGIN_NOT_AVAILABLE",
    "TRY_AGAIN_LATER",
    "UNKNOWN",
    "UNSUPPORTED_FIELD",
    "CNIError",
    "DecodingFailure",
    "IOFailure",
    "IncompatibleVersion",
    "InternalError",
    "InvalidConfig",
    "InvalidEnv",
    "InvalidNetNS",
    "LimitedConnectivity",
    "PluginNotAvailable",
    "TryAgainLater",
    "UnknownContainer",
    "UnsupportedField",
]

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
        return jsoncodec.dumps(self.to_dict(cni_version), indent=4)

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


class _Coded(CNIError):
    """A CNIError whose code is fixed by its class: ``InvalidConfig(msg, details)``.

    A subclass names its code in its header: ``class InvalidConfig(_Coded, code=7)``.
    """

    code_of_class: ClassVar[int] = UNKNOWN

    def __init_subclass__(cls, *, code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:  # else the parent's (a narrower InvalidConfig is still code 7)
            cls.code_of_class = code

    def __init__(self, msg: str, details: str = "") -> None:
        super().__init__(self.code_of_class, msg, details)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(msg={self.msg!r}, details={self.details!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.msg, self.details))


class IncompatibleVersion(_Coded, code=INCOMPATIBLE_CNI_VERSION):
    """Code 1: the config's cniVersion is one this plugin (or verb) cannot serve."""


class UnsupportedField(_Coded, code=UNSUPPORTED_FIELD):
    """Code 2: a field this implementation understands but does not support here."""


class UnknownContainer(_Coded, code=UNKNOWN_CONTAINER):
    """Code 3: the container does not exist."""


class InvalidEnv(_Coded, code=INVALID_ENVIRONMENT_VARIABLES):
    """Code 4: a CNI_* environment variable is missing or malformed."""


class IOFailure(_Coded, code=IO_FAILURE):
    """Code 5: reading or writing a file the plugin needs failed."""


class DecodingFailure(_Coded, code=DECODING_FAILURE):
    """Code 6: stdin (or a stored document) is not the JSON it must be."""


class InvalidConfig(_Coded, code=INVALID_NETWORK_CONFIG):
    """Code 7: a config value has the wrong type, range or form; the message names the field."""


class InvalidNetNS(_Coded, code=INVALID_NETNS):
    """Code 8: CNI_NETNS is unusable."""


class TryAgainLater(_Coded, code=TRY_AGAIN_LATER):
    """Code 11: a transient condition; the runtime should retry."""


class PluginNotAvailable(_Coded, code=PLUGIN_NOT_AVAILABLE):
    """Code 50: STATUS says the plugin cannot serve ADDs now."""


class LimitedConnectivity(_Coded, code=LIMITED_CONNECTIVITY):
    """Code 51: STATUS says the plugin cannot serve ADDs now, and pods already attached may
    have limited connectivity (what keeps them connected has stopped)."""


class InternalError(_Coded, code=INTERNAL):
    """Code 999: an unexpected failure (a kernel answer or a bug)."""
