"""The cold path: every module a plugin call may import on its in-process path.

Without a daemon every plugin call is a new interpreter (the entry point, whose source is
pycni/entrypoints/forwarder.py -> pycni.skel.main -> skel.run -> the registry -> the plugin ->
what it imports), and what the call imports is most of its cost. This module names that path
per plugin type, so that it is a checked list and not a region of the tree:
tests/integration/test_cold_path_imports.py runs every registered type's ADD and DEL in-process
under ``python -X importtime`` and requires that the pycni modules it imports are exactly
``modules(type)``, its standard-library modules within STDLIB (beyond what the bare interpreter
imports at start-up) and of OFF_PATH only the type's DEBT. The one-shot cnitool verbs (`pycni
add`, `pycni del`) are the other start-up that is measured; CLI names their modules. When a
path changes, its test fails with the entry to paste here. docs/cold-path.md explains the rules.

The rule, stated once for every module named here: a module on a cold path keeps the cold-path
tricks (``TYPE_CHECKING`` assigned False for names used only in annotations, ``Protocol`` bound
to ``object`` at run time, records or plain classes instead of dataclasses, JSON through
pycni.spec.jsoncodec, a function-local import for what only an error, a tool run or another
plugin needs). Every other module is plain Python: ``from typing import TYPE_CHECKING,
Protocol``, top-level imports (a lazy one says why on its line), dataclasses or records. Nothing
imports this module at run time.
"""

from __future__ import annotations

__all__ = ["BY_TYPE", "CLI", "DEBT", "ENTRY", "OFF_PATH", "STDLIB", "modules"]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Modules no call may import unless its type's DEBT says so (a module counts with its
# submodules); each was on the path once and costs ms per call.
OFF_PATH: tuple[str, ...] = (
    "pyroute2",  # the core plugins talk rtnetlink natively
    "subprocess",  # only an exec'd delegate or an iptables/nft command run needs it
    "logging",  # only a failed undo logs
    "traceback",  # only an internal error formats one
    "hashlib",  # loads OpenSSL; only chain and rule names hash
    "tempfile",  # fsutil creates its temporary files itself
    "shutil",  # only a tool lookup (which) needs it
    "ctypes.util",  # find_library runs ldconfig in a child process
    "decimal",  # only a float in a config is formatted with it
    "pathlib",
    "socket",  # socket.py builds its enums at import; the netlink code uses _socket
    "pycni.spec.conf",  # the runtime's config-list types; a plugin needs only spec.gojson
    "pycni.runtime.exec",  # exec's a delegate; an IPAM plugin of pycni runs in the caller
    "pycni.net.netfilter.nftnl",  # only masquerading (ipMasq) and port maps talk nfnetlink
    "bz2",
    "lzma",
    "dataclasses",  # pycni.record builds a class's methods without compiling source
    "inspect",  # (imported by dataclasses)
    "typing",  # annotations only: TYPE_CHECKING blocks
    "json",  # pycni.spec.jsoncodec uses the C codec; json's package imports re and enum
    "re",  # names and MACs are checked with character sets
    "enum",  # (imported by re)
    "threading",  # locks come from _thread
    "nftables",  # libnftables' binding: only nftables rules (masquerade, portmap, firewall)
)

# Every call: the entry point's pycni.skel.main, skel.run, the registry, the spec's types and
# JSON, the error tree and the namespace helpers.
ENTRY: frozenset[str] = _names(
    """
        pycni pycni.net pycni.net.errors pycni.net.ns pycni.net.tools pycni.plugins
        pycni.record pycni.skel pycni.skel.base pycni.skel.host pycni.skel.main
        pycni.skel.registry pycni.skel.run pycni.spec pycni.spec.decode
        pycni.spec.errors pycni.spec.gojson pycni.spec.jsoncodec pycni.spec.result
        pycni.spec.validate pycni.spec.version
    """
)

# The standard-library modules any call may import (beyond the interpreter's own start-up).
STDLIB: frozenset[str] = _names(
    """
        __future__ _bisect _blake2 _bz2 _collections _collections_abc _compression
        _contextvars _ctypes _functools _hashlib _json _locale _lzma _operator
        _posixsubprocess _random _sha512 _socket _sre _stat _struct _typing _weakrefset
        _winapi array bisect collections collections.abc contextlib contextvars copyreg
        ctypes ctypes._endian errno fcntl fnmatch functools gc genericpath ipaddress
        itertools keyword locale math msvcrt nt ntpath operator os posixpath random
        reprlib select selectors signal stat struct types urllib urllib.parse warnings
        zlib
    """
)

