"""tap: a tap device in the pod (for a VM monitor inside it), L2 only or with IPAM.

The tap is made under a temporary ``veth<hex>`` name inside the pod, given its MTU and MAC,
renamed to CNI_IFNAME, optionally enslaved to a bridge that already exists *inside the pod*
(``bridge``), and set up. We create it with /dev/net/tun ioctls in-process where the
reference runs ``ip tuntap`` for some configurations; the flags are kept the same (see
:mod:`pycni.plugins.main.tap.tun`).

``selinuxContext``: where SELinux is on (``req.host.selinux()``), the tap is made by a helper
exec'd under that exec label, as the reference's ``ip tuntap`` under go-selinux's
SetExecLabel, so the kernel labels the device; where it is off the key is accepted and changes
nothing (v1.9.1 fails the ADD there: the kernel refuses the label write).

The device is the one thing here neither ``Kernel`` nor ``req.host`` makes, so the plugin takes
its tap maker as a constructor argument: ``PLUGIN`` uses /dev/net/tun in the pod (entered by
``req.host.pod``); unit tests build ``Tap(create_tap=...)`` over FakeKernel.add_tap, which
tests/kernel_contract.py holds to what tun.create_tap makes.
"""

from __future__ import annotations

import sys

from pycni.net import link_attrs
from pycni.net.link import LinkNotFound, index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.net.ns import NetNS
from pycni.net.veth import random_host_name
from pycni.plugins.main.shared.conf import checked_mac, ipam_type
from pycni.plugins.main.shared.pod_iface import (
    check_ips_and_routes,
    configure_pod_iface,
    ipam_add,
    ipam_passthrough,
    pod_result,
    prev_interface,
)
from pycni.plugins.main.shared.pod_link import delete_in_pod, delete_pod_link
from pycni.plugins.main.tap import tun
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.config import MTU
from pycni.skel.mac import CNI_ARGS, CONFIG, RUNTIME_CONFIG
from pycni.skel.rollback import Rollback
from pycni.skel.selinux import LabelRefused, SELinuxError
from pycni.spec.decode import Bool, IfName, Int, Str, decode, option
from pycni.spec.errors import InternalError
from pycni.spec.result import Interface, Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from pycni.skel.selinux import SELinux

    TapMaker = Callable[[Kernel, str, int, int | None, int | None], None]
    """(kernel of the pod, name, TUNSETIFF flags, owner, group): make the persistent tap."""

_UINT32_MAX = 0xFFFFFFFF
_ID_RANGE = "invalid config: {path} must be a uid/gid in [0, 4294967295], got {value}"

# tap.go loadConf: CNI_ARGS MAC, then runtimeConfig.mac override the config's "mac".
MAC_ORDER = (RUNTIME_CONFIG, CNI_ARGS, CONFIG)


@record
class TapConf:
    multi_queue: bool
    mtu: int
    mac: str
    owner: int | None
    group: int | None
    selinux_context: str
    bridge: str
    ipam: str


@record(frozen=True)
class TapKeys:
    """tap's own keys, declared for the decoder (owner/group are Go's ``*uint32``)."""

    multi_queue: bool = option("multiQueue", Bool(), False)
    mtu: int = option("mtu", MTU(), 0)
    owner: int | None = option("owner", Int(0, _UINT32_MAX, _ID_RANGE))
    group: int | None = option("group", Int(0, _UINT32_MAX, _ID_RANGE))
    selinux_context: str = option("selinuxContext", Str(max_len=1024, no_control=True), "")
    bridge: str = option("bridge", IfName(), "")


def load_conf(req: Request) -> TapConf:
    """The config, validated before anything is created."""
    keys = decode(TapKeys, req.config)
    conf = TapConf(
        multi_queue=keys.multi_queue,
        mtu=keys.mtu,
        mac=checked_mac(req, MAC_ORDER),
        owner=keys.owner,
        group=keys.group,
        selinux_context=keys.selinux_context,
        bridge=keys.bridge,
        ipam=ipam_type(req),
    )
    return conf


def tun_tap(
    pod_kernel: Kernel, name: str, flags: int, owner: int | None, group: int | None
) -> None:
    """The real maker: /dev/net/tun ioctls in this thread's namespace, the pod's while the
    ``req.host.pod`` block that handed out ``pod_kernel`` lasts."""
    tun.create_tap(name, flags, owner, group)


def labelled_tap(selinux: SELinux, label: str) -> TapMaker:
    """The maker for ``selinuxContext`` where SELinux is on: as the reference (exec label, then
    ``ip tuntap add``), a helper exec'd under ``label`` from this thread, in the pod, creates
    the tap, so the kernel labels it with that context."""

    def make(
        pod_kernel: Kernel, name: str, flags: int, owner: int | None, group: int | None
    ) -> None:
        argv = tun.helper_argv(sys.executable, name, flags, owner, group)
        selinux.run_labelled(label, argv, 30.0)  # one interpreter start and four ioctls

    return make


