"""What a user sees in a namespace, normalised for comparison across implementations.

The differential suites run the Go reference and pycni on twin namespaces with the same
config and compare these snapshots after ADD and after the last DEL, so a difference in what
``ip -d -j link/addr/route``, ``tc -j qdisc/filter``, ``bridge -d -j link`` or
``nft -j list ruleset`` shows cannot slip in unnoticed.

Normalised, and only these, because they must differ between two runs: MAC addresses (each
becomes a label naming the first link that holds it, so "the bridge has its first port's MAC"
still differs from "the bridge has its own"), the IPv6 link-local addresses the kernel makes
(from the MAC, present or not yet by their DAD timer), ifindexes and netns ids, interface
names with random parts (``veth%08x``, numbered in creation order), timers, lifetimes,
counters and the handles nft and tc number globally. A snapshot waits until each link's
operational state has caught up with its carrier (the kernel's link watch lags up to 1 s)
and no IPv6 address is in DAD (its local route depends on it).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from tests import harness
from tests import reference_differences as differences_table
from tests.references import Reference

RANDOM_NAMES = re.compile(r"veth[0-9a-f]{8}")
MAC = re.compile(r"\b[0-9a-f]{1,2}(?::[0-9a-f]{1,2}){5}\b")
LINK_LOCAL = re.compile(r"\bfe80::[0-9a-f:]*")
# keys whose values are counters, timers, kernel-global numbers or derived from a MAC
DROPPED = frozenset(
    {
        "ifindex",
        "link_index",
        "link_netnsid",
        "stats",
        "stats64",
        "bridge_id",
        "root_id",
        "designated_root",
        "designated_bridge",
        "handle",  # nft's object handles (a global counter per table)
        "index",  # tc's action index (a global counter per namespace)
        "ref",
        "bind",
        "installed",
        "last_used",
        "first_used",
        "expires",
        "used",
        "metainfo",
        "packets",  # nft counters
        "bytes",
    }
)
KEEP_MACS = {"00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff"}


class Labels:
    """The replacements of one namespace's snapshot: random names and MACs (but those in
    ``fixed``: MACs a config sets, compared as they are)."""

    def __init__(self, links: list[dict[str, Any]], fixed: tuple[str, ...] = ()) -> None:
        self.names: dict[str, str] = {}
        self.macs: dict[str, str] = {mac.lower(): mac.lower() for mac in fixed}
        for link in links:  # ifindex order: creation order
            name = str(link["ifname"])
            if RANDOM_NAMES.fullmatch(name):
                self.names[name] = f"veth#{sum(v.startswith('veth#') for v in self.names.values())}"
        for link in links:
            mac = str(link.get("address", ""))
            if mac and mac not in KEEP_MACS and mac not in self.macs:
                self.macs[mac] = f"mac({self.name(str(link['ifname']))})"

    def name(self, text: str) -> str:
        return self.names.get(text, text)

    def text(self, text: str) -> str:
        if text in self.names:
            return self.names[text]
        text = RANDOM_NAMES.sub(lambda m: self.names.get(m.group(0), "veth#?"), text)
        text = LINK_LOCAL.sub("fe80::LL", text)

        def mac(m: re.Match[str]) -> str:
            found = m.group(0)
            if found in KEEP_MACS or int(found.split(":")[0], 16) & 1:  # multicast: fixed
                return found
            return self.macs.get(found, "mac(?)")

        return MAC.sub(mac, text)

    def clean(self, value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if key in DROPPED or key.endswith("_timer") or key.endswith("_life_time"):
                    continue
                if key == "tentative":  # IPv6 DAD still running: timing, not configuration
                    continue
                out[key] = self.clean(item)
            return out
        if isinstance(value, list):
            return [self.clean(item) for item in value]
        if isinstance(value, str):
            return self.text(value)
        return value


def _settled(links: list[dict[str, Any]]) -> bool:
    """Whether every link's operational state has caught up with its carrier: ``LOWER_UP``
    is the carrier itself, ``NO-CARRIER`` and ``operstate`` follow it through the kernel's
    link watch, up to a second later (a bridge whose last port just went, say)."""
    for link in links:
        flags = link.get("flags", [])
        if "UP" in flags and ("LOWER_UP" in flags) == ("NO-CARRIER" in flags):
            return False
    return True


def _tentative(addrs: list[dict[str, Any]]) -> bool:
    """Whether an IPv6 address is still in duplicate address detection (about a second, and
    it goes on after the link lost its carrier): its local route comes when it ends."""
    return any(
        a.get("tentative") and a.get("scope") != "link"  # link-local ones are left out anyway
        for link in addrs
        for a in link.get("addr_info", [])
    )


# Everything in one exec of a shell in the namespace (an exec per command made a snapshot
# cost half a second on a loaded machine): sections split by marker lines.
_SCRIPT = """
for part in "ip -d -j link show" "ip -d -j addr show" "ip -d -j -4 route show table all" \\
    "ip -d -j -6 route show table all" "tc -j qdisc show" "bridge -d -j link show" \\
    "nft -j list ruleset"; do
  echo "@@section"; $part || exit 1