# Per type, the pycni modules its ADD and DEL import beyond ENTRY (a main plugin's include its
# delegated host-local, which runs in its process; ptp's its ipMasq masquerading).
BY_TYPE: dict[str, frozenset[str]] = {
    "bandwidth": _names(
        """
            pycni.net.link pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire pycni.net.tc
            pycni.plugins.meta pycni.plugins.meta.bandwidth
            pycni.plugins.meta.bandwidth.plugin pycni.skel.rollback
        """
    ),
    "bridge": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.bridge pycni.net.ipmath pycni.net.link
            pycni.net.netfilter pycni.net.netfilter.ipmasq pycni.net.netfilter.nft_records
            pycni.net.netlink pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.nfnetlink pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route pycni.net.sysctl
            pycni.net.thread_sysctl pycni.net.veth pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.bridge pycni.plugins.main.bridge.macspoofchk
            pycni.plugins.main.bridge.plugin pycni.plugins.main.shared
            pycni.plugins.main.shared.masquerade pycni.plugins.main.shared.pod_link
            pycni.runtime pycni.runtime.find pycni.skel.config pycni.skel.delegate
            pycni.skel.entry_point pycni.skel.mac pycni.skel.rollback pycni.spec.args
            pycni.state pycni.state.disk
        """
    ),
    "dhcp": _names(
        """
            pycni.plugins.ipam pycni.plugins.ipam.dhcp
            pycni.plugins.ipam.dhcp.config pycni.plugins.ipam.dhcp.plugin
            pycni.plugins.ipam.dhcp.protocol
        """
    ),
    "dnsname": _names(
        """
            pycni.fsutil pycni.net.link pycni.net.netfilter
            pycni.net.netfilter.conntrack pycni.net.netfilter.iptables
            pycni.net.netfilter.iptables_script pycni.net.netfilter.iptables_seam
            pycni.net.netfilter.nft pycni.net.netfilter.nft_records
            pycni.net.netfilter.nft_seam pycni.net.netfilter.rule_tokens
            pycni.net.netfilter.seam pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.nfnetlink pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire
            pycni.plugins.meta pycni.plugins.meta.dnsname
            pycni.plugins.meta.dnsname.config pycni.plugins.meta.dnsname.dnsmasq
            pycni.plugins.meta.dnsname.files pycni.plugins.meta.dnsname.firewall
            pycni.plugins.meta.dnsname.names pycni.plugins.meta.dnsname.plugin
            pycni.process pycni.process.processes pycni.process.real pycni.skel.rollback
            pycni.spec.args pycni.state pycni.state.disk
        """
    ),
    "dummy": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.netlink pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route
            pycni.net.sysctl pycni.net.thread_sysctl pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.dummy pycni.plugins.main.dummy.plugin
            pycni.plugins.main.shared pycni.plugins.main.shared.conf
            pycni.plugins.main.shared.pod_iface pycni.plugins.main.shared.pod_link
            pycni.runtime pycni.runtime.find pycni.skel.config pycni.skel.delegate
            pycni.skel.entry_point pycni.skel.mac pycni.skel.rollback pycni.spec.args
            pycni.state pycni.state.disk
        """
    ),
    "firewall": _names(
        """
            pycni.fsutil pycni.net.netfilter pycni.net.netfilter.conntrack
            pycni.net.netfilter.ipmasq pycni.net.netfilter.iptables_script
            pycni.net.netfilter.iptables_seam pycni.net.netfilter.model
            pycni.net.netfilter.nft pycni.net.netfilter.nft_records
            pycni.net.netfilter.nft_seam pycni.net.netfilter.rule_tokens
            pycni.net.netfilter.seam pycni.net.netlink pycni.net.netlink.kernel
            pycni.net.netlink.nfnetlink pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.wire pycni.plugins.meta pycni.plugins.meta.firewall
            pycni.plugins.meta.firewall.backend
            pycni.plugins.meta.firewall.iptables_backend
            pycni.plugins.meta.firewall.nft_backend pycni.plugins.meta.firewall.plugin
            pycni.plugins.meta.firewall.records pycni.skel.rollback pycni.state
            pycni.state.disk
        """
    ),
    "flannel": _names(
        """
            pycni.cluster pycni.cluster.subnet pycni.fsutil pycni.net.addr
            pycni.net.bridge pycni.net.ipmath pycni.net.link pycni.net.netfilter
            pycni.net.netfilter.conntrack pycni.net.netfilter.ipmasq
            pycni.net.netfilter.ipmasq.iptables_backend
            pycni.net.netfilter.ipmasq.nft_backend pycni.net.netfilter.iptables_script
            pycni.net.netfilter.iptables_seam pycni.net.netfilter.model
            pycni.net.netfilter.nft pycni.net.netfilter.nft_records
            pycni.net.netfilter.nft_seam pycni.net.netfilter.nftnl
            pycni.net.netfilter.rule_tokens pycni.net.netfilter.seam pycni.net.netlink
            pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.nfnetlink pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire
            pycni.net.resolvconf pycni.net.route pycni.net.sysctl
            pycni.net.thread_sysctl pycni.net.veth pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.bridge
            pycni.plugins.main.bridge.macspoofchk pycni.plugins.main.bridge.plugin
            pycni.plugins.main.shared pycni.plugins.main.shared.masquerade
            pycni.plugins.main.shared.pod_link pycni.plugins.meta
            pycni.plugins.meta.flannel pycni.plugins.meta.flannel.plugin pycni.runtime
            pycni.runtime.find pycni.skel.config pycni.skel.delegate
            pycni.skel.entry_point pycni.skel.mac pycni.skel.rollback pycni.spec.args
            pycni.state pycni.state.disk
        """
    ),
    "host-device": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.netlink pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route
            pycni.net.sysctl pycni.net.thread_sysctl pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.host_device
            pycni.plugins.main.host_device.plugin pycni.plugins.main.shared
            pycni.plugins.main.shared.conf pycni.plugins.main.shared.pod_iface
            pycni.runtime pycni.runtime.find pycni.skel.config pycni.skel.delegate
            pycni.skel.entry_point pycni.skel.mac pycni.skel.rollback pycni.spec.args
            pycni.state pycni.state.disk
        """
    ),
    "host-local": _names(
        """
            pycni.fsutil pycni.net.ipmath pycni.net.resolvconf pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.spec.args pycni.state pycni.state.disk
        """
    ),
    "ipvlan": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.macvlan pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route
            pycni.net.sublink pycni.net.sysctl pycni.net.thread_sysctl pycni.net.veth
            pycni.plugins.ipam pycni.plugins.ipam.host_local
            pycni.plugins.ipam.host_local.allocator pycni.plugins.ipam.host_local.config
            pycni.plugins.ipam.host_local.index pycni.plugins.ipam.host_local.plugin
            pycni.plugins.ipam.host_local.store pycni.plugins.main
            pycni.plugins.main.ipvlan pycni.plugins.main.ipvlan.plugin
            pycni.plugins.main.shared pycni.plugins.main.shared.conf
            pycni.plugins.main.shared.pod_iface pycni.plugins.main.shared.pod_link
            pycni.plugins.main.shared.sublink pycni.runtime pycni.runtime.find
            pycni.skel.config pycni.skel.delegate pycni.skel.entry_point pycni.skel.mac
            pycni.skel.rollback pycni.spec.args pycni.state pycni.state.disk
        """
    ),
    "loopback": _names(
        """
            pycni.net.link pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire
            pycni.plugins.main pycni.plugins.main.loopback
            pycni.plugins.main.loopback.plugin
        """
    ),
    "macvlan": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.macvlan pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route
            pycni.net.sysctl pycni.net.thread_sysctl pycni.net.veth pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.macvlan
            pycni.plugins.main.macvlan.plugin pycni.plugins.main.shared
            pycni.plugins.main.shared.conf pycni.plugins.main.shared.pod_iface
            pycni.plugins.main.shared.pod_link pycni.plugins.main.shared.sublink
            pycni.runtime pycni.runtime.find pycni.skel.config pycni.skel.delegate
            pycni.skel.entry_point pycni.skel.mac pycni.skel.rollback pycni.spec.args
            pycni.state pycni.state.disk
        """
    ),
    "portmap": _names(
        """
            pycni.net.netfilter pycni.net.netfilter.chain_names
            pycni.net.netfilter.conntrack pycni.net.netfilter.iptables_script
            pycni.net.netfilter.iptables_seam pycni.net.netfilter.model
            pycni.net.netfilter.nft pycni.net.netfilter.nft_records
            pycni.net.netfilter.nft_seam pycni.net.netfilter.nftnl
            pycni.net.netfilter.rule_matches pycni.net.netfilter.rule_tokens
            pycni.net.netfilter.seam pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.nfnetlink pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire pycni.net.sysctl
            pycni.net.thread_sysctl pycni.plugins.meta pycni.plugins.meta.portmap
            pycni.plugins.meta.portmap.backend pycni.plugins.meta.portmap.config
            pycni.plugins.meta.portmap.iptables_backend
            pycni.plugins.meta.portmap.nft_backend pycni.plugins.meta.portmap.nft_chains
            pycni.plugins.meta.portmap.nft_maps pycni.plugins.meta.portmap.plugin
            pycni.plugins.meta.portmap.reference_state pycni.skel.rollback
        """
    ),
    "ptp": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.netfilter pycni.net.netfilter.conntrack pycni.net.netfilter.ipmasq
            pycni.net.netfilter.ipmasq.iptables_backend
            pycni.net.netfilter.ipmasq.nft_backend pycni.net.netfilter.iptables_script
            pycni.net.netfilter.iptables_seam pycni.net.netfilter.model
            pycni.net.netfilter.nft pycni.net.netfilter.nft_records
            pycni.net.netfilter.nft_seam pycni.net.netfilter.nftnl
            pycni.net.netfilter.rule_tokens pycni.net.netfilter.seam pycni.net.netlink
            pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.nfnetlink pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire
            pycni.net.resolvconf pycni.net.route pycni.net.sysctl
            pycni.net.thread_sysctl pycni.net.veth pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.ptp pycni.plugins.main.ptp.plugin
            pycni.plugins.main.shared pycni.plugins.main.shared.masquerade
            pycni.plugins.main.shared.pod_link pycni.runtime pycni.runtime.find
            pycni.skel.config pycni.skel.delegate pycni.skel.entry_point
            pycni.skel.rollback pycni.spec.args pycni.state pycni.state.disk
        """
    ),
    "sbr": _names(
        """
            pycni.net.link pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire
            pycni.plugins.meta pycni.plugins.meta.sbr pycni.plugins.meta.sbr.plugin
            pycni.plugins.meta.sbr.policy pycni.skel.rollback
        """
    ),
    "static": _names(
        """
            pycni.plugins.ipam pycni.plugins.ipam.static
            pycni.plugins.ipam.static.plugin pycni.spec.args
        """
    ),
    "tap": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.link_attrs pycni.net.netlink pycni.net.netlink.client
            pycni.net.netlink.kernel pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route
            pycni.net.sysctl pycni.net.thread_sysctl pycni.net.veth pycni.plugins.ipam
            pycni.plugins.ipam.host_local pycni.plugins.ipam.host_local.allocator
            pycni.plugins.ipam.host_local.config pycni.plugins.ipam.host_local.index
            pycni.plugins.ipam.host_local.plugin pycni.plugins.ipam.host_local.store
            pycni.plugins.main pycni.plugins.main.shared pycni.plugins.main.shared.conf
            pycni.plugins.main.shared.pod_iface pycni.plugins.main.shared.pod_link
            pycni.plugins.main.tap pycni.plugins.main.tap.plugin
            pycni.plugins.main.tap.tun pycni.runtime pycni.runtime.find
            pycni.skel.config pycni.skel.delegate pycni.skel.entry_point pycni.skel.mac
            pycni.skel.rollback pycni.skel.selinux pycni.spec.args pycni.state
            pycni.state.disk
        """
    ),
    "tuning": _names(
        """
            pycni.fsutil pycni.net.link pycni.net.link_attrs pycni.net.netlink
            pycni.net.netlink.client pycni.net.netlink.kernel pycni.net.netlink.rtnl
            pycni.net.netlink.rtnl.codec pycni.net.netlink.rtnl.native
            pycni.net.netlink.rtnl.tc_codec pycni.net.netlink.rtnl.wire pycni.net.sysctl
            pycni.net.thread_sysctl pycni.plugins.meta pycni.plugins.meta.tuning
            pycni.plugins.meta.tuning.backup pycni.plugins.meta.tuning.conf
            pycni.plugins.meta.tuning.plugin pycni.skel.config pycni.skel.mac
            pycni.skel.rollback pycni.spec.args pycni.state pycni.state.disk
        """
    ),
    "vlan": _names(
        """
            pycni.fsutil pycni.net.addr pycni.net.ipmath pycni.net.link
            pycni.net.netlink pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.resolvconf pycni.net.route
            pycni.net.sublink pycni.net.sysctl pycni.net.thread_sysctl pycni.net.veth
            pycni.plugins.ipam pycni.plugins.ipam.host_local
            pycni.plugins.ipam.host_local.allocator pycni.plugins.ipam.host_local.config
            pycni.plugins.ipam.host_local.index pycni.plugins.ipam.host_local.plugin
            pycni.plugins.ipam.host_local.store pycni.plugins.main
            pycni.plugins.main.shared pycni.plugins.main.shared.conf
            pycni.plugins.main.shared.pod_iface pycni.plugins.main.shared.pod_link
            pycni.plugins.main.shared.sublink pycni.plugins.main.vlan
            pycni.plugins.main.vlan.plugin pycni.runtime pycni.runtime.find
            pycni.skel.config pycni.skel.delegate pycni.skel.entry_point pycni.skel.mac
            pycni.skel.rollback pycni.spec.args pycni.state pycni.state.disk
        """
    ),
    "vrf": _names(
        """
            pycni.net.netlink pycni.net.netlink.client pycni.net.netlink.kernel
            pycni.net.netlink.rtnl pycni.net.netlink.rtnl.codec
            pycni.net.netlink.rtnl.native pycni.net.netlink.rtnl.tc_codec
            pycni.net.netlink.rtnl.wire pycni.net.vrf pycni.plugins.meta
            pycni.plugins.meta.vrf pycni.plugins.meta.vrf.plugin pycni.skel.rollback
        """
    ),
}

# The OFF_PATH modules a type's ADD or DEL still imports: a ratchet (an entry the type no longer
# needs must go). nftables rules (masquerading, portmap, firewall) need nfnetlink or the
# libnftables binding (json); dnsname starts dnsmasq (subprocess); the rest are config decoding
# that still uses typing or re.
DEBT: dict[str, frozenset[str]] = {
    "bandwidth": frozenset({"enum", "hashlib", "re", "typing"}),
    "dhcp": frozenset({"enum", "json", "re", "socket", "typing"}),
    "dnsname": frozenset(
        {"bz2", "enum", "lzma", "pathlib", "re", "shutil", "subprocess", "threading", "typing"}
    ),
    "firewall": frozenset({"enum", "hashlib", "json", "nftables", "re"}),
    "flannel": frozenset(
        {"enum", "hashlib", "json", "nftables", "pycni.net.netfilter.nftnl", "re", "typing"}
    ),
    "host-device": frozenset({"enum", "json", "re"}),
    "portmap": frozenset(
        {
            "enum",
            "hashlib",
            "json",
            "nftables",
            "pycni.net.netfilter.nftnl",
            "re",
        }
    ),
    "ptp": frozenset({"enum", "hashlib", "json", "nftables", "pycni.net.netfilter.nftnl", "re"}),
    "static": frozenset({"enum", "re", "typing"}),
    "tuning": frozenset({"enum", "json", "re", "typing"}),
}

# The one-shot cnitool verbs: what `pycni add` and `pycni del` import (docs/cli.md, "Start-up";
# tests/unit/test_cli.py checks it, and that none of argparse, typing, subprocess, json, re, ...
# come with it).
CLI: frozenset[str] = _names(
    """
    pycni pycni.cli pycni.cli.cnitool pycni.cli.main pycni.fsutil pycni.record pycni.runtime
    pycni.runtime.api pycni.runtime.cache pycni.runtime.confdir pycni.runtime.exec
    pycni.runtime.find pycni.runtime.trace pycni.runtime.types pycni.spec pycni.spec.args
    pycni.spec.conf pycni.spec.errors pycni.spec.gojson pycni.spec.jsoncodec pycni.spec.result
    pycni.spec.validate pycni.spec.version
    """
)


def modules(plugin_type: str) -> frozenset[str]:
    """The pycni modules an in-process ADD or DEL of ``plugin_type`` imports."""
    return ENTRY | BY_TYPE[plugin_type]
