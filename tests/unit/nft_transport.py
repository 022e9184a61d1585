"""A recording netfilter (pycni.net.netfilter.seam.Netfilter: libnftables, nf_tables netlink,
iptables save/restore and commands, conntrack), for the golden tests of test_nft_model.py.

Each scenario runs a backend verb with ``Recorder.nf`` (or a plugin on ``Recorder.host()``,
whose node netfilter it is) against scripted kernel answers and records, in order, everything
the code reads and writes: nft text scripts, libnftables JSON commands (parsed, so key order
does not matter), the nf_tables netlink batch messages as bytes, iptables restore scripts and
iptables argv. The goldens were captured from the code before the nftables model existed, so
equal recordings prove the migration changed nothing a kernel could see. Nothing here patches
a module: the code under test is handed this netfilter, as plugins are by ``req.host``.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Sequence
from typing import Any

from pycni.net.netfilter import iptables, nft_records
from pycni.net.netfilter.nft_records import NftError
from pycni.net.netfilter.seam import Netfilter
from pycni.skel.fake_host import FakeHost
from pycni.spec import jsoncodec
from pycni.spec.result import IPAddress

Answer = Any  # a scripted answer: a value, or an exception to raise

_READ_DEFAULTS: dict[str, Any] = {
    "chain_rules": [],
    "chain_exists": False,
    "set_exists": True,
    "set_elements": None,
    "set_is_empty": None,
}


class Recorder:
    """Scripted answers in, recorded calls out."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.answers: dict[tuple[str, str], Answer] = {}
        self.failures: dict[str, list[BaseException | None]] = {}
        self.exec_rc: dict[str, int] = {}
        self._host: FakeHost | None = None
        self.nf = Netfilter(
            RecordingNftables(self), RecordingIptables(self), RecordingConntrack(self)
        )

    def host(self) -> FakeHost:
        """The fake host whose node namespace has this netfilter (a plugin run through it); one
        per recorder, so the state files one call writes are there for the next."""
        if self._host is None:
            self._host = FakeHost()
        self._host.netfilters[self._host.node_ns.fd] = self.nf
        return self._host

    # --- scripting ----------------------------------------------------------------------

    def answer(self, what: str, key: str, value: Answer) -> None:
        self.answers[(what, key)] = value

    def fail_next(self, what: str, *outcomes: BaseException | None) -> None:
        """The next calls of a write (``nft.json``, ``nft.text``, ``nftnl.batch``,
        ``iptables.restore``) fail with these exceptions (None: succeeds)."""
        self.failures.setdefault(what, []).extend(outcomes)

    def read(self, what: str, key: str, default: Answer, *record: Any) -> Any:
        self.calls.append([what, *record])
        value = self.answers.get((what, key), default)
        if isinstance(value, BaseException):
            raise value
        return value

    def write(self, what: str, *record: Any) -> None:
        self.calls.append([what, *record])
        pending = self.failures.get(what)
        if pending:
            outcome = pending.pop(0)
            if outcome is not None:
                raise outcome

    def exec(self, argv: list[str]) -> int:
        self.calls.append(["exec", list(argv)])
        key = " ".join(argv[1:])
        return next((rc for prefix, rc in self.exec_rc.items() if key.startswith(prefix)), 0)


