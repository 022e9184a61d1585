"""host-device: move an existing node link into the pod (renamed to CNI_IFNAME) and back on DEL.

The link is moved and renamed in one netlink request, so a pod link with the node name is no
obstacle and the node never sees a half-renamed device. Its node name is kept in the link's
alias (as the reference, so either implementation can undo the other's ADD). pycni also keeps
the link's node addresses and up state in a small file and puts them back on DEL: moving a
link between namespaces makes the kernel drop its addresses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os

from pycni.net.link import LinkNotFound, addresses, index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.net.ns import NetNS, NetNSNotFound
from pycni.plugins.main.shared.conf import ipam_type
from pycni.plugins.main.shared.pod_iface import (
    check_ips_and_routes,
    configure_pod_iface,
    ipam_add,
    ipam_passthrough,
    pod_result,
    prev_interface,
)
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.decode import FilePath, IfName, Str, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import Interface, Result
from pycni.spec.validate import is_mac, is_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import StateFiles

SYS_BUS_PCI = "/sys/bus/pci/devices"
SYS_BUS_AUX = "/sys/bus/auxiliary/devices"
USERSPACE_DRIVERS = ("vfio-pci", "uio_pci_generic", "igb_uio")
DEFAULT_DATA_DIR = "/run/cni/pycni-host-device"
DATA_DIR_ENV = "PYCNI_HOST_DEVICE_DATA_DIR"


@record
class HostDeviceConf:
    device: str
    hwaddr: str
    kernelpath: str
    pci: str
    dpdk: bool
    ipam: str
    data_dir: str


_DEVICE_ID = Str(
    max_len=255,
    valid=lambda name: is_name(name, extra=":"),
    what="a PCI or auxiliary device ID like 0000:03:00.1",
)


@record(frozen=True)
class HostDeviceKeys:
    """host-device's own keys, declared for the decoder."""

    device: str = option("device", IfName(), "")
    hwaddr: str = option("hwaddr", Str(max_len=64), "")
    kernelpath: str = option("kernelpath", FilePath(), "")
    pci: str = option("pciBusID", _DEVICE_ID, "")
    data_dir: str = option("dataDir", FilePath(), "")


@record(frozen=True)
class HostDeviceRuntime:
    device_id: str = option("deviceID", _DEVICE_ID, "")


def load_conf(req: Request) -> HostDeviceConf:
    keys = decode(HostDeviceKeys, req.config)
    device_id = decode(HostDeviceRuntime, req.runtime_config, "runtimeConfig").device_id
    conf = HostDeviceConf(
        device=keys.device,
        hwaddr=keys.hwaddr,
        kernelpath=keys.kernelpath,
        pci=device_id or keys.pci,
        dpdk=False,
        ipam=ipam_type(req),
        data_dir=keys.data_dir or req.env.get(DATA_DIR_ENV, "") or DEFAULT_DATA_DIR,
    )
    if not (conf.device or conf.hwaddr or conf.kernelpath or conf.pci):
        raise InvalidConfig('specify either "device", "hwaddr", "kernelpath" or "pciBusID"')
    if conf.hwaddr and not is_mac(conf.hwaddr):
        raise InvalidConfig(f'failed to parse MAC address "{conf.hwaddr}"')
    if conf.kernelpath and not (
        os.path.isabs(conf.kernelpath)
        and conf.kernelpath.startswith("/sys/devices/")
        and ".." not in conf.kernelpath.split("/")
    ):
        raise InvalidConfig(
            f'kernel device path "{conf.kernelpath}" must be absolute and begin with '
            "/sys/devices/ (no '..')"
        )
    if conf.pci:
        conf.dpdk = has_userspace_driver(conf.pci)
    return conf


def has_userspace_driver(pci: str) -> bool:
    """True when the PCI device is bound to a DPDK-style driver (then nothing is moved)."""
    driver = os.path.join(SYS_BUS_PCI, pci, "driver")
    if not os.path.exists(os.path.join(SYS_BUS_PCI, pci)):
        if os.path.exists(os.path.join(SYS_BUS_AUX, pci)):
            return False
        raise InternalError(f"error with host device: no PCI or auxiliary device {pci}")
    try:
        return os.path.basename(os.path.realpath(driver, strict=True)) in USERSPACE_DRIVERS
    except OSError:
        return False