done
tc qdisc show | awk '$2 != "noqueue" && $2 != "noop" {
  for (i = 1; i <= NF; i++) if ($i == "dev") print $(i + 1), $3 }' |
while read dev handle; do
  echo "@@filter $dev $handle"; tc -j filter show dev "$dev" parent "$handle" || exit 1
done
"""
_SECTIONS = ("link", "addr", "route4", "route6", "qdisc", "bridge", "nft")


def _parse(text: str) -> Any:
    return json.loads(text) if text.strip() else []


def _once(ns: harness.Namespace) -> dict[str, Any]:
    out = ns.run("sh", "-c", _SCRIPT).stdout
    chunks = out.split("@@")
    found: dict[str, Any] = {"filter": []}
    sections = iter(_SECTIONS)
    for chunk in chunks[1:]:
        head, _, body = chunk.partition("\n")
        if head == "section":
            found[next(sections)] = _parse(body)
        else:
            _, dev, parent = head.split()
            found["filter"] += [{"dev": dev, "parent": parent, **f} for f in _parse(body)]
    nft = found["nft"]
    found["nft"] = [i for i in nft.get("nftables", []) if "metainfo" not in i] if nft else []
    return found


def raw(ns: harness.Namespace, timeout: float = 10.0) -> dict[str, Any]:
    """The unnormalised outputs, once the state is settled: operational states caught up
    with the carriers, no address in DAD (polled; a deadline, not a delay)."""
    deadline = time.monotonic() + timeout
    while True:
        found = _once(ns)
        if time.monotonic() > deadline or (
            _settled(found["link"]) and not _tentative(found["addr"])
        ):
            return found
        time.sleep(0.05)


def _kernel_link_local(found: dict[str, Any]) -> None:
    """Drop the IPv6 link-local addresses the kernel configures by itself and their local
    and anycast routes: whether one is there yet, or still, depends on its DAD timer and on
    how long the link had carrier, not on the plugin (``inet6_addr_gen_mode`` still shows
    how a plugin set them up)."""
    for link in found["addr"]:
        link["addr_info"] = [
            a
            for a in link.get("addr_info", [])
            if not (a.get("family") == "inet6" and a.get("scope") == "link")
        ]
    found["route6"] = [
        r
        for r in found["route6"]
        if not (r.get("type") in ("local", "anycast") and str(r.get("dst")).startswith("fe80:"))
    ]


def snapshot(ns: harness.Namespace, fixed_macs: tuple[str, ...] = ()) -> dict[str, Any]:
    """The normalised view of ``ns`` (see the module docstring)."""
    found = raw(ns)
    _kernel_link_local(found)
    labels = Labels(found["link"], fixed_macs)
    out = {key: labels.clean(value) for key, value in found.items()}
    for key in ("route4", "route6"):  # a dump lists equal prefixes in the order they came
        out[key] = sorted(out[key], key=lambda r: json.dumps(r, sort_keys=True))
    out["nft"] = sorted(out["nft"], key=_nft_order)  # stable: rules keep their chain's order
    return out


_NFT_KINDS = ("table", "chain", "set", "map", "element", "rule")


def _nft_order(item: dict[str, Any]) -> tuple[str, str, int, str]:
    """Tables, then chains and sets by name, then each chain's rules in their order: nft
    lists chains in the order they were made, which says nothing about what they do."""
    kind = next((k for k in _NFT_KINDS if k in item), "")
    body = item.get(kind, {})
    where = str(body.get("chain", body.get("name", ""))) if kind != "table" else ""
    table = str(body.get("table", body.get("name", "")))
    return (str(body.get("family", "")), table, _NFT_KINDS.index(kind) if kind else 9, where)


# Where pycni may differ from a reference: tests/reference_differences.py (documented in
# docs/differences-from-reference.md), each taken out of the comparison only where it is
# exactly what the table says, so the rest is compared.
VETH_TXQLEN = 1000  # the kernel's default, which v1.1.1 does not leave


def _documented_pair(ours: dict[str, Any], theirs: dict[str, Any], reference: str) -> None:
    """In one namespace's pair of views, the table's differences that apply to ``reference``:
    ``txqlen-zero`` (v1.1.1 leaves 0 on a veth or macvlan it makes, ``ip`` shows none, where
    pycni leaves the kernel's 1000), ``host-veth-ipv6``, ``empty-nat-table`` (the reference's
    DEL leaves an empty iptables ``nat`` table pycni never makes), ``masquerade-sets``."""
    if differences_table.applies("txqlen-zero", reference):
        for key in ("link", "addr"):
            for mine, other in zip(ours.get(key, []), theirs.get(key, []), strict=False):
                kind = mine.get("linkinfo", {}).get("info_kind")
                made = kind in ("veth", "macvlan") and mine.get("txqlen") == VETH_TXQLEN
                if made and "txqlen" not in other:
                    del mine["txqlen"]
    if differences_table.applies("host-veth-ipv6", reference):
        _host_veth_ipv6(ours, theirs)
    if "nft" in theirs and differences_table.applies("empty-nat-table", reference):
        nft = theirs["nft"]
        used = {(i[k]["family"], i[k]["table"]) for i in nft for k in i if k != "table"}
        mine_tables = {
            (i["table"]["family"], i["table"]["name"]) for i in ours.get("nft", []) if "table" in i
        }
        theirs["nft"] = [
            i
            for i in nft
            if "table" not in i
            or i["table"]["name"] != "nat"
            or (i["table"]["family"], i["table"]["name"]) in used | mine_tables
        ]
    if "nft" in theirs and differences_table.applies("masquerade-sets", reference):
        _masquerade_sets(ours, theirs)


MASQ_TABLE = "cni_plugins_masquerade"


def _masquerade_entries(nft: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The masquerade table's objects other than its base (table, ``postrouting``,
    ``masq_checks`` and the jump between them), and each pod's masquerade as one line:
    its comment, its address and the rest of its rule. pycni's addresses are the elements of
    a per-network set its rule matches (``@set``); the reference's, one rule each in
    ``masq_checks`` matching the address."""
    base_chains = ("postrouting", "masq_checks")
    mine = [
        i
        for kind in ("chain", "set", "rule")
        for i in nft
        if kind in i
        and i[kind].get("table") == MASQ_TABLE
        and not (kind == "chain" and i[kind].get("name") in base_chains)
        and not (kind == "rule" and i[kind].get("chain") == "postrouting")
    ]
    sets = {
        str(i["set"]["name"]): [e["elem"] for e in i["set"].get("elem", [])]
        for i in mine
        if "set" in i
    }
    lines = []
    for item in mine:
        rule = item.get("rule")
        if rule is None or not rule.get("expr") or "match" not in rule["expr"][0]:
            continue
        first, rest = rule["expr"][0]["match"], json.dumps(rule["expr"][1:], sort_keys=True)
        family = json.dumps(first["left"], sort_keys=True)
        right = first["right"]
        if isinstance(right, str) and right.startswith("@"):
            for elem in sets.get(right[1:], []):
                lines.append(f"{elem['comment']} {family} {elem['val']} {rest}")
        else:
            lines.append(f"{rule.get('comment')} {family} {right} {rest}")
    return mine, sorted(lines)


