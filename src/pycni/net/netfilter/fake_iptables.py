"""FakeIptables and FakeConntrack: one namespace's iptables tables and conntrack table in
memory, for the rootless plugin-logic tests.

Held to the real transports (pycni.net.netfilter.iptables_seam) by the contract cases of
tests/netfilter/iptables_contract.py. What the fake keeps, per variant (legacy, nft) and
family (4, 6): the tables (filter, nat, mangle, raw, security) with their built-in chains,
user chains and rule lines. ``restore`` applies a ``--noflush`` script table by table at each
COMMIT, and a table with a failing line changes nothing; ``save`` answers the SavedTable
iptables-save's output parses to.

What it leaves out: a rule written by ``restore`` is kept as written, so callers write
iptables-save's canonical form (the plugins do: the contract checks the real tools print
each of their rule shapes back unchanged); only ``command`` (the reference's one process
per rule, ipMasq's iptables backend) puts the shapes it is given into that form. Matches and
targets are not checked beyond what names a chain: a jump to a chain that does not exist, and
DROP or REJECT in ``nat``, fail as they do in the real tools.

Nothing in pycni imports this module but the fake host (pycni.skel.fake_host).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

from pycni.net.netfilter.iptables_script import IptablesError, SavedTable, quote
from pycni.record import record

BUILTIN = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}
TARGETS = frozenset(
    {"ACCEPT", "DROP", "RETURN", "REJECT", "QUEUE", "LOG", "MASQUERADE", "DNAT", "SNAT"}
    | {"REDIRECT", "MARK", "CONNMARK", "CT", "NOTRACK", "TCPMSS", "CHECKSUM"}
)
FILTERING = frozenset({"DROP", "REJECT"})  # refused in nat: "not intended for filtering"
TOP = frozenset({"-s", "-d", "-i", "-o", "-p", "-m", "-j", "-g"})  # a rule's parts
ORDER = ("-s", "-d", "-i", "-o", "-p")  # how iptables-save orders the fixed parts


BUSY = ("Directory not empty", "Too many links")  # the kernel refuses a chain in use: status 4


def _refused(message: str) -> IptablesError:
    """One line the real tool would refuse (the message it gives); the caller says whose."""
    return IptablesError(message)


def _status(refusal: IptablesError) -> int:
    """The exit status ``iptables`` gives for a refusal: 4 for a chain in use, else 1."""
    return 4 if str(refusal).startswith(BUSY) else 1


class _Table:
    """One table: chains in creation order (built-ins first), each a list of rule texts (what
    follows ``-A CHAIN`` in iptables-save's output)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.chains: dict[str, list[str]] = {chain: [] for chain in BUILTIN[name]}
        self.used: set[str] = set()  # built-ins that ever held a rule (iptables-nft makes them)

    def copy(self) -> _Table:
        out = _Table(self.name)
        out.chains = {chain: list(rules) for chain, rules in self.chains.items()}
        out.used = set(self.used)
        return out

    def rules(self, chain: str) -> list[str]:
        found = self.chains.get(chain)
        if found is None:
            raise _refused(f"No chain/target/match by that name: {chain}")
        return found

    def builtin(self, chain: str) -> bool:
        return chain in BUILTIN[self.name]

    def referenced(self, chain: str) -> bool:
        jumps = (f"-j {chain}", f"-g {chain}")
        return any(
            rule.endswith(jump) or f"{jump} " in rule
            for rules in self.chains.values()
            for rule in rules
            for jump in jumps
        )

    def check_target(self, tokens: Sequence[str]) -> None:
        for at, token in enumerate(tokens[:-1]):
            if token in ("-j", "-g"):
                target = tokens[at + 1]
                if target in FILTERING and self.name == "nat":
                    raise _refused(f'The "nat" table is not intended for filtering: {target}')
                if target not in TARGETS and target not in self.chains:
                    raise _refused(f"Couldn't load target `{target}'")

    def put(self, chain: str, at: int | None, tokens: Sequence[str]) -> None:
        rules = self.rules(chain)
        self.check_target(tokens)
        text = " ".join(quote(t) for t in tokens)
        if at is None:
            rules.append(text)
        elif not 1 <= at <= len(rules) + 1:
            raise _refused(f"Index of insertion too big: {at}")
        else:
            rules.insert(at - 1, text)
        if self.builtin(chain):
            self.used.add(chain)

    def remove(self, chain: str, tokens: Sequence[str]) -> None:
        rules = self.rules(chain)
        if len(tokens) == 1 and tokens[0].isdigit():
            number = int(tokens[0])
            if not 1 <= number <= len(rules):
                raise _refused(f"Index of deletion too big: {number}")
            del rules[number - 1]
            return
        text = " ".join(quote(t) for t in tokens)
        if text not in rules:
            raise _refused("Bad rule (does a matching rule exist in that chain?)")
        rules.remove(text)

    def create(self, chain: str) -> None:
        if chain in self.chains:
            raise _refused("Chain already exists")
        self.chains[chain] = []

    def declare(self, chain: str) -> None:
        """``:CHAIN - [0:0]`` under --noflush: a user chain is created or flushed; a built-in
        keeps its rules (its policy is all the line sets)."""
        if self.builtin(chain):
            return
        self.chains[chain] = []

    def flush(self, chain: str | None) -> None:
        for name in [chain] if chain else list(self.chains):
            self.rules(name).clear()

    def delete(self, chain: str | None) -> None:
        for name in [chain] if chain else [c for c in self.chains if not self.builtin(c)]:
            if self.builtin(name):
                raise _refused(f"Can't delete built-in chain {name}")
            if self.rules(name):
                raise _refused(f"Directory not empty: {name}")
            if self.referenced(name):
                raise _refused(f"Too many links: {name}")
            del self.chains[name]


def split_line(line: str) -> list[str]:
    """The words of one restore line as iptables-restore splits them: blanks separate,
    double quotes group (a backslash escapes the next character inside them)."""
    words: list[str] = []
    word: list[str] = []
    quoted = started = False
    at = 0
    while at < len(line):
        c = line[at]
        if quoted and c == "\\" and at + 1 < len(line):
            word.append(line[at + 1])
            at += 2
            continue
        if c == '"':
            quoted, started = not quoted, True
        elif c in " \t" and not quoted:
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(c)
            started = True
        at += 1
    if quoted:
        raise _refused("unterminated quote")
    if started:
        words.append("".join(word))
    return words


def canonical(tokens: Sequence[str], family: int) -> list[str]:
    """A rule as iptables-save prints it, for the shapes ipMasq's backend gives ``iptables``:
    addresses with their prefix and host bits cleared, the fixed parts first (-s, -d, -i, -o,
    -p, each after its ``!``), then the matches in order, the target last."""
    fixed: dict[str, list[str]] = {}
    matches: list[str] = []
    target: list[str] = []
    part: list[str] = matches
    negate = False
    for at, token in enumerate(tokens):
        if token == "!" and at + 1 < len(tokens) and tokens[at + 1] in TOP:
            negate = True
            continue
        if token in ORDER:
            part = fixed.setdefault(token, [])
            part += ["!"] if negate else []
            part.append(token)
        elif token in ("-m",):
            part = matches
            part += ["!", token] if negate else [token]
        elif token in ("-j", "-g"):
            part = target
            part.append(token)
        elif part is not matches and len(part) >= 1 and part[-1] in ("-s", "-d"):
            part.append(_network(token, family))
        else:
            part.append(token)
        negate = False
    out: list[str] = []
    for key in ORDER:
        out += fixed.get(key, [])
    return out + matches + target


def _network(text: str, family: int) -> str:
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise _refused(f"host/network `{text}' not found") from None
    if net.version != family:
        raise _refused(f"host/network `{text}' not found")
    return str(net)


class FakeIptables:
    """One namespace's iptables: per (variant, family, table) a _Table, made on first use.

    ``variants`` are the installed variants (``available`` answers for them, the others
    fail as a missing binary does); ``default`` is the system's alternative (variant None,
    and ``command``). ``restores`` records every script applied, with family and variant;
    ``failures`` are the outcomes of the next restores, in turn (an IptablesError to raise
    before the script is read, as when the tool is killed or loses the xtables lock; None:
    applied)."""

    def __init__(self, variants: Sequence[str] = ("legacy", "nft"), default: str = "nft") -> None:
        self.variants = set(variants)
        self.default = default
        self.tables: dict[tuple[str, int, str], _Table] = {}
        self.restores: list[tuple[str, int, str]] = []
        self.failures: list[IptablesError | None] = []

    # ------------------------------------------------------------ the Iptables protocol

    def available(self, family: int = 4, variant: str | None = None) -> bool:
        return (variant or self.default) in self.variants

    def save(self, table: str, family: int = 4, variant: str | None = None) -> SavedTable:
        chosen = self._variant(variant, "save", family)
        try:
            found = self._table(chosen, family, table)
        except IptablesError as exc:
            raise IptablesError(f"{_tool(family, chosen, 'save')} failed (1): {exc}") from None
        out = SavedTable()
        for chain, rules in found.chains.items():
            out.chains.add(chain)
            if rules:
                out.rules[chain] = [f"-A {chain} {rule}" for rule in rules]
        return out

    def restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        chosen = self._variant(variant, "restore", family)
        self.restores.append((script, family, chosen))
        if self.failures:
            failure = self.failures.pop(0)
            if failure is not None:
                raise failure
        current: _Table | None = None
        for number, raw in enumerate(script.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                if line.startswith("*"):
                    if current is not None:
                        raise _refused("COMMIT expected")
                    current = self._table(chosen, family, line[1:]).copy()
                elif current is None:
                    raise _refused("no table given")
                elif line == "COMMIT":
                    self.tables[(chosen, family, current.name)] = current
                    current = None
                elif line.startswith(":"):
                    current.declare(line[1:].split()[0])
                else:
                    self._apply(current, split_line(line))
            except IptablesError as exc:
                raise IptablesError(
                    f"{_tool(family, chosen, 'restore')} failed (1): line {number} failed: {exc}"
                ) from None
        if current is not None:
            raise IptablesError(
                f"{_tool(family, chosen, 'restore')} failed (1): COMMIT expected at the end"
            )

    def command(self, args: Sequence[str], family: int = 4) -> tuple[int, str]:
        variant = self._variant(None, "", family)
        words = list(args)
        table = "filter"
        if words[:1] == ["-t"]:
            table, words = words[1], words[2:]
        try:
            if len(words) < 2:
                raise _refused("a command and a chain are needed")
            found = self._table(variant, family, table)
            op, chain, rest = words[0], words[1], words[2:]
            if op == "-S":
                found.rules(chain)
                return 0, ""
            if op == "-C":
                if " ".join(quote(t) for t in canonical(rest, family)) in found.rules(chain):
                    return 0, ""
                raise _refused("Bad rule (does a matching rule exist in that chain?)")
            work = found.copy()
            self._apply(work, [op, chain, *(canonical(rest, family) if rest else [])])
            self.tables[(variant, family, table)] = work
        except IptablesError as exc:
            return _status(exc), f"iptables: {exc}."
        return 0, ""

    def nft_chain_exists(self, table: str, chain: str, family: int = 4) -> bool:
        found = self.tables.get(("nft", family, table))
        if found is None or chain not in found.chains:
            return False
        return not found.builtin(chain) or chain in found.used

    def legacy_nat(self) -> bool:
        return any(v == "legacy" and t == "nat" for v, _f, t in self.tables)

    # ------------------------------------------------------------ for tests

    def picture(self) -> dict[str, dict[str, list[str]]]:
        """Every non-empty table as ``"variant ipv<family> table"``: its user chains and the
        chains holding rules, each with its rules as iptables-save prints them (what a test
        compares before and after)."""
        out: dict[str, dict[str, list[str]]] = {}
        for (variant, family, name), table in sorted(self.tables.items()):
            chains = {
                chain: [f"-A {chain} {rule}" for rule in rules]
                for chain, rules in table.chains.items()
                if rules or not table.builtin(chain)
            }
            if chains:
                out[f"{variant} ipv{family} {name}"] = chains
        return out

    # ------------------------------------------------------------ internals

    def _variant(self, variant: str | None, action: str, family: int) -> str:
        chosen = variant or self.default
        if chosen not in ("legacy", "nft"):
            raise ValueError(f"unknown iptables variant {variant!r} (use legacy or nft)")
        if chosen not in self.variants:
            raise IptablesError(f"{_tool(family, chosen, action)} is not installed")
        return chosen

    def _table(self, variant: str, family: int, name: str) -> _Table:
        found = self.tables.get((variant, family, name))
        if found is None:
            if name not in BUILTIN:
                raise _refused(f"can't initialize iptables table `{name}': Table does not exist")
            found = self.tables[(variant, family, name)] = _Table(name)
        return found

    @staticmethod
    def _apply(table: _Table, words: list[str]) -> None:
        op = words[0] if words else ""
        chain = words[1] if len(words) > 1 else None
        rest = words[2:]
        if op in ("-A", "-I", "-D", "-N", "-P") and chain is None:
            raise _refused(f"option {op} needs a chain")
        assert chain is not None or op in ("-F", "-X")
        if op == "-A":
            table.put(chain or "", None, rest)
        elif op == "-I":
            at = int(rest[0]) if rest and rest[0].isdigit() else 1
            table.put(chain or "", at, rest[1:] if rest and rest[0].isdigit() else rest)
        elif op == "-D":
            table.remove(chain or "", rest)
        elif op == "-N":
            table.create(chain or "")
        elif op == "-F":
            table.flush(chain)
        elif op == "-X":
            table.delete(chain)
        elif op == "-P":
            if not table.builtin(chain or ""):
                raise _refused(f"Bad built-in chain name {chain}")
        else:
            raise _refused(f"unknown command {op!r}")


def _tool(family: int, variant: str, action: str) -> str:
    base = "iptables" if family == 4 else "ip6tables"
    return f"{base}-{variant}-{action}" if action else f"{base}"


@record
class Entry:
    """One conntrack entry: protocol, original tuple, and the reply's source (the address
    that answers: the original destination unless DNAT rewrote it)."""

    protocol: str
    src: str
    dst: str
    sport: int
    dport: int
    reply_src: str = ""

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.src).version

    @property
    def answers(self) -> str:
        return self.reply_src or self.dst


PROTOCOLS = ("tcp", "udp", "sctp")


class FakeConntrack:
    """One namespace's conntrack entries; a test seeds them with ``add``. ``broken``, when
    set, is raised by every delete (a table that cannot be read)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.broken: Exception | None = None

    def add(
        self, protocol: str, src: str, dst: str, sport: int, dport: int, reply_src: str = ""
    ) -> None:
        self.entries.append(Entry(protocol, src, dst, sport, dport, reply_src))

    def delete_by_address(self, address: bytes, protocol: str) -> int:
        self._usable(protocol)
        ip = str(ipaddress.ip_address(address))
        return self._drop(
            lambda e: e.protocol == protocol and ip in (_same(e.src), _same(e.answers))
        )

    def delete_by_dst_port(self, ports: list[int], protocol: str, family: int) -> int:
        self._usable(protocol)
        wanted = set(ports)
        return self._drop(
            lambda e: e.protocol == protocol and e.family == family and e.dport in wanted
        )

    def picture(self) -> list[str]:
        """The entries, each as one sorted line (what a test compares before and after)."""
        return sorted(
            f"{e.protocol} src={e.src} dst={e.dst} sport={e.sport} dport={e.dport} "
            f"reply-src={e.answers}"
            for e in self.entries
        )

    def _usable(self, protocol: str) -> None:
        if self.broken is not None:
            raise self.broken
        if protocol not in PROTOCOLS:
            raise KeyError(protocol)

    def _drop(self, gone: Callable[[Entry], bool]) -> int:
        before = len(self.entries)
        self.entries = [e for e in self.entries if not gone(e)]
        return before - len(self.entries)


def _same(address: str) -> str:
    return str(ipaddress.ip_address(address))


TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_seam import Conntrack, Iptables

    _i: type[Iptables] = FakeIptables  # mypy proves each satisfies its Protocol
    _c: type[Conntrack] = FakeConntrack
