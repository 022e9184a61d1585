"""tuning takes the MAC the Go reference takes, for every combination of where one is asked for.

The config's ``mac``, CNI_ARGS ``MAC=``, ``runtimeConfig.mac`` and ``args.cni.mac`` (also
present but empty, which only a ``*string`` field tells from absent): each combination is one
ADD of pycni's tuning and of the reference's, in turn on a veth in a pod, and the pod
interface must have the same MAC after each. tests/unit/test_mac_precedence.py holds the same
table for bridge, macvlan and tap against their reference source.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Namespace, exec_plugin
from tests.references import Reference

pytestmark = [pytest.mark.kernel, pytest.mark.interop]

VALUE = {
    "config": "02:00:00:00:00:01",
    "CNI_ARGS": "02:00:00:00:00:02",
    "args.cni": "02:00:00:00:00:03",
    "runtimeConfig": "02:00:00:00:00:04",
}
ORIGINAL = "02:00:00:00:00:aa"


def _cases() -> list[dict[str, str]]:
    out = [
        {s: VALUE[s] for s in chosen}
        for n in range(len(VALUE) + 1)
        for chosen in itertools.combinations(VALUE, n)
    ]
    # args.cni.mac given as "": absent for three plugins, an override for tuning's *string
    out += [{"args.cni": ""}, {"args.cni": "", "runtimeConfig": VALUE["runtimeConfig"]}]
    out += [{"args.cni": "", "config": VALUE["config"], "CNI_ARGS": VALUE["CNI_ARGS"]}]
    return out


def _conf(given: dict[str, str], pod: Namespace, data_dir: Path) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "macnet",
        "type": "tuning",
        "dataDir": str(data_dir),
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path}],
            "ips": [],
        },
    }
    if "config" in given:
        conf["mac"] = given["config"]
    if "args.cni" in given:
        conf["args"] = {"cni": {"mac": given["args.cni"]}}
    if "runtimeConfig" in given:
        conf["runtimeConfig"] = {"mac": given["runtimeConfig"]}
    return conf


def _run(plugin: Path, node: Namespace, pod: Namespace, command: str, **kw: Any) -> None:
    with node.entered():
        exec_plugin(plugin, command, container_id="mac", netns=pod.path, **kw).ok()


def _macs(plugin: Path, node: Namespace, pod: Namespace, data_dir: Path) -> list[str]:
    """The pod interface's MAC after each case's ADD, one after the other on the same link (an
    ADD that asks for none leaves the last one); one DEL at the end removes the backup file.
    (What that DEL restores after repeated ADDs is not compared: the reference's backup is
    rewritten by each ADD, pycni's keeps the first ADD's originals.)"""
    pod.run("ip", "link", "add", "eth0", "address", ORIGINAL, "type", "veth", "peer", "peer0")
    found = []
    for given in _cases():
        env = f"IgnoreUnknown=1;MAC={given['CNI_ARGS']}" if "CNI_ARGS" in given else ""
        config = _conf(given, pod, data_dir)
        _run(plugin, node, pod, "ADD", config=config, cni_args=env, cni_path=str(plugin.parent))
        found.append(str(pod.links()["eth0"]["address"]))
    _run(plugin, node, pod, "DEL", config=_conf({}, pod, data_dir), cni_path=str(plugin.parent))
    return found


def test_the_pod_gets_the_mac_the_reference_gives(
    node: Namespace,
    pod_factory: Any,
    tmp_path: Path,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
) -> None:
    ours = _macs(plugin_dir / "tuning", node, pod_factory(), tmp_path / "py")
    theirs = _macs(go_plugin_dir / "tuning", node, pod_factory(), tmp_path / "go")
    assert list(zip(_cases(), ours, strict=True)) == list(zip(_cases(), theirs, strict=True))
    assert ours[_cases().index({})] == ORIGINAL  # something to compare: a case changes nothing
    assert ORIGINAL not in ours[1 : len(VALUE) + 1]  # and each single source changes the MAC