def net_names_under(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def find_host_link(node_kernel: Kernel, conf: HostDeviceConf) -> int:
    """The index of the node link the selectors name (device, hwaddr, kernelpath, PCI)."""
    if conf.device:
        try:
            return index_of(node_kernel, conf.device)
        except LinkNotFound:
            raise InternalError(
                f'failed to find host device: Link not found: "{conf.device}"'
            ) from None
    links = node_kernel.links()
    if conf.hwaddr:
        want = conf.hwaddr.replace("-", ":").lower()
        for found in links:
            if found.mac.lower() == want:
                return found.index
    elif conf.kernelpath:
        names = net_names_under(os.path.join(conf.kernelpath, "net"))
        for name in names:
            for found in links:
                if found.name == name:
                    return found.index
    elif conf.pci:
        candidates = [os.path.join(base, conf.pci, "net") for base in (SYS_BUS_PCI, SYS_BUS_AUX)]
        pci_dir = os.path.join(SYS_BUS_PCI, conf.pci)
        with contextlib.suppress(OSError):
            candidates += [
                os.path.join(pci_dir, d, "net")
                for d in os.listdir(pci_dir)
                if d.startswith("virtio")
            ]
        for directory in candidates:
            names = net_names_under(directory)
            if names:
                try:
                    return index_of(node_kernel, names[0])
                except LinkNotFound:
                    break
        raise InternalError(f"failed to find host device: no net directory under device {conf.pci}")
    raise InternalError("failed to find host device: failed to find physical interface")


def state_file(conf: HostDeviceConf, req: Request) -> str:
    return os.path.join(conf.data_dir, f"{req.container_id}-{req.ifname}.json")


def _save_node_state(files: StateFiles, path: str, name: str, up: bool, addrs: list[str]) -> None:
    body = json.dumps({"name": name, "up": up, "addresses": addrs})
    files.write_atomic(path, body.encode(), mode=0o644, dir_mode=0o700, durable=False)


def _load_node_state(files: StateFiles, path: str) -> dict[str, object] | None:
    try:
        data = json.loads(files.read(path))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def move_in(node_kernel: Kernel, index: int, pod: NetNS, ifname: str) -> None:
    """Record the node name in the alias, then move and rename in one request."""
    name = node_kernel.link(index).name
    node_kernel.set_link(index, up=False)
    node_kernel.set_link(index, alias=name)
    node_kernel.set_link(index, netns_fd=pod.fd, name=ifname)


def move_out(req: Request, pod: NetNS, ifname: str, node_fd: int) -> str:
    """From the pod back to the node under the name kept in the alias; returns that name."""
    with req.host.pod(pod) as pod_kernel:
        index = index_of(pod_kernel, ifname)
        alias = pod_kernel.link(index).alias
        if not alias:
            raise InternalError(f'failed to restore "{ifname}": alias is not set')
        pod_kernel.set_link(index, up=False)
        pod_kernel.set_link(index, netns_fd=node_fd, name=alias)
    return alias


class HostDevice(Plugin):
    about = "pycni host-device: moves an existing node link into the pod"

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        with req.host.node_netns() as node:
            return self._add(req, conf, node.fd)

    def _add(self, req: Request, conf: HostDeviceConf, node_fd: int) -> Result:
        with req.open_netns() as pod, Rollback(req.env) as rb:
            iface = Interface(name=req.ifname, sandbox=req.netns)
            if not conf.dpdk:
                iface.mac = self._move_in(req, conf, pod, node_fd, rb)
            if not conf.ipam:
                return Result(cni_version=req.cni_version, interfaces=[iface])
            ipam = ipam_add(req, conf.ipam, rb)
            result = pod_result(req, iface, ipam)
            if not conf.dpdk:
                rb.step("configure")
                with req.host.pod(pod) as pod_kernel:
                    index = index_of(pod_kernel, req.ifname)
                    configure_pod_iface(
                        req,
                        pod_kernel,
                        index,
                        result,
                        ndisc_notify=False,
                    )
            return result

    def _move_in(
        self, req: Request, conf: HostDeviceConf, pod: NetNS, node_fd: int, rb: Rollback
    ) -> str:
        state_path = state_file(conf, req)
        with req.host.node() as node_kernel:
            index = find_host_link(node_kernel, conf)
            found = node_kernel.link(index)
            name, was_up = found.name, found.up
            node_addrs = [str(a) for a in addresses(node_kernel, index) if not a.ip.is_link_local]
            rb.step("save")
            _save_node_state(req.host.state(), state_path, name, was_up, node_addrs)
            rb.push("save", lambda: req.host.state().remove(state_path))
            rb.step("move")
            try:
                move_in(node_kernel, index, pod, req.ifname)
            except NetlinkError as exc:
                with contextlib.suppress(NetlinkError):
                    node_kernel.set_link(index, alias="")
                    if was_up:
                        node_kernel.set_link(index, up=True)
                raise InternalError(f"failed to move link {exc}") from None
        rb.push("move", lambda: _restore(req, move_out(req, pod, req.ifname, node_fd), state_path))
        rb.step("up")
        with req.host.pod(pod) as pod_kernel:
            index = index_of(pod_kernel, req.ifname)
            pod_kernel.set_link(index, up=True)
            return pod_kernel.link(index).mac

    def delete(self, req: Request) -> None:
        conf = load_conf(req)
        if not req.netns:
            return
        state_path = state_file(conf, req)
        try:
            pod = req.open_netns()
        except NetNSNotFound:
            # The kernel gave a physical link back to the initial namespace (a virtual one
            # died with the pod): nothing is left to move, but the address is still held
            # (the reference fails this DEL and keeps it: a GC's stale DEL must free it).
            if conf.ipam:
                ipam_passthrough(req, "DEL")
            forget(req.host.state(), state_path)
            return
        with pod:
            if conf.ipam:
                ipam_passthrough(req, "DEL")
            if conf.dpdk:
                return
            try:
                with req.host.node_netns() as node:
                    name = move_out(req, pod, req.ifname, node.fd)
            except LinkNotFound:
                return  # already moved back (DEL is idempotent)
        _restore(req, name, state_path)
        forget(req.host.state(), state_path)

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        with req.open_netns() as pod:
            if conf.ipam:
                ipam_passthrough(req, "CHECK")
            prev, intf = prev_interface(req)
            if conf.dpdk:
                return
            with req.host.pod(pod) as pod_kernel:
                if not intf.name:
                    raise InternalError("Container interface name missing in prevResult")
                try:
                    index = index_of(pod_kernel, intf.name)
                except LinkNotFound:
                    raise InternalError(
                        f"Container Interface name in prevResult: {intf.name} not found"
                    ) from None
                mac = pod_kernel.link(index).mac
                if intf.mac and intf.mac != mac:
                    raise InternalError(
                        f"Interface {intf.name} Mac {intf.mac} doesn't match container Mac: {mac}"
                    )
                check_ips_and_routes(pod_kernel, req.ifname, index, prev)

    def status(self, req: Request) -> None:
        ipam_passthrough(req, "STATUS")

    def gc(self, req: Request) -> None:
        """The spec's duty (v1.9.1 leaves it undone): GC goes on to the IPAM plugin, which
        frees the reservations of attachments not in cni.dev/valid-attachments."""
        ipam_passthrough(req, "GC")


def _restore(req: Request, name: str, state_path: str) -> None:
    """Back on the node: drop the alias, re-add the saved addresses and up state."""
    with req.host.node() as node_kernel:
        index = index_of(node_kernel, name)
        node_kernel.set_link(index, alias="")
        state = _load_node_state(req.host.state(), state_path)
        if state is not None and state.get("name") == name:
            saved = state.get("addresses", [])
            for text in saved if isinstance(saved, list) else []:
                addr = ipaddress.ip_interface(str(text))
                with contextlib.suppress(NetlinkError):  # already there
                    node_kernel.add_address(index, addr)
            if state.get("up"):
                node_kernel.set_link(index, up=True)


def forget(files: StateFiles, state_path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        files.remove(state_path)


PLUGIN = HostDevice()
