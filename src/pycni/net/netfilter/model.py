"""One model of the nftables objects pycni writes and reads: table, chain, rule, set/map,
element, and the few expressions and statements our rules use.

Every nftables feature (portmap's nftables backend, masquerading, the firewall plugin, inspect)
builds these objects and renders them for its transport:

- :func:`add`, :func:`create`, :func:`delete`, :func:`flush` give libnftables JSON commands
  (run by ``nft.apply_json``): every name, address and comment is a JSON string, never parsed
  as nft rule text, so no value can end a string or a statement. Values still come checked by
  rule_tokens.py / rule_matches.py, which keeps errors early and both backends' rules alike;
- :meth:`Element.change` and :func:`removal` give the nf_tables netlink changes nftnl.py sends
  in one batch, for the per-pod paths whose cost must not grow with the ruleset (libnftables
  loads its cache first: see nftnl.py);
- :func:`parse` reads ``nft -j list …`` output back into the same objects (for DEL, GC, CHECK
  and inspect), ignoring what it does not know (``Raw``).

What the model cannot give libnftables stays nft text in its caller, which says why
(portmap's scaffolding: libnftables 1.0.6 crashes on the JSON form of a ``dnat … map`` whose
data is a concatenation; the masquerade scaffolding: its JSON input drops table and chain
comments). The objects are small ``__slots__`` classes (immutable values; rules and sets are
filled in place): importing this module costs no json, typing, re or dataclasses, and no
record class to build. It is on the cold path (pycni.skel.cold_path: masquerading, portmap,
firewall), where a record class costs several times a plain one (docs/benchmarks.md, "Record
classes").
tests/unit/test_nft_model.py holds golden recordings of what every user sends.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    from pycni.net.netfilter import nftnl


class _Node:
    """A small immutable value: its fields are its ``__slots__``; equality, hash and repr go
    over them. Plain classes, not ``pycni.record``: see the module docstring."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()  # the fields in the order ``__init__`` takes them

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Node)
            and type(other) is type(self)
            and self._values() == other._values()
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self._values(), strict=True))
        return f"{type(self).__name__}({shown})"


class _Mutable(_Node):
    """A value whose fields may change (lists filled in place); not hashable."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]

    def __setattr__(self, name: str, value: object) -> None:
        _set(self, name, value)


_set = object.__setattr__  # how an immutable value's __init__ sets its fields


# --- expressions --------------------------------------------------------------------------------


class Payload(_Node):
    """A packet field: ``ip saddr``, ``tcp dport``."""

    _fields = ("protocol", "field")
    __slots__ = _fields
    protocol: str
    field: str

    def __init__(self, protocol: str, field: str) -> None:
        _set(self, "protocol", protocol)
        _set(self, "field", field)

    def json(self) -> Any:
        return {"payload": {"protocol": self.protocol, "field": self.field}}


class Meta(_Node):
    """``meta KEY`` (mark, nfproto, l4proto, iifname, …)."""

    _fields = ("key",)
    __slots__ = _fields
    key: str

    def __init__(self, key: str) -> None:
        _set(self, "key", key)

    def json(self) -> Any:
        return {"meta": {"key": self.key}}


class Ct(_Node):
    """``ct KEY`` (state)."""

    _fields = ("key",)
    __slots__ = _fields
    key: str

    def __init__(self, key: str) -> None:
        _set(self, "key", key)

    def json(self) -> Any:
        return {"ct": {"key": self.key}}


class Fib(_Node):
    """``fib FLAGS type``."""

    _fields = ("flags", "result")
    __slots__ = _fields
    flags: tuple[str, ...]
    result: str

    def __init__(self, flags: tuple[str, ...], result: str = "type") -> None:
        _set(self, "flags", flags)
        _set(self, "result", result)

    def json(self) -> Any:
        return {"fib": {"result": self.result, "flags": list(self.flags)}}


class Prefix(_Node):
    """An address prefix ``ADDR/LEN``."""

    _fields = ("addr", "length")
    __slots__ = _fields
    addr: str
    length: int

    def __init__(self, addr: str, length: int) -> None:
        _set(self, "addr", addr)
        _set(self, "length", length)

    def json(self) -> Any:
        return {"prefix": {"addr": self.addr, "len": self.length}}


class SetRef(_Node):
    """A named set or map, ``@NAME``."""

    _fields = ("name",)
    __slots__ = _fields
    name: str

    def __init__(self, name: str) -> None:
        _set(self, "name", name)

    def json(self) -> Any:
        return f"@{self.name}"


class Concat(_Node):
    """``a . b . c``: a set key or a map's data."""

    _fields = ("parts",)
    __slots__ = _fields
    parts: tuple[Value, ...]

    def __init__(self, parts: tuple[Value, ...]) -> None:
        _set(self, "parts", parts)

    def json(self) -> Any:
        return {"concat": [render(p) for p in self.parts]}


