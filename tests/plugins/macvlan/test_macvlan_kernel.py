"""macvlan against the real kernel: traffic between two pods, the Go reference, DEL, rollback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import harness, node_view
from tests import reference_differences as differences
from tests.references import Reference

pytestmark = pytest.mark.kernel

MASTER = "mvmaster0"


def _master(node: harness.Namespace, with_default_route: bool = False) -> None:
    """A veth pair in the node; its first end is the macvlan master (up, carrier on)."""
    node.run("ip", "link", "add", "name", MASTER, "type", "veth", "peer", "name", "mvpeer0")
    node.run("ip", "link", "set", MASTER, "up")
    node.run("ip", "link", "set", "mvpeer0", "up")
    if with_default_route:
        node.run("ip", "addr", "add", "192.0.2.1/24", "dev", MASTER)
        node.run("ip", "route", "add", "default", "via", "192.0.2.254", "dev", MASTER)


def _conf(address: str | None = None, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "mvnet",
        "type": "macvlan",
        "master": MASTER,
        **extra,
    }
    if address is not None:
        conf["ipam"] = {
            "type": "static",
            "addresses": [{"address": address, "gateway": "10.70.0.1"}],
            "routes": [{"dst": "10.99.0.0/16"}],
        }
    return conf


def _run(
    plugin: Path, command: str, conf: dict[str, Any], pod: harness.Namespace, path: str, **kw: Any
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin, command, conf, container_id="ctr1", netns=pod.path, cni_path=path, **kw
    )


def _paths(plugin_dir: Path, go_plugin_dir: Path) -> str:
    return f"{plugin_dir}:{go_plugin_dir}"


def _link_state(pod: harness.Namespace, ifname: str = "eth0") -> dict[str, Any]:
    link = pod.links()[ifname]
    info = link["linkinfo"]
    return {
        "mtu": link["mtu"],
        "mac": link["address"],
        "up": "UP" in link["flags"],
        "kind": info["info_kind"],
        "mode": info["info_data"]["mode"],
        "addrs": pod.addresses(ifname),
        "routes": sorted(
            (r["dst"], r.get("gateway", ""), r.get("scope", ""))
            for r in pod.json("ip", "-j", "route", "show", "dev", ifname)  # type: ignore[union-attr]
        ),
        "arp_notify": pod.run("sysctl", "-n", f"net.ipv4.conf.{ifname}.arp_notify").stdout.strip(),
    }


def test_two_macvlan_pods_on_one_master_ping_each_other(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    _master(node)
    path = _paths(plugin_dir, go_plugin_dir)
    a, b = pod_factory(), pod_factory()
    with node.entered():
        ra = _run(plugin_dir / "macvlan", "ADD", _conf("10.70.0.11/24"), a, path).ok()
        _run(plugin_dir / "macvlan", "ADD", _conf("10.70.0.12/24"), b, path).ok()
    assert ra.json["interfaces"][0]["name"] == "eth0"  # type: ignore[index]
    assert ra.json["ips"][0]["interface"] == 0  # type: ignore[index]
    assert a.ping("10.70.0.12") and b.ping("10.70.0.11")
    # The master's own namespace has no new link: the macvlans live in the pods only.
    assert set(node.links()) == {"lo", MASTER, "mvpeer0"}
    with node.entered():
        _run(plugin_dir / "macvlan", "DEL", _conf("10.70.0.11/24"), a, path).ok()
    assert "eth0" not in a.links()
    assert not b.ping("10.70.0.11", timeout=1)


@pytest.mark.interop
@pytest.mark.parametrize(
    "extra",
    [
        {"mode": "private", "mtu": 1400, "mac": "02:11:22:33:44:55"},
        {"mode": "vepa", "mac": "02:11:22:33:44:56"},
        {"mac": "02:11:22:33:44:57"},
    ],
)
def test_same_result_and_kernel_state_as_go_reference(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
    extra: dict[str, Any],
) -> None:
    _master(node)
    path = _paths(plugin_dir, go_plugin_dir)
    ours, theirs = pod_factory(), pod_factory()
    conf = _conf("10.70.0.21/24", **extra)
    seen = []
    views: dict[str, list[dict[str, Any]]] = {}
    fixed = (str(extra["mac"]),)
    # One after the other: the same MAC twice on one master is refused by the kernel.
    for plugin, pod in ((plugin_dir / "macvlan", ours), (go_plugin_dir / "macvlan", theirs)):
        impl = "pycni" if pod is ours else "go"
        with node.entered():
            run = _run(plugin, "ADD", conf, pod, str(go_plugin_dir)).ok()
            state = _link_state(pod)
            views[impl] = [
                {"node": node_view.snapshot(node), "pod": node_view.snapshot(pod, fixed)}
            ]
            checked = {**conf, "prevResult": run.json}
            result = _comparable(run.json, pod, go_reference)
            # Our CHECK accepts what either implementation set up.
            _run(plugin_dir / "macvlan", "CHECK", checked, pod, path).ok()
            _run(plugin, "DEL", conf, pod, str(go_plugin_dir)).ok()
        assert set(pod.links()) == {"lo"}
        views[impl].append({"node": node_view.snapshot(node), "pod": node_view.snapshot(pod)})
        seen.append((result, state))
    assert seen[0] == seen[1]
    # what ip/tc/bridge/nft show on the node and in the pod (tests/node_view.py)
    whens = ("after ADD", "after DEL")
    for when, mine, other in zip(whens, views["pycni"], views["go"], strict=True):
        node_view.compare(mine, other, f"macvlan {extra} {when}", go_reference)


def _comparable(
    result: dict[str, Any], pod: harness.Namespace, reference: Reference
) -> dict[str, Any]:
    """A result with the pod path blanked and an empty ``dns`` dropped (``dns-empty``)."""
    out = json.loads(json.dumps(result))
    for intf in out["interfaces"]:
        if intf.get("sandbox") == pod.path:
            intf["sandbox"] = "<pod>"
    if out.get("dns") == {} and differences.applies("dns-empty", reference):
        del out["dns"]
    return out  # type: ignore[no-any-return]


def test_default_master_is_the_default_route_link_and_l2_is_up(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    _master(node, with_default_route=True)
    pod = pod_factory()
    conf = {"cniVersion": "1.0.0", "name": "mvnet", "type": "macvlan"}
    with node.entered():
        run = _run(plugin_dir / "macvlan", "ADD", conf, pod, str(plugin_dir)).ok()
    assert "ips" not in run.json
    link = pod.links()["eth0"]
    assert "UP" in link["flags"]
    assert link["link_index"] == node.links()[MASTER]["ifindex"]  # type: ignore[index]


def test_check_detects_a_changed_mode_and_missing_link(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    _master(node)
    pod = pod_factory()
    path = _paths(plugin_dir, go_plugin_dir)
    conf = _conf("10.70.0.31/24")
    with node.entered():
        result = _run(plugin_dir / "macvlan", "ADD", conf, pod, path).ok().json
        checked = {**conf, "prevResult": result}
        _run(plugin_dir / "macvlan", "CHECK", checked, pod, path).ok()
        wrong = _run(plugin_dir / "macvlan", "CHECK", {**checked, "mode": "private"}, pod, path)
        assert wrong.code == 1 and "mode bridge does not match" in wrong.json["msg"]  # type: ignore[operator]
        pod.run("ip", "link", "del", "eth0")
        gone = _run(plugin_dir / "macvlan", "CHECK", checked, pod, path)
        assert gone.code == 1 and "not found" in gone.json["msg"]  # type: ignore[operator]
        _run(plugin_dir / "macvlan", "DEL", conf, pod, path).ok()


def test_del_is_idempotent_and_tolerates_a_gone_netns(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    _master(node)
    pod = pod_factory()
    conf = _conf("10.70.0.41/24")
    path = _paths(plugin_dir, go_plugin_dir)
    with node.entered():
        _run(plugin_dir / "macvlan", "ADD", conf, pod, path).ok()
        for _ in range(2):
            _run(plugin_dir / "macvlan", "DEL", conf, pod, path).ok()
        gone = harness.Namespace(pod.name + "-gone")
        _run(plugin_dir / "macvlan", "DEL", conf, gone, path).ok()
        harness.exec_plugin(
            plugin_dir / "macvlan", "DEL", conf, container_id="ctr1", netns="", cni_path=path
        ).ok()
    assert set(pod.links()) == {"lo"}


@pytest.mark.parametrize("step", ["create", "rename", "ipam", "configure"])
def test_failed_add_leaves_nothing_behind(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    tmp_state: harness.State,
    step: str,
) -> None:
    _master(node)
    pod = pod_factory()
    conf = _conf()
    conf["ipam"] = {
        "type": "host-local",
        "subnet": "10.71.0.0/24",
        "dataDir": str(tmp_state.data_dir),
    }
    with node.entered():
        run = _run(
            plugin_dir / "macvlan",
            "ADD",
            conf,
            pod,
            _paths(plugin_dir, go_plugin_dir),
            extra_env={"PYCNI_TEST_FAIL_AT": step},
        )
    assert run.code == 1 and step in run.json["msg"]  # type: ignore[operator]
    assert set(pod.links()) == {"lo"}
    assert tmp_state.reservations("mvnet") == []


@pytest.mark.parametrize(
    ("extra", "code", "words"),
    [
        ({"mode": "bogus"}, 7, "unknown macvlan mode"),
        ({"mtu": 99999}, 7, "invalid MTU 99999"),
        ({"mac": "zz:11"}, 7, "for MAC addr"),
        ({"master": "nosuchlink"}, 999, 'failed to lookup master "nosuchlink"'),
        ({"mtu": "big"}, 7, "mtu must be a number"),
        # Go's uint32: v1.9.1 fails to unmarshal these; the message here names the key.
        ({"bcqueuelen": -1}, 7, "bcqueuelen must be a number in [0, 4294967295], got -1"),
        ({"bcqueuelen": 2**32}, 7, "bcqueuelen must be a number in [0, 4294967295]"),
        ({"bcqueuelen": "100"}, 7, "bcqueuelen must be a number"),
        ({"bcqueuelen": 1.5}, 7, "bcqueuelen must be a number"),
    ],
)
def test_bad_config_is_a_cni_error(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    extra: dict[str, Any],
    code: int,
    words: str,
) -> None:
    _master(node)
    pod = pod_factory()
    with node.entered():
        run = _run(plugin_dir / "macvlan", "ADD", _conf(**extra), pod, str(plugin_dir))
    assert run.code == 1, run.stderr
    body = json.loads(run.stdout)
    assert body["code"] == code and words in body["msg"], body
    assert set(pod.links()) == {"lo"}


def _bc_queue(pod: harness.Namespace) -> tuple[int, int]:
    """(bcqueuelen, usedbcqueuelen) of the pod's macvlan, as ``ip -d`` reports them."""
    data = pod.links()["eth0"]["linkinfo"]["info_data"]
    return int(data["bcqueuelen"]), int(data["usedbcqueuelen"])