def _make_tap(
    req: Request,
    pod_kernel: Kernel,
    pod: NetNS,
    conf: TapConf,
    ifname: str,
    rb: Rollback,
    create_tap: TapMaker,
) -> tuple[int, str]:
    """In the pod: create, configure, rename, enslave and set up the tap; (index, MAC)."""
    flags = tun.tap_flags(conf.multi_queue, conf.owner, conf.group)
    selinux = req.host.selinux() if conf.selinux_context else None
    if selinux is not None and selinux.enabled():
        # the reference's `ip tuntap` path, whatever owner and group are: its flags
        flags = tun.tap_flags(conf.multi_queue, None, None)
        create_tap = labelled_tap(selinux, conf.selinux_context)
    for _ in range(10):
        tmp = random_host_name()
        if pod_kernel.find_link(tmp) is None:
            break
    rb.step("create")
    try:
        create_tap(pod_kernel, tmp, flags, conf.owner, conf.group)
    except LabelRefused as exc:
        raise InternalError(str(exc)) from None  # the reference's message, unwrapped
    except (tun.TunError, SELinuxError) as exc:
        raise InternalError(f"failed to create tap: {exc}") from None
    index = index_of(pod_kernel, tmp)
    rb.push("create", lambda: delete_in_pod(req, pod, index))
    rb.step("configure-link")
    try:
        if conf.mtu:
            link_attrs.set_mtu(pod_kernel, index, conf.mtu)
        if conf.mac:
            link_attrs.set_mac(pod_kernel, index, conf.mac)
    except (NetlinkError, ValueError) as exc:
        raise InternalError(f"failed to configure tap {tmp}: {exc}") from None
    rb.step("rename")
    try:
        pod_kernel.set_link(index, name=ifname)
    except NetlinkError as exc:
        raise InternalError(f'failed to rename tap to "{ifname}": {exc}') from None
    if conf.bridge:
        rb.step("bridge")
        try:
            bridge_index = index_of(pod_kernel, conf.bridge)
        except LinkNotFound:
            raise InternalError(f"failed to get bridge {conf.bridge}: Link not found") from None
        try:
            pod_kernel.set_link(index, master=bridge_index)
        except NetlinkError as exc:
            raise InternalError(
                f"failed to set tap {ifname} as a port of bridge {conf.bridge}: {exc}"
            ) from None
    rb.step("up")
    try:
        pod_kernel.set_link(index, up=True)
    except NetlinkError as exc:
        raise InternalError(f"failed to set tap interface up: {exc}") from None
    return index, pod_kernel.link(index).mac


class Tap(Plugin):
    about = "pycni tap: a tap device in the pod"

    def __init__(self, create_tap: TapMaker = tun_tap) -> None:
        self.create_tap = create_tap

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        with req.open_netns() as pod, Rollback(req.env) as rb:
            with req.host.pod(pod) as pod_kernel:
                index, mac = _make_tap(req, pod_kernel, pod, conf, req.ifname, rb, self.create_tap)
            iface = Interface(name=req.ifname, mac=mac, sandbox=req.netns)
            ipam = ipam_add(req, conf.ipam, rb) if conf.ipam else None
            result = pod_result(req, iface, ipam)
            if ipam is not None:
                rb.step("configure")
                with req.host.pod(pod) as pod_kernel:
                    configure_pod_iface(
                        req,
                        pod_kernel,
                        index,
                        result,
                        ndisc_notify=False,
                    )
        return result

    def delete(self, req: Request) -> None:
        load_conf(req)
        ipam_passthrough(req, "DEL")
        delete_pod_link(req)

    def check(self, req: Request) -> None:
        load_conf(req)
        with req.open_netns() as pod:
            ipam_passthrough(req, "CHECK")
            prev, _ = prev_interface(req)
            with req.host.pod(pod) as pod_kernel:
                try:
                    index = index_of(pod_kernel, req.ifname)
                except LinkNotFound:
                    raise InternalError(f'failed to find interface "{req.ifname}"') from None
                check_ips_and_routes(pod_kernel, req.ifname, index, prev)

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")

    def gc(self, req: Request) -> None:
        """The spec's duty (v1.9.1 leaves it undone): GC goes on to the IPAM plugin, which
        frees the reservations of attachments not in cni.dev/valid-attachments."""
        ipam_passthrough(req, "GC")


PLUGIN = Tap()
