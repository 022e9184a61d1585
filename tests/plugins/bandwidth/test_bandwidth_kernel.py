"""bandwidth against the real kernel: measured throughput, the Go reference's tc state, CHECK,
DEL and rollback."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests import harness, node_view

pytestmark = pytest.mark.kernel

NODE_IP, POD_IP = "10.80.0.1", "10.80.0.2"
RATE = 8_000_000  # bit/s = 1 MB/s
BURST = 262_144  # bits = 32 KiB


def _veth(node: harness.Namespace, pod: harness.Namespace, host: str) -> dict[str, Any]:
    """A veth between node and pod with addresses; returns the prevResult a main plugin gives."""
    node.run(
        "ip", "link", "add", "name", host, "type", "veth", "peer", "name", "eth0", "netns", pod.path
    )
    node.run("ip", "addr", "add", f"{NODE_IP}/24", "dev", host)
    node.run("ip", "link", "set", host, "up")
    pod.run("ip", "addr", "add", f"{POD_IP}/24", "dev", "eth0")
    pod.run("ip", "link", "set", "eth0", "up")
    return {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": host, "mac": node.links()[host]["address"]},
            {"name": "eth0", "mac": pod.links()["eth0"]["address"], "sandbox": pod.path},
        ],
        "ips": [{"address": f"{POD_IP}/24", "interface": 1}],
    }


def _conf(prev: dict[str, Any] | None, **limits: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "bwnet", "type": "bandwidth", **limits}
    if prev is not None:
        conf["prevResult"] = prev
    return conf


BOTH = {"ingressRate": RATE, "ingressBurst": BURST, "egressRate": RATE, "egressBurst": BURST}


def _run(
    plugin: Path, command: str, conf: dict[str, Any], pod: harness.Namespace, **kw: Any
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin, command, conf, container_id="ctr1", netns=pod.path, cni_path="/nonexistent", **kw
    )


def _throughput(
    sender: harness.Namespace, receiver: harness.Namespace, addr: str, size: int
) -> float:
    """Bytes per second of one TCP transfer of ``size`` bytes from sender to receiver."""
    with receiver.entered():
        server = socket.socket()
    with sender.entered():
        client = socket.socket()
    server.bind((addr, 0))
    server.listen(1)
    done: list[float] = []

    def drain() -> None:
        conn, _ = server.accept()
        got = 0
        while chunk := conn.recv(65536):
            got += len(chunk)
        done.append(time.monotonic())
        assert got == size
        conn.close()

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        client.connect(server.getsockname())
        start = time.monotonic()
        client.sendall(b"x" * size)
        client.shutdown(socket.SHUT_WR)
        reader.join(timeout=20)
    finally:
        client.close()
        server.close()
    assert done, "the transfer did not finish"
    return size / (done[0] - start)


def test_rate_limit_holds_for_real_transfers_both_ways(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    unlimited = _throughput(pod, node, NODE_IP, 4_000_000)
    with node.entered():
        _run(plugin_dir / "bandwidth", "ADD", _conf(prev, **BOTH), pod).ok()
    limit = RATE / 8
    into_pod = _throughput(node, pod, POD_IP, 1_000_000)
    out_of_pod = _throughput(pod, node, NODE_IP, 1_000_000)
    for measured in (into_pod, out_of_pod):
        assert limit / 2 < measured < limit * 2, (measured, limit)
    assert unlimited > 10 * limit, unlimited
    with node.entered():
        _run(plugin_dir / "bandwidth", "DEL", _conf(prev, **BOTH), pod).ok()
    assert not [name for name in node.links() if name.startswith("bwp")]


def _tc_state(node: harness.Namespace, host: str, ifb: str) -> dict[str, Any]:
    def norm(items: Any) -> list[Any]:
        out = []
        for item in items:
            item = {k: v for k, v in item.items() if k not in ("dev", "refcnt")}
            out.append(item)
        return out

    filters = node.json("tc", "-j", "filter", "show", "dev", host, "ingress")
    actions = [
        {k: a[k] for k in ("kind", "mirred_action", "direction", "to_dev", "control_action")}
        for f in filters  # type: ignore[union-attr]
        for a in f.get("options", {}).get("actions", [])
    ]
    flowids = [f["options"].get("flowid") for f in filters if "options" in f]  # type: ignore[union-attr]
    link = node.links()[ifb]
    return {
        "host": norm(node.json("tc", "-j", "qdisc", "show", "dev", host)),
        "ifb": norm(node.json("tc", "-j", "qdisc", "show", "dev", ifb)),
        "actions": actions,
        "flowids": flowids,
        "ifb_link": (
            link["mtu"],
            link.get("txqlen", 0),
            "UP" in link["flags"],
            link["linkinfo"]["info_kind"],
        ),
    }


@pytest.mark.interop
def test_same_result_and_tc_state_as_go_reference(
    pod_factory: Any, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    """Twin nodes, the same veth and limits: the same result, the same tc objects (the
    reference's ingress filter has two mirred actions, ours too), the same ifb, and what
    ip/tc show on the node after ADD and after DEL (tests/node_view.py)."""
    seen = []
    views: dict[str, list[dict[str, Any]]] = {}
    limits = {
        "ingressRate": 1_000_000,
        "ingressBurst": 100_000,
        "egressRate": 3_000_000,
        "egressBurst": 123_456,
    }
    for impl, plugin in (("pycni", plugin_dir / "bandwidth"), ("go", go_plugin_dir / "bandwidth")):
        node = harness.create_namespace("node")
        try:
            pod = pod_factory()
            host = "bwh0"
            prev = _veth(node, pod, host)
            node.run("ip", "link", "set", host, "mtu", "1400")
            conf = _conf(prev, **limits)
            with node.entered():
                result = _run(plugin, "ADD", conf, pod).ok().json
                ifb = result["interfaces"][-1]  # type: ignore[index]
                state = _tc_state(node, host, ifb["name"])
                views[impl] = [node_view.snapshot(node)]
                # Our CHECK accepts what either implementation set up.
                _run(plugin_dir / "bandwidth", "CHECK", {**conf, "prevResult": result}, pod).ok()
                _run(plugin, "DEL", conf, pod).ok()
                assert ifb["name"] not in node.links()
            views[impl].append(node_view.snapshot(node))
        finally:
            node.delete()
        result["interfaces"] = [  # type: ignore[index]
            {"name": i["name"], "mac": "M", **({"sandbox": "P"} if "sandbox" in i else {})}
            for i in result["interfaces"]  # type: ignore[attr-defined]
        ]
        result.pop("dns", None)
        seen.append((result, state))
    assert seen[0] == seen[1]
    assert seen[0][0]["interfaces"][-1]["name"].startswith("bwp")  # type: ignore[index]
    whens = ("after ADD", "after DEL")
    for when, ours, theirs in zip(whens, views["pycni"], views["go"], strict=True):
        node_view.assert_same(ours, theirs, f"bandwidth {when}")  # the test made the veth
    actions = [f.get("options", {}).get("actions", []) for f in views["pycni"][0]["filter"]]
    assert [[a["control_action"]["type"] for a in each] for each in actions if each] == [
        ["stolen", "pass"]
    ]


def test_check_notices_a_changed_shaper(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    conf = _conf(prev, **BOTH)
    with node.entered():
        result = _run(plugin_dir / "bandwidth", "ADD", conf, pod).ok().json
        checked = {**conf, "prevResult": result}
        _run(plugin_dir / "bandwidth", "CHECK", checked, pod).ok()
        node.run(
            "tc",
            "qdisc",
            "change",
            "dev",
            "bwh0",
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            "2mbit",
            "burst",
            "32kb",
            "latency",
            "25ms",
        )
        bad = _run(plugin_dir / "bandwidth", "CHECK", checked, pod)
        assert bad.code == 1 and bad.json["msg"] == "Rate doesn't match"
        _run(plugin_dir / "bandwidth", "DEL", conf, pod).ok()


def test_runtime_config_capability_and_top_level_precedence(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    runtime = {"bandwidth": {"ingressRate": 4_000_000, "ingressBurst": BURST}}
    with node.entered():
        out = _run(plugin_dir / "bandwidth", "ADD", _conf(prev, runtimeConfig=runtime), pod)
    assert len(out.ok().json["interfaces"]) == 2  # type: ignore[arg-type]  # no ifb: no egress
    qdisc = node.json("tc", "-j", "qdisc", "show", "dev", "bwh0")[0]  # type: ignore[index]
    assert qdisc["kind"] == "tbf" and qdisc["options"]["rate"] == 500_000
    node.run("tc", "qdisc", "del", "dev", "bwh0", "root")
    # Any top-level key makes the top-level entry win as a whole (egress only here).
    conf = _conf(prev, runtimeConfig=runtime, egressRate=RATE, egressBurst=BURST)
    with node.entered():
        out = _run(plugin_dir / "bandwidth", "ADD", conf, pod).ok()
    assert out.json["interfaces"][-1]["name"].startswith("bwp")  # type: ignore[index]
    assert node.json("tc", "-j", "qdisc", "show", "dev", "bwh0", "root")[0]["kind"] != "tbf"  # type: ignore[index]
    with node.entered():
        _run(plugin_dir / "bandwidth", "DEL", conf, pod).ok()


def test_no_limits_passes_the_prev_result_through(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    with node.entered():
        out = _run(plugin_dir / "bandwidth", "ADD", _conf(prev, ingressRate=0), pod).ok()
    assert out.json["interfaces"] == prev["interfaces"]
    assert node.json("tc", "-j", "qdisc", "show", "dev", "bwh0", "root")[0]["kind"] != "tbf"  # type: ignore[index]


@pytest.mark.parametrize("step", ["ingress-tbf", "ifb", "redirect", "egress-tbf"])
def test_failed_add_leaves_no_shaper_behind(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, step: str
) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    before = node.json("tc", "-j", "qdisc", "show", "dev", "bwh0")
    with node.entered():
        run = _run(
            plugin_dir / "bandwidth",
            "ADD",
            _conf(prev, **BOTH),
            pod,
            extra_env={"PYCNI_TEST_FAIL_AT": step},
        )
    assert run.code == 1 and step in run.json["msg"]  # type: ignore[operator]
    assert node.json("tc", "-j", "qdisc", "show", "dev", "bwh0") == before
    assert set(node.links()) == {"lo", "bwh0"}


def test_del_is_idempotent(node: harness.Namespace, pod_factory: Any, plugin_dir: Path) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    with node.entered():
        _run(plugin_dir / "bandwidth", "ADD", _conf(prev, **BOTH), pod).ok()
        for _ in range(2):
            _run(plugin_dir / "bandwidth", "DEL", _conf(prev, **BOTH), pod).ok()
    assert set(node.links()) == {"lo", "bwh0"}


@pytest.mark.parametrize(
    ("limits", "code", "words"),
    [
        ({"ingressRate": RATE}, 7, "burst must also be set"),
        ({"egressBurst": BURST}, 7, "rate must also be set"),
        ({"ingressRate": -1, "ingressBurst": 8}, 7, "non-negative integer"),
        ({"ingressRate": RATE, "ingressBurst": 8 * 2**32}, 7, "more than 4GB"),
        ({"egressRate": "fast", "egressBurst": BURST}, 7, "egressRate"),
        # A bucket of no byte at that rate: the kernel's EINVAL (v1.9.1: "create qdisc").
        ({"egressRate": 2**64 - 1, "egressBurst": 8_000_000}, 7, "egressBurst 8000000 bits"),
        ({"ingressRate": 8 * 2**40, "ingressBurst": 800}, 7, "too small for ingressRate"),
        ({"ingressRate": RATE, "ingressBurst": 7}, 7, "ingressBurst 7 bits is too small"),
    ],
)
def test_bad_config_is_a_cni_error(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    limits: dict[str, Any],
    code: int,
    words: str,
) -> None:
    pod = pod_factory()
    prev = _veth(node, pod, "bwh0")
    with node.entered():
        run = _run(plugin_dir / "bandwidth", "ADD", _conf(prev, **limits), pod)
    body = json.loads(run.stdout)
    assert run.code == 1 and body["code"] == code and words in body["msg"], body
    assert set(node.links()) == {"lo", "bwh0"}
    assert [q["kind"] for q in node.json("tc", "-j", "qdisc", "show", "dev", "bwh0")] == [  # type: ignore[union-attr]
        "noqueue"
    ]


def test_needs_a_prev_result_and_a_veth(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    with node.entered():
        run = _run(plugin_dir / "bandwidth", "ADD", _conf(None, **BOTH), pod)
    assert run.code == 1 and "chained plugin" in run.json["msg"]  # type: ignore[operator]
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "lo", "sandbox": pod.path}]}
    with node.entered():
        run = harness.exec_plugin(
            plugin_dir / "bandwidth",
            "ADD",
            _conf(prev, **BOTH),
            container_id="c",
            netns=pod.path,
            ifname="lo",
            cni_path="/nonexistent",
        )
    assert run.code == 1 and "no veth peer" in run.json["msg"]  # type: ignore[operator]


# Rates around 2^32 bytes/s: below it the tbf's 32-bit rate holds it, from it on the kernel
# needs TCA_TBF_RATE64 (it reports the 32-bit field as ~0 and the real rate beside it).
WIDE_RATES = [8 * (2**32 - 1), 8 * 2**32, 8 * (2**32 + 1), 100_000_000_000, 10**12]
WIDE_BURST = 8 * 1_000_000


def _tbf_of(node: harness.Namespace, dev: str) -> dict[str, Any]:
    """What ``tc -j qdisc show`` says of the link's root tbf (rate in bytes/s)."""
    found = [q for q in node.json("tc", "-j", "qdisc", "show", "dev", dev) if q["kind"] == "tbf"]  # type: ignore[union-attr]
    assert len(found) == 1, found
    return {k: v for k, v in found[0].items() if k not in ("dev", "refcnt")}


def _wide_add(
    plugin: Path, node: harness.Namespace, pod: harness.Namespace, rate: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """ADD both directions at ``rate`` on a fresh veth; (ingress tbf, egress (ifb) tbf)."""
    prev = _veth(node, pod, "bwh0")
    limits = {"ingressRate": rate, "ingressBurst": WIDE_BURST}
    limits |= {"egressRate": rate, "egressBurst": WIDE_BURST}
    conf = _conf(prev, **limits)
    with node.entered():
        result = _run(plugin, "ADD", conf, pod).ok().json
        ifb = result["interfaces"][-1]["name"]  # type: ignore[index]
        seen = (_tbf_of(node, "bwh0"), _tbf_of(node, ifb))
        _run(plugin, "CHECK", {**conf, "prevResult": result}, pod).ok()
        _run(plugin, "DEL", conf, pod).ok()
    return seen


@pytest.mark.parametrize("rate", WIDE_RATES, ids=lambda r: f"{r}bit")
def test_rates_of_2_to_the_32_bytes_and_above_reach_the_kernel_whole(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, rate: int
) -> None:
    """Refused above 34 Gbit/s before rate64: now the kernel holds the whole rate both ways,
    and CHECK reads it back (from TCA_TBF_RATE64)."""
    ingress, egress = _wide_add(plugin_dir / "bandwidth", node, pod_factory(), rate)
    assert ingress["options"]["rate"] == egress["options"]["rate"] == rate // 8
    assert not [name for name in node.links() if name.startswith("bwp")]


@pytest.mark.interop
@pytest.mark.parametrize("rate", WIDE_RATES, ids=lambda r: f"{r}bit")
def test_wide_rates_give_the_qdiscs_of_upstream(
    pod_factory: Any, plugin_dir: Path, upstream_reference: Any, rate: int
) -> None:
    """The tbf the kernel reports (rate, burst, lat, limit) is the one v1.9.1 makes, just below,
    at and above 2^32 bytes/s."""
    seen = {}
    for impl, plugin in (
        ("pycni", plugin_dir / "bandwidth"),
        (upstream_reference.name, upstream_reference.plugin_dir / "bandwidth"),
    ):
        node = harness.create_namespace("node")
        try:
            seen[impl] = _wide_add(plugin, node, pod_factory(), rate)
        finally:
            node.delete()
    assert seen["pycni"] == seen[upstream_reference.name], (upstream_reference.label, seen)
