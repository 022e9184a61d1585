"""The allowed grammar of extra match conditions (portmap ``conditionsV4`` / ``conditionsV6``).

The reference plugin appends each condition string to its rule, as one iptables argv element or
as nft rule text, so a condition can be any match at all - or, in the nft case, a new statement.
pycni parses each list into a small, documented set of matches and renders the parsed form for
either backend; anything else is refused with code 7 naming ``conditionsV4[i]``.

iptables syntax (the list starts with ``-`` or ``!``), one token per list element::

    [!] -s|--source|--src        ADDR[/LEN]
    [!] -d|--destination|--dst   ADDR[/LEN]
    [!] -i|--in-interface        IFNAME[+]
    [!] -o|--out-interface       IFNAME[+]
    -m addrtype  ([!] --src-type TYPE | [!] --dst-type TYPE)...

nftables syntax (anything else); list elements are joined with spaces, as the reference does::

    ip|ip6 saddr|daddr  [==|!=]  ADDR[/LEN]
    [meta] iifname|oifname  [==|!=]  IFNAME[*]      (or "IFNAME[*]" in double quotes)
    fib saddr|daddr type  [==|!=]  TYPE

TYPE is one of unspec, unicast, local, broadcast, anycast, multicast, blackhole, unreachable,
prohibit (upper case in iptables syntax). Addresses must be of the list's family
(``conditionsV4``: IPv4). docs/security.md has the same grammar for users.
"""

from __future__ import annotations

from collections.abc import Sequence

from pycni.net.netfilter import model, rule_tokens
from pycni.net.netfilter.rule_tokens import refuse
from pycni.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ADDR_TYPES = (
    "unspec",
    "unicast",
    "local",
    "broadcast",
    "anycast",
    "multicast",
    "blackhole",
    "unreachable",
    "prohibit",
)
KINDS = ("saddr", "daddr", "iifname", "oifname", "src-type", "dst-type")
MAX_CONDITIONS = 32

_IPT_OPTIONS = {
    "-s": "saddr",
    "--source": "saddr",
    "--src": "saddr",
    "-d": "daddr",
    "--destination": "daddr",
    "--dst": "daddr",
    "-i": "iifname",
    "--in-interface": "iifname",
    "-o": "oifname",
    "--out-interface": "oifname",
}
_IPT_ADDRTYPE = {"--src-type": "src-type", "--dst-type": "dst-type"}

_IPT_GRAMMAR = (
    "allowed: [!] -s|-d ADDR[/LEN], [!] -i|-o IFNAME[+], "
    "-m addrtype [!] --src-type|--dst-type TYPE (see docs/security.md)"
)
_NFT_GRAMMAR = (
    "allowed: ip|ip6 saddr|daddr [!=] ADDR[/LEN], iifname|oifname [!=] IFNAME[*], "
    "fib saddr|daddr type [!=] TYPE (see docs/security.md)"
)


@record(frozen=True)
class Match:
    """One parsed condition: ``kind`` of KINDS, a canonical ``value``, and negation.

    Addresses are canonical prefixes (``10.0.0.0/8``), interface names end in ``*`` when they
    are a prefix match, address types are lower case."""

    kind: str
    value: str
    negate: bool = False

    # --- iptables ---------------------------------------------------------------------------

    def iptables_args(self) -> list[str]:
        neg = ["!"] if self.negate else []
        if self.kind in ("saddr", "daddr"):
            return [*neg, "-s" if self.kind == "saddr" else "-d", self.value]
        if self.kind in ("iifname", "oifname"):
            name = self.value[:-1] + "+" if self.value.endswith("*") else self.value
            return [*neg, "-i" if self.kind == "iifname" else "-o", name]
        option = "--src-type" if self.kind == "src-type" else "--dst-type"
        return ["-m", "addrtype", *neg, option, self.value.upper()]

    # --- nftables (statements of the nftables model) ---------------------------------------

    def nft_statement(self, family: int) -> model.Match:
        op = "!=" if self.negate else "=="
        left: model.Value
        right: model.Value = self.value
        if self.kind in ("saddr", "daddr"):
            left = model.Payload("ip" if family == 4 else "ip6", self.kind)
            addr, _, length = self.value.partition("/")
            full = 32 if family == 4 else 128
            right = addr if int(length) == full else model.Prefix(addr, int(length))
        elif self.kind in ("iifname", "oifname"):
            left = model.Meta(self.kind)
        else:
            left = model.Fib(("saddr" if self.kind == "src-type" else "daddr",))
        return model.Match(left, right, op)

    def nft_expr(self, family: int) -> dict[str, Any]:
        """The statement as libnftables JSON."""
        out: dict[str, Any] = self.nft_statement(family).json()
        return out


