"""A recording stand-in for every netfilter transport (libnftables, nf_tables netlink,
iptables-save/restore, the iptables binaries), for the golden tests of test_nft_model.py.

Each scenario runs a backend verb against scripted kernel answers and records, in order,
everything the code reads and writes: nft text scripts, libnftables JSON commands (parsed, so
key order does not matter), the nf_tables netlink batch messages as bytes, iptables restore
scripts and iptables argv. The goldens were captured from the code before the nftables model
existed, so equal recordings prove the migration changed nothing a kernel could see.
"""

from __future__ import annotations

import errno
import ipaddress
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from pycni.net import tools
from pycni.net.netfilter import iptables, nft, nft_records, nftnl
from pycni.spec import jsoncodec

Answer = Any  # a scripted answer: a value, or an exception to raise


class Recorder:
    """Scripted answers in, recorded calls out."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.answers: dict[tuple[str, str], Answer] = {}
        self.failures: dict[str, list[BaseException | None]] = {}
        self.exec_rc: dict[str, int] = {}

    # --- scripting ----------------------------------------------------------------------

    def answer(self, what: str, key: str, value: Answer) -> None:
        self.answers[(what, key)] = value

    def fail_next(self, what: str, *outcomes: BaseException | None) -> None:
        """The next calls of a write (``nft.json``, ``nft.text``, ``nftnl.batch``,
        ``iptables.restore``) fail with these exceptions (None: succeeds)."""
        self.failures.setdefault(what, []).extend(outcomes)

    def _answer(self, what: str, key: str, default: Answer) -> Any:
        value = self.answers.get((what, key), default)
        if isinstance(value, BaseException):
            raise value
        return value

    def _write(self, what: str, *record: Any) -> None:
        self.calls.append([what, *record])
        pending = self.failures.get(what)
        if pending:
            outcome = pending.pop(0)
            if outcome is not None:
                raise outcome

    # --- the stand-ins ------------------------------------------------------------------

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(nft, "apply", lambda script: self._write("nft.text", script))
        monkeypatch.setattr(nft, "apply_json", self._apply_json)
        monkeypatch.setattr(nft, "run_document", self._run_document)
        monkeypatch.setattr(nft, "query", self._query)
        monkeypatch.setattr(nft, "available", lambda: True)
        monkeypatch.setattr(nftnl, "change_elements", self._change_elements)
        for name in ("chain_rules", "chain_exists", "set_exists", "set_elements", "set_is_empty"):
            monkeypatch.setattr(nftnl, name, self._reader(name))
        monkeypatch.setattr(nftnl, "get_element", self._get_element)
        monkeypatch.setattr(iptables, "save", self._ipt_save)
        monkeypatch.setattr(iptables, "restore", self._ipt_restore)
        monkeypatch.setattr(tools, "which", lambda name: f"/usr/sbin/{name}")
        monkeypatch.setattr(subprocess, "run", self._exec)

    def _apply_json(self, commands: list[dict[str, Any]]) -> None:
        if commands:
            self._write("nft.json", jsoncodec.loads(jsoncodec.dumps(commands)))

    def _run_document(self, document: str) -> str:
        if document.lstrip().startswith("{"):
            self._write("nft.json", jsoncodec.loads(document)["nftables"])
        else:
            self._write("nft.text", document)
        return ""

    def _query(self, command: str) -> list[dict[str, Any]]:
        self.calls.append(["nft.query", command])
        return list(self._answer("nft.query", command, nft.NftError("No such file or directory")))

    def _change_elements(self, family: str, table: str, changes: Any) -> None:
        if not changes:
            return
        messages = [
            [kind, flags, body.hex()]
            for kind, flags, body in nft_records.batch_messages(family, table, changes)
        ]
        self._write("nftnl.batch", family, table, messages)

    def _reader(self, name: str) -> Callable[..., Any]:
        defaults: dict[str, Any] = {
            "chain_rules": [],
            "chain_exists": False,
            "set_exists": True,
            "set_elements": None,
            "set_is_empty": None,
        }

        def read(family: str, table: str, obj: str) -> Any:
            self.calls.append([f"nftnl.{name}", family, table, obj])
            return self._answer(f"nftnl.{name}", obj, defaults[name])

        return read

    def _get_element(
        self, family: str, table: str, set_name: str, key: bytes, key_end: bytes = b""
    ) -> nft_records.Element | None:
        self.calls.append(["nftnl.get_element", family, table, set_name, key.hex(), key_end.hex()])
        found: nft_records.Element | None = self._answer(
            "nftnl.get_element", f"{set_name} {key.hex()}", None
        )
        return found

    def _ipt_save(self, table: str, family: int = 4, variant: str | None = None) -> Any:
        self.calls.append(["iptables.save", table, family, variant])
        text = self._answer("iptables.save", f"{table} {family}", f"*{table}\nCOMMIT\n")
        return iptables.parse_save(text, table)

    def _ipt_restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        self._write("iptables.restore", script, family, variant)

    def _exec(self, argv: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(["exec", list(argv)])
        key = " ".join(argv[1:])
        rc = next((rc for prefix, rc in self.exec_rc.items() if key.startswith(prefix)), 0)
        return subprocess.CompletedProcess(argv, rc, "", "")


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
