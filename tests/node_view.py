"""What a user sees in a namespace, normalised for comparison across implementations.

The differential suites run the Go reference and pycni on twin namespaces with the same
config and compare these snapshots after ADD and after the last DEL, so a difference in what
``ip -d -j link/addr/route``, ``tc -j qdisc/filter``, ``bridge -d -j link`` or
``nft -j list ruleset`` shows cannot slip in unnoticed.

Normalised, and only these, because they must differ between two runs: MAC addresses (each
becomes a label naming the first link that holds it, so "the bridge has its first port's MAC"
still differs from "the bridge has its own"), IPv6 link-local addresses (made from the MAC),
ifindexes and netns ids, interface names with random parts (``veth%08x``, numbered in
creation order), timers, lifetimes, counters and the handles nft and tc number globally.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests import harness

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
    }
)
KEEP_MACS = {"00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff"}


class Labels:
    """The replacements of one namespace's snapshot: random names and MACs."""

    def __init__(self, links: list[dict[str, Any]]) -> None:
        self.names: dict[str, str] = {}
        self.macs: dict[str, str] = {}
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


def _json(ns: harness.Namespace, *argv: str) -> Any:
    out = ns.run(*argv).stdout
    return json.loads(out) if out.strip() else []


def raw(ns: harness.Namespace) -> dict[str, Any]:
    """The unnormalised outputs (for a failure message, or a test of one detail)."""
    links = _json(ns, "ip", "-d", "-j", "link", "show")
    qdiscs = _json(ns, "tc", "-j", "qdisc", "show")
    filters = []
    for qdisc in qdiscs:
        parent = str(qdisc.get("handle", ""))
        if not parent or qdisc.get("kind") in ("noqueue", "noop"):
            continue
        for found in _json(ns, "tc", "-j", "filter", "show", "dev", qdisc["dev"], "parent", parent):
            filters.append({"dev": qdisc["dev"], "parent": parent, **found})
    nft = _json(ns, "nft", "-j", "list", "ruleset")
    return {
        "link": links,
        "addr": _json(ns, "ip", "-d", "-j", "addr", "show"),
        "route4": _json(ns, "ip", "-d", "-j", "-4", "route", "show", "table", "all"),
        "route6": _json(ns, "ip", "-d", "-j", "-6", "route", "show", "table", "all"),
        "qdisc": qdiscs,
        "filter": filters,
        "bridge": _json(ns, "bridge", "-d", "-j", "link", "show"),
        "nft": [i for i in nft.get("nftables", []) if "metainfo" not in i] if nft else [],
    }


def snapshot(ns: harness.Namespace) -> dict[str, Any]:
    """The normalised view of ``ns`` (see the module docstring)."""
    found = raw(ns)
    labels = Labels(found["link"])
    return {key: labels.clean(value) for key, value in found.items()}


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
    if ours != theirs:
        return [f"{path}: {json.dumps(ours)[:300]} != {json.dumps(theirs)[:300]}"]
    return []


def assert_same(ours: Any, theirs: Any, what: str) -> None:
    """Fail naming every difference between two snapshots (pycni's first)."""
    found = differences(ours, theirs)
    assert not found, f"{what}: pycni != Go reference:\n  " + "\n  ".join(found)
