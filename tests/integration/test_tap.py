"""tap against the real kernel: link attributes, bridge in the pod, IPAM, CHECK, DEL, rollback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pycni.skel import run as skel
from pycni.skel import selinux
from pycni.skel.host import RealHost
from tests import harness, references

pytestmark = pytest.mark.kernel

MAC = "02:54:00:aa:bb:01"


def _conf(**extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "name": "tapnet", "type": "tap", **extra}


def _ipam(state: harness.State, subnet: str = "10.71.0.0/24") -> dict[str, Any]:
    return {
        "type": "host-local",
        "subnet": subnet,
        "dataDir": str(state.data_dir),
        "routes": [{"dst": "10.98.0.0/16"}],
    }


def _run(
    plugin_dir: Path, command: str, conf: dict[str, Any], pod: harness.Namespace, **kw: Any
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin_dir / "tap",
        command,
        conf,
        container_id="ctr1",
        netns=pod.path,
        cni_path=str(plugin_dir),
        **kw,
    )


def _tun(pod: harness.Namespace, ifname: str = "eth0") -> dict[str, Any]:
    link = pod.links()[ifname]
    info = link["linkinfo"]
    assert isinstance(info, dict) and info["info_kind"] == "tun"
    data: dict[str, Any] = dict(info["info_data"])
    data.update(mtu=link["mtu"], mac=link["address"], up="UP" in str(link["flags"]))
    data["master"] = link.get("master", "")
    return data


def test_l2_tap_with_mac_mtu_multiqueue_owner_group(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(mac=MAC, mtu=1400, multiQueue=True, owner=1234, group=4321)
    with node.entered():
        res = _run(plugin_dir, "ADD", conf, pod).ok().json
    assert res["interfaces"] == [{"name": "eth0", "mac": MAC, "sandbox": pod.path}]
    assert "ips" not in res or res["ips"] == []
    tap = _tun(pod)
    assert tap["type"] == "tap"
    assert (tap["mtu"], tap["mac"], tap["up"]) == (1400, MAC, True)
    assert tap["multi_queue"] is True
    assert (tap["user"], tap["group"]) == (1234, 4321)
    # owner and group both set: the reference's netlink path (vnet header); multiQueue adds no-pi
    assert (tap["vnet_hdr"], tap["pi"]) == (True, False)
    assert tap.get("persist", True) is True
    with node.entered():
        _run(plugin_dir, "DEL", conf, pod).ok()
        assert "eth0" not in pod.links()
        _run(plugin_dir, "DEL", conf, pod).ok()  # idempotent


def test_plain_tap_has_the_ip_tuntap_flags_and_no_owner(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(owner=0, selinuxContext="system_u:system_r:svirt_t:s0")
    with node.entered():
        res = _run(plugin_dir, "ADD", conf, pod, ifname="tap0").ok().json
    tap = _tun(pod, "tap0")
    assert (tap["vnet_hdr"], tap["pi"], tap["multi_queue"]) == (False, False, False)
    assert tap["user"] == "root" and "group" not in tap  # ip names uid 0
    assert res["interfaces"][0]["mac"] == tap["mac"]  # type: ignore[index]


def test_mac_precedence_runtime_config_over_cni_args_over_config(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = _conf(mac=MAC, runtimeConfig={"mac": "02:54:00:aa:bb:03"})
    with node.entered():
        _run(plugin_dir, "ADD", conf, pod, cni_args="MAC=02:54:00:aa:bb:02").ok()
    assert _tun(pod)["mac"] == "02:54:00:aa:bb:03"
    pod2 = pod_factory()
    with node.entered():
        _run(plugin_dir, "ADD", _conf(mac=MAC), pod2, cni_args="MAC=02:54:00:aa:bb:02").ok()
    assert _tun(pod2)["mac"] == "02:54:00:aa:bb:02"


def test_tap_on_a_pod_bridge_with_ipam_check_and_del(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, tmp_state: harness.State
) -> None:
    pod = pod_factory()
    pod.run("ip", "link", "add", "br0", "type", "bridge")
    conf = _conf(bridge="br0", ipam=_ipam(tmp_state))
    with node.entered():
        res = _run(plugin_dir, "ADD", conf, pod).ok().json
    assert res["ips"] == [{"address": "10.71.0.2/24", "gateway": "10.71.0.1", "interface": 0}]
    assert res["routes"] == [{"dst": "10.98.0.0/16"}]
    tap = _tun(pod)
    assert tap["master"] == "br0" and tap["up"]
    assert pod.addresses("eth0") == ["10.71.0.2/24"]
    assert pod.run("sysctl", "-n", "net.ipv4.conf.eth0.arp_notify").stdout.strip() == "1"
    assert tmp_state.reservations("tapnet") == ["10.71.0.2"]

    check_conf = {**conf, "prevResult": res}
    with node.entered():
        _run(plugin_dir, "CHECK", check_conf, pod).ok()
        pod.run("ip", "addr", "flush", "dev", "eth0")
        bad = _run(plugin_dir, "CHECK", check_conf, pod)
        assert bad.code != 0 and "10.71.0.2" in bad.json["msg"]  # type: ignore[operator]
        _run(plugin_dir, "DEL", conf, pod).ok()
    assert "eth0" not in pod.links() and "br0" in pod.links()
    assert tmp_state.reservations("tapnet") == []


def test_missing_pod_bridge_fails_and_leaves_nothing(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, tmp_state: harness.State
) -> None:
    pod = pod_factory()
    with node.entered():
        run = _run(plugin_dir, "ADD", _conf(bridge="nobr0", ipam=_ipam(tmp_state)), pod)
    assert run.code == 1
    assert run.json["msg"] == "failed to get bridge nobr0: Link not found"
    assert set(pod.links()) == {"lo"}
    assert tmp_state.reservations("tapnet") == []


@pytest.mark.parametrize("step", ["create", "configure-link", "rename", "up", "ipam", "configure"])
def test_failed_add_rolls_back_every_step(
    step: str, node: harness.Namespace, pod_factory: Any, plugin_dir: Path, tmp_state: harness.State
) -> None:
    pod = pod_factory()
    conf = _conf(mtu=1300, ipam=_ipam(tmp_state))
    with node.entered():
        run = _run(plugin_dir, "ADD", conf, pod, extra_env={"PYCNI_TEST_FAIL_AT": step})
    assert run.code == 1 and "injected failure" in run.json["msg"]  # type: ignore[operator]
    assert set(pod.links()) == {"lo"}
    assert tmp_state.reservations("tapnet") == []


def test_del_without_netns_or_with_a_gone_netns_succeeds(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    with node.entered():
        none = harness.exec_plugin(
            plugin_dir / "tap", "DEL", _conf(), container_id="c", cni_path=str(plugin_dir)
        )
        gone = harness.exec_plugin(
            plugin_dir / "tap",
            "DEL",
            _conf(),
            container_id="c",
            netns="/run/netns/pycni-no-such-ns",
            cni_path=str(plugin_dir),
        )
    none.ok()
    gone.ok()
    assert pod.exists()


@pytest.mark.parametrize(
    ("extra", "code", "text"),
    [
        ({"owner": -1}, 7, "owner"),
        ({"group": 4294967296}, 7, "group"),
        ({"owner": "root"}, 7, "owner"),
        ({"mtu": "1500"}, 7, "mtu"),
        ({"multiQueue": "yes"}, 7, "multiQueue"),
        ({"mac": "02:00:00:00:00"}, 7, "MAC"),
    ],
)
def test_bad_config_is_a_cni_error_and_creates_nothing(
    extra: dict[str, Any],
    code: int,
    text: str,
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
) -> None:
    pod = pod_factory()
    with node.entered():
        run = _run(plugin_dir, "ADD", _conf(**extra), pod)
    assert run.code == 1 and run.json["code"] == code
    assert text in str(run.json["msg"])
    assert "Traceback" not in run.stdout
    assert set(pod.links()) == {"lo"}


def test_two_taps_in_one_pod_and_the_node_is_untouched(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    before = set(node.links())
    with node.entered():
        _run(plugin_dir, "ADD", _conf(), pod, ifname="tap0").ok()
        _run(plugin_dir, "ADD", _conf(), pod, ifname="tap1").ok()
        clash = _run(plugin_dir, "ADD", _conf(), pod, ifname="tap1")
    assert clash.code == 1
    assert set(pod.links()) == {"lo", "tap0", "tap1"}
    assert set(node.links()) == before


# --- selinuxContext ----------------------------------------------------------------------

LABEL = "system_u:system_r:svirt_t:s0"


def _no_selinux() -> None:
    if selinux.LINUX.enabled():
        pytest.skip("SELinux is on here: the no-SELinux behaviour cannot be observed")


def test_selinux_context_without_selinux_is_a_no_op_where_v1_9_1_fails(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    upstream_reference: references.Reference,
) -> None:
    """No SELinux (this machine): pycni accepts the key and makes the same tap as without it.
    v1.9.1 writes the label regardless, the kernel refuses it, and its ADD fails (999): the
    deliberate difference of docs/plugins/tap.md."""
    print(f"compared with {upstream_reference}")
    _no_selinux()
    conf = _conf(selinuxContext=LABEL, owner=1234, group=4321, mac=MAC)
    pods = [pod_factory(), pod_factory()]
    with node.entered():
        ours = _run(plugin_dir, "ADD", conf, pods[0]).ok().json
        _run(plugin_dir, "ADD", _conf(owner=1234, group=4321, mac=MAC), pods[1]).ok()
        theirs = harness.exec_plugin(
            upstream_reference.plugin_dir / "tap", "ADD", conf, container_id="ctr1",
            netns=pods[1].path, ifname="tap1", cni_path=str(upstream_reference.plugin_dir),
        )  # fmt: skip
    assert ours["interfaces"] == [{"name": "eth0", "mac": MAC, "sandbox": pods[0].path}]
    assert _tun(pods[0]) | {"up": True} == _tun(pods[1]) | {"up": True}
    assert theirs.code == 1 and theirs.json["code"] == 999
    assert str(theirs.json["msg"]).startswith("failed set socket label: ")
    assert str(theirs.json["msg"]).endswith("invalid argument")
    assert "tap1" not in pods[1].links()
    with node.entered():
        _run(plugin_dir, "DEL", conf, pods[0]).ok()
    assert "eth0" not in pods[0].links()


def test_the_kernel_refuses_a_label_without_selinux_and_nothing_runs(tmp_path: Path) -> None:
    _no_selinux()
    marker = tmp_path / "ran"
    with pytest.raises(selinux.LabelRefused) as err:
        selinux.LINUX.run_labelled(LABEL, ["touch", str(marker)], 10.0)
    assert str(err.value) == f"failed set socket label: write {selinux.EXEC_ATTR}: invalid argument"
    assert not marker.exists()


class _RecordingSELinux(selinux.LinuxSELinux):
    """The machine's labelled exec, "on", with the exec attribute moved to a file."""

    __slots__ = ()

    def enabled(self) -> bool:
        return True


