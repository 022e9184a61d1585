"""vrf: put the pod interface (and its routes) into a VRF of the pod namespace.

A chained plugin: ADD finds or creates the VRF ``vrfname`` (on ``table``, or the lowest table
no other VRF of the pod uses), enslaves CNI_IFNAME to it, moves the interface's routes into the
VRF's table, and passes prevResult on unchanged. Several interfaces may share one VRF; DEL takes
the interface out and removes the VRF when its last interface has left.
"""

from __future__ import annotations

import contextlib
from functools import partial

from pycni.net import vrf
from pycni.net.netlink.kernel import Kernel, Link, NetlinkError
from pycni.net.ns import NetNSNotFound
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec import version
from pycni.spec.decode import UINT32_MAX, IfName, Int, decode, option
from pycni.spec.errors import InternalError, InvalidConfig
from pycni.spec.result import Result


@record(frozen=True)
class VrfKeys:
    """vrf's own keys, declared for the decoder."""

    vrfname: str = option("vrfname", IfName(), "")
    table: int = option("table", Int(0, UINT32_MAX), 0)


def load_conf(req: Request) -> VrfKeys:
    keys = decode(VrfKeys, req.config)
    if not keys.vrfname:
        raise InvalidConfig("configuration is expected to have a valid vrf name")
    return keys


def _find(pod_kernel: Kernel, name: str) -> Link | None:
    try:
        return vrf.find(pod_kernel, name)
    except vrf.VrfError:
        raise InvalidConfig(
            f"vrfname {name} names a link of the pod that is not a VRF (Netlink {name} is not "
            "a VRF): choose another vrfname"
        ) from None


def _delete_link(pod_kernel: Kernel, index: int) -> None:
    with contextlib.suppress(NetlinkError):
        pod_kernel.delete_link(index)


class Vrf(Plugin):
    about = "pycni vrf: moves the pod interface and its routes into a VRF"
    supported_versions = tuple(v for v in version.ALL if version.at_least(v, "0.3.1"))

    def add(self, req: Request) -> Result:
        conf = load_conf(req)
        prev = req.prev_result()
        if prev is None:
            raise InvalidConfig("missing prevResult from earlier plugin")
        with (
            req.open_netns() as pod,
            req.host.locked(pod),  # one run at a time per pod
            req.host.pod(pod) as pod_kernel,
            Rollback(req.env) as rb,
        ):
            found = _find(pod_kernel, conf.vrfname)
            if found is not None and conf.table and found.vrf_table != conf.table:
                raise InternalError(
                    f"cmdAdd failed: VRF {conf.vrfname} already exist with different routing "
                    f"table {found.vrf_table}"
                )
            try:
                if found is None:
                    rb.step("create")
                    found = vrf.create(pod_kernel, conf.vrfname, conf.table)
                    rb.push("create", partial(_delete_link, pod_kernel, found.index))
                link = pod_kernel.find_link(req.ifname)
                if link is None:
                    raise vrf.VrfError(f"could not get link by name {req.ifname}")
                vrf.check_free(pod_kernel, link)  # before an undo that would clear its master
                rb.step("enslave")
                saved = vrf.movable_routes(pod_kernel, link.index)
                rb.push("enslave", partial(vrf.release, pod_kernel, link, saved))
                vrf.enslave(pod_kernel, found, link)
            except vrf.VrfError as exc:
                raise InternalError(f"cmdAdd failed: {exc}") from None
        return prev

    def delete(self, req: Request) -> None:
        conf = load_conf(req)
        if not req.netns:
            return
        try:
            pod = req.open_netns()
        except NetNSNotFound:
            return
        with pod, req.host.locked(pod), req.host.pod(pod) as pod_kernel:
            found = _find(pod_kernel, conf.vrfname)
            if found is None:
                return
            link = pod_kernel.find_link(req.ifname)
            try:
                if link is not None and link.master == found.index:
                    vrf.leave(pod_kernel, found, link)
                if not vrf.members(pod_kernel, found):
                    pod_kernel.delete_link(found.index)
            except NetlinkError as exc:
                raise InternalError(f"cmdDel failed: {exc}") from None

    def check(self, req: Request) -> None:
        conf = load_conf(req)
        if req.prev_result() is None:
            raise InvalidConfig("missing prevResult from earlier plugin")
        with req.open_netns() as pod, req.host.pod(pod) as pod_kernel:
            found = _find(pod_kernel, conf.vrfname)
            if found is None:
                raise InternalError("Link not found")
            if not any(link.name == req.ifname for link in vrf.members(pod_kernel, found)):
                raise InternalError(f"failed to find {req.ifname} associated to vrf {conf.vrfname}")


PLUGIN = Vrf()
