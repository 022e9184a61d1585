"""The nft text FakeNftables reads: the fixed scripts plugins send through ``apply``, as the
libnftables JSON commands they stand for (fake_nft.py runs those).

Only the forms those scripts use: ``add|create table`` (with a comment), ``add|create chain``
(regular, or base with ``type … hook … priority … ; policy … ;``, or with a comment), ``add set``
and ``add map`` (``{ type a . b [: c] ; }``), ``flush chain``, ``delete rule … handle N``,
``delete chain|set|table`` and ``add rule`` (whose statements are kept as their words, with the
jumps, gotos and ``@set`` lookups the kernel checks, and the comment). Anything else is a
ValueError, so a script a plugin starts to send is noticed by its test, not skipped.
"""

from __future__ import annotations

from typing import Any

_VERDICTS = ("accept", "drop", "return", "masquerade")


def _tokens(line: str) -> list[str]:
    """Words, ``"quoted strings"`` (kept with their quotes), braces and semicolons."""
    out: list[str] = []
    pos = 0
    while pos < len(line):
        char = line[pos]
        if char.isspace():
            pos += 1
        elif char == '"':
            end = line.find('"', pos + 1)
            if end < 0:
                raise ValueError(f"unterminated string in {line!r}")
            out.append(line[pos : end + 1])
            pos = end + 1
        elif char in "{};":
            out.append(char)
            pos += 1
        else:
            end = pos
            while end < len(line) and not line[end].isspace() and line[end] not in '{};"':
                end += 1
            out.append(line[pos:end])
            pos = end
    return out


def _options(words: list[str]) -> dict[str, str]:
    """``{ key value ; key value ; }`` (a ``type`` runs to its ``;``, a map's ``: data``)."""
    if not words:
        return {}
    if words[0] != "{" or words[-1] != "}":
        raise ValueError(f"expected {{ … }}, got {' '.join(words)!r}")
    out: dict[str, str] = {}
    clause: list[str] = []
    for word in [*words[1:-1], ";"]:
        if word != ";":
            clause.append(word)
            continue
        if not clause:
            continue
        if clause[0] == "type" and "hook" in clause:  # a base chain: type T hook H priority P
            pairs = dict(zip(clause[::2], clause[1::2], strict=False))
            out.update(type=pairs["type"], hook=pairs["hook"], priority=pairs["priority"])
        elif clause[0] == "type":
            key, _, data = " ".join(clause[1:]).partition(" : ")
            out["type"] = key
            if data:
                out["map"] = data
        elif len(clause) == 2:
            out[clause[0]] = clause[1].strip('"')
        else:
            raise ValueError(f"unknown option {' '.join(clause)!r}")
        clause = []
    return out


def _priority(raw: str) -> int | str:
    return int(raw) if raw.lstrip("-").isdigit() else raw


def _rule(ids: dict[str, Any], words: list[str]) -> dict[str, Any]:
    comment = ""
    if len(words) >= 2 and words[-2] == "comment" and words[-1].startswith('"'):
        comment, words = words[-1].strip('"'), words[:-2]
    expr: list[Any] = []
    plain: list[str] = []
    pos = 0
    while pos < len(words):
        word = words[pos]
        if word in ("jump", "goto") and pos + 1 < len(words):
            expr.append({word: {"target": words[pos + 1]}})
            pos += 2
            continue
        if word in _VERDICTS and pos == len(words) - 1:
            expr.append({word: None})
        else:
            plain.append(word)
        pos += 1
    if plain:
        expr.insert(0, {"words": plain})  # kept as said; @set words are the lookups
    body = {**ids, "expr": expr}
    if comment:
        body["comment"] = comment
    return {"add": {"rule": body}}


def _command(words: list[str]) -> dict[str, Any]:
    if len(words) < 4:
        raise ValueError(f"not a command: {' '.join(words)!r}")
    verb, kind, family, table = words[:4]
    if kind == "table":
        opts = _options(words[4:])
        body: dict[str, Any] = {"family": family, "name": table}
        if "comment" in opts:
            body["comment"] = opts["comment"]
        if verb in ("add", "create", "delete"):
            return {verb: {"table": body}}
        raise ValueError(f"cannot {verb} a table")
    name, rest = words[4], words[5:]
    ids = {"family": family, "table": table}
    if kind == "chain":
        body = {**ids, "name": name}
        if verb == "flush" or verb == "delete":
            return {verb: {"chain": body}}
        opts = _options(rest)
        if "type" in opts:
            body.update(type=opts["type"], hook=opts["hook"], prio=_priority(opts["priority"]))
            body["policy"] = opts.get("policy", "accept")
        if "comment" in opts:
            body["comment"] = opts["comment"]
        return {verb: {"chain": body}}
    if kind in ("set", "map"):
        body = {**ids, "name": name}
        if verb == "delete":
            return {verb: {kind: body}}
        opts = _options(rest)
        body["type"] = opts["type"]
        if kind == "map":
            body["map"] = opts["map"]
        return {verb: {kind: body}}
    if kind == "rule":
        if verb == "delete" and len(rest) == 2 and rest[0] == "handle":
            return {"delete": {"rule": {**ids, "chain": name, "handle": int(rest[1])}}}
        if verb == "add":
            return _rule({**ids, "chain": name}, rest)
    raise ValueError(f"unknown command {' '.join(words[:2])!r}")


def commands(script: str) -> list[dict[str, Any]]:
    """The JSON commands of an nft script, one per non-empty line."""
    return [_command(_tokens(line)) for line in script.splitlines() if line.strip()]
