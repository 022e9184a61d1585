"""The one error tree of pycni.net, and the one place it becomes a CNI error.

Everything pycni.net (and the netfilter and device modules that live beside one plugin) raises
on purpose is a :class:`NetError`. A plugin lets it propagate; skel's ``run_plugin`` turns it
into the CNI error the runtime sees with :func:`to_cni`, so plugins catch a NetError only to
give the reference's own wording or to decide (a missing link on DEL is not a failure). Each
class keeps the builtin base callers already test with (``except OSError``, ``LookupError``)::

    NetError                                    code 999 (INTERNAL) unless noted
    ├── NetlinkError(OSError)                   net/netlink/kernel.py: rtnetlink refused; .errno
    ├── NfnetlinkError(OSError)                 net/netlink/nfnetlink.py: nfnetlink refused
    ├── NetNSNotFound(CNIError)                 net/ns.py: code 3 (INVALID_NETNS), already CNI
    ├── LinkNotFound(LookupError)               net/link.py: no link of that name
    ├── NoDefaultRoute(LookupError)             net/macvlan.py: no default route for a master
    ├── AddressError                            net/addr.py: an address to configure or CHECK
    ├── RouteError                              net/route.py: a route to add or CHECK
    ├── VethNameTaken                           net/veth.py: the pod already has that name
    ├── NotABridge                              net/bridge.py: the name is another kind of link
    ├── AddressConflict                         net/bridge.py: the gateway clashes on the bridge
    ├── VlanFilteringUnsupported                net/bridge.py: kernel has no bridge VLAN filtering
    ├── VrfError                                net/vrf.py: a VRF step refused
    ├── TunError(OSError)                       plugins/main/tap/tun.py: /dev/net/tun refused
    └── NetfilterError                          a netfilter change refused
        ├── NftError(RuntimeError)              net/netfilter/nft_records.py: libnftables' message
        ├── IptablesError(RuntimeError)         net/netfilter/iptables.py: the tool's stderr
        ├── IPMasqError                         net/netfilter/ipmasq/__init__.py: masquerade set-up
        └── FirewallError(RuntimeError)         plugins/meta/firewall/backend.py: the tool's message

tests/unit/test_net_errors.py checks that this drawing lists every exception class those modules
define, with the parents drawn here.
"""

from __future__ import annotations

from pycni.spec.errors import CNIError, InternalError


class NetError(Exception):
    """Base of every error pycni.net raises on purpose (see the tree above)."""


class NetfilterError(NetError):
    """A netfilter change (nftables, iptables, masquerade, firewall) was refused."""


def to_cni(exc: Exception) -> CNIError:
    """The CNI error a runtime gets for ``exc``: its own when it is one; else code 999 with the
    exception's text, which for a NetError is the reference plugins' wording of the failure (a
    bug that is no NetError gets the same code, and skel logs its traceback)."""
    if isinstance(exc, CNIError):
        return exc
    notes = "; ".join(str(n) for n in getattr(exc, "__notes__", ()))
    return InternalError(str(exc) or type(exc).__name__, notes)
