"""Where pycni may differ from a Go reference: the one table the differential tests take their
normalisations from.

``DELIBERATE`` holds pycni's own choices, which hold against every reference (v1.9.1 included);
``V1_1_1_ONLY`` the Debian build's defects that upstream has fixed since and the features it
lacks, which the tests work around only when they compare with v1.1.1.
docs/differences-from-reference.md lists both in tables; tests/unit/test_reference_differences.py
checks the two agree, so a normalisation a test applies is one the docs name.

A test asks ``applies(key, reference)`` before it takes a difference out of a comparison;
an unknown key is an error, so no test normalises something the table does not list.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.references import Reference

__all__ = ["DELIBERATE", "V1_1_1_ONLY", "Difference", "applies", "deliberate", "table"]


@dataclass(frozen=True)
class Difference:
    """One row: what differs (``plugins``, ``what``), why, and the config that gives the
    reference's behaviour back (``restore``; "none" when no config does)."""

    key: str
    plugins: str
    what: str
    why: str
    restore: str


DELIBERATE: dict[str, Difference] = {
    d.key: d
    for d in (
        Difference(
            "host-veth-ipv6",
            "bridge",
            "The host end of a pod's veth (a bridge port) has IPv6 disabled: no link-local "
            "address, so no `fe80::/64` and `ff00::/8` routes on it and `accept_ra` stays 1.",
            "A bridge port only forwards; its link-local address costs a DAD, MLD reports and "
            "two routes per pod, which made every IPv6 route dump grow with the pod count.",
            '`"hostVethIPv6": true`',
        ),
        Difference(
            "dns-empty",
            "all (result encoding)",
            'A result with no DNS settings has no `"dns"` key; the reference prints `"dns": {}`.',
            "The SPEC makes `dns` optional; libcni since v1.2 (and cnitool v1.3.0) encode it "
            "the same way, so what a runtime prints does not depend on the plugin.",
            "none (the key carries no settings either way)",
        ),
        Difference(
            "masquerade-sets",
            "bridge, ptp (`ipMasqBackend: nftables`)",
            "In `inet cni_plugins_masquerade`, pycni masquerades a network's pods through one "
            "`pycni-<hash>` chain whose rule matches a set of their addresses (each element with "
            "the reference's per-attachment comment); the reference adds one rule per address "
            "to `masq_checks`. After the last DEL pycni removes the table, which the reference "
            "leaves empty.",
            "An ADD or DEL changes one set element in one nf_tables batch instead of libnftables "
            "loading every rule of the table, which made each ADD grow with the pod count. DEL "
            "and GC still remove the reference's per-address rules.",
            '`"ipMasqBackend": "iptables"` for the reference\'s iptables rules; none for its '
            "nftables layout",
        ),
        Difference(
            "portmap-nft-maps",
            "portmap (`backend: nftables`)",
            "pycni's nftables backend keeps every mapping in `inet pycni_portmap` as elements "
            "of fixed maps (a pod's mappings are map entries, its rules never change); the "
            "reference's makes per-pod chains in `cni_hostport`. The differential tests "
            "compare portmap on the iptables backend only.",
            "A map lookup per packet and one batch per ADD/DEL, whatever the number of pods; "
            "the reference's chains grow with them.",
            '`"backend": "iptables"` (both implementations then write the same iptables rules)',
        ),
        Difference(
            "dhcp-release",
            "dhcp (daemon)",
            "On DEL pycni's daemon sends DHCPRELEASE, so the server frees the address at once; "
            "v1.9.1's daemon sends none here (dnsmasq logs no DHCPRELEASE after its DEL, v1.1.1's "
            "does), so the server holds the lease until it expires.",
            "RFC 2131 §4.4.6: a client gives up its lease with DHCPRELEASE; the reference's own "
            "code means to (its lease loop releases on stop).",
            "none",
        ),
        Difference(
            "empty-nat-table",
            "bridge, ptp (ipMasq), portmap",
            "The reference's DEL runs iptables for its cleanup even when nothing of it is in "
            "iptables; with iptables-nft that leaves an empty `ip nat` / `ip6 nat` table in "
            "`nft list ruleset` (v1.1.1: of a family its pod had no address of; v1.9.1: after "
            "an nftables-backend masquerade). pycni looks for its iptables chains in-process "
            "and creates no table it does not fill.",
            "A DEL should leave the node as it found it; an empty table is clutter that "
            "iptables-nft recreates anyway the first time an iptables rule is added.",
            "none (the table is empty either way)",
        ),
        Difference(
            "gc-forwarded",
            "macvlan, host-device, tap (with host-local IPAM)",
            "GC is forwarded to the IPAM plugin, and host-local's GC frees the reservations of "
            "attachments not in `cni.dev/valid-attachments`; v1.9.1's three plugins do not "
            "forward GC (and its host-local has none), so it frees nothing.",
            "The SPEC says a plugin MUST forward GC to its delegates; without it a node leaks "
            "the address of every pod whose DEL was lost until the range runs dry.",
            '`"disableGC": true` in the conflist (libcni then sends no GC at all)',
        ),
        Difference(
            "tap-selinux-off",
            "tap (`selinuxContext`)",
            "Where SELinux is not enabled, `selinuxContext` is accepted and changes nothing; "
            "v1.9.1 writes the label regardless and its ADD fails with code 999 "
            "(`failed set socket label: … invalid argument`).",
            "A label means nothing without SELinux; a config shared by nodes with and without "
            "it should work on both, as the issue's brief and upstream's intent have it.",
            "none (leave `selinuxContext` out where SELinux is off)",
        ),
    )
}

