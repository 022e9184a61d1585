"""deploy/kubernetes/pycni.yaml against the Kubernetes schema (kubernetes-validate's offline
schemas of a current release, strict: an unknown field fails), plus what the schema cannot
see: references between the objects, the mounts a CNI needs, no blanket privilege. What of
it runs for real is tests/integration/test_image_node.py's (docs/kubernetes.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pycni import __version__

MANIFEST = Path(__file__).resolve().parents[2] / "deploy/kubernetes/pycni.yaml"
K8S_VERSION = "1.33.0"  # a current release; kubernetes-validate also knows newer ones


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d is not None]


def by_kind(kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents() if d["kind"] == kind]
    return found


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = by_kind("DaemonSet")["spec"]["template"]["spec"]
    return spec


def containers() -> dict[str, dict[str, Any]]:
    spec = pod_spec()
    return {c["name"]: c for c in spec["initContainers"] + spec["containers"]}


@pytest.mark.parametrize("version", [K8S_VERSION, kubernetes_validate.latest_version()])
def test_every_object_is_valid_against_the_schema(version: str) -> None:
    kinds = []
    for doc in documents():
        kubernetes_validate.validate(doc, version, strict=True)
        kinds.append(doc["kind"])
    assert sorted(kinds) == sorted(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret",
         "ConfigMap", "DaemonSet"]
    )  # fmt: skip


def test_the_validator_catches_a_misspelled_field() -> None:
    """Proof the check above can fail: strict mode rejects what a typo would give."""
    ds = copy.deepcopy(by_kind("DaemonSet"))
    ds["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
    ds = copy.deepcopy(by_kind("DaemonSet"))
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPropagation"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


def test_the_node_pod_is_what_a_cni_needs() -> None:
    spec = pod_spec()
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    effects = {t.get("effect") for t in spec["tolerations"] if t.get("operator") == "Exists"}
    assert {"NoSchedule", "NoExecute"} <= effects
    assert [c["name"] for c in spec["initContainers"]] == ["install-cni"]
    assert [c["name"] for c in spec["containers"]] == ["daemon", "agent"]
    for name, c in containers().items():
        assert c["image"] == f"localhost/pycni:{__version__}", name
        context = c.get("securityContext", {})
        assert not context.get("privileged"), f"{name}: capabilities, not privileged"
        assert context["capabilities"]["drop"] == ["ALL"], name
        assert c["command"][0] == "/opt/pycni/current/venv/bin/pycni-image"
    assert containers()["install-cni"]["command"][1:] == ["install-cni"]
    assert containers()["daemon"]["command"][1:] == ["daemon"]
    assert containers()["agent"]["command"][1:] == ["agent"]
    assert containers()["agent"]["args"] == ["--net-conf", "/etc/pycni/net-conf.json"]
    daemon_caps = set(containers()["daemon"]["securityContext"]["capabilities"]["add"])
    assert daemon_caps == {"NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"}
    assert "exec" in containers()["daemon"]["livenessProbe"]


def _host_paths() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_spec()["volumes"]}


def test_mounts_name_declared_volumes_and_the_cni_dirs() -> None:
    volumes = _host_paths()
    mounted: dict[str, dict[str, str]] = {}
    for name, c in containers().items():
        for m in c["volumeMounts"]:
            assert m["name"] in volumes, f"{name} mounts undeclared volume {m['name']}"
            # Bidirectional is refused by the API server outside privileged containers
            assert m.get("mountPropagation", "None") in ("None", "HostToContainer"), m
            if "hostPath" in volumes[m["name"]]:
                mounted.setdefault(name, {})[volumes[m["name"]]["hostPath"]["path"]] = m[
                    "mountPath"
                ]
    assert mounted["install-cni"] == {
        "/opt/cni/bin": "/host/opt/cni/bin",
        "/etc/cni/net.d": "/host/etc/cni/net.d",
        "/opt/pycni": "/host/opt/pycni",
    }
    assert {"/run/pycni", "/run/netns", "/opt/cni/bin", "/etc/cni/net.d"} <= set(mounted["daemon"])
    netns = [m for m in containers()["daemon"]["volumeMounts"] if m["mountPath"] == "/run/netns"]
    assert netns[0]["mountPropagation"] == "HostToContainer"
    assert mounted["agent"]["/run/flannel"] == "/run/flannel"


def test_config_and_secret_references_resolve() -> None:
    secret, config = by_kind("Secret"), by_kind("ConfigMap")
    namespace = by_kind("Namespace")["metadata"]["name"]
    for doc in documents():
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == namespace, doc["kind"]
    assert _host_paths()["pycni-cfg"]["configMap"]["name"] == config["metadata"]["name"]
    for c in containers().values():
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == secret["metadata"]["name"]
                assert ref["key"] in secret["stringData"]
    binding = by_kind("ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == pod_spec()["serviceAccountName"]


def test_the_configmap_holds_flannels_two_files() -> None:
    data = by_kind("ConfigMap")["data"]
    conflist = json.loads(data["cni-conf.json"])
    assert [p["type"] for p in conflist["plugins"]] == ["flannel", "portmap"]
    net_conf = json.loads(data["net-conf.json"])
    assert net_conf["Network"] == "10.244.0.0/16" and net_conf["Backend"]["Type"] == "vxlan"
