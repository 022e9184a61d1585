"""bandwidth: shape a pod's traffic with tbf on the node side of its veth.

"ingress" is traffic towards the pod: a root tbf on the host veth (its egress). "egress" is
traffic from the pod: the host veth's ingress is redirected (u32 + mirred) to an ifb device
named ``bwp`` + 12 hex of sha512(network name + container ID), which carries the tbf.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TypeVar

from pycni.net import tc
from pycni.net.link import LinkNotFound, get
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.record import record
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec import version
from pycni.spec.decode import Int, decode, fail, lookup, option
from pycni.spec.errors import CNIError, InternalError, InvalidConfig
from pycni.spec.result import Interface, Result

IFB_PREFIX = "bwp"
IFB_NAME_LEN = 15
_KEYS = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")
_MAX_BURST_BYTES = 0xFFFFFFFF


_UINT64 = Int(
    0,
    2**64 - 1,
    "failed to parse network configuration: {path} must be a non-negative integer "
    "(at most 2^64-1), got {value}",
)


@record(frozen=True)
class Limits:
    """Rates in bit/s, bursts in bits; 0 means unlimited in that direction (Go's uint64s)."""

    ingress_rate: int = option("ingressRate", _UINT64, 0)
    ingress_burst: int = option("ingressBurst", _UINT64, 0)
    egress_rate: int = option("egressRate", _UINT64, 0)
    egress_burst: int = option("egressBurst", _UINT64, 0)

    def is_zero(self) -> bool:
        return not (
            self.ingress_rate or self.ingress_burst or self.egress_rate or self.egress_burst
        )


def ifb_name(network: str, container_id: str) -> str:
    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    return (IFB_PREFIX + digest)[:IFB_NAME_LEN]


def _validate(rate: int, burst: int, direction: str) -> None:
    if burst == 0 and rate != 0:
        raise InvalidConfig(f"if {direction}Rate is set, burst must also be set")
    if rate == 0 and burst != 0:
        raise InvalidConfig(f"if {direction}Burst is set, rate must also be set")
    if burst // 8 >= _MAX_BURST_BYTES:
        raise InvalidConfig("burst cannot be more than 4GB")
    if rate and rate < 8:
        raise InvalidConfig(f"{direction}Rate must be at least 8 bit/s")
    if rate and (burst < 8 or tc.TbfParams.from_bits(rate, burst).max_packet() == 0):
        # The kernel would refuse the tbf (EINVAL, after the ifb is made); say which field.
        raise InvalidConfig(
            f"{direction}Burst {burst} bits is too small for {direction}Rate {rate} bit/s: "
            "the tbf bucket would hold no byte"
        )


def load_limits(req: Request) -> Limits | None:
    """Top-level keys win as a whole when any is present, else ``runtimeConfig.bandwidth``."""
    if any(lookup(req.config, key)[0] for key in _KEYS):
        limits = decode(Limits, req.config)
    else:
        found, raw = lookup(req.runtime_config, "bandwidth")
        if not found or raw is None:
            return None
        if not isinstance(raw, dict):
            raise fail("runtimeConfig.bandwidth", "an object", raw)
        limits = decode(Limits, raw, "runtimeConfig.bandwidth")
    _validate(limits.ingress_rate, limits.ingress_burst, "ingress")
    _validate(limits.egress_rate, limits.egress_burst, "egress")
    return limits


def _host_veth(req: Request, prev: Result) -> tuple[str, int]:
    """The node end of the pod's veth, which prevResult must list with an empty sandbox."""
    if not prev.interfaces:
        raise InternalError("no interfaces provided")
    with req.open_netns() as pod, req.host.pod(pod) as pod_kernel:
        try:
            found = get(pod_kernel, req.ifname)
        except LinkNotFound:
            raise InternalError(f"container interface {req.ifname} not found") from None
        peer = found.peer_index if found.kind == "veth" else 0
    if peer <= 0:
        raise InternalError(f"container interface {req.ifname} has no veth peer")
    with req.host.node() as node_kernel:
        try:
            name = node_kernel.link(peer).name
        except NetlinkError:
            raise InternalError(f"veth peer with index {peer} is not in host ns") from None
    for intf in prev.interfaces:
        if not intf.sandbox and intf.name == name:
            return name, peer
    raise InternalError("no veth peer of container interface found in host ns")


def _prev(req: Request) -> Result | None:
    try:
        return req.prev_result()
    except CNIError as exc:
        raise CNIError(exc.code, f"could not parse prevResult: {exc.msg}") from None


class Bandwidth(Plugin):
    about = "pycni bandwidth: tbf rate limits on a pod's veth (ifb for its outgoing traffic)"
    supported_versions = tuple(v for v in version.ALL if version.at_least(v, "0.3.0"))

    def add(self, req: Request) -> Result:
        limits = load_limits(req)
        prev = _prev(req)
        if limits is None or limits.is_zero():
            return prev if prev is not None else Result(cni_version=req.cni_version)
        if prev is None:
            raise InvalidConfig("must be called as chained plugin")
        _, host_index = _host_veth(req, prev)
        result = Result(
            cni_version=prev.cni_version,
            interfaces=list(prev.interfaces),
            ips=prev.ips,
            routes=prev.routes,
            dns=prev.dns,
        )
        with req.host.node() as node_kernel, Rollback(req.env) as rb:
            if limits.ingress_rate:
                rb.step("ingress-tbf")
                params = tc.TbfParams.from_bits(limits.ingress_rate, limits.ingress_burst)
                _kernel(lambda: tc.add_tbf(node_kernel, host_index, params), "create qdisc")
                rb.push("ingress-tbf", lambda: tc.delete_root_qdisc(node_kernel, host_index))
            if limits.egress_rate:
                name = ifb_name(req.name, req.container_id)
                mtu = node_kernel.link(host_index).mtu
                rb.step("ifb")
                ifb = _kernel(lambda: tc.create_ifb(node_kernel, name, mtu), "adding link")
                rb.push("ifb", lambda: node_kernel.delete_link(ifb))
                result.interfaces.append(Interface(name=name, mac=node_kernel.link(ifb).mac))
                rb.step("redirect")
                _kernel(lambda: tc.add_ingress(node_kernel, host_index), "create ingress qdisc")
                rb.push("redirect", lambda: tc.delete_ingress(node_kernel, host_index))
                _kernel(lambda: tc.redirect_ingress_to(node_kernel, host_index, ifb), "add filter")
                rb.step("egress-tbf")
                params = tc.TbfParams.from_bits(limits.egress_rate, limits.egress_burst)
                _kernel(lambda: tc.add_tbf(node_kernel, ifb, params), "create ifb qdisc")
        return result

    def delete(self, req: Request) -> None:
        load_limits(req)
        _prev(req)
        with req.host.node() as node_kernel:
            try:
                node_kernel.delete_link(
                    get(node_kernel, ifb_name(req.name, req.container_id)).index
                )
            except LinkNotFound:
                return

    def check(self, req: Request) -> None:
        limits = load_limits(req) or Limits()
        prev = _prev(req)
        if prev is None:
            raise InvalidConfig("must be called as a chained plugin")
        _, host_index = _host_veth(req, prev)
        with req.host.node() as node_kernel:
            if limits.ingress_rate:
                want = tc.TbfParams.from_bits(limits.ingress_rate, limits.ingress_burst)
                _check_tbf(node_kernel, host_index, want)
            if limits.egress_rate:
                name = ifb_name(req.name, req.container_id)
                try:
                    ifb = get(node_kernel, name).index
                except LinkNotFound:
                    raise InternalError(f"get ifb device: Link not found: {name}") from None
                want = tc.TbfParams.from_bits(limits.egress_rate, limits.egress_burst)
                _check_tbf(node_kernel, ifb, want)


def _check_tbf(node_kernel: Kernel, index: int, want: tc.TbfParams) -> None:
    found = tc.qdiscs(node_kernel, index)
    if not found:
        raise InternalError("Failed to find qdisc")
    for qdisc in found:
        if qdisc.kind != "tbf":
            break
        have = tc.tbf_params_of(qdisc)
        for what in ("rate", "limit", "buffer"):
            if getattr(have, what) != getattr(want, what):
                raise InternalError(f"{what.capitalize()} doesn't match")


T = TypeVar("T")


def _kernel(action: Callable[[], T], what: str) -> T:
    """Run one kernel change; a netlink failure becomes a CNI error naming the step."""
    try:
        return action()
    except (NetlinkError, LookupError) as exc:
        raise InternalError(f"{what}: {exc}") from None


PLUGIN = Bandwidth()
