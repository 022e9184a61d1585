"""The syntax error Go's encoding/json reports for a JSON text, in its words.

Go checks the whole input before decoding (``checkValid``), byte by byte, and names the first
byte that cannot continue the text and what it was looking for: ``invalid character 'x'
looking for beginning of object key string``, ``... after array element``, ``unexpected end of
JSON input``. cnitool prints these for a bad CAP_ARGS, libcni wraps them for a bad conflist, a
plugin for bad stdin; pycni's parser (the stdlib's) words them differently, so on a syntax
error :func:`syntax_error` scans the text again the way Go does. Only loaded on an error.
"""

from __future__ import annotations

__all__ = ["quote_char", "syntax_error"]

_WS = b" \t\r\n"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = b'"\\/bfnrtu'
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
END = "unexpected end of JSON input"


class _Invalid(Exception):
    def __init__(self, raw: bytes, pos: int, context: str) -> None:
        super().__init__(f"invalid character {quote_char(raw, pos)} {context}")


def quote_char(raw: bytes, pos: int) -> str:
    """The character at ``raw[pos]`` as Go's decoder names it: the UTF-8 rune there (or the
    lone byte, when it starts none) in single quotes, escaped as strconv.Quote escapes it."""
    lead = raw[pos]
    size = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    try:
        char = raw[pos : pos + size].decode("utf-8")
    except UnicodeDecodeError:
        return f"'\\x{lead:02x}'"
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    short = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    short |= {"\v": "\\v", "\\": "\\\\"}
    if char in short:
        return f"'{short[char]}'"
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return f"'\\x{code:02x}'"
    if char.isprintable():
        return f"'{char}'"
    return f"'\\u{code:04x}'" if code < 0x10000 else f"'\\U{code:08x}'"


class _Message(Exception):
    """An error worded otherwise than "invalid character …"."""


def syntax_error(data: bytes | str) -> str | None:
    """Go's message for the first syntax error in ``data``, or None when it has none."""
    raw = data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data
    try:
        end = _value(raw, _skip(raw, 0), "looking for beginning of value")
        end = _skip(raw, end)
        if end < len(raw):
            raise _Invalid(raw, end, "after top-level value")
    except (_Invalid, _Message) as err:
        return str(err)
    except IndexError:
        return END
    except RecursionError:  # nested deeper than the stack: the caller's own message stands
        return None
    return None


def _skip(raw: bytes, pos: int) -> int:
    while pos < len(raw) and raw[pos] in _WS:
        pos += 1
    return pos


def _value(raw: bytes, pos: int, context: str) -> int:
    """Scan one value starting at ``pos`` (whitespace skipped); the index after it."""
    char = raw[pos]
    if char == ord("{"):
        return _object(raw, pos + 1)
    if char == ord("["):
        return _array(raw, pos + 1)
    if char == ord('"'):
        return _string(raw, pos + 1)
    if char == ord("-") or char in _DIGITS:
        return _number(raw, pos)
    literal = _LITERALS.get(char)
    if literal is not None:
        for index in range(1, len(literal)):
            if raw[pos + index] != literal[index]:
                expected = chr(literal[index])
                raise _Invalid(
                    raw, pos + index, f"in literal {literal.decode()} (expecting '{expected}')"
                )
        return pos + len(literal)
    raise _Invalid(raw, pos, context)


def _object(raw: bytes, pos: int) -> int:
    pos = _skip(raw, pos)
    if raw[pos] == ord("}"):
        return pos + 1
    while True:
        if raw[pos] != ord('"'):
            raise _Invalid(raw, pos, "looking for beginning of object key string")
        pos = _skip(raw, _string(raw, pos + 1))
        if raw[pos] != ord(":"):
            raise _Invalid(raw, pos, "after object key")
        pos = _skip(raw, _value(raw, _skip(raw, pos + 1), "looking for beginning of value"))
        if raw[pos] == ord("}"):
            return pos + 1
        if raw[pos] != ord(","):
            raise _Invalid(raw, pos, "after object key:value pair")
        pos = _skip(raw, pos + 1)


def _array(raw: bytes, pos: int) -> int:
    pos = _skip(raw, pos)
    if raw[pos] == ord("]"):
        return pos + 1
    while True:
        pos = _skip(raw, _value(raw, pos, "looking for beginning of value"))
        if raw[pos] == ord("]"):
            return pos + 1
        if raw[pos] != ord(","):
            raise _Invalid(raw, pos, "after array element")
        pos = _skip(raw, pos + 1)


def _string(raw: bytes, pos: int) -> int:
    """A string body from ``pos`` (after its quote); the index after its closing quote. A bad
    escape is shown as the six bytes a \\u escape would take (or the two of another one)."""
    while True:
        char = raw[pos]
        if char == ord('"'):
            return pos + 1
        if char < 0x20:
            raise _Invalid(raw, pos, "in string")
        if char != ord("\\"):
            pos += 1
            continue
        escape = raw[pos + 1]
        if escape == ord("u"):
            for index in range(pos + 2, pos + 6):
                if raw[index] not in _HEX:  # the end of the input first: IndexError
                    raise _Message(_bad_escape(raw[pos : pos + 6]))
            pos += 6
        elif escape in _ESCAPES:
            pos += 2
        else:
            raise _Message(_bad_escape(raw[pos : pos + 2]))


def _bad_escape(sequence: bytes) -> str:
    return f"invalid escape sequence `{sequence.decode('utf-8', errors='replace')}` in string"


def _number(raw: bytes, pos: int) -> int:
    if raw[pos] == ord("-"):
        pos += 1
        if raw[pos] not in _DIGITS:
            raise _Invalid(raw, pos, "in numeric literal")
    if raw[pos] == ord("0"):
        pos += 1
    else:
        while pos < len(raw) and raw[pos] in _DIGITS:
            pos += 1
    if pos < len(raw) and raw[pos] == ord("."):
        pos += 1
        if raw[pos] not in _DIGITS:
            raise _Invalid(raw, pos, "in numeric literal")
        while pos < len(raw) and raw[pos] in _DIGITS:
            pos += 1
    if pos < len(raw) and raw[pos] in b"eE":
        pos += 1
        if raw[pos] in b"+-":
            pos += 1
        if raw[pos] not in _DIGITS:
            raise _Invalid(raw, pos, "in numeric literal")
        while pos < len(raw) and raw[pos] in _DIGITS:
            pos += 1
    return pos
