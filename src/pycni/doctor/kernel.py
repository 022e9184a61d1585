"""Kernel features, tried for real in a scratch network namespace that is removed afterwards.

A feature is present when the kernel lets us make the thing the plugins make: a link of the
type, a qdisc, an nftables NAT rule, an iptables chain, a conntrack dump. Reading config
files or module lists would miss built-in code and modules that fail to load. Nothing is
done outside the scratch namespace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator

from pycni.doctor.report import FAIL, OK, WARN, Check
from pycni.net import tc
from pycni.net.netfilter import conntrack, iptables, iptables_script, nft
from pycni.net.netlink.client import rtnl
from pycni.net.ns import NetNS
from pycni.playground import netns_path

SCRATCH_PREFIX = "pycni-doctor-"
UNSUPPORTED_DOC = "docs/plugins/unsupported.md"

# (feature, ip link arguments, what needs it); created in this order (macvlan, vlan and
# ipvlan sit on the veth).
REQUIRED_LINKS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("bridge", ("pd-br", "type", "bridge"), "the bridge plugin"),
    ("veth", ("pd-va", "type", "veth", "peer", "name", "pd-vb"), "bridge and ptp"),
    ("vxlan", ("pd-vx", "type", "vxlan", "id", "42", "dstport", "4789"), "the cluster agent"),
    ("macvlan", ("pd-mv", "link", "pd-va", "type", "macvlan", "mode", "bridge"), "macvlan"),
)
OPTIONAL_LINKS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("vlan", ("pd-vl", "link", "pd-va", "type", "vlan", "id", "5"), "the vlan plugin"),
    ("ipvlan", ("pd-iv", "link", "pd-va", "type", "ipvlan", "mode", "l2"), "the ipvlan plugin"),
    ("vrf", ("pd-vrf", "type", "vrf", "table", "10"), "the vrf plugin"),
    ("dummy", ("pd-dm", "type", "dummy"), "the dummy plugin"),
    ("wireguard", ("pd-wg", "type", "wireguard"), "the cluster agent's wireguard backend"),
    ("ipip", ("pd-ipip", "type", "ipip", "remote", "192.0.2.1"), "the cluster's ipip backend"),
    (
        "bridge vlan filtering",
        ("pd-brv", "type", "bridge", "vlan_filtering", "1"),
        "the bridge plugin's vlan, vlanTrunk and preserveDefaultVlan",
    ),
)
# The module each optional feature needs (what `modprobe` loads; tests/fullkernel runs the
# features' tests in a VM on kernels without them, docs/full-kernel-lane.md).
MODULES = {"vlan": "8021q", "bridge vlan filtering": "bridge"}


class ScratchError(RuntimeError):
    """The scratch namespace could not be made."""


def _ip(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=False, timeout=30)


@contextlib.contextmanager
def _scratch_namespace() -> Iterator[str]:
    """A fresh named namespace (lo up) that is deleted on the way out."""
    name = f"{SCRATCH_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        raise ScratchError(f"ip netns add {name}: {made.stderr.strip()}")
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        _ip("netns", "del", name)


def _link_check(ns: str, feature: str, args: tuple[str, ...], user: str, required: bool) -> Check:
    proc = _ip("-n", ns, "link", "add", *args)
    name = f"kernel: {feature}"
    module = MODULES.get(feature, feature)
    if proc.returncode == 0:
        extra = "" if required else f" ({user}; module {module})"
        return Check(name, OK, f"{feature} links can be created{extra}")
    reason = proc.stderr.strip() or f"ip exited {proc.returncode}"
    if required:
        return Check(
            name,
            FAIL,
            f"cannot create a {feature} link: {reason}; {user} needs it",
            f"load the module (modprobe {feature}) or use a kernel with {feature} support",
        )
    return Check(
        name,
        WARN,
        f"not supported by this kernel ({reason}): {user} cannot be used here",
        f"only needed for {user}: load module {module} (modprobe {module}) or use a kernel "
        f"with it; see {UNSUPPORTED_DOC}",
    )


def _in_ns(ns: str, fn: Callable[[], Check]) -> Check:
    with NetNS.open(netns_path(ns)) as handle, handle.entered():
        return fn()


def _tc(ns: str) -> Check:
    def probe() -> Check:
        with rtnl() as kernel:
            found = kernel.find_link("pd-va")
            if found is None:
                return Check("kernel: tc", FAIL, "no veth to attach a qdisc to (see veth above)")
            index = found.index
            tc.add_tbf(kernel, index, tc.TbfParams.from_bits(1_000_000, 32_000))
            tc.add_ingress(kernel, index)
            kinds = sorted(q.kind for q in tc.qdiscs(kernel, index))
        return Check("kernel: tc", OK, f"tbf and ingress qdiscs work ({', '.join(kinds)})")

    try:
        return _in_ns(ns, probe)
    except Exception as exc:
        return Check(
            "kernel: tc",
            FAIL,
            f"cannot add a tbf or ingress qdisc: {exc}; the bandwidth plugin needs them",
            "load sch_tbf and sch_ingress (CONFIG_NET_SCH_TBF, CONFIG_NET_SCH_INGRESS)",
        )


def _nftables(ns: str) -> Check:
    script = (
        "add table inet pycni_doctor\n"
        "add chain inet pycni_doctor pre { type nat hook prerouting priority -100 ; }\n"
        "add rule inet pycni_doctor pre tcp dport 1 dnat ip to 10.255.255.1:1\n"
    )

    def probe() -> Check:
        nft.apply(script)
        found = nft.query("list table inet pycni_doctor")
        rules = [i for i in found if "rule" in i]
        return Check(
            "kernel: nf_tables",
            OK,
            f"a NAT table with a DNAT rule works ({len(rules)} rule read back)",
        )

    try:
        return _in_ns(ns, probe)
    except Exception as exc:
        return Check(
            "kernel: nf_tables",
            FAIL,
            f"cannot make an nftables NAT rule: {exc}; portmap, firewall and ipMasq need it",
            "load nf_tables and nft_nat, and install libnftables1 / nftables",
        )


def _conntrack(ns: str) -> Check:
    def probe() -> Check:
        conntrack.delete_by_dst_port([9], "udp", 4)
        return Check("kernel: conntrack", OK, "the conntrack table answers over netlink")

    try:
        return _in_ns(ns, probe)
    except Exception as exc:
        return Check(
            "kernel: conntrack",
            FAIL,
            f"cannot read the conntrack table: {exc}; portmap clears stale UDP entries with it",
            "load nf_conntrack and nf_conntrack_netlink",
        )


def _system_iptables_variant() -> str:
    """ "nft" or "legacy": what the system's plain ``iptables`` is (the reference uses it)."""
    proc = subprocess.run(
        ["iptables", "--version"], capture_output=True, text=True, check=False, timeout=30
    )
    text = proc.stdout + proc.stderr
    return "legacy" if "legacy" in text else "nft" if "nf_tables" in text else ""


