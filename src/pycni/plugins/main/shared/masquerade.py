"""bridge's and ptp's ipMasq step."""

from __future__ import annotations

from pycni.skel.base import Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import InternalError
from pycni.spec.result import Result


def masquerade(rb: Rollback, backend: str, result: Result, network: str, req: Request) -> None:
    """bridge's and ptp's ipMasq step: masquerade the result's addresses, undone on failure."""
    from pycni.net.netfilter import ipmasq
    from pycni.net.netfilter.nft import NftError

    rb.step("ipmasq")
    ipns = [ipc.address for ipc in result.ips]
    ifname, cid = req.ifname, req.container_id
    masq = ipmasq.backend(backend)

    def undo() -> list[str]:
        with req.host.node() as node_kernel:
            nf = req.host.netfilter(node_kernel)
            return ipmasq.teardown(nf, masq, ipns, network, ifname, cid)

    rb.push("ipmasq", undo)
    try:
        with req.host.node() as node_kernel:
            masq.setup(req.host.netfilter(node_kernel), ipns, network, ifname, cid)
    except (ipmasq.IPMasqError, NftError) as exc:
        raise InternalError(f"failed to set up IP masquerading: {exc}") from None
