"""What the ipvlan, vlan and bridge-VLAN guest tests share: exec'ing pycni and the Go reference
side by side, and views of the kernel state that compare equal when only generated names
(veth<8 hex>, temporary names) and MACs differ."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests import harness
from tests import reference_differences as differences_table

# TCG is slow and a plugin's first Python start in the guest reads its modules over 9p
TIMEOUT = 300
_GENERATED = re.compile(r"^veth[0-9a-f]{8}$")


def run(
    plugin: Path,
    command: str,
    conf: dict[str, Any],
    pod: harness.Namespace | None,
    cni_path: str,
    *,
    container_id: str = "c1",
    ifname: str = "eth0",
) -> harness.PluginRun:
    """Exec ``plugin`` once (call inside the node's ``entered()``)."""
    return harness.exec_plugin(
        plugin,
        command,
        conf,
        container_id=container_id,
        netns=pod.path if pod is not None else "",
        ifname=ifname,
        cni_path=cni_path,
        timeout=TIMEOUT,
    )


# the fallback tunnels a tunnel module (ipip, gre, sit...) puts in every namespace once loaded
FALLBACK_TUNNELS = {"tunl0", "gre0", "gretap0", "erspan0", "ip_vti0", "ip6_vti0", "sit0", "ip6tnl0"}


def own_links(ns: harness.Namespace) -> set[str]:
    """The names of a namespace's links, without the kernel's fallback tunnels."""
    return set(ns.links()) - FALLBACK_TUNNELS


class Names:
    """Generated link names replaced by a label: one given by ``label`` (what the link is), or
    ``<gen0>``, ``<gen1>``… in order of first sight."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def label(self, name: str, what: str) -> None:
        if _GENERATED.match(name) and name not in self.seen:
            taken = set(self.seen.values())
            label, n = f"<{what}>", 1
            while label in taken:
                n += 1
                label = f"<{what} #{n}>"
            self.seen[name] = label

    def __call__(self, name: str) -> str:
        if not _GENERATED.match(name):
            return name
        return self.seen.setdefault(name, f"<gen{len(self.seen)}>")


def comparable_result(result: dict[str, Any], pods: dict[str, str]) -> dict[str, Any]:
    """A result without MACs, with generated names and pod paths replaced, and an empty
    ``dns`` dropped (``dns-empty``: the reference prints ``{}``)."""
    out = json.loads(json.dumps(result))
    names = Names()
    for intf in out.get("interfaces", []):
        intf.pop("mac", None)
        intf["name"] = names(intf["name"])
        if "sandbox" in intf:
            intf["sandbox"] = pods.get(intf["sandbox"], intf["sandbox"])
    if out.get("dns") == {}:
        del out["dns"]
    return out  # type: ignore[no-any-return]


_LINK_KEYS = ("mtu", "txqlen", "flags", "operstate", "group", "link_type")
# txqlen-zero (tests/reference_differences.py, v1.1.1 only): Go 1.1.1 gives veth, ipvlan and
# vlan links a queue length of 0 (a struct literal, fixed upstream in 1.6); pycni leaves the
# kernel's default (1000) but on a veth's host end (0, as v1.9.1). assert_same takes it out of
# comparisons with v1.1.1 only.
DEFAULT_QLEN_KINDS = ("veth", "ipvlan", "vlan")
_INFO_SKIP = {"info_slave_data"}  # a bridge port's ids and timers differ from run to run


def link_view(ns: harness.Namespace, names: Names | None = None) -> dict[str, Any]:
    """Every link of ``ns`` by (normalised) name: the attributes ``ip -d -j link`` shows that
    a plugin decides (MTU, queue length, flags, state, kind and its IFLA_INFO_DATA, master,
    parent), without MACs, indexes and counters."""
    names = names or Names()
    found = ns.links()
    for name, item in found.items():  # a generated name is known by what it is attached to
        info = item.get("linkinfo") or {}
        peer = item.get("link") or ("other netns" if "link_netnsid" in item else "")
        kind = info.get("info_kind", "") if isinstance(info, dict) else ""
        names.label(name, f"{kind} of {item.get('master', '')} to {peer}")
    out: dict[str, Any] = {}
    for name, item in sorted(found.items()):
        view: dict[str, Any] = {k: item.get(k) for k in _LINK_KEYS}
        info = item.get("linkinfo") or {}
        assert isinstance(info, dict)
        if info.get("info_kind") == "bridge":
            # a bridge's operstate follows its ports through the kernel's link watch, some
            # time after the ADD: UNKNOWN or UP depending on when one looks (seen both ways)
            del view["operstate"]
        view["linkinfo"] = {k: v for k, v in info.items() if k not in _INFO_SKIP}
        if isinstance(view["linkinfo"].get("info_data"), dict) and info.get("info_kind") in (
            "bridge",
        ):
            data = view["linkinfo"]["info_data"]
            view["linkinfo"]["info_data"] = {
                k: data.get(k) for k in ("vlan_filtering", "vlan_protocol", "vlan_default_pvid")
            }
        master = item.get("master")
        view["master"] = names(str(master)) if master else None
        parent = item.get("link")
        view["link"] = names(str(parent)) if parent else None
        view["has_link_netnsid"] = "link_netnsid" in item
        out[names(name)] = view
    return out


def addresses(ns: harness.Namespace, names: Names | None = None) -> dict[str, list[str]]:
    """Global addresses by (normalised) link name."""
    names = names or Names()
    data = ns.json("ip", "-j", "addr", "show")
    assert isinstance(data, list)
    return {
        names(item["ifname"]): sorted(
            f"{a['local']}/{a['prefixlen']}"
            for a in item.get("addr_info", [])
            if a.get("scope") == "global"
        )
        for item in data
    }


def routes(ns: harness.Namespace, names: Names | None = None) -> list[tuple[str, ...]]:
    """The main table of both families, as (dst, gateway, dev, scope, proto)."""
    names = names or Names()
    out = []
    for family in ("-4", "-6"):
        data = ns.json("ip", family, "-j", "route", "show")
        assert isinstance(data, list)
        for r in data:
            out.append(
                (
                    str(r.get("dst")),
                    str(r.get("gateway", "")),
                    names(str(r.get("dev", ""))),
                    str(r.get("scope", "")),
                    str(r.get("protocol", "")),
                )
            )
    return sorted(out)


def bridge_vlans(ns: harness.Namespace, names: Names | None = None) -> dict[str, Any]:
    """``bridge -j vlan show`` by (normalised) port name: each VLAN with its flags."""
    names = names or Names()
    data = ns.json("bridge", "-j", "vlan", "show")
    assert isinstance(data, list)
    return {
        names(item["ifname"]): sorted(
            (v["vlan"], tuple(sorted(v.get("flags", [])))) for v in item.get("vlans", [])
        )
        for item in data
    }


def _flat(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flat(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list | tuple) and value and isinstance(value[0], dict | list):
        for i, item in enumerate(value):
            _flat(item, f"{path}[{i}]", out)
    else:
        out[path] = value


def differences(ours: Any, theirs: Any) -> list[str]:
    """Every leaf where two nested structures differ, as ``path: ours != theirs`` (pytest's
    own diff of such structures is cut off in the guest's report)."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flat(ours, "", a)
    _flat(theirs, "", b)
    return [
        f"{key}: {a.get(key, '<missing>')!r} != {b.get(key, '<missing>')!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key, "<missing>") != b.get(key, "<missing>")
    ]


def state(ns: harness.Namespace) -> dict[str, Any]:
    """Links, addresses, routes and bridge VLANs of a namespace, comparable across runs."""
    names = Names()
    return {
        "links": link_view(ns, names),
        "addresses": addresses(ns, names),
        "routes": routes(ns, names),
        "vlans": bridge_vlans(ns, names),
    }


def _without_v1_1_1_qlen(ours: Any, theirs: Any) -> None:
    """``txqlen-zero``: in every pair of link views (found at the same place in both), the
    queue length of a veth, ipvlan or vlan link v1.1.1 left at 0 where pycni has the kernel's
    default is dropped from both."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in set(ours) & set(theirs):
            mine, other = ours[key], theirs[key]
            if isinstance(mine, dict) and isinstance(other, dict) and "txqlen" in mine:
                kind = (mine.get("linkinfo") or {}).get("info_kind")
                if (
                    kind in DEFAULT_QLEN_KINDS
                    and mine["txqlen"] == 1000
                    and not other.get("txqlen")
                ):
                    del mine["txqlen"]
                    other.pop("txqlen", None)
                continue
            _without_v1_1_1_qlen(mine, other)
    elif isinstance(ours, list | tuple) and isinstance(theirs, list | tuple):
        for mine, other in zip(ours, theirs, strict=False):
            _without_v1_1_1_qlen(mine, other)


def assert_same(ours: Any, theirs: Any, reference: str) -> None:
    """pycni's views equal the reference's, but for the table's differences that apply to it
    (tests/reference_differences.py); the message names the reference."""
    ours, theirs = json.loads(json.dumps(ours)), json.loads(json.dumps(theirs))
    if differences_table.applies("txqlen-zero", reference):
        _without_v1_1_1_qlen(ours, theirs)
    diff = differences(ours, theirs)
    assert not diff, f"pycni != Go plugins {reference}:\n" + "\n".join(diff)
