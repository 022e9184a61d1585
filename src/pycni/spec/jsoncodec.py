"""JSON text in and out for the plugin path, on the interpreter's C codec (``_json``).

Why not ``import json``: the package imports ``re`` (and with it ``enum``) for its pure-Python
fallbacks; in a one-shot in-process plugin call that cost more than the interpreter's own
start-up (docs/benchmarks.md). ``_json`` holds the same C scanner and encoder ``json`` uses, so
``loads`` and ``dumps`` here return exactly what ``json.loads`` and ``json.dumps`` return (a
property test checks it on generated documents). Rare inputs (bytes in UTF-16/32, errors) go to
the ``json`` package itself, imported only then.
"""

from __future__ import annotations

import _json
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time on the plugin path
    from collections.abc import Callable, Iterable
    from json import JSONDecodeError
    from typing import Any, TypeGuard

__all__ = ["dumps", "loads", "syntax_error"]

_WHITESPACE = " \t\n\r"
_INFINITY = float("inf")


class _ScanContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    def __init__(self, parse_constant: Callable[[str], Any] | None) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = parse_constant or _CONSTANTS.__getitem__


_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
# typeshed names the context type after the scanner; any object with these attributes works
_SCANNER = _json.make_scanner(_ScanContext(None))  # type: ignore[arg-type]


def loads(data: str | bytes, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(data, parse_constant=parse_constant)``."""
    if isinstance(data, (bytes, bytearray)):
        if data[:1] in (b"\xef", b"\xfe", b"\xff") or b"\x00" in data[:4]:
            return _stdlib_loads(data, parse_constant)  # a BOM or UTF-16/32: json's detection
        text = data.decode("utf-8", "surrogatepass")
    else:
        text = data
        if text.startswith("\ufeff"):
            return _stdlib_loads(text, parse_constant)
    scanner = _SCANNER
    if parse_constant is not None:
        scanner = _json.make_scanner(_ScanContext(parse_constant))  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = scanner(text, start)  # (it clears its key memo itself after each call)
    except StopIteration:
        return _stdlib_loads(text, parse_constant)  # raises json's JSONDecodeError
    except SystemError:
        # Most syntax errors make the C scanner build a JSONDecodeError from the class it
        # finds in sys.modules["json.decoder"]; when nothing imported json yet (a one-shot
        # in-process call), it fails with SystemError instead. json's own loads raises the
        # right error (and imports json.decoder for the next time).
        if "json.decoder" in sys.modules:
            raise
        return _stdlib_loads(text, parse_constant)
    if len(text.rstrip(_WHITESPACE)) > end:
        return _stdlib_loads(text, parse_constant)  # raises "Extra data"
    return value


def syntax_error(exc: BaseException) -> TypeGuard[JSONDecodeError]:
    """Whether ``exc`` is json's ``JSONDecodeError`` (with ``msg`` and ``pos``). Only
    ``json.decoder`` raises one, so it is imported whenever there is one to test."""
    decoder = sys.modules.get("json.decoder")
    return decoder is not None and isinstance(exc, decoder.JSONDecodeError)


def _stdlib_loads(data: str | bytes, parse_constant: Callable[[str], Any] | None) -> Any:
    import json

    return json.loads(data, parse_constant=parse_constant)


def dumps(
    value: Any,
    *,
    indent: int | None = None,
    ensure_ascii: bool = True,
    allow_nan: bool = True,
) -> str:
    """``json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, allow_nan=allow_nan)``."""
    quote = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    if indent is None:
        if isinstance(value, str):
            return quote(value)
        encode = _json.make_encoder(
            {}, _unserializable, quote, None, ": ", ", ", False, False, allow_nan
        )
        return "".join(encode(value, 0))
    chunks: list[str] = []
    _pretty(value, chunks, quote, allow_nan, " " * indent, "\n", {})
    return "".join(chunks)


def _unserializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _float(value: float, allow_nan: bool) -> str:
    if value != value:
        text = "NaN"
    elif value == _INFINITY:
        text = "Infinity"
    elif value == -_INFINITY:
        text = "-Infinity"
    else:
        return float.__repr__(value)
    if not allow_nan:
        raise ValueError("Out of range float values are not JSON compliant: " + repr(value))
    return text


def _scalar(value: Any, quote: Callable[[str], str], allow_nan: bool) -> str | None:
    """The text of a scalar, or None for a container (as json's encoder orders its checks)."""
    if isinstance(value, str):
        return quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value, allow_nan)
    return None


def _key(key: Any, quote: Callable[[str], str], allow_nan: bool) -> str:
    """A dict key as json writes it: strings as they are, scalars as their JSON text."""
    if isinstance(key, str):
        return key
    text = _scalar(key, quote, allow_nan)
    if text is None:
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
    return text


def _pretty(
    value: Any,
    out: list[str],
    quote: Callable[[str], str],
    allow_nan: bool,
    step: str,
    newline: str,
    markers: dict[int, Any],
) -> None:
    """json's indented layout: one item per line, ``", "`` → ``","``, ``": "`` after keys."""
    text = _scalar(value, quote, allow_nan)
    if text is not None:
        out.append(text)
        return
    pairs: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        brackets, pairs = "{}", value.items()
    elif isinstance(value, (list, tuple)):
        brackets, pairs = "[]", ((None, item) for item in value)
    else:
        _unserializable(value)
    if not value:
        out.append(brackets)
        return
    _enter(value, markers)
    inner = newline + step
    out.append(brackets[0])
    for i, (key, item) in enumerate(pairs):
        out.append(inner if i == 0 else "," + inner)
        if brackets == "{}":  # a key is converted when reached, as json does
            out.append(quote(_key(key, quote, allow_nan)) + ": ")
        _pretty(item, out, quote, allow_nan, step, inner, markers)
    out.append(newline + brackets[1])
    del markers[id(value)]


def _enter(container: Any, markers: dict[int, Any]) -> None:
    if id(container) in markers:
        raise ValueError("Circular reference detected")
    markers[id(container)] = container