def iptables_args(matches: Sequence[Match]) -> list[str]:
    return [arg for m in matches for arg in m.iptables_args()]


def nft_statements(matches: Sequence[Match], family: int) -> list[model.Match]:
    return [m.nft_statement(family) for m in matches]


def nft_exprs(matches: Sequence[Match], family: int) -> list[dict[str, Any]]:
    return [m.nft_expr(family) for m in matches]


def syntax_of(tokens: Sequence[str]) -> str:
    """The reference's rule: a first token starting with ``-`` or ``!`` means iptables."""
    if not tokens:
        return ""
    return "iptables" if tokens[0].startswith(("-", "!")) else "nftables"


def parse(field: str, raw: object, family: int) -> tuple[list[Match], str]:
    """Parse a conditions list of ``family``; returns (matches, syntax)."""
    if raw is None:
        return [], ""
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise refuse(field, "must be a list of strings", _IPT_GRAMMAR)
    if len(raw) > MAX_CONDITIONS * 4:
        raise refuse(field, f"has {len(raw)} elements", f"use at most {MAX_CONDITIONS * 4}")
    for index, token in enumerate(raw):
        bad = rule_tokens.control_character(token)
        if bad is not None:
            raise refuse(
                f"{field}[{index}]",
                f'contains {bad} in "{rule_tokens.shown(token)}"',
                "conditions are printable tokens",
            )
    syntax = syntax_of(raw)
    if syntax == "iptables":
        return _Iptables(field, raw, family).parse(), syntax
    if syntax == "nftables":
        return _Nft(field, raw, family).parse(), syntax
    return [], ""


class _Iptables:
    """One list element per argv token, as the reference passes them to iptables."""

    def __init__(self, field: str, tokens: Sequence[str], family: int) -> None:
        self.field, self.tokens, self.family, self.at = field, list(tokens), family, 0

    def _where(self, index: int | None = None) -> str:
        return f"{self.field}[{self.at if index is None else index}]"

    def _fail(self, problem: str, index: int | None = None) -> Exception:
        return refuse(self._where(index), problem, _IPT_GRAMMAR)

    def _next(self, what: str) -> str:
        if self.at >= len(self.tokens):
            raise self._fail(f"ends where {what} was expected", len(self.tokens) - 1)
        token = self.tokens[self.at]
        self.at += 1
        return token

    def parse(self) -> list[Match]:
        out: list[Match] = []
        while self.at < len(self.tokens):
            negate = self.tokens[self.at] == "!"
            if negate:
                self.at += 1
            start = self.at
            option = self._next("an option")
            if option in _IPT_OPTIONS:
                out.append(self._value(_IPT_OPTIONS[option], negate))
            elif option == "-m" and not negate:
                module = self._next("a match module")
                if module != "addrtype":
                    problem = f'match module "{rule_tokens.shown(module)}" is not allowed'
                    raise self._fail(problem, self.at - 1)
                out += self._addrtype(start)
            else:
                raise self._fail(f'"{rule_tokens.shown(option)}" is not allowed here', start)
            if len(out) > MAX_CONDITIONS:
                raise self._fail(f"more than {MAX_CONDITIONS} matches")
        return out

    def _value(self, kind: str, negate: bool) -> Match:
        index = self.at
        value = self._next("a value")
        where = self._where(index)
        if kind in ("saddr", "daddr"):
            net = rule_tokens.network(where, value, self.family)
            return Match(kind, str(net), negate)
        name = rule_tokens.interface_name(where, value, wildcard="+")
        return Match(kind, name[:-1] + "*" if name.endswith("+") else name, negate)

    def _addrtype(self, start: int) -> list[Match]:
        out: list[Match] = []
        while self.at < len(self.tokens):
            negate = self.tokens[self.at] == "!"
            ahead = self.at + 1 if negate else self.at
            option = self.tokens[ahead] if ahead < len(self.tokens) else ""
            if option not in _IPT_ADDRTYPE:
                break
            self.at += 2 if negate else 1
            index = self.at
            value = self._next("an address type")
            kind = _IPT_ADDRTYPE[option]
            if value.lower() not in ADDR_TYPES or value != value.upper():
                raise refuse(
                    self._where(index),
                    f'"{rule_tokens.shown(value)}" is not an address type',
                    "use one of " + ", ".join(t.upper() for t in ADDR_TYPES),
                )
            out.append(Match(kind, value.lower(), negate))
        if not out:
            raise self._fail("-m addrtype needs --src-type or --dst-type", start)
        return out