class BitOr(_Node):
    """``LEFT | RIGHT`` (``meta mark | 0x2000``)."""

    _fields = ("left", "right")
    __slots__ = _fields
    left: Value
    right: Value

    def __init__(self, left: Value, right: Value) -> None:
        _set(self, "left", left)
        _set(self, "right", right)

    def json(self) -> Any:
        return {"|": [render(self.left), render(self.right)]}


class Raw(_Node):
    """A libnftables JSON value or statement the model does not know (read back only)."""

    _fields = ("value",)
    __slots__ = _fields
    value: Any

    def __init__(self, value: Any) -> None:
        _set(self, "value", value)

    def json(self) -> Any:
        return self.value


if TYPE_CHECKING:
    Expression: TypeAlias = Payload | Meta | Ct | Fib | Prefix | SetRef | Concat | BitOr | Raw


def render(value: Value) -> Any:
    """A value as libnftables JSON."""
    if isinstance(value, str | int | list):
        return value
    return value.json()


# --- statements ---------------------------------------------------------------------------------


class Match(_Node):
    """``LEFT OP RIGHT`` (op ``==``, ``!=`` or ``in``)."""

    _fields = ("left", "right", "op")
    __slots__ = _fields
    left: Value
    right: Value
    op: str

    def __init__(self, left: Value, right: Value, op: str = "==") -> None:
        _set(self, "left", left)
        _set(self, "right", right)
        _set(self, "op", op)

    def json(self) -> Any:
        return {"match": {"op": self.op, "left": render(self.left), "right": render(self.right)}}


class Verdict(_Node):
    """``accept``, ``drop``, ``return``, or ``jump``/``goto TARGET``."""

    _fields = ("kind", "target")
    __slots__ = _fields
    kind: str
    target: str

    def __init__(self, kind: str, target: str = "") -> None:
        _set(self, "kind", kind)
        _set(self, "target", target)

    def json(self) -> Any:
        return {self.kind: {"target": self.target} if self.target else None}


class Dnat(_Node):
    """``dnat FAMILY to ADDR:PORT`` (port 0: unchanged)."""

    _fields = ("family", "addr", "port")
    __slots__ = _fields
    family: str
    addr: str
    port: int

    def __init__(self, family: str, addr: str, port: int = 0) -> None:
        _set(self, "family", family)
        _set(self, "addr", addr)
        _set(self, "port", port)

    def json(self) -> Any:
        to: dict[str, Any] = {"family": self.family} if self.family else {}
        to["addr"] = self.addr
        if self.port:
            to["port"] = self.port
        return {"dnat": to}


class Masquerade(_Node):
    __slots__ = ()

    def json(self) -> Any:
        return {"masquerade": None}


class Mangle(_Node):
    """``KEY set VALUE`` (``meta mark set meta mark | 0x2000``)."""

    _fields = ("key", "value")
    __slots__ = _fields
    key: Value
    value: Value

    def __init__(self, key: Value, value: Value) -> None:
        _set(self, "key", key)
        _set(self, "value", value)

    def json(self) -> Any:
        return {"mangle": {"key": render(self.key), "value": render(self.value)}}


if TYPE_CHECKING:
    Value: TypeAlias = Expression | Verdict | str | int | list[str]
    Statement: TypeAlias = Match | Verdict | Dnat | Masquerade | Mangle | Raw


# --- objects ------------------------------------------------------------------------------------


class Table(_Node):
    _fields = ("family", "name", "comment")
    __slots__ = _fields
    family: str
    name: str
    comment: str

    def __init__(self, family: str, name: str, comment: str = "") -> None:
        _set(self, "family", family)
        _set(self, "name", name)
        _set(self, "comment", comment)

    def json(self, full: bool = True) -> Any:
        out: dict[str, Any] = {"family": self.family, "name": self.name}
        if full and self.comment:
            out["comment"] = self.comment
        return out

    def ids(self) -> dict[str, Any]:
        """What names an object of this table: its family and table name."""
        return {"family": self.family, "table": self.name}


