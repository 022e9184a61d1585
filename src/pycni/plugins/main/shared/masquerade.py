"""bridge's and ptp's ipMasq step."""

from __future__ import annotations

from pycni.net.netfilter.nft_records import NftError
from pycni.skel.base import Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import InternalError
from pycni.spec.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.seam import Netfilter


def masquerade(
    nf: Netfilter, rb: Rollback, backend: str, result: Result, network: str, req: Request
) -> None:
    """bridge's and ptp's ipMasq step: masquerade the result's addresses in the node's
    netfilter ``nf``, undone on failure."""
    from pycni.net.netfilter import ipmasq

    rb.step("ipmasq")
    ipns = [ipc.address for ipc in result.ips]
    ifname, cid = req.ifname, req.container_id
    masq = ipmasq.backend(backend)
    rb.push("ipmasq", lambda: ipmasq.teardown(nf, masq, ipns, network, ifname, cid))
    try:
        masq.setup(nf, ipns, network, ifname, cid)
    except (ipmasq.IPMasqError, NftError) as exc:
        raise InternalError(f"failed to set up IP masquerading: {exc}") from None