class _Nft:
    """Elements joined with spaces (as the reference builds the rule), then read as words."""

    def __init__(self, field: str, tokens: Sequence[str], family: int) -> None:
        self.field, self.family = field, family
        self.words: list[tuple[int, str]] = []
        for index, token in enumerate(tokens):
            self.words += [(index, part) for part in token.split(" ") if part]
        self.at = 0

    def _fail(self, problem: str, index: int | None = None) -> Exception:
        if index is None:
            index = self.words[min(self.at, len(self.words) - 1)][0] if self.words else 0
        return refuse(f"{self.field}[{index}]", problem, _NFT_GRAMMAR)

    def _next(self, what: str) -> tuple[int, str]:
        if self.at >= len(self.words):
            raise self._fail(f"ends where {what} was expected")
        word = self.words[self.at]
        self.at += 1
        return word

    def _expect(self, allowed: tuple[str, ...], what: str) -> str:
        index, word = self._next(what)
        if word not in allowed:
            raise self._fail(f'"{rule_tokens.shown(word)}" is not {what}', index)
        return word

    def _op(self) -> bool:
        if self.at < len(self.words) and self.words[self.at][1] in ("==", "!="):
            return self._next("an operator")[1] == "!="
        return False

    def parse(self) -> list[Match]:
        out: list[Match] = []
        while self.at < len(self.words):
            index, word = self._next("a match")
            if word == "meta":
                index, word = self._next("iifname or oifname")
                if word not in ("iifname", "oifname"):
                    raise self._fail(f'"meta {rule_tokens.shown(word)}" is not allowed', index)
            if word in ("ip", "ip6"):
                want = "ip" if self.family == 4 else "ip6"
                if word != want:
                    raise self._fail(f'"{word}" does not match IPv{self.family}', index)
                kind = self._expect(("saddr", "daddr"), "saddr or daddr")
                negate = self._op()
                vi, value = self._next("an address")
                net = rule_tokens.network(f"{self.field}[{vi}]", value, self.family)
                out.append(Match(kind, str(net), negate))
            elif word in ("iifname", "oifname"):
                negate = self._op()
                vi, value = self._next("an interface name")
                if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
                    value = value[1:-1]
                name = rule_tokens.interface_name(f"{self.field}[{vi}]", value, wildcard="*")
                out.append(Match(word, name, negate))
            elif word == "fib":
                which = self._expect(("saddr", "daddr"), "saddr or daddr")
                self._expect(("type",), '"type"')
                negate = self._op()
                vi, value = self._next("an address type")
                if value not in ADDR_TYPES:
                    raise refuse(
                        f"{self.field}[{vi}]",
                        f'"{rule_tokens.shown(value)}" is not an address type',
                        "use one of " + ", ".join(ADDR_TYPES),
                    )
                kind = "src-type" if which == "saddr" else "dst-type"
                out.append(Match(kind, value, negate))
            else:
                raise self._fail(f'"{rule_tokens.shown(word)}" is not allowed', index)
            if len(out) > MAX_CONDITIONS:
                raise self._fail(f"more than {MAX_CONDITIONS} matches")
        return out
