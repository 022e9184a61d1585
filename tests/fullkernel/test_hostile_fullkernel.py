# ruff: noqa: F811  (pytest fixtures imported from tests.fullkernel.helpers)
"""Hostile configs for dummy and vrf (the hostile-config suite's rules, on a kernel with their
modules): a failed ADD is a CNI error with a config/IO code, never a traceback or 999 for a
config value, and leaves the node, the pod and the reservations as they were; a successful
ADD is deleted again and leaves them as they were too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import AF_INET, AF_INET6
from pycni.skel import run as skel
from tests import harness
from tests.fullkernel.helpers import daemon_plugin_dir  # noqa: F401
from tests.unit.test_hostile_config import FieldPath, hostile, put

pytestmark = pytest.mark.kernel

SETTINGS = settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ALLOWED_CODES = {1, 2, 4, 6, 7}
VRF_FIELDS: list[FieldPath] = [
    ("vrfname",),
    ("table",),
    ("prevResult", "interfaces", 0, "name"),
    ("prevResult", "ips", 0, "address"),
]
DUMMY_FIELDS: list[FieldPath] = [
    ("ipam", "type"),
    ("ipam", "ranges", 0, 0, "subnet"),
    ("ipam", "routes", 0, "dst"),
]


def _snapshot(node: harness.Namespace, pod: harness.Namespace, data_dir: Path) -> Any:
    """Node link names; the pod's links, addresses and routes of every table; reservations.
    Read in-process over rtnetlink: a process per `ip` call costs seconds in the guest."""
    with node.entered(), rtnl() as kernel:
        node_links = sorted(link.name for link in kernel.links())
    with pod.entered(), rtnl() as kernel:
        pod_links = sorted(
            (link.name, link.kind, link.master, link.up, link.mtu, link.mac)
            for link in kernel.links()
        )
        addrs = sorted(repr(a) for a in kernel.addresses())
        routes = sorted(repr(r) for family in (AF_INET, AF_INET6) for r in kernel.routes(family))
    leases = sorted(str(p) for p in data_dir.rglob("*") if p.is_file() and p.name[0].isdigit())
    return node_links, pod_links, addrs, routes, leases


def _add_then_clean(
    plugin: str,
    plugin_dir: Path,
    node: harness.Namespace,
    pod: harness.Namespace,
    data_dir: Path,
    config: dict[str, Any],
) -> None:
    before = _snapshot(node, pod, data_dir)
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "hostile1",
        "CNI_NETNS": pod.path,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(plugin_dir),
    }
    stdin = json.dumps(config).encode()
    with node.entered():
        out = skel.run(plugin, env, stdin)
    assert b"Traceback" not in out.stdout
    if out.exit_code != 0:
        body = json.loads(out.stdout)
        not_found = str(body["msg"]).startswith('failed to find plugin "')
        assert body["code"] in ALLOWED_CODES or not_found, body
        assert _snapshot(node, pod, data_dir) == before, body
        return
    with node.entered():
        gone = skel.run(plugin, {**env, "CNI_COMMAND": "DEL"}, stdin)
    assert gone.exit_code == 0, gone.stdout
    assert _snapshot(node, pod, data_dir) == before


def _pod(node: harness.Namespace, pod_factory: Any, with_eth0: bool) -> harness.Namespace:
    attr = f"_hostile_pod_{with_eth0}"
    pod = getattr(node, attr, None)
    if pod is None or not pod.exists():
        pod = pod_factory()
        if with_eth0:
            pod.run("ip", "link", "add", "eth0", "type", "dummy")
            pod.run("ip", "addr", "add", "10.75.0.2/24", "dev", "eth0")
            pod.run("ip", "link", "set", "eth0", "up")
            pod.run("ip", "route", "add", "10.99.0.0/16", "via", "10.75.0.1")
        setattr(node, attr, pod)
    return pod  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", VRF_FIELDS, ids=str)
@SETTINGS
@given(value=hostile)
def test_hostile_vrf_field_changes_nothing_on_failure(
    path: FieldPath,
    value: Any,
    node: harness.Namespace,
    pod_factory: Any,
    daemon_plugin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pod = _pod(node, pod_factory, with_eth0=True)
    base = {
        "cniVersion": "1.0.0",
        "name": "hostile",
        "type": "vrf",
        "vrfname": "red",
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path}],
            "ips": [{"address": "10.75.0.2/24", "interface": 0}],
        },
    }
    data_dir = tmp_path_factory.mktemp("hostile-vrf")
    _add_then_clean("vrf", daemon_plugin_dir, node, pod, data_dir, put(base, path, value))


@pytest.mark.parametrize("path", DUMMY_FIELDS, ids=str)
@SETTINGS
@given(value=hostile)
def test_hostile_dummy_field_changes_nothing_on_failure(
    path: FieldPath,
    value: Any,
    node: harness.Namespace,
    pod_factory: Any,
    daemon_plugin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pod = _pod(node, pod_factory, with_eth0=False)
    data_dir = tmp_path_factory.mktemp("hostile-dummy")
    base = {
        "cniVersion": "1.0.0",
        "name": "hostile",
        "type": "dummy",
        "ipam": {
            "type": "host-local",
            "dataDir": str(data_dir),
            "ranges": [[{"subnet": "10.76.0.0/24"}]],
            "routes": [{"dst": "10.98.0.0/16"}],
        },
    }
    _add_then_clean("dummy", daemon_plugin_dir, node, pod, data_dir, put(base, path, value))