def _iptables(ns: str, variant: str, default: str) -> Check:
    name = f"iptables-{variant}"
    script = (
        "*nat\n:PYCNI-DOCTOR - [0:0]\n"
        "-A PYCNI-DOCTOR -p tcp --dport 1 -j DNAT --to-destination 10.255.255.1:1\nCOMMIT\n"
    )

    def probe() -> Check:
        iptables.restore(script, 4, variant)
        saved = iptables.save("nat", 4, variant)
        if "PYCNI-DOCTOR" not in saved.chains:
            raise iptables_script.IptablesError("the chain written is not read back")
        note = " (the system's iptables)" if variant == default else ""
        return Check(name, OK, f"a nat chain with a DNAT rule works{note}")

    try:
        return _in_ns(ns, probe)
    except Exception as exc:
        is_default = variant == default
        return Check(
            name,
            FAIL if is_default else WARN,
            f"does not work: {exc}"
            + (
                "; the system's iptables is this variant (the reference plugins use it)"
                if is_default
                else "; only needed by configs that ask for this backend"
            ),
            f"install iptables and load {'ip_tables' if variant == 'legacy' else 'nft_compat'}",
        )


def check_kernel() -> list[Check]:
    """Every kernel feature pycni's plugins use, plus the link types it does not ship."""
    out: list[Check] = []
    with _scratch_namespace() as ns:
        for feature, args, user in REQUIRED_LINKS:
            out.append(_link_check(ns, feature, args, user, required=True))
        out.append(_tc(ns))
        out.append(_nftables(ns))
        out.append(_conntrack(ns))
        default = _system_iptables_variant()
        for variant in ("legacy", "nft"):
            out.append(_iptables(ns, variant, default))
        for feature, args, user in OPTIONAL_LINKS:
            out.append(_link_check(ns, feature, args, user, required=False))
    return out