class RecordingNftables:
    """The Nftables Protocol (pycni.net.netfilter.nft_seam) over a Recorder. The composite
    calls do what the real ones do with the primitive ones (``table_exists`` is a ``list
    table`` query, ``element_comment`` a keyed element lookup), so they record the same."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.usable = True  # what ``available`` answers

    def available(self) -> bool:
        return self.usable

    def apply(self, script: str) -> None:
        self.rec.write("nft.text", script)

    def apply_json(self, commands: list[dict[str, Any]]) -> None:
        if commands:
            self.rec.write("nft.json", jsoncodec.loads(jsoncodec.dumps(commands)))

    def query(self, command: str) -> list[dict[str, Any]]:
        missing = NftError("No such file or directory")
        return list(self.rec.read("nft.query", command, missing, command))

    def table_exists(self, family: str, name: str) -> bool:
        try:
            self.query(f"list table {family} {name}")
        except NftError:
            return False
        return True

    def _read(self, name: str, family: str, table: str, obj: str) -> Any:
        return self.rec.read(f"nftnl.{name}", obj, _READ_DEFAULTS[name], family, table, obj)

    def chain_rules(self, family: str, table: str, chain: str) -> list[nft_records.Rule]:
        found: list[nft_records.Rule] = self._read("chain_rules", family, table, chain)
        return found

    def chain_exists(self, family: str, table: str, chain: str) -> bool:
        return bool(self._read("chain_exists", family, table, chain))

    def set_exists(self, family: str, table: str, set_name: str) -> bool:
        return bool(self._read("set_exists", family, table, set_name))

    def set_elements(
        self, family: str, table: str, set_name: str
    ) -> list[nft_records.Element] | None:
        found: list[nft_records.Element] | None = self._read(
            "set_elements", family, table, set_name
        )
        return found

    def set_is_empty(self, family: str, table: str, set_name: str) -> bool | None:
        found: bool | None = self._read("set_is_empty", family, table, set_name)
        return found

    def get_element(
        self, family: str, table: str, set_name: str, key: bytes, key_end: bytes = b""
    ) -> nft_records.Element | None:
        record = (family, table, set_name, key.hex(), key_end.hex())
        found: nft_records.Element | None = self.rec.read(
            "nftnl.get_element", f"{set_name} {key.hex()}", None, *record
        )
        return found

    def element_comment(
        self, family: str, table: str, set_name: str, address: IPAddress
    ) -> str | None:
        found = self.get_element(family, table, set_name, address.packed)
        return None if found is None else found.comment

    def change_elements(
        self,
        family: str,
        table: str,
        changes: Sequence[
            nft_records.ElementChange | nft_records.ChainRemoval | nft_records.Removal
        ],
    ) -> None:
        if not changes:
            return
        messages = [
            [kind, flags, body.hex()]
            for kind, flags, body in nft_records.batch_messages(family, table, changes)
        ]
        self.rec.write("nftnl.batch", family, table, messages)


class RecordingIptables:
    """The Iptables Protocol (pycni.net.netfilter.iptables_seam) over a Recorder."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def available(self, family: int = 4, variant: str | None = None) -> bool:
        return True

    def save(self, table: str, family: int = 4, variant: str | None = None) -> Any:
        default = f"*{table}\nCOMMIT\n"
        text = self.rec.read("iptables.save", f"{table} {family}", default, table, family, variant)
        return iptables.parse_save(text, table)

    def restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        self.rec.write("iptables.restore", script, family, variant)

    def command(self, args: Sequence[str], family: int = 4) -> tuple[int, str]:
        binary = "iptables" if family == 4 else "ip6tables"
        return self.rec.exec([f"/usr/sbin/{binary}", "-w", *args]), ""

    def nft_chain_exists(self, table: str, chain: str, family: int = 4) -> bool:
        fam = "ip" if family == 4 else "ip6"
        return bool(self.rec.read("nftnl.chain_exists", chain, False, fam, table, chain))

    def legacy_nat(self) -> bool:
        return False  # the scenarios hold no legacy tables (not a recorded read)


class RecordingConntrack:
    """The Conntrack Protocol over a Recorder: deletes are recorded, none finds an entry."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def delete_by_address(self, address: bytes, protocol: str) -> int:
        self.rec.calls.append(["conntrack.delete_by_address", address.hex(), protocol])
        return 0

    def delete_by_dst_port(self, ports: list[int], protocol: str, family: int) -> int:
        self.rec.calls.append(["conntrack.delete_by_dst_port", ports, protocol, family])
        return 0


def rule(handle: int, comment: str) -> nft_records.Rule:
    return nft_records.Rule(handle, comment)


def element(
    comment: str, key: bytes = b"", data: bytes = b"", chain: str = ""
) -> nft_records.Element:
    return nft_records.Element(key, b"", data, comment, chain)


def packed(address: str) -> str:
    return ipaddress.ip_address(address).packed.hex()


ENOENT = nft_records.NftnlError(errno.ENOENT, "No such file or directory")
EEXIST = nft_records.NftnlError(errno.EEXIST, "File exists")