def _masquerade_sets(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """``masquerade-sets``: the two masquerade tables' per-pod objects become the same lines
    when both masquerade the same addresses with the same comments and matches; after the
    last DEL pycni removes the table the reference keeps (empty)."""
    mine, my_lines = _masquerade_entries(ours["nft"])
    other, other_lines = _masquerade_entries(theirs["nft"])
    marker = [{"masquerade": line} for line in my_lines]
    ours["nft"] = [i for i in ours["nft"] if i not in mine] + marker
    theirs["nft"] = [i for i in theirs["nft"] if i not in other]
    theirs["nft"] += [{"masquerade": line} for line in other_lines]
    if not my_lines and not other_lines and not [i for i in ours["nft"] if _in_masq(i)]:
        theirs["nft"] = [i for i in theirs["nft"] if not _in_masq(i)]


def _in_masq(item: dict[str, Any]) -> bool:
    body = next(iter(item.values()))
    return isinstance(body, dict) and MASQ_TABLE in (body.get("table"), body.get("name"))


def _host_veth_ipv6(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """pycni's bridge ports have no IPv6 unless ``hostVethIPv6`` (docs/plugins/bridge.md): a
    host veth with no IPv6 route under pycni drops the two the kernel gives Go's port with
    its link-local address (``fe80::/64`` in main, ``ff00::/8`` in local). With
    ``hostVethIPv6: true`` pycni's port has them too and nothing is dropped."""
    if "route6" not in ours or "route6" not in theirs:
        return
    veths = {
        str(link["ifname"])
        for link in ours.get("link", [])
        if link.get("linkinfo", {}).get("info_kind") == "veth"
        and str(link.get("ifname", "")).startswith("veth")
    }
    ours_on = {str(r.get("dev")) for r in ours["route6"]}
    bare = veths - ours_on
    theirs["route6"] = [
        r
        for r in theirs["route6"]
        if not (
            r.get("dev") in bare
            and r.get("protocol") == "kernel"
            and (r.get("dst"), r.get("table")) in (("fe80::LL/64", "main"), ("ff00::/8", "local"))
        )
    ]


def documented(
    ours: dict[str, Any], theirs: dict[str, Any], reference: Reference | str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copies of pycni's and Go's views without the documented differences that apply to
    ``reference``."""
    name = reference if isinstance(reference, str) else reference.name
    mine, other = json.loads(json.dumps(ours)), json.loads(json.dumps(theirs))
    if "link" in mine:
        _documented_pair(mine, other, name)
    else:  # several namespaces' views by name
        for ns in mine:
            if ns in other:
                _documented_pair(mine[ns], other[ns], name)
    return mine, other


def compare(
    ours: dict[str, Any], theirs: dict[str, Any], what: str, reference: Reference | str
) -> None:
    """Assert that pycni's view equals the reference's, but for the documented differences
    that apply to it; the message names the reference."""
    name = reference if isinstance(reference, str) else reference.name
    assert_same(*documented(ours, theirs, name), f"{what} (against Go plugins {name})")


def differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where two snapshots differ, one line per leaf (``path: ours != theirs``)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = []
        for key in sorted(set(ours) | set(theirs), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in ours:
                out.append(f"{where}: missing != {json.dumps(theirs[key])[:200]}")
            elif key not in theirs:
                out.append(f"{where}: {json.dumps(ours[key])[:200]} != missing")
            else:
                out += differences(ours[key], theirs[key], where)
        return out
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        out = []
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            out += differences(a, b, f"{path}[{index}]")
        return out
    if isinstance(ours, list) and isinstance(theirs, list):  # of different lengths
        mine = [json.dumps(item, sort_keys=True) for item in ours]
        other = [json.dumps(item, sort_keys=True) for item in theirs]
        out = [f"{path}: only pycni has {item[:300]}" for item in mine if item not in other]
        out += [f"{path}: only Go has {item[:300]}" for item in other if item not in mine]
        return out or [f"{path}: {len(ours)} items != {len(theirs)} items"]
    if ours != theirs:
        return [f"{path}: {json.dumps(ours)[:300]} != {json.dumps(theirs)[:300]}"]
    return []


def assert_same(ours: Any, theirs: Any, what: str) -> None:
    """Fail naming every difference between two snapshots (pycni's first)."""
    found = differences(ours, theirs)
    shown = found[:40] + ([f"... and {len(found) - 40} more"] if len(found) > 40 else [])
    assert not found, f"{what}: pycni != Go reference:\n  " + "\n  ".join(shown)


def without_dad(*namespaces: harness.Namespace) -> None:
    """Links made from now on in these namespaces skip IPv6 duplicate address detection, so
    snapshots need not wait a second or two for it (the same for both implementations)."""
    for ns in namespaces:
        for scope in ("all", "default"):
            ns.run("sh", "-c", f"echo 0 > /proc/sys/net/ipv6/conf/{scope}/dad_transmits")
