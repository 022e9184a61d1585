"""FakeNftables: one namespace's nftables ruleset in memory, for the rootless plugin-logic tests.

It answers every method of the Nftables Protocol (pycni.net.netfilter.nft_seam) as libnftables
and the kernel do for the objects plugins use: tables, regular and base chains, rules (handles,
comments, their jumps and set references), named sets and maps (plain, typed-data and verdict)
and their elements (kernel keys, data, comments). What it checks is what the kernel checks:
a missing table, chain, set, element or rule handle is ENOENT, ``create`` of an existing object
EEXIST, a set or chain still referenced (or, on a removal ``only_if_unused``, not empty) EBUSY,
an exclusive element add of a present key EEXIST, a map element's data changed EBUSY. Every
``apply``, ``apply_json`` and ``change_elements`` is one transaction: a failure anywhere leaves
the ruleset as it was. libnftables' errors are NftError with its wording ("Could not process
rule: No such file or directory"), netlink's NftnlError with the errno.

nft text (``apply``) is read by fake_nft_text.py, which knows the fixed scripts plugins send.
Packets are not evaluated: statements are kept as given (JSON) or as text, and listed back.
Held to the real transport (nft_seam.ThreadNftables) by tests/netfilter/nft_contract.py.
Nothing in pycni imports this module but the fake host (pycni.skel.fake_host).
"""

from __future__ import annotations

import copy
import errno
import ipaddress
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pycni.net.netfilter.nft_records import (
    PROTOCOLS,
    ChainRemoval,
    Element,
    ElementChange,
    NftError,
    NftnlError,
    Removal,
    Rule,
)
from pycni.spec.result import IPAddress