class Chain(_Node):
    """A regular chain, or a base chain (``type``, ``hook``, ``prio``, ``policy``)."""

    _fields = ("table", "name", "type", "hook", "prio", "policy", "comment")
    __slots__ = _fields
    table: Table
    name: str
    type: str
    hook: str
    prio: int | None
    policy: str
    comment: str

    def __init__(
        self,
        table: Table,
        name: str,
        type: str = "",
        hook: str = "",
        prio: int | None = None,
        policy: str = "",
        comment: str = "",
    ) -> None:
        _set(self, "table", table)
        _set(self, "name", name)
        _set(self, "type", type)
        _set(self, "hook", hook)
        _set(self, "prio", prio)
        _set(self, "policy", policy)
        _set(self, "comment", comment)

    kind = "chain"

    def json(self, full: bool = True) -> Any:
        out: dict[str, Any] = {**self.table.ids(), "name": self.name}
        if full:
            if self.type:
                out.update(type=self.type, hook=self.hook, prio=self.prio)
                if self.policy:
                    out["policy"] = self.policy
            if self.comment:
                out["comment"] = self.comment
        return out


class Rule(_Mutable):
    """A rule of ``chain``: its statements, comment and (read back, or to delete) handle."""

    _fields = ("table", "chain", "statements", "comment", "handle")
    __slots__ = _fields
    table: Table
    chain: str
    statements: list[Statement]
    comment: str
    handle: int

    def __init__(
        self,
        table: Table,
        chain: str,
        statements: list[Statement] | None = None,
        comment: str = "",
        handle: int = 0,
    ) -> None:
        _set(self, "table", table)
        _set(self, "chain", chain)
        _set(self, "statements", [] if statements is None else statements)
        _set(self, "comment", comment)
        _set(self, "handle", handle)

    kind = "rule"

    @property
    def expr(self) -> list[Any]:
        return [s.json() for s in self.statements]

    def json(self, full: bool = True) -> Any:
        out: dict[str, Any] = {**self.table.ids(), "chain": self.chain}
        if not full:
            out["handle"] = self.handle
            return out
        out["expr"] = self.expr
        if self.comment:
            out["comment"] = self.comment
        return out

    def jumps_to(self, target: str) -> bool:
        return any(
            isinstance(s, Verdict) and s.kind in ("jump", "goto") and s.target == target
            for s in self.statements
        )


class Element(_Node):
    """A set element (``key``), or a map element (``key : value``), with a comment."""

    _fields = ("key", "value", "comment")
    __slots__ = _fields
    key: Value | bytes  # bytes: the kernel's form (read over netlink, or ``in_kernel_form``)
    value: Value | bytes | None
    comment: str

    def __init__(
        self, key: Value | bytes, value: Value | bytes | None = None, comment: str = ""
    ) -> None:
        _set(self, "key", key)
        _set(self, "value", value)
        _set(self, "comment", comment)

    def json(self) -> Any:
        if isinstance(self.key, bytes) or isinstance(self.value, bytes):
            raise ValueError("an element in the kernel's form has no JSON form")
        key = render(self.key)
        if self.comment:
            key = {"elem": {"val": key, "comment": self.comment}}
        return key if self.value is None else [key, render(self.value)]

    def key_bytes(self) -> bytes:
        """The key in the kernel's form (nftnl.concat_key)."""
        return _kernel_value(self.key)

    def in_kernel_form(self) -> Element:
        """The same element with its key and data rendered for netlink once (a per-pod path
        that sends or looks up an element several times renders it once)."""
        data = None if self.value is None else self.value_bytes()
        return Element(self.key_bytes(), data, self.comment)

    def value_bytes(self) -> bytes:
        """A map element's data in the kernel's form (b"" for a set element)."""
        return b"" if self.value is None else _kernel_value(self.value)

    def change(
        self, set_name: str, add: bool, comment: str = "", exclusive: bool = False
    ) -> nftnl.ElementChange:
        """This element's add or delete as one nf_tables netlink change (the map data as a
        value, never a verdict); ``comment`` overrides the element's own."""
        from pycni.net.netfilter import nftnl  # only the netlink paths load it

        data = self.value_bytes() if add else b""
        text = (comment or self.comment) if add else ""
        return nftnl.ElementChange(add, set_name, self.key_bytes(), text, data, b"", exclusive)

    def target(self) -> str:
        """A verdict map element's jump or goto target ("" for anything else)."""
        if isinstance(self.value, Verdict) and self.value.kind in ("jump", "goto"):
            return self.value.target
        return ""