V1_1_1_ONLY: dict[str, Difference] = {
    d.key: d
    for d in (
        Difference(
            "txqlen-zero",
            "bridge, ptp, macvlan, ipvlan, vlan, vrf",
            "v1.1.1 creates veth (both ends), macvlan, ipvlan and vlan links with tx queue "
            "length 0 (`ip link` shows no `qlen`); pycni, as upstream since v1.6, leaves the "
            "kernel's default (1000) on the links it creates, 0 only on a veth's host end.",
            "A struct literal left its netlink library's TxQLen at 0 (fixed upstream in 2024).",
            "none",
        ),
        Difference(
            "no-nftables-backend",
            "bridge, ptp (ipMasq), portmap",
            "v1.1.1 has no nftables backend: with `ipMasqBackend`/`backend: nftables` it "
            "masquerades and maps ports with iptables, so the tests check pycni's nft objects "
            "and v1.1.1's iptables rules apart instead of comparing the rulesets.",
            "The nftables backends came upstream in v1.5 and v1.6.",
            "none",
        ),
        Difference(
            "firewall-isolation-comments",
            "firewall (iptables, `ingressPolicy`)",
            "v1.1.1 comments every isolation rule `CNI firewall plugin rules (ingressPolicy: "
            "same-bridge)`; v1.9.1 and pycni comment the rules all policies share "
            "`(ingressPolicy: same-bridge|isolated)` and a bridge's own rules with its policy.",
            "`isolated` came in v1.5, with the comments that tell the policies apart.",
            "none",
        ),
        Difference(
            "default-vlan-kept",
            "bridge (`vlan`)",
            "v1.1.1 leaves VLAN 1 on a port it puts on an access `vlan`; pycni, as upstream "
            "since v1.8 (`preserveDefaultVlan` defaults to false), removes it.",
            "A port in one VLAN should not also carry the default one. `preserveDefaultVlan: "
            "true` gives v1.1.1's ports.",
            '`"preserveDefaultVlan": true`',
        ),
        Difference(
            "no-vlan-trunk",
            "bridge (`vlanTrunk`)",
            "v1.1.1 ignores `vlanTrunk` (and makes no VLAN filtering for it); the tests check "
            "pycni's trunk against v1.9.1 only.",
            "`vlanTrunk` came upstream in v1.3.",
            "none",
        ),
        Difference(
            "vrf-routes-dropped",
            "vrf",
            "v1.1.1 loses the interface's routes when it enslaves it to the VRF (the kernel "
            "flushes them); pycni, as upstream since v1.4, moves them into the VRF's table.",
            "Route moving came upstream in v1.4.",
            "none",
        ),
        Difference(
            "vrf-discarded-error",
            "vrf",
            "v1.1.1's CHECK builds the error for an interface that is not in the VRF the "
            "config names and discards it, so its CHECK succeeds; pycni (and upstream since) "
            "fails it.",
            "A dropped `err` in v1.1.1's vrf plugin.",
            "none",
        ),
    )
}


def table() -> dict[str, Difference]:
    """Every row of both tables by key."""
    return {**DELIBERATE, **V1_1_1_ONLY}


def deliberate(key: str) -> bool:
    """True for a deliberate difference (it applies whatever the reference); an error for any
    other key, so a test cannot take a v1.1.1 workaround out without naming its reference."""
    if key not in DELIBERATE:
        raise KeyError(f"{key!r} is not a deliberate difference in tests/reference_differences.py")
    return True


def applies(key: str, reference: Reference | str) -> bool:
    """Whether the difference ``key`` may be taken out of a comparison with ``reference``:
    a deliberate one always, a v1.1.1 bug only against v1.1.1."""
    name = reference if isinstance(reference, str) else reference.name
    if key in DELIBERATE:
        return True
    if key in V1_1_1_ONLY:
        return name == "v1.1.1"
    raise KeyError(f"{key!r} is not in tests/reference_differences.py")
