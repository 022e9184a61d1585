"""Reading JSON the way Go's encoding/json reads it, and the shape checks every config passes.

Its own module, without conf.py's configuration types: every plugin call parses its stdin
with these, and an in-process call pays for every module it imports.
"""

from __future__ import annotations

from pycni.spec import jsoncodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["go_unmarshal", "shape_problem"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def go_unmarshal(data: bytes | str) -> Any:
    """Parse JSON, refusing what Go refuses (NaN/Infinity) and naming errors like Go."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if text.strip() == "":
        raise ValueError("unexpected end of JSON input")
    try:
        return jsoncodec.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("exceeded max depth") from None
    except ValueError as err:
        if not jsoncodec.syntax_error(err):
            raise
        from pycni.spec.goscan import syntax_error

        message = syntax_error(data)
        if message is not None:
            raise ValueError(message) from None
        if err.pos >= len(text.rstrip()):
            raise ValueError("unexpected end of JSON input") from None
        raise ValueError(err.msg + f" (offset {err.pos})") from None


def shape_problem(value: Any, max_depth: int, source: bytes | None = None) -> str:
    """Why a decoded JSON value cannot be handled safely, or "" when it can.

    Refused: nesting deeper than ``max_depth`` (Go's decoder stops at 10000; every walk over
    a config here recurses, so the bound is far lower), and strings or keys holding a lone
    UTF-16 surrogate (``"\\ud800"``), which are not Unicode text and cannot be encoded.
    Iterative, so the check itself cannot overflow the stack. ``source``: the bytes
    ``jsoncodec.loads`` read ``value`` from, when the caller has them (see _plainly_safe).
    """
    if source is not None and _plainly_safe(source, max_depth):
        return ""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                return f"exceeded max depth (more than {max_depth} nested objects or arrays)"
            children = item.values() if isinstance(item, dict) else item
            if isinstance(item, dict) and not all(_is_text(k) for k in item):
                return "invalid Unicode in an object key (a lone surrogate)"
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str) and not _is_text(item):
            return "invalid Unicode in a string (a lone surrogate)"
    return ""


def _plainly_safe(source: bytes, max_depth: int) -> bool:
    """Whether JSON bytes cannot hold either problem, checked in C (1 µs where the walk
    takes 10 µs on a bridge config). ASCII without NUL is read as UTF-8 (no BOM, not
    UTF-16/32), so with no ``\\u`` escape every string is ASCII; and no more ``[``/``{``
    bytes than ``max_depth`` bounds the nesting. Anything else is walked."""
    return (
        isinstance(source, bytes)
        and source.isascii()
        and b"\x00" not in source
        and b"\\u" not in source
        and source.count(b"[") + source.count(b"{") <= max_depth
    )


def _is_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