def _kernel_value(value: Value | bytes) -> bytes:
    """A key or map data in the kernel's form; ``bytes`` are that form already (an element
    read back over netlink)."""
    if isinstance(value, bytes):
        return value
    from pycni.net.netfilter import nftnl

    parts = value.parts if isinstance(value, Concat) else (value,)
    return nftnl.concat_key([str(p) for p in parts])


class Set(_Mutable):
    """A named set (``map`` empty) or map (``map``: the data type, ``verdict`` for a vmap).
    ``type`` is one type or, for a concatenation, several. ``listed_as_map``: read back from a
    ``map`` item (whose type may be left out)."""

    _fields = ("table", "name", "type", "map", "flags", "elements", "listed_as_map")
    __slots__ = _fields
    table: Table
    name: str
    type: str | tuple[str, ...]
    map: str | tuple[str, ...]
    flags: tuple[str, ...]
    elements: list[Element]
    listed_as_map: bool

    def __init__(
        self,
        table: Table,
        name: str,
        type: str | tuple[str, ...] = "",
        map: str | tuple[str, ...] = "",
        flags: tuple[str, ...] = (),
        elements: list[Element] | None = None,
        listed_as_map: bool = False,
    ) -> None:
        found = [] if elements is None else elements
        _set(self, "table", table)
        _set(self, "name", name)
        _set(self, "type", type)
        _set(self, "map", map)
        _set(self, "flags", flags)
        _set(self, "elements", found)
        _set(self, "listed_as_map", listed_as_map)

    @property
    def kind(self) -> str:
        return "map" if self.map or self.listed_as_map else "set"

    def json(self, full: bool = True) -> Any:
        out: dict[str, Any] = {**self.table.ids(), "name": self.name}
        if full:
            out["type"] = self.type if isinstance(self.type, str) else list(self.type)
            if self.map:
                out["map"] = self.map if isinstance(self.map, str) else list(self.map)
            if self.flags:
                out["flags"] = list(self.flags)
        return out

    def with_elements(self, elements: list[Element]) -> Any:
        """The ``element`` object libnftables adds or deletes: these elements of this set."""
        return {**self.table.ids(), "name": self.name, "elem": [e.json() for e in elements]}


if TYPE_CHECKING:
    Object: TypeAlias = Table | Chain | Rule | Set


# --- commands -----------------------------------------------------------------------------------


def _object(obj: Object, full: bool) -> Any:
    kind = "table" if isinstance(obj, Table) else obj.kind
    return {kind: obj.json(full)}


def add(obj: Object, elements: list[Element] | None = None) -> Any:
    """``add``: the object (or, with ``elements``, those elements of the set)."""
    if elements is not None:
        assert isinstance(obj, Set)
        return {"add": {"element": obj.with_elements(elements)}}
    return {"add": _object(obj, True)}


def create(obj: Object) -> Any:
    """``create``: as ``add``, but the transaction fails when the object exists."""
    return {"create": _object(obj, True)}


def delete(obj: Object, elements: list[Element] | None = None) -> Any:
    """``delete``: the object (a rule by its handle), or those elements of the set."""
    if elements is not None:
        assert isinstance(obj, Set)
        return {"delete": {"element": obj.with_elements(elements)}}
    return {"delete": _object(obj, False)}


def flush(obj: Chain) -> Any:
    """``flush chain``: every rule of the chain goes, the chain stays."""
    return {"flush": _object(obj, False)}


def removal(obj: Object, only_if_unused: bool = False) -> nftnl.Removal:
    """The nf_tables netlink removal of a rule (by handle), set, chain or table (nftnl.Removal:
    ``only_if_unused`` lets the kernel refuse an object still in use)."""
    from pycni.net.netfilter import nftnl

    if isinstance(obj, Rule):
        return nftnl.Removal("rule", obj.chain, obj.handle)
    if isinstance(obj, Table):
        return nftnl.Removal("table", obj.name, only_if_unused=only_if_unused)
    return nftnl.Removal(obj.kind, obj.name, only_if_unused=only_if_unused)


def chain_removal(chain: Chain) -> nftnl.ChainRemoval:
    """The nf_tables netlink removal of a regular chain with every rule in it."""
    from pycni.net.netfilter import nftnl

    return nftnl.ChainRemoval(chain.name)


# --- reading back -------------------------------------------------------------------------------


class Ruleset(_Mutable):
    """What a ``list`` command returned, as model objects (in listing order)."""

    _fields = ("tables", "chains", "rules", "sets")
    __slots__ = _fields
    tables: list[Table]
    chains: list[Chain]
    rules: list[Rule]
    sets: list[Set]

    def __init__(self) -> None:
        _set(self, "tables", [])
        _set(self, "chains", [])
        _set(self, "rules", [])
        _set(self, "sets", [])

    def set(self, name: str) -> Set | None:
        return next((s for s in self.sets if s.name == name), None)

    def rules_of(self, chain: str) -> list[Rule]:
        return [r for r in self.rules if r.chain == chain]


