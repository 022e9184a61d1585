"""nftables as a plugin is handed it (pycni.net.netfilter.seam): libnftables commands and
nf_tables netlink reads and batches of one namespace, as a Protocol and the real transport.

The methods mirror pycni.net.netfilter.nft (libnftables) and .nftnl (nf_tables netlink); the
real one calls them, on the calling thread's namespace.
"""

from __future__ import annotations

from pycni.net.netfilter import nft, nftnl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Protocol

    from pycni.net.netfilter.nft_records import ChainRemoval, Element, ElementChange, Removal, Rule
    from pycni.spec.result import IPAddress
else:
    Protocol = object  # typing is not imported at run time


class Nftables(Protocol):
    """One namespace's nftables; failures are NftError (pycni.net.netfilter.nft)."""

    # libnftables
    def available(self) -> bool: ...

    def apply(self, script: str) -> None:
        """One transaction of nft text (fixed scripts only: config values go through JSON)."""
        ...

    def apply_json(self, commands: list[dict[str, Any]]) -> None:
        """One transaction of libnftables JSON commands."""
        ...

    def query(self, command: str) -> list[dict[str, Any]]:
        """The JSON objects a list command answers (``list table inet x``)."""
        ...

    def table_exists(self, family: str, name: str) -> bool: ...

    # nf_tables netlink
    def chain_rules(self, family: str, table: str, chain: str) -> list[Rule]: ...

    def chain_exists(self, family: str, table: str, chain: str) -> bool: ...

    def set_exists(self, family: str, table: str, set_name: str) -> bool: ...

    def get_element(
        self, family: str, table: str, set_name: str, key: bytes, key_end: bytes = b""
    ) -> Element | None: ...

    def set_elements(self, family: str, table: str, set_name: str) -> list[Element] | None: ...

    def set_is_empty(self, family: str, table: str, set_name: str) -> bool | None: ...

    def element_comment(
        self, family: str, table: str, set_name: str, address: IPAddress
    ) -> str | None: ...

    def change_elements(
        self, family: str, table: str, changes: Sequence[ElementChange | ChainRemoval | Removal]
    ) -> None:
        """One atomic nf_tables batch of element changes and removals."""
        ...


class ThreadNftables:
    """The calling thread's namespace, through pycni.net.netfilter.nft and .nftnl."""

    __slots__ = ()

    def available(self) -> bool:
        return nft.available()

    def apply(self, script: str) -> None:
        nft.apply(script)

    def apply_json(self, commands: list[dict[str, Any]]) -> None:
        nft.apply_json(commands)

    def query(self, command: str) -> list[dict[str, Any]]:
        return nft.query(command)

    def table_exists(self, family: str, name: str) -> bool:
        return nft.table_exists(family, name)

    def chain_rules(self, family: str, table: str, chain: str) -> list[Rule]:
        return nftnl.chain_rules(family, table, chain)

    def chain_exists(self, family: str, table: str, chain: str) -> bool:
        return nftnl.chain_exists(family, table, chain)

    def set_exists(self, family: str, table: str, set_name: str) -> bool:
        return nftnl.set_exists(family, table, set_name)

    def get_element(
        self, family: str, table: str, set_name: str, key: bytes, key_end: bytes = b""
    ) -> Element | None:
        return nftnl.get_element(family, table, set_name, key, key_end)

    def set_elements(self, family: str, table: str, set_name: str) -> list[Element] | None:
        return nftnl.set_elements(family, table, set_name)

    def set_is_empty(self, family: str, table: str, set_name: str) -> bool | None:
        return nftnl.set_is_empty(family, table, set_name)

    def element_comment(
        self, family: str, table: str, set_name: str, address: IPAddress
    ) -> str | None:
        return nftnl.element_comment(family, table, set_name, address)

    def change_elements(
        self, family: str, table: str, changes: Sequence[ElementChange | ChainRemoval | Removal]
    ) -> None:
        nftnl.change_elements(family, table, changes)


THREAD_NFTABLES = ThreadNftables()

if TYPE_CHECKING:
    _check: type[Nftables] = ThreadNftables  # mypy proves it satisfies the Protocol
