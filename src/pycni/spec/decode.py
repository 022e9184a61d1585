"""One decoder for plugin configs: records declare their fields, ``decode`` checks them.

A config record names, per field, its JSON key, its kind (type plus the values allowed) and
its default::

    @record(frozen=True)
    class Conf:
        mtu: int = option("mtu", Int(0, 65535), 0)

``decode(Conf, obj, "where")`` returns a ``Conf`` or raises :class:`InvalidConfig` (code 7)
with a message that names the field by its full path and says what is allowed::

    invalid config: ipam.ranges[0][1].subnet must be a CIDR like 10.1.0.0/16, got "x"

Keys match as the plugins' Go reference reads them with encoding/json: an exact key wins,
else the first key equal to it ignoring case. ``null`` or an absent key gives the default.
Every string is checked to be encodable UTF-8, free of NUL and of bounded length, so no config
value can reach a path, a kernel name or a log line as something Python cannot handle.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from pycni import record
from pycni.spec import jsoncodec
from pycni.spec.errors import InvalidConfig
from pycni.spec.validate import is_mac

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol, TypeVar

    T = TypeVar("T")
else:
    Protocol = object  # typing is not imported at run time

__all__ = [
    "CIDR",
    "ETH_MAX_MTU",
    "IP",
    "MAC",
    "MAX_ITEMS",
    "UINT32_MAX",
    "Bool",
    "FilePath",
    "IfName",
    "Int",
    "Kind",
    "ListOf",
    "MapOf",
    "Obj",
    "Parsed",
    "Raw",
    "Str",
    "check_text",
    "decode",
    "fail",
    "lookup",
    "observe",
    "option",
    "present",
    "section",
    "shown",
    "specs",
]


MAX_STRING = 4096
MAX_ITEMS = 4096
INT64 = (-(2**63), 2**63 - 1)
UINT32_MAX = 2**32 - 1
ETH_MAX_MTU = 65535
_SHOWN = 64
_META = "pycni.decode"


def lookup(data: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """(found, value): an exact key wins, then the first case-insensitive match."""
    if key in data:
        return True, data[key]
    lowered = key.lower()
    for k, v in data.items():
        if isinstance(k, str) and k.lower() == lowered:
            return True, v
    return False, None


def shown(value: Any) -> str:
    """A config value as the user wrote it (JSON), cut short so a huge value stays readable."""
    try:
        text = jsoncodec.dumps(value, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def fail(path: str, allowed: str, value: Any) -> InvalidConfig:
    """The one message form: ``invalid config: <path> must be <allowed>, got <value>``."""
    return InvalidConfig(f"invalid config: {path} must be {allowed}, got {shown(value)}")


class Kind(Protocol):
    """What a field may hold; ``decode`` returns the Python value or raises InvalidConfig."""

    def describe(self) -> str: ...

    def decode(self, value: Any, path: str) -> Any: ...


class _Frozen:
    """An immutable value with ``__slots__``: what ``dataclass(frozen=True)`` gives the kinds
    below (init, repr, eq, hash, no assignment), without generating code when this module is
    imported. Every plugin call imports it, and each frozen dataclass is costly to create
    (docs/benchmarks.md)."""

    __slots__: tuple[str, ...] = ()

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        shown_values = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({shown_values})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Frozen)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __reduce__(self) -> tuple[Any, ...]:
        """copy, deepcopy and pickle rebuild it field by field (assignment is refused)."""
        return (_rebuild, (type(self), {n: getattr(self, n) for n in self.__slots__}))


def _rebuild(cls: type[_Frozen], values: dict[str, Any]) -> _Frozen:
    obj = cls.__new__(cls)
    obj._set(**values)
    return obj


# --- scalar kinds --------------------------------------------------------------------------------


class Bool(_Frozen):
    __slots__ = ()

    def describe(self) -> str:
        return "a boolean"

    def decode(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise fail(path, self.describe(), value)
        return value


class Int(_Frozen):
    """A JSON number with an integral value in [lo, hi] (Go's intN/uintN fields).

    ``message``, when set, is the text for a number out of range (``{path}``, ``{value}``),
    for ranges whose wording the reference plugin fixes; a wrong type keeps the standard text.
    """

    __slots__ = ("hi", "lo", "message")
    lo: int
    hi: int
    message: str

    def __init__(self, lo: int = INT64[0], hi: int = INT64[1], message: str = "") -> None:
        self._set(lo=lo, hi=hi, message=message)

    def describe(self) -> str:
        if (self.lo, self.hi) == INT64:
            return "a number (an integer)"
        return f"a number in [{self.lo}, {self.hi}]"

    def decode(self, value: Any, path: str) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(path, self.describe(), value)
        if not self.lo <= value <= self.hi:
            if self.message:
                raise InvalidConfig(self.message.format(path=path, value=shown(value)))
            raise fail(path, self.describe(), value)
        return value


def check_text(value: str, path: str, max_len: int = MAX_STRING) -> str:
    """The rules every config string obeys: UTF-8, no NUL, at most ``max_len`` characters."""
    if len(value) > max_len:
        raise InvalidConfig(
            f"invalid config: {path} must be at most {max_len} characters, got {len(value)}"
        )
    if "\x00" in value:
        raise InvalidConfig(f"invalid config: {path} must not contain NUL, got {shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidConfig(
            f"invalid config: {path} must be valid UTF-8 text, got {shown(value)}"
        ) from None
    return value


class Str(_Frozen):
    """A string; optionally one of ``choices`` or accepted by ``valid`` (``what`` says which).

    ``message``, when set, is the text for a value outside ``choices``/``valid``, for
    errors whose wording the reference plugin fixes: ``{path}``, ``{raw}`` (the string) and
    ``{value}`` (it as JSON, shortened).
    """

    __slots__ = ("choices", "max_len", "message", "no_control", "valid", "what")
    max_len: int
    choices: tuple[str, ...]
    valid: Callable[[str], bool] | None
    what: str
    no_control: bool
    message: str

    def __init__(
        self,
        max_len: int = MAX_STRING,
        choices: tuple[str, ...] = (),
        valid: Callable[[str], bool] | None = None,
        what: str = "",
        no_control: bool = False,
        message: str = "",
    ) -> None:
        self._set(
            max_len=max_len,
            choices=choices,
            valid=valid,
            what=what,
            no_control=no_control,
            message=message,
        )

    def describe(self) -> str:
        if self.what:
            return self.what
        if self.choices:
            return "one of " + ", ".join(jsoncodec.dumps(c) for c in self.choices)
        return "a string"

    def decode(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise fail(path, self.describe(), value)
        check_text(value, path, self.max_len)
        if self.no_control and any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise fail(path, f"{self.describe()} without control characters", value)
        wrong = (self.choices and value not in self.choices) or (
            self.valid is not None and value and not self.valid(value)
        )
        if wrong:
            if self.message:
                raise InvalidConfig(self.message.format(path=path, raw=value, value=shown(value)))
            raise fail(path, self.describe(), value)
        return value


class IfName(_Frozen):
    """A Linux interface name: 1..15 bytes, not ``.``/``..``, no ``/``, ``:`` or whitespace.

    ``""`` is allowed (it means "the default") unless ``required``.
    """

    __slots__ = ("required",)
    required: bool

    def __init__(self, required: bool = False) -> None:
        self._set(required=required)

    def describe(self) -> str:
        return "a string naming an interface (1-15 bytes, no '/', ':' or whitespace)"

    def decode(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise fail(path, self.describe(), value)
        check_text(value, path)
        if value == "" and not self.required:
            return value
        bad = (
            value in ("", ".", "..")
            or len(value.encode()) > 15
            or any(ch in "/:" or ch.isspace() or not ch.isprintable() for ch in value)
        )
        if bad:
            raise fail(path, self.describe(), value)
        return value


class FilePath(_Frozen):
    """A file system path: at most PATH_MAX-1 bytes, each component at most NAME_MAX bytes,
    no control characters. ``""`` means "the default". What the path names is the config
    author's choice (as in the reference plugins); this only keeps the OS from refusing it."""

    __slots__ = ("max_bytes",)
    max_bytes: int

    def __init__(self, max_bytes: int = 4095) -> None:
        self._set(max_bytes=max_bytes)

    def describe(self) -> str:
        return (
            f"a path (at most {self.max_bytes} bytes, parts of at most 255, no control characters)"
        )

    def decode(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise fail(path, self.describe(), value)
        check_text(value, path)
        raw = value.encode()
        bad = (
            len(raw) > self.max_bytes
            or any(len(part) > 255 for part in raw.split(b"/"))
            or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)
        )
        if bad:
            raise fail(path, self.describe(), value)
        return value


class Parsed(_Frozen):
    """A string turned into a value by ``parse`` (which raises ValueError when it cannot).

    ``message``, when set, replaces the standard text (for errors whose wording the Go
    reference fixes); it may use ``{path}``, ``{value}`` (the raw string) and ``{error}``.
    """

    __slots__ = ("message", "parse", "what")
    parse: Callable[[str], Any]
    what: str
    message: str

    def __init__(self, parse: Callable[[str], Any], what: str, message: str = "") -> None:
        self._set(parse=parse, what=what, message=message)

    def describe(self) -> str:
        return self.what

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            raise fail(path, self.describe(), value)
        check_text(value, path)
        if value == "":
            return None
        try:
            return self.parse(value)
        except ValueError as exc:
            if self.message:
                raise InvalidConfig(
                    self.message.format(path=path, value=value, error=exc)
                ) from None
            raise fail(path, self.describe(), value) from None


def _cidr(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    if "/" not in text:
        raise ValueError(text)
    return ipaddress.ip_interface(text)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def _mac(text: str) -> str:
    if not is_mac(text):
        raise ValueError(text)
    return text


def CIDR(message: str = "") -> Parsed:
    return Parsed(_cidr, "a CIDR like 10.1.0.0/16", message)


def IP(message: str = "") -> Parsed:
    return Parsed(_ip, "an IP address like 10.1.0.1", message)


def MAC(message: str = "") -> Parsed:
    return Parsed(_mac, "a MAC address like 02:aa:bb:cc:dd:ee", message)


# --- containers ----------------------------------------------------------------------------------


class ListOf(_Frozen):
    """A JSON array of ``item`` (a ``null`` entry is refused, as any wrong type)."""

    __slots__ = ("item", "max_items")
    item: Kind
    max_items: int

    def __init__(self, item: Kind, max_items: int = MAX_ITEMS) -> None:
        self._set(item=item, max_items=max_items)

    def describe(self) -> str:
        return f"a list of {_plural(self.item.describe())}"

    def decode(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise fail(path, self.describe(), value)
        if len(value) > self.max_items:
            raise InvalidConfig(
                f"invalid config: {path} must have at most {self.max_items} entries, "
                f"got {len(value)}"
            )
        return [self.item.decode(v, f"{path}[{i}]") for i, v in enumerate(value)]


class MapOf(_Frozen):
    """A JSON object whose keys are checked strings and whose values are ``item``."""

    __slots__ = ("item", "max_items")
    item: Kind
    max_items: int

    def __init__(self, item: Kind, max_items: int = MAX_ITEMS) -> None:
        self._set(item=item, max_items=max_items)

    def describe(self) -> str:
        return f"an object of {_plural(self.item.describe())}"

    def decode(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(path, self.describe(), value)
        if len(value) > self.max_items:
            raise InvalidConfig(
                f"invalid config: {path} must have at most {self.max_items} entries, "
                f"got {len(value)}"
            )
        out: dict[str, Any] = {}
        for key, item in value.items():
            check_text(key, f"{path} key", MAX_STRING)
            out[key] = self.item.decode(item, f"{path}.{key}")
        return out


class Obj(_Frozen):
    """A nested object decoded into the config record ``cls``."""

    __slots__ = ("cls",)
    cls: type[Any]

    def __init__(self, cls: type[Any]) -> None:
        self._set(cls=cls)

    def describe(self) -> str:
        return "an object"

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise fail(path, self.describe(), value)
        return decode(self.cls, value, path)


class Raw(_Frozen):
    """A JSON value kept as is, of one of ``types`` (for sections handed on unchanged)."""

    __slots__ = ("types", "what")
    types: tuple[type, ...]
    what: str

    def __init__(self, types: tuple[type, ...] = (dict,), what: str = "an object") -> None:
        self._set(types=types, what=what)

    def describe(self) -> str:
        return self.what

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, self.types) or (
            bool not in self.types and isinstance(value, bool)
        ):
            raise fail(path, self.describe(), value)
        return value


def _plural(text: str) -> str:
    for article in ("an ", "a "):
        if text.startswith(article):
            text = text[len(article) :]
            break
    head, _, rest = text.partition(" ")
    return (head + "s " + rest).strip() if not head.endswith("s") else text


# --- record fields -------------------------------------------------------------------------------


class Spec(_Frozen):
    """A field's metadata: its JSON key and its kind."""

    __slots__ = ("key", "kind")
    key: str
    kind: Kind

    def __init__(self, key: str, kind: Kind) -> None:
        self._set(key=key, kind=kind)


def option(
    key: str,
    kind: Kind,
    default: Any = None,
    *,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A record field read from JSON ``key`` (any case) as ``kind``; absent/null = default."""
    meta = {_META: Spec(key, kind)}
    if factory is not None:
        return record.field(default_factory=factory, metadata=meta)
    return record.field(default=default, metadata=meta)


_SPECS: dict[type[Any], tuple[tuple[str, Spec], ...]] = {}
_observers: list[Callable[[type[Any], str], None]] = []


class observe:
    """Within the block, ``callback(cls, path)`` hears of every record :func:`decode` decodes
    (``pycni validate`` learns from it which keys each JSON path may hold, as ADD reads them)."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[type[Any], str], None]) -> None:
        self.callback = callback

    def __enter__(self) -> None:
        _observers.append(self.callback)

    def __exit__(self, *exc: object) -> None:
        _observers.remove(self.callback)


def specs(cls: type[Any]) -> tuple[tuple[str, Spec], ...]:
    """(attribute, spec) of every declared field of a config record (computed once)."""
    found = _SPECS.get(cls)
    if found is None:
        fields = record.fields(cls)
        found = tuple((f.name, f.metadata[_META]) for f in fields if _META in f.metadata)
        _SPECS[cls] = found
    return found


def decode(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """An instance of the config record ``cls`` from the JSON object ``data``.

    Fields absent from ``data`` (or ``null``) keep their defaults; unknown keys are ignored,
    as Go's encoding/json does; every present value is checked by its field's kind.
    """
    values: dict[str, Any] = {}
    if _observers:
        for callback in _observers:
            callback(cls, path)
    if data is None:
        return cls()
    folded: dict[str, Any] | None = None  # lower-cased key -> its first key, built when needed
    for attr, spec in specs(cls):
        if spec.key in data:
            value = data[spec.key]
        else:
            if folded is None:
                folded = {}
                for k in data:
                    if isinstance(k, str):
                        folded.setdefault(k.lower(), k)
            key = folded.get(spec.key.lower())
            if key is None:
                continue
            value = data[key]
        if value is not None:
            values[attr] = spec.kind.decode(value, join(path, spec.key))
    return cls(**values)


def present(data: Mapping[str, Any] | None, key: str) -> bool:
    """Whether ``key`` is given (any case) with a value other than ``null``."""
    if data is None:
        return False
    found, value = lookup(data, key)
    return found and value is not None


def section(data: Mapping[str, Any] | None, key: str, path: str = "") -> dict[str, Any]:
    """A nested object (``{}`` when absent or null); anything else is a config error."""
    if data is None:
        return {}
    found, value = lookup(data, key)
    if not found or value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(join(path, key), "an object", value)
    return value