def _value(raw: Any) -> Value:
    if isinstance(raw, str) and raw.startswith("@"):
        return SetRef(raw[1:])
    if isinstance(raw, str | int):
        return raw
    if isinstance(raw, dict):
        if isinstance(raw.get("concat"), list):
            return Concat(tuple(_value(p) for p in raw["concat"]))
        if isinstance(raw.get("payload"), dict):
            found = raw["payload"]
            return Payload(str(found.get("protocol", "")), str(found.get("field", "")))
        if isinstance(raw.get("meta"), dict):
            return Meta(str(raw["meta"].get("key", "")))
        if isinstance(raw.get("prefix"), dict):
            found = raw["prefix"]
            return Prefix(str(found.get("addr", "")), int(found.get("len", 0)))
        for verdict in ("jump", "goto"):
            if isinstance(raw.get(verdict), dict):
                return Verdict(verdict, str(raw[verdict].get("target", "")))
    return Raw(raw)


def _statement(raw: Any) -> Statement:
    if isinstance(raw, dict):
        match = raw.get("match")
        if isinstance(match, dict):
            op = match.get("op")
            return Match(_value(match.get("left")), _value(match.get("right")), str(op or "=="))
        dnat = raw.get("dnat")
        if isinstance(dnat, dict) and isinstance(dnat.get("addr"), str):
            port = dnat.get("port")
            family = str(dnat.get("family", ""))
            return Dnat(family, dnat["addr"], port if isinstance(port, int) else 0)
        if "masquerade" in raw:
            return Masquerade()
        for kind in ("accept", "drop", "return"):
            if kind in raw:
                return Verdict(kind)
        for kind in ("jump", "goto"):
            if isinstance(raw.get(kind), dict):
                return Verdict(kind, str(raw[kind].get("target", "")))
    return Raw(raw)


def _element(raw: Any, is_map: bool) -> Element | None:
    value: Value | None = None
    if is_map:
        if not isinstance(raw, list) or len(raw) != 2:
            return None
        raw, value = raw[0], _value(raw[1])
    comment = ""
    if isinstance(raw, dict) and isinstance(raw.get("elem"), dict):
        comment = str(raw["elem"].get("comment", ""))
        raw = raw["elem"].get("val")
    return Element(_value(raw), value, comment)


def parse(items: list[dict[str, Any]]) -> Ruleset:
    """The ``nftables`` array of a ``nft -j list …`` answer as model objects."""
    out = Ruleset()
    for item in items:
        for kind, raw in item.items():
            if not isinstance(raw, dict):
                continue
            table = Table(str(raw.get("family", "")), str(raw.get("table", "")))
            if kind == "table":
                name = str(raw.get("name", ""))
                out.tables.append(Table(table.family, name, str(raw.get("comment", ""))))
            elif kind == "chain":
                prio = raw.get("prio")
                out.chains.append(
                    Chain(
                        table,
                        str(raw.get("name", "")),
                        str(raw.get("type", "")),
                        str(raw.get("hook", "")),
                        prio if isinstance(prio, int) else None,
                        str(raw.get("policy", "")),
                        str(raw.get("comment", "")),
                    )
                )
            elif kind == "rule":
                expr = raw.get("expr")
                out.rules.append(
                    Rule(
                        table,
                        str(raw.get("chain", "")),
                        [_statement(e) for e in expr] if isinstance(expr, list) else [],
                        str(raw.get("comment", "")),
                        _handle(raw.get("handle")),
                    )
                )
            elif kind in ("set", "map"):
                is_map = kind == "map"
                found = [_element(e, is_map) for e in raw.get("elem") or []]
                kept = [e for e in found if e is not None]
                out.sets.append(
                    Set(
                        table,
                        str(raw.get("name", "")),
                        _type(raw.get("type")),
                        _type(raw.get("map")) if is_map else "",
                        tuple(str(f) for f in raw.get("flags") or []),
                        kept,
                        is_map,
                    )
                )
    return out


def _handle(raw: Any) -> int:
    return int(raw) if isinstance(raw, int | str) and str(raw).isdigit() else 0


def _type(raw: Any) -> str | tuple[str, ...]:
    if isinstance(raw, list):
        return tuple(str(t) for t in raw)
    return "" if raw is None else str(raw)
