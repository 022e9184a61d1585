"""loopback: bring ``lo`` up in the pod (down on DEL); pass a prevResult through unchanged."""

from __future__ import annotations

from pycni.net.link import LinkNotFound, addresses, get, index_of
from pycni.net.ns import NetNSNotFound
from pycni.skel.base import Plugin, Request
from pycni.spec.errors import InternalError
from pycni.spec.result import Interface, IPConfig, Result

IFF_UP = 0x1
LOOPBACK = "lo"


class Loopback(Plugin):
    about = "pycni loopback: brings up the loopback interface of a pod"

    def add(self, req: Request) -> Result:
        with req.open_netns() as ns, req.host.pod(ns) as pod_kernel:
            try:
                idx = index_of(pod_kernel, LOOPBACK)
            except LinkNotFound:
                raise InternalError('failed to find loopback interface "lo"') from None
            pod_kernel.set_link(idx, up=True)
            found = addresses(pod_kernel, idx)
        for addr in found:
            if not addr.ip.is_loopback:
                raise InternalError(
                    f'loopback interface found with non-loopback address "{addr.ip}"'
                )
        prev = req.prev_result()
        if prev is not None:
            return prev
        ips = []
        for family in (4, 6):
            first = next((a for a in found if a.version == family), None)
            if first is not None:
                ips.append(IPConfig(address=first, interface=0))
        return Result(
            cni_version=req.cni_version,
            interfaces=[Interface(name=LOOPBACK, mac="00:00:00:00:00:00", sandbox=req.netns)],
            ips=ips,
        )

    def delete(self, req: Request) -> None:
        if not req.netns:
            return
        try:
            with req.open_netns() as ns, req.host.pod(ns) as pod_kernel:
                pod_kernel.set_link(index_of(pod_kernel, LOOPBACK), up=False)
        except NetNSNotFound:
            return

    def check(self, req: Request) -> None:
        with req.open_netns() as ns, req.host.pod(ns) as pod_kernel:
            if not get(pod_kernel, LOOPBACK).flags & IFF_UP:
                raise InternalError("loopback interface is down")


PLUGIN = Loopback()
