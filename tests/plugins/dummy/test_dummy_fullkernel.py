# ruff: noqa: F811  (pytest fixtures imported from tests.fullkernel.helpers)
"""dummy on a kernel with the dummy module: the pod gets a dummy link carrying its IPAM address,
CHECK accepts it, DEL removes it and the address reservation; failures roll back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests.fullkernel.helpers import (  # noqa: F401
    call,
    daemon_plugin_dir,
    links,
    normalized_result,
    pycni_dir,
    routes,
    settle,
)
from tests.references import Reference

pytestmark = pytest.mark.kernel


def _conf(state: harness.State, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "dummynet",
        "type": "dummy",
        "ipam": {
            "type": "host-local",
            "dataDir": str(state.data_dir),
            "ranges": [[{"subnet": "10.71.0.0/24"}], [{"subnet": "fd71::/64"}]],
            "routes": [{"dst": "10.99.0.0/16"}],
        },
        **extra,
    }


def test_pod_gets_dummy_link_with_its_address_and_del_removes_it(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, pycni_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(tmp_state)
    result = call(node, pycni_dir / "dummy", "ADD", conf, pod).ok().json
    link = pod.links()["eth0"]
    assert link["linkinfo"]["info_kind"] == "dummy"  # type: ignore[index]
    assert "UP" in link["flags"]  # type: ignore[operator]
    assert result["interfaces"] == [{"name": "eth0", "mac": link["address"], "sandbox": pod.path}]
    addrs = pod.addresses("eth0")
    assert "10.71.0.2/24" in addrs and "fd71::2/64" in addrs
    assert [ip["address"] for ip in result["ips"]] == ["10.71.0.2/24", "fd71::2/64"]  # type: ignore[index]
    assert all(ip["interface"] == 0 for ip in result["ips"])  # type: ignore[index]
    assert "10.99.0.0/16 via 10.71.0.1 dev eth0" in pod.run("ip", "-4", "route").stdout
    assert tmp_state.reservations("dummynet") == ["10.71.0.2", "fd71::2"]
    # CHECK with the result as prevResult passes
    call(node, pycni_dir / "dummy", "CHECK", {**conf, "prevResult": result}, pod).ok()
    call(node, pycni_dir / "dummy", "DEL", conf, pod).ok()
    assert set(pod.links()) == {"lo"}
    assert tmp_state.reservations("dummynet") == []
    # DEL again, and DEL of a namespace that is gone, succeed
    call(node, pycni_dir / "dummy", "DEL", conf, pod).ok()
    call(node, pycni_dir / "dummy", "DEL", conf, "/run/netns/pycni-no-such-ns").ok()


@pytest.mark.interop
def test_same_result_and_pod_state_as_go_reference(
    node: harness.Namespace,
    pod_factory: Any,
    tmp_path: Path,
    daemon_plugin_dir: Path,
    upstream_reference: Reference,
) -> None:
    """The same config through pycni (the daemon form: a Python start per exec costs seconds
    under TCG) and v1.9.1's dummy (Debian's v1.1.1 has none): the same result, the same pod
    links, addresses and routes after ADD, each CHECK accepting the other's pod, and an empty
    pod after DEL. Nothing is normalised but MACs and indexes."""
    seen = []
    for n, plugins in enumerate((daemon_plugin_dir, upstream_reference.plugin_dir)):
        pod = pod_factory()
        state = harness.State.make(tmp_path / f"impl{n}")  # each its own host-local store
        conf = _conf(state, dns={"nameservers": ["192.0.2.53"]})
        result = call(node, plugins / "dummy", "ADD", conf, pod).ok().json
        settle(pod)
        shown = normalized_result(result)
        for intf in shown["interfaces"]:
            assert intf.pop("sandbox") == pod.path
        seen.append((shown, links(pod), routes(pod)))
        other = upstream_reference.plugin_dir if plugins == daemon_plugin_dir else daemon_plugin_dir
        call(node, other / "dummy", "CHECK", {**conf, "prevResult": result}, pod).ok()
        call(node, plugins / "dummy", "DEL", conf, pod).ok()
        assert set(pod.links()) == {"lo"}
        assert state.reservations("dummynet") == []
    (ours, our_links, our_routes), (theirs, their_links, their_routes) = seen
    assert ours == theirs
    assert our_links == their_links, f"pycni != Go plugins {upstream_reference.name}"
    assert our_routes == their_routes, f"pycni != Go plugins {upstream_reference.name}"


def test_same_result_and_link_as_go_reference_shape(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, plugin_dir: Path
) -> None:
    """Without a Go dummy to run (Debian ships none; the test above compares with v1.9.1's):
    the result's shape is the reference's (IPAM's result with the one interface, ips pointing
    at it), checked field by field."""
    pod = pod_factory()
    conf = _conf(tmp_state, dns={"nameservers": ["192.0.2.53"]})
    result = call(node, plugin_dir / "dummy", "ADD", conf, pod).ok().json
    assert result["cniVersion"] == "1.0.0"
    assert sorted(set(result) - {"dns"}) == ["cniVersion", "interfaces", "ips", "routes"]
    assert result["routes"] == [{"dst": "10.99.0.0/16"}]
    # the reference keeps IPAM's DNS (host-local has none), not the config's
    assert result.get("dns", {}) == {}
    call(node, plugin_dir / "dummy", "DEL", conf, pod).ok()


def test_check_finds_a_changed_link(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(tmp_state)
    result = call(node, plugin_dir / "dummy", "ADD", conf, pod).ok().json
    pod.run("ip", "link", "set", "eth0", "down")
    run = call(node, plugin_dir / "dummy", "CHECK", {**conf, "prevResult": result}, pod)
    assert run.code != 0 and "Interface eth0 is down" in run.stdout
    call(node, plugin_dir / "dummy", "DEL", conf, pod).ok()


def test_without_ipam_is_a_config_error_and_creates_nothing(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(tmp_state)
    del conf["ipam"]
    run = call(node, plugin_dir / "dummy", "ADD", conf, pod)
    assert run.code == 1 and run.json["code"] == 7, run.stdout
    assert "requires an IPAM configuration" in str(run.json["msg"])
    assert set(pod.links()) == {"lo"}


def test_failed_ipam_rolls_back_the_link(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(tmp_state)
    conf["ipam"]["ranges"] = [[{"subnet": "10.71.0.0/30"}]]  # one usable address
    other = pod_factory()
    call(node, plugin_dir / "dummy", "ADD", conf, other, cid="first").ok()
    run = call(node, plugin_dir / "dummy", "ADD", conf, pod, cid="second")
    assert run.code == 1, run.stdout
    assert set(pod.links()) == {"lo"}
    call(node, plugin_dir / "dummy", "DEL", conf, other, cid="first").ok()
    assert tmp_state.reservations("dummynet") == []


def test_a_failure_at_any_step_leaves_nothing(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(tmp_state)
    for step in ("create", "ipam", "configure"):
        run = call(node, plugin_dir / "dummy", "ADD", conf, pod, env={"PYCNI_TEST_FAIL_AT": step})
        assert run.code == 1 and "injected failure" in run.stdout, run.stdout
        assert set(pod.links()) == {"lo"}, step
        assert tmp_state.reservations("dummynet") == [], step