def _bc_queue_add(
    plugin: Path, node: harness.Namespace, pod: harness.Namespace, path: str, **extra: Any
) -> tuple[int, int]:
    conf = _conf("10.70.0.31/24", **extra)
    with node.entered():
        _run(plugin, "ADD", conf, pod, path).ok()
        seen = _bc_queue(pod)
        _run(plugin, "DEL", conf, pod, path).ok()
    assert set(pod.links()) == {"lo"}
    return seen


def test_bcqueuelen_sets_the_broadcast_queue_of_the_master(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    """Refused before; now the kernel's IFLA_MACVLAN_BC_QUEUE_LEN (shared by the master's
    macvlans: the largest request is the one used); absent or 0 leaves the kernel's 1000."""
    _master(node)
    path = str(plugin_dir)
    assert _bc_queue_add(plugin_dir / "macvlan", node, pod_factory(), path) == (1000, 1000)
    assert _bc_queue_add(plugin_dir / "macvlan", node, pod_factory(), path, bcqueuelen=0) == (
        1000,
        1000,
    )
    big = _bc_queue_add(plugin_dir / "macvlan", node, pod_factory(), path, bcqueuelen=4321)
    assert big == (4321, 4321)


@pytest.mark.interop
@pytest.mark.parametrize("bcqueuelen", [0, 1, 4321, 2**32 - 1])
def test_bcqueuelen_as_upstream(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    upstream_reference: Any,
    bcqueuelen: int,
) -> None:
    """The pod link's broadcast queue lengths equal v1.9.1's for the same config."""
    _master(node)
    seen = {}
    for impl, plugin, path in (
        ("pycni", plugin_dir / "macvlan", str(plugin_dir)),
        (
            upstream_reference.name,
            upstream_reference.plugin_dir / "macvlan",
            str(upstream_reference.plugin_dir),
        ),
    ):
        seen[impl] = _bc_queue_add(plugin, node, pod_factory(), path, bcqueuelen=bcqueuelen)
    assert seen["pycni"] == seen[upstream_reference.name], (upstream_reference.label, seen)
