"""tap ADD/CHECK/DEL on the fake host (tests/plugin_logic.py): no root, no /dev/net/tun.

The plugin is built with its tap maker pointed at FakeKernel.add_tap (what TUNSETIFF and
TUNSETPERSIST leave, held to tun.create_tap on the real kernel by the contract case
``tap_device`` in tests/kernel_contract.py); everything after the device is the plugin's own
logic on the Kernel it is handed, as in production.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Sequence
from typing import Any

from pycni.net.netlink.fake_kernel import FakeKernel
from pycni.net.netlink.kernel import IFF_UP, Kernel, NetlinkError
from pycni.plugins.main.tap import tun
from pycni.plugins.main.tap.plugin import Tap
from pycni.skel.fake_host import FakeHost, FakeSELinux
from pycni.skel.selinux import SELinuxError
from tests.plugin_logic import (
    POD,
    assert_each_step_rolls_back,
    call,
    failed,
    ok,
    picture,
    with_prev,
)

MAC = "02:54:00:aa:bb:01"


class FakeTun:
    """A tap maker over the fake: records each call's flags, owner and group, and raises
    TunError as tun.create_tap does (so the plugin's own error path runs)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int | None, int | None]] = []

    def __call__(
        self, kernel: Kernel, name: str, flags: int, owner: int | None, group: int | None
    ) -> None:
        assert isinstance(kernel, FakeKernel)
        self.calls.append((name, flags, owner, group))
        try:
            kernel.add_tap(name, multi_queue=bool(flags & tun.IFF_MULTI_QUEUE))
        except NetlinkError as exc:
            code = exc.errno or 0
            raise tun.TunError(code, f"TUNSETIFF: {os.strerror(code)}") from None


def plugin() -> tuple[Tap, FakeTun]:
    maker = FakeTun()
    return Tap(create_tap=maker), maker


def pod_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def conf(**extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "tapnet", "type": "tap", **extra}


IPAM = {
    "type": "static",
    "addresses": [{"address": "10.71.0.2/24", "gateway": "10.71.0.1"}],
    "routes": [{"dst": "10.98.0.0/16"}],
}


def test_l2_tap_with_mtu_mac_multiqueue_owner_and_group() -> None:
    host = pod_host()
    tap, maker = plugin()
    node_before = picture(host)["node"]
    config = conf(mtu=1400, mac=MAC, multiQueue=True, owner=1234, group=4321)
    result = ok(host, tap, "ADD", config)
    assert result["interfaces"] == [{"name": "eth0", "mac": MAC, "sandbox": POD}]
    assert not result.get("ips")
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None
    assert (eth0.kind, eth0.mtu, eth0.mac, bool(eth0.flags & IFF_UP)) == ("tun", 1400, MAC, True)
    assert eth0.oper_state == "down"  # no VMM attached yet: no carrier, as on the kernel
    # made under a temporary name, then renamed; the reference's netlink-path flags
    [(tmp, flags, owner, group)] = maker.calls
    assert tmp.startswith("veth") and tmp != "eth0"
    assert flags == tun.IFF_TAP | tun.IFF_VNET_HDR | tun.IFF_MULTI_QUEUE | tun.IFF_NO_PI
    assert (owner, group) == (1234, 4321)
    assert picture(host)["node"] == node_before
    assert host.delegations == []
    ok(host, tap, "CHECK", with_prev(config, result))


def test_plain_tap_gets_the_ip_tuntap_flags() -> None:
    host = pod_host()
    tap, maker = plugin()
    result = ok(host, tap, "ADD", conf())
    [(_, flags, owner, group)] = maker.calls
    assert (flags, owner, group) == (tun.IFF_TAP | tun.IFF_NO_PI, None, None)
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.mtu == 1500
    assert result["interfaces"][0]["mac"] == eth0.mac  # the kernel's random MAC, read back


def test_tap_on_a_pod_bridge_with_ipam_then_check_and_del() -> None:
    host = pod_host()
    pod = host.kernel(POD)
    pod.add_bridge("br0")
    br0 = pod.find_link("br0")
    assert br0 is not None
    pod.set_link(br0.index, up=True)
    tap, _ = plugin()
    config = conf(bridge="br0", ipam=IPAM)
    before = picture(host)
    result = ok(host, tap, "ADD", config)
    assert result["ips"] == [{"address": "10.71.0.2/24", "gateway": "10.71.0.1", "interface": 0}]
    assert result["routes"] == [{"dst": "10.98.0.0/16"}]
    view = picture(host)[POD]
    assert ("eth0", "tun", True, False, 1500, "br0", "", "") in view["links"]
    assert ("eth0", "10.71.0.2/24", 0) in view["addresses"]
    assert dict(view["conf"]["eth0"][0])["arp_notify"] == "1"
    assert host.delegations == [("static", "ADD")]
    ok(host, tap, "CHECK", with_prev(config, result))

    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.delete_address(eth0.index, ipaddress.ip_interface("10.71.0.2/24"))
    assert "10.71.0.2" in failed(host, tap, "CHECK", with_prev(config, result))

    ok(host, tap, "DEL", config)
    assert picture(host) == before  # the tap gone, the pod's bridge kept
    ok(host, tap, "DEL", config)
    assert picture(host) == before
    host.remove_pod(POD)
    ok(host, tap, "DEL", config)  # the namespace gone: nothing to do
    assert host.delegations[-3:] == [("static", "DEL")] * 3


def test_check_fails_when_the_tap_is_gone() -> None:
    host = pod_host()
    tap, _ = plugin()
    result = ok(host, tap, "ADD", conf())
    ok(host, tap, "DEL", conf())
    assert failed(host, tap, "CHECK", with_prev(conf(), result)) == (
        'failed to find interface "eth0"'
    )


def test_missing_pod_bridge_fails_and_leaves_nothing() -> None:
    host = pod_host()
    tap, maker = plugin()
    before = picture(host)
    assert failed(host, tap, "ADD", conf(bridge="nobr0", ipam=IPAM)) == (
        "failed to get bridge nobr0: Link not found"
    )
    assert len(maker.calls) == 1  # the tap was made, then rolled back
    assert picture(host) == before
    assert host.delegations == []  # IPAM comes after the device


def test_a_taken_ifname_fails_at_rename_and_rolls_back() -> None:
    host = pod_host()
    tap, _ = plugin()
    ok(host, tap, "ADD", conf(), ifname="tap0")
    before = picture(host)
    code, reply = call(host, tap, "ADD", conf(), ifname="tap0")
    assert code == 1
    assert reply["msg"].startswith('failed to rename tap to "tap0": ')
    assert picture(host) == before  # the second tap went, the first stayed


def test_a_refused_device_is_a_cni_error() -> None:
    """The ioctl's refusal (here: the name held by a non-tap link) reaches the caller in the
    plugin's words; nothing is left."""
    host = pod_host()
    calls: list[str] = []

    def on_a_taken_name(
        kernel: Kernel, name: str, flags: int, owner: int | None, group: int | None
    ) -> None:
        assert isinstance(kernel, FakeKernel)
        kernel.add_dummy(name)  # someone else takes the name between lookup and creation
        calls.append(name)
        FakeTun()(kernel, name, flags, owner, group)

    before_links = [x[0] for x in picture(host)[POD]["links"]]
    msg = failed(host, Tap(create_tap=on_a_taken_name), "ADD", conf())
    assert msg == "failed to create tap: [Errno 22] TUNSETIFF: Invalid argument"
    assert [x[0] for x in picture(host)[POD]["links"]] == sorted([*before_links, calls[0]])


def test_a_bad_mtu_is_refused_by_the_kernel_and_rolled_back() -> None:
    host = pod_host()
    tap, _ = plugin()
    before = picture(host)
    # 65535 passes the config's MTU check; a tap's maximum is 65521 (see the contract case)
    msg = failed(host, tap, "ADD", conf(mtu=65535))
    assert msg.startswith("failed to configure tap veth"), msg
    assert picture(host) == before


def test_a_failure_at_each_step_leaves_the_pod_as_it_was() -> None:
    host = pod_host()
    pod = host.kernel(POD)
    pod.add_bridge("br0")
    tap, _ = plugin()
    config = conf(bridge="br0", mtu=1400, mac=MAC, ipam=IPAM)
    steps = assert_each_step_rolls_back(host, tap, config)
    assert steps == ["create", "configure-link", "rename", "bridge", "up", "ipam", "configure"]


def test_gc_goes_on_to_the_ipam_plugin() -> None:
    """The spec's MUST (v1.9.1 does not): GC reaches the IPAM plugin, without a pod."""
    host = pod_host()
    tap, _ = plugin()
    gc = {**conf(ipam=IPAM), "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
    before = picture(host)
    ok(host, tap, "GC", gc)
    assert host.delegations == [("static", "GC")]
    ok(host, tap, "GC", {k: v for k, v in gc.items() if k != "ipam"})
    assert host.delegations == [("static", "GC")]
    assert picture(host) == before


# --- selinuxContext: the labelled helper where SELinux is on, nothing where it is off -------

LABEL = "system_u:system_r:svirt_t:s0:c1,c2"


def _labelled_host(**kw: Any) -> tuple[FakeHost, FakeSELinux]:
    """A host with SELinux on whose "helper" makes the tap in the fake pod, as the real helper
    (tun.helper_argv) does in the real one: it reads the name, flags and ids from argv."""
    host = pod_host()

    def helper(label: str, argv: Sequence[str]) -> None:
        name, flags, owner, group = argv[-4:]
        FakeTun()(host.kernel(POD), name, int(flags), int(owner or 0), int(group or 0))

    selinux = FakeSELinux(enabled=True, on_run=helper, **kw)
    host.selinux_state = selinux
    return host, selinux


def test_selinux_context_without_selinux_is_accepted_and_changes_nothing() -> None:
    host = pod_host()
    assert not host.selinux().enabled()
    tap, maker = plugin()
    config = conf(selinuxContext=LABEL, owner=1234, group=4321)
    ok(host, tap, "ADD", config)
    [(_, flags, owner, group)] = maker.calls  # the in-process ioctls, the usual flags
    assert (flags, owner, group) == (tun.IFF_TAP | tun.IFF_VNET_HDR, 1234, 4321)
    assert host.selinux_state.runs == []
    ok(host, tap, "DEL", config)


def test_selinux_context_with_selinux_makes_the_tap_in_a_labelled_helper() -> None:
    host, selinux = _labelled_host()
    tap, maker = plugin()
    config = conf(selinuxContext=LABEL, owner=1234, group=4321, multiQueue=True, mac=MAC)
    result = ok(host, tap, "ADD", config)
    assert maker.calls == []  # not in-process: the label must be the creating task's
    [(label, argv)] = selinux.runs
    assert label == LABEL
    name, flags, owner, group = argv[-4:]
    assert name.startswith("veth")
    # the reference's `ip tuntap` path whatever owner/group are: no vnet header, no pi
    assert int(flags) == tun.IFF_TAP | tun.IFF_NO_PI | tun.IFF_MULTI_QUEUE
    assert (owner, group) == ("1234", "4321")
    assert argv[:3] == [sys.executable, "-I", "-S"]
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.mac == MAC and bool(eth0.flags & IFF_UP)
    assert result["interfaces"] == [{"name": "eth0", "mac": MAC, "sandbox": POD}]
    ok(host, tap, "DEL", config)
    assert host.kernel(POD).find_link("eth0") is None


def test_a_refused_label_is_the_references_error_and_leaves_nothing() -> None:
    host, selinux = _labelled_host(refuse=True)
    tap, maker = plugin()
    before = picture(host)
    msg = failed(host, tap, "ADD", conf(selinuxContext="bogus", ipam=IPAM))
    assert msg == "failed set socket label: write /proc/thread-self/attr/exec: invalid argument"
    assert picture(host) == before and maker.calls == [] and selinux.runs == []
    assert host.delegations == []  # IPAM comes after the device


def test_a_failed_labelled_helper_is_a_cni_error_and_leaves_nothing() -> None:
    host = pod_host()

    def broken(label: str, argv: Sequence[str]) -> None:
        raise SELinuxError("failed to run command permission denied: exit status 1")

    host.selinux_state = FakeSELinux(enabled=True, on_run=broken)
    before = picture(host)
    msg = failed(host, plugin()[0], "ADD", conf(selinuxContext=LABEL))
    assert msg == "failed to create tap: failed to run command permission denied: exit status 1"
    assert picture(host) == before


def test_each_step_of_a_labelled_add_rolls_back() -> None:
    host, _ = _labelled_host()
    pod = host.kernel(POD)
    pod.add_bridge("br0")
    steps = assert_each_step_rolls_back(
        host, plugin()[0], conf(selinuxContext=LABEL, bridge="br0", ipam=IPAM)
    )
    assert "create" in steps