PRIORITIES = {"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50}
PRIORITIES["srcnat"] = 100
_PROTOCOL_NAMES = {number: name for name, number in PROTOCOLS.items()}
_WIDTHS = {"ipv4_addr": 4, "ipv6_addr": 16, "inet_proto": 1, "inet_service": 2, "mark": 4}


def _refused(code: int) -> NftnlError:
    """One command of a transaction failed with ``code`` (the whole transaction is undone):
    netlink's error; apply_json turns it into libnftables' message."""
    return NftnlError(code, os.strerror(code))


def _types(raw: Any) -> tuple[str, ...]:
    """A set's key or data type: JSON (a name or a list) or nft text (``a . b``)."""
    if isinstance(raw, list | tuple):
        return tuple(str(t) for t in raw)
    return tuple(part.strip() for part in str(raw).split(" . ") if part.strip())


def _field_bytes(kind: str, value: Any) -> bytes:
    if kind in ("ipv4_addr", "ipv6_addr"):
        address = ipaddress.ip_address(str(value).strip("[]"))
        if (address.version == 4) != (kind == "ipv4_addr"):
            raise _refused(errno.EINVAL)
        return address.packed
    if kind == "inet_proto":
        number = PROTOCOLS.get(str(value), value)
        return int(number).to_bytes(1, "big")
    if kind == "inet_service":
        return int(value).to_bytes(2, "big")
    if kind == "mark":
        return int(value).to_bytes(4, "big")
    raise _refused(errno.EINVAL)


def _field_value(kind: str, raw: bytes) -> Any:
    if kind in ("ipv4_addr", "ipv6_addr"):
        return str(ipaddress.ip_address(raw[: _WIDTHS[kind]]))
    if kind == "inet_proto":
        return _PROTOCOL_NAMES.get(raw[0], raw[0])
    return int.from_bytes(raw[: _WIDTHS.get(kind, len(raw))], "big")


def encode(types: tuple[str, ...], value: Any) -> bytes:
    """A JSON key or data value in the kernel's form: one field as it is, the fields of a
    concatenation each padded to 4 bytes (nft_records.concat_key)."""
    concat = isinstance(value, dict) and "concat" in value
    parts = list(value["concat"]) if concat else [value]
    if len(parts) != len(types):
        raise _refused(errno.EINVAL)
    if len(types) == 1:
        return _field_bytes(types[0], parts[0])
    out = b""
    for kind, part in zip(types, parts, strict=True):
        raw = _field_bytes(kind, part)
        out += raw + b"\0" * (-len(raw) % 4)
    return out


def decode(types: tuple[str, ...], raw: bytes) -> Any:
    """A kernel key or data value as nft -j lists it."""
    if len(types) == 1:
        return _field_value(types[0], raw)
    parts, pos = [], 0
    for kind in types:
        width = _WIDTHS.get(kind, 4)
        parts.append(_field_value(kind, raw[pos : pos + width]))
        pos += width + (-width % 4)
    return {"concat": parts}


class _Elem:
    __slots__ = ("comment", "data", "key", "verdict")

    def __init__(self, key: bytes, data: bytes, comment: str, verdict: dict[str, Any] | None):
        self.key, self.data, self.comment, self.verdict = key, data, comment, verdict

    def target(self) -> str:
        if self.verdict is None:
            return ""
        for kind in ("jump", "goto"):
            if kind in self.verdict:
                return str(self.verdict[kind]["target"])
        return ""


class _Set:
    __slots__ = ("data", "deleted", "elements", "flags", "handle", "is_map", "name", "types")

    def __init__(self, name: str, handle: int, types: tuple[str, ...], data: tuple[str, ...]):
        self.name, self.handle, self.types, self.data = name, handle, types, data
        self.is_map = bool(data)
        self.flags: list[str] = []
        self.elements: dict[bytes, _Elem] = {}
        # elements deleted by the transaction under way: the kernel counts them until its
        # commit, so a removal ``only_if_unused`` in the same batch still sees them (EBUSY)
        self.deleted = 0


class _Rule:
    __slots__ = ("comment", "expr", "handle")

    def __init__(self, handle: int, expr: list[Any], comment: str) -> None:
        self.handle, self.expr, self.comment = handle, expr, comment


class _Chain:
    __slots__ = ("base", "handle", "name", "rules")

    def __init__(self, name: str, handle: int, base: dict[str, Any] | None) -> None:
        self.name, self.handle, self.base = name, handle, base
        self.rules: list[_Rule] = []


class _Table:
    __slots__ = ("chains", "family", "handle", "name", "next_handle", "sets")

    def __init__(self, family: str, name: str, handle: int) -> None:
        self.family, self.name, self.handle = family, name, handle
        self.chains: dict[str, _Chain] = {}
        self.sets: dict[str, _Set] = {}
        self.next_handle = 1

    def new_handle(self) -> int:
        handle, self.next_handle = self.next_handle, self.next_handle + 1
        return handle


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for inner in value.values():
            yield from _walk(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _walk(inner)


def _targets(expr: list[Any]) -> list[str]:
    """The chains a rule jumps or goes to."""
    out = []
    for node in _walk(expr):
        if isinstance(node, dict):
            for kind in ("jump", "goto"):
                found = node.get(kind)
                if isinstance(found, dict) and "target" in found:
                    out.append(str(found["target"]))
    return out


def _set_refs(expr: list[Any]) -> list[str]:
    """The named sets a rule looks up (``@name``)."""
    return [n[1:] for n in _walk(expr) if isinstance(n, str) and n.startswith("@")]


class _Ruleset:
    """The tables of one namespace and the checks the kernel makes on them."""

    def __init__(self) -> None:
        self.tables: dict[tuple[str, str], _Table] = {}
        self.next_table = 1

    def table(self, family: str, name: str) -> _Table:
        found = self.tables.get((family, name))
        if found is None:
            raise _refused(errno.ENOENT)
        return found

    def chain(self, family: str, table: str, name: str) -> _Chain:
        found = self.table(family, table).chains.get(name)
        if found is None:
            raise _refused(errno.ENOENT)
        return found

    def set(self, family: str, table: str, name: str) -> _Set:
        found = self.table(family, table).sets.get(name)
        if found is None:
            raise _refused(errno.ENOENT)
        return found

    def chain_in_use(self, table: _Table, name: str) -> bool:
        rules = (r for c in table.chains.values() for r in c.rules)
        if any(name in _targets(r.expr) for r in rules):
            return True
        return any(e.target() == name for s in table.sets.values() for e in s.elements.values())

    def set_in_use(self, table: _Table, name: str) -> bool:
        return any(name in _set_refs(r.expr) for c in table.chains.values() for r in c.rules)

    # --- objects ------------------------------------------------------------------------------

    def add_table(self, family: str, name: str, create: bool) -> None:
        if (family, name) in self.tables:
            if create:
                raise _refused(errno.EEXIST)
            return
        self.tables[(family, name)] = _Table(family, name, self.next_table)
        self.next_table += 1

    def add_chain(self, raw: dict[str, Any], create: bool) -> None:
        table = self.table(raw["family"], raw["table"])
        if raw["name"] in table.chains:
            if create:
                raise _refused(errno.EEXIST)
            return
        base = None
        if raw.get("type"):
            prio = raw.get("prio", 0)
            base = {
                "type": raw["type"],
                "hook": raw["hook"],
                "prio": PRIORITIES.get(prio, prio) if isinstance(prio, str) else int(prio),
                "policy": raw.get("policy") or "accept",
            }
        table.chains[raw["name"]] = _Chain(raw["name"], table.new_handle(), base)

    def add_set(self, raw: dict[str, Any], create: bool, is_map: bool) -> None:
        table = self.table(raw["family"], raw["table"])
        if raw["name"] in table.sets:
            if create:
                raise _refused(errno.EEXIST)
            return
        data = _types(raw.get("map", "")) if is_map else ()
        if is_map and not data:
            raise _refused(errno.EINVAL)
        found = _Set(raw["name"], table.new_handle(), _types(raw["type"]), data)
        found.flags = list(raw.get("flags") or [])
        table.sets[raw["name"]] = found

    def add_rule(self, raw: dict[str, Any]) -> None:
        table = self.table(raw["family"], raw["table"])
        chain = self.chain(raw["family"], raw["table"], raw["chain"])
        expr = list(raw.get("expr") or [])
        if any(t not in table.chains for t in _targets(expr)):
            raise _refused(errno.ENOENT)
        if any(s not in table.sets for s in _set_refs(expr)):
            raise _refused(errno.ENOENT)
        chain.rules.append(_Rule(table.new_handle(), expr, str(raw.get("comment", ""))))

    def delete_rule(self, family: str, table: str, chain: str, handle: int) -> None:
        found = self.chain(family, table, chain)
        for index, rule in enumerate(found.rules):
            if rule.handle == handle:
                del found.rules[index]
                return
        raise _refused(errno.ENOENT)

    def flush_chain(self, family: str, table: str, chain: str) -> None:
        self.chain(family, table, chain).rules.clear()

    def delete_chain(self, family: str, table: str, name: str, only_if_unused: bool) -> None:
        found = self.table(family, table)
        chain = self.chain(family, table, name)
        if self.chain_in_use(found, name) or (only_if_unused and chain.rules):
            raise _refused(errno.EBUSY)
        del found.chains[name]

    def delete_set(self, family: str, table: str, name: str, only_if_unused: bool) -> None:
        found = self.table(family, table)
        named = self.set(family, table, name)
        held = len(named.elements) + named.deleted
        if self.set_in_use(found, name) or (only_if_unused and held):
            raise _refused(errno.EBUSY)
        del found.sets[name]

    def delete_table(self, family: str, name: str, only_if_unused: bool) -> None:
        found = self.table(family, name)
        if only_if_unused and (found.chains or found.sets):
            raise _refused(errno.EBUSY)
        del self.tables[(family, name)]

    # --- elements -----------------------------------------------------------------------------

    def add_element(self, named: _Set, new: _Elem, exclusive: bool) -> None:
        if named.is_map and not new.data and new.verdict is None:
            raise _refused(errno.EINVAL)
        if new.verdict is not None:
            table = next(t for t in self.tables.values() if named in t.sets.values())
            if new.target() and new.target() not in table.chains:
                raise _refused(errno.ENOENT)
        old = named.elements.get(new.key)
        if old is None:
            named.elements[new.key] = new
            return
        if exclusive:
            raise _refused(errno.EEXIST)
        if (old.data, old.verdict) != (new.data, new.verdict):
            raise _refused(errno.EBUSY)

    def delete_element(self, named: _Set, key: bytes) -> None:
        if named.elements.pop(key, None) is None:
            raise _refused(errno.ENOENT)
        named.deleted += 1


def _elem_from_json(named: _Set, raw: Any) -> _Elem:
    """One element of a JSON ``elem`` list (``val``, ``{"elem": …}``, or ``[key, data]``)."""
    data_raw: Any = None
    if isinstance(raw, list):
        raw, data_raw = raw
    comment = ""
    if isinstance(raw, dict) and "elem" in raw:
        comment = str(raw["elem"].get("comment", ""))
        raw = raw["elem"]["val"]
    key = encode(named.types, raw)
    if data_raw is None:
        return _Elem(key, b"", comment, None)
    if named.data == ("verdict",):
        if not isinstance(data_raw, dict):
            raise _refused(errno.EINVAL)
        return _Elem(key, b"", comment, copy.deepcopy(data_raw))
    return _Elem(key, encode(named.data, data_raw), comment, None)


def _message(code: int, command: str = "") -> NftError:
    text = f"Error: Could not process rule: {os.strerror(code)}"
    return NftError(f"{text}\n{command}" if command else text)


class FakeNftables:
    """One namespace's nftables ruleset, in memory (see the module docstring).

    ``usable`` is what ``available()`` answers (a node without nftables: False)."""

    def __init__(self, usable: bool = True) -> None:
        self.usable = usable
        self.ruleset = _Ruleset()

    # --- transactions -------------------------------------------------------------------------

    def _transaction(self) -> _Ruleset:
        work = copy.deepcopy(self.ruleset)
        for table in work.tables.values():
            for named in table.sets.values():
                named.deleted = 0
        return work

    def available(self) -> bool:
        return self.usable

    def apply(self, script: str) -> None:
        from pycni.net.netfilter.fake_nft_text import commands

        try:
            parsed = commands(script)
        except ValueError as exc:
            raise NftError(f"Error: syntax error, {exc}") from None
        self.apply_json(parsed)

    def apply_json(self, commands: list[dict[str, Any]]) -> None:
        if not commands:
            return
        work = self._transaction()
        for command in commands:
            try:
                _run(work, command)
            except NftnlError as exc:
                raise _message(exc.errno or errno.EINVAL, str(command)) from None
            except (KeyError, TypeError, ValueError) as exc:
                raise NftError(f"Error: invalid command {command!r}: {exc}") from None
        self.ruleset = work

    def query(self, command: str) -> list[dict[str, Any]]:
        words = command.split()
        try:
            return _list(self.ruleset, words)
        except NftnlError as exc:
            raise NftError(f"Error: {os.strerror(exc.errno or 0)}\n{command}") from None

    def table_exists(self, family: str, name: str) -> bool:
        return (family, name) in self.ruleset.tables

    # --- nf_tables netlink --------------------------------------------------------------------

    def chain_rules(self, family: str, table: str, chain: str) -> list[Rule]:
        try:
            found = self.ruleset.chain(family, table, chain)
        except NftnlError:
            return []
        return [Rule(r.handle, r.comment) for r in found.rules]

    def chain_exists(self, family: str, table: str, chain: str) -> bool:
        found = self.ruleset.tables.get((family, table))
        return found is not None and chain in found.chains

    def set_exists(self, family: str, table: str, set_name: str) -> bool:
        found = self.ruleset.tables.get((family, table))
        return found is not None and set_name in found.sets

    def _named(self, family: str, table: str, set_name: str) -> _Set | None:
        try:
            return self.ruleset.set(family, table, set_name)
        except NftnlError:
            return None

    def get_element(
        self, family: str, table: str, set_name: str, key: bytes, key_end: bytes = b""
    ) -> Element | None:
        named = self._named(family, table, set_name)
        found = None if named is None else named.elements.get(key)
        if found is None:
            return None
        return Element(found.key, b"", found.data, found.comment, found.target())

    def set_elements(self, family: str, table: str, set_name: str) -> list[Element] | None:
        named = self._named(family, table, set_name)
        if named is None:
            return None
        return [Element(e.key, b"", e.data, e.comment, e.target()) for e in named.elements.values()]

    def set_is_empty(self, family: str, table: str, set_name: str) -> bool | None:
        named = self._named(family, table, set_name)
        return None if named is None else not named.elements

    def element_comment(
        self, family: str, table: str, set_name: str, address: IPAddress
    ) -> str | None:
        found = self.get_element(family, table, set_name, address.packed)
        return None if found is None else found.comment

    def change_elements(
        self, family: str, table: str, changes: Sequence[ElementChange | ChainRemoval | Removal]
    ) -> None:
        if not changes:
            return
        work = self._transaction()
        try:
            for change in changes:
                _change(work, family, table, change)
        except NftnlError as exc:
            raise NftnlError(exc.errno, os.strerror(exc.errno or 0)) from None
        self.ruleset = work

    # --- views for tests ----------------------------------------------------------------------

    def picture(self) -> list[dict[str, Any]]:
        """The whole ruleset as plain data, for a test to compare (``nft -j list ruleset``;
        empty when there is none)."""
        return _list(self.ruleset, ["list", "ruleset"])


def _run(work: _Ruleset, command: dict[str, Any]) -> None:
    """One libnftables JSON command."""
    ((verb, body),) = command.items()
    ((kind, raw),) = body.items()
    create = verb == "create"
    if verb in ("add", "create"):
        if kind == "table":
            work.add_table(raw["family"], raw["name"], create)
        elif kind == "chain":
            work.add_chain(raw, create)
        elif kind in ("set", "map"):
            work.add_set(raw, create, kind == "map")
            for elem in raw.get("elem") or []:
                named = work.set(raw["family"], raw["table"], raw["name"])
                work.add_element(named, _elem_from_json(named, elem), False)
        elif kind == "rule":
            work.add_rule(raw)
        elif kind == "element":
            named = work.set(raw["family"], raw["table"], raw["name"])
            for elem in raw["elem"]:
                work.add_element(named, _elem_from_json(named, elem), create)
        else:
            raise ValueError(f"cannot {verb} a {kind}")
    elif verb == "delete":
        if kind == "table":
            work.delete_table(raw["family"], raw["name"], False)
        elif kind == "chain":
            work.delete_chain(raw["family"], raw["table"], raw["name"], False)
        elif kind in ("set", "map"):
            work.delete_set(raw["family"], raw["table"], raw["name"], False)
        elif kind == "rule":
            work.delete_rule(raw["family"], raw["table"], raw["chain"], int(raw["handle"]))
        elif kind == "element":
            named = work.set(raw["family"], raw["table"], raw["name"])
            for elem in raw["elem"]:
                work.delete_element(named, _elem_from_json(named, elem).key)
        else:
            raise ValueError(f"cannot delete a {kind}")
    elif verb == "flush" and kind == "chain":
        work.flush_chain(raw["family"], raw["table"], raw["name"])
    else:
        raise ValueError(f"unknown command {verb} {kind}")


def _change(
    work: _Ruleset, family: str, table: str, change: ElementChange | ChainRemoval | Removal
) -> None:
    """One message of an nf_tables netlink batch."""
    if isinstance(change, ChainRemoval):
        work.flush_chain(family, table, change.chain)
        work.delete_chain(family, table, change.chain, False)
    elif isinstance(change, Removal):
        if change.kind == "rule":
            work.delete_rule(family, table, change.name, change.handle)
        elif change.kind == "set":
            work.delete_set(family, table, change.name, change.only_if_unused)
        elif change.kind == "chain":
            work.delete_chain(family, table, change.name, change.only_if_unused)
        elif change.kind == "table":
            work.delete_table(family, table, change.only_if_unused)
        else:
            raise ValueError(f"unknown nf_tables object kind {change.kind!r}")
    else:
        named = work.set(family, table, change.set_name)
        if change.add:
            new = _Elem(change.key, change.data, change.comment[:254], None)
            work.add_element(named, new, change.exclusive)
        else:
            work.delete_element(named, change.key)


# --- listing ---------------------------------------------------------------------------------


def _table_json(t: _Table) -> dict[str, Any]:
    return {"table": {"family": t.family, "name": t.name, "handle": t.handle}}


def _set_json(t: _Table, s: _Set) -> dict[str, Any]:
    body: dict[str, Any] = {"family": t.family, "name": s.name, "table": t.name}
    body["type"] = s.types[0] if len(s.types) == 1 else list(s.types)
    body["handle"] = s.handle
    if s.is_map:
        body["map"] = " . ".join(s.data)
    if s.flags:
        body["flags"] = list(s.flags)
    elems = []
    for e in s.elements.values():
        key: Any = decode(s.types, e.key)
        if e.comment:
            key = {"elem": {"val": key, "comment": e.comment}}
        if e.verdict is not None:
            elems.append([key, copy.deepcopy(e.verdict)])
        elif s.is_map:
            elems.append([key, decode(s.data, e.data)])
        else:
            elems.append(key)
    if elems:
        body["elem"] = elems
    return {"map" if s.is_map else "set": body}


def _chain_json(t: _Table, c: _Chain) -> dict[str, Any]:
    body: dict[str, Any] = {"family": t.family, "table": t.name, "name": c.name}
    body["handle"] = c.handle
    if c.base is not None:
        body.update(c.base)
    return {"chain": body}


def _rules_json(t: _Table, c: _Chain) -> list[dict[str, Any]]:
    out = []
    for r in c.rules:
        body: dict[str, Any] = {"family": t.family, "table": t.name, "chain": c.name}
        body["handle"] = r.handle
        if r.comment:
            body["comment"] = r.comment
        body["expr"] = copy.deepcopy(r.expr)
        out.append({"rule": body})
    return out


def _whole(t: _Table) -> list[dict[str, Any]]:
    out = [_table_json(t)]
    out += [_set_json(t, s) for s in t.sets.values()]
    out += [_chain_json(t, c) for c in t.chains.values()]
    for c in t.chains.values():
        out += _rules_json(t, c)
    return out


def _list(work: _Ruleset, words: list[str]) -> list[dict[str, Any]]:
    """``list tables``, ``list ruleset`` and ``list table|chain|set|map <family> <table> …``."""
    if words == ["list", "tables"]:
        return [_table_json(t) for t in work.tables.values()]
    if words == ["list", "ruleset"]:
        return [item for t in work.tables.values() for item in _whole(t)]
    if len(words) < 4 or words[0] != "list":
        raise _refused(errno.EINVAL)
    kind, family, table = words[1:4]
    found = work.table(family, table)
    if kind == "table" and len(words) == 4:
        return _whole(found)
    if len(words) != 5:
        raise _refused(errno.EINVAL)
    name = words[4]
    if kind == "chain":
        chain = work.chain(family, table, name)
        return [_chain_json(found, chain), *_rules_json(found, chain)]
    if kind in ("set", "map"):
        named = found.sets.get(name)
        if named is None or named.is_map != (kind == "map"):
            raise _refused(errno.ENOENT)
        return [_set_json(found, named)]
    raise _refused(errno.EINVAL)


if TYPE_CHECKING:
    from pycni.net.netfilter.nft_seam import Nftables

    _check: type[Nftables] = FakeNftables  # mypy proves the fake satisfies the Protocol
