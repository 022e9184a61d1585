"""Masquerading of pod traffic leaving its subnet (bridge/ptp ``ipMasq``): the names both
backends share, the Backend Protocol, and the dispatch between the backends.

Two backends with exactly the reference's names, so pods set up by the Go plugins and by
pycni coexist and either can tear down what the other made; each is one module:

* nft_backend.py (``nftables``, our default, in-process via libnftables and nf_tables
  netlink): the reference's table ``inet cni_plugins_masquerade``, with pycni's sets of pod
  addresses per network and subnet (the layout is in that module's docstring);
* iptables_backend.py (``ipMasqBackend: "iptables"``): chain ``CNI-<hash>`` in ``nat`` per
  (network, containerID), reached from POSTROUTING by ``-s <ip>``. It runs the iptables
  binaries (through the Iptables it is handed), so it is slower; it exists for compatibility.

Every call takes the node's Netfilter (``req.host.netfilter(kernel)``, pycni.net.netfilter.seam):
a backend never reaches a transport itself.

A backend module is imported when a call first needs it: a bridge or ptp call without
``ipMasq`` pays for neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pycni.net.errors import NetfilterError
from pycni.spec import jsoncodec
from pycni.spec.result import IPInterface

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from pycni.net.netfilter.seam import Netfilter
else:
    Protocol = object  # typing is not imported at run time

TABLE = "cni_plugins_masquerade"
CHAIN = "masq_checks"
COMMENT_MAX = 128
BACKENDS = ("nftables", "iptables")  # the ``name`` of each backend module's BACKEND
DEFAULT_BACKEND = "nftables"


class IPMasqError(NetfilterError):
    pass


def hash_hex(length: int, prefix: str, text: str) -> str:
    """pkg/utils' MustFormatHashWithPrefix: prefix + sha512 hex, cut to ``length``."""
    if len(prefix) >= length or length > 128:
        raise ValueError("invalid hash length")
    import hashlib  # loads OpenSSL: only calls that name a chain or a rule pay for it

    return (prefix + hashlib.sha512(text.encode()).hexdigest())[:length]


def hash_for_network(network: str) -> str:
    return hash_hex(16, "", network)


def hash_for_instance(network: str, ifname: str, container_id: str) -> str:
    return hash_for_network(network) + "-" + hash_hex(16, "", f"{ifname}:{container_id}")


def comment_for_instance(network: str, ifname: str, container_id: str) -> str:
    def clean(s: str) -> str:
        return s.replace('"', "")

    text = (
        f"{hash_for_instance(network, ifname, container_id)}, net: {clean(network)}, "
        f"if: {clean(ifname)}, id: {clean(container_id)}"
    )
    return text[:COMMENT_MAX]


def chain_name(network: str, container_id: str) -> str:
    """pkg/utils' FormatChainName: ``CNI-`` + 24 hex of sha512(network+containerID)."""
    return hash_hex(28, "CNI-", network + container_id)


def iptables_comment(network: str, container_id: str) -> str:
    """pkg/utils' FormatComment: ``name: "<net>" id: "<id>"`` (Go %q quoting)."""
    return f"name: {jsoncodec.dumps(network)} id: {jsoncodec.dumps(container_id)}"


class Backend(Protocol):
    """One way of masquerading an attachment's addresses (bridge's and ptp's ``ipMasq``)."""

    name: str

    def setup(
        self, nf: Netfilter, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
    ) -> None:
        """Masquerade traffic from ``ipns`` leaving their subnets, tagged with the attachment."""
        ...

    def teardown(
        self, nf: Netfilter, ipns: Sequence[IPInterface], network: str, ifname: str, cid: str
    ) -> None:
        """Remove what ``setup`` made for the attachment (``ipns`` may be empty: the link is
        gone and its addresses unknown). Raises IPMasqError."""
        ...

    def may_hold(self, nf: Netfilter, network: str, cid: str) -> bool:
        """Whether this backend may hold something of the attachment, so a DEL under another
        backend cleans it too (a pod set up before the network's backend changed)."""
        ...

    def gc(self, nf: Netfilter, network: str, valid: Iterable[tuple[str, str]]) -> int:
        """Remove the network's entries whose (containerID, ifname) is not in ``valid``."""
        ...


_MODULES = {"nftables": "nft_backend", "iptables": "iptables_backend"}  # name: module


def _load(name: str) -> Backend:
    # __import__, the import statement's machinery: -X importtime names the backend, which the
    # cold-path test (pycni.skel.cold_path) checks
    module = __import__(f"{__name__}.{_MODULES[name]}", fromlist=("BACKEND",))
    found: Backend = module.BACKEND
    return found


def _all() -> tuple[Backend, ...]:
    return tuple(_load(name) for name in BACKENDS)


def backend(name: str) -> Backend:
    """The backend a config names (``ipMasqBackend``, checked against BACKENDS by the plugin);
    only its module is imported (an ADD needs no other)."""
    if name not in _MODULES:
        raise IPMasqError(f'unknown ipmasq backend "{name}"')
    return _load(name)


def teardown(
    nf: Netfilter,
    chosen: Backend,
    ipns: Sequence[IPInterface],
    network: str,
    ifname: str,
    cid: str,
) -> list[str]:
    """Remove the attachment from the chosen backend and from any other that may hold it
    (nftables always, iptables when its chain exists). Returns the errors (not raised)."""
    errors: list[str] = []
    for each in _all():
        if each is chosen or each.may_hold(nf, network, cid):
            try:
                each.teardown(nf, ipns, network, ifname, cid)
            except IPMasqError as exc:
                errors.append(str(exc))
    return errors


def gc(nf: Netfilter, network: str, valid: Iterable[tuple[str, str]]) -> int:
    """Garbage-collect the network in every backend; returns how many entries went."""
    return sum(each.gc(nf, network, valid) for each in _all())