class _Host(RealHost):
    __slots__ = ()

    def selinux(self) -> selinux.SELinux:
        return _RecordingSELinux()


def test_the_labelled_helper_makes_the_tap_in_the_pod_on_the_real_kernel(
    node: harness.Namespace, pod_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SELinux's effect cannot be seen here; the rest of the path can: the label written for
    the thread that execs, the helper run from it inside the pod, the reference's `ip tuntap`
    flags although owner and group are set, then the plugin's own steps on the tap."""
    attr = tmp_path / "attr-exec"
    attr.write_bytes(b"")
    monkeypatch.setattr(selinux, "EXEC_ATTR", str(attr))
    pod = pod_factory()
    conf = _conf(selinuxContext=LABEL, owner=1234, group=4321, mac=MAC, mtu=1400)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "ctr1", "CNI_NETNS": pod.path,
           "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}  # fmt: skip
    with node.entered():
        out = skel.run("tap", env, json.dumps(conf).encode(), host=_Host())
    assert out.exit_code == 0, out.stdout
    assert attr.read_bytes() == LABEL.encode()
    tap = _tun(pod)
    assert (tap["vnet_hdr"], tap["pi"], tap["user"], tap["group"]) == (False, False, 1234, 4321)
    assert (tap["mtu"], tap["mac"], tap["up"]) == (1400, MAC, True)
    assert "eth0" not in node.links()
    with node.entered():
        _run_del = skel.run("tap", {**env, "CNI_COMMAND": "DEL"}, json.dumps(conf).encode())
    assert _run_del.exit_code == 0
    assert "eth0" not in pod.links()
