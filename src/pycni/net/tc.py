"""Traffic control for the bandwidth plugin: tbf shapers, the ingress qdisc, ifb devices and
the u32 + mirred filter that sends a link's incoming traffic through an ifb.

The tbf parameters are computed exactly as the reference computes them (bytes from bits,
a 25 ms latency, buffer in kernel ticks), so CHECK can compare them with what the kernel
reports and a config gives the same qdisc under either implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_DELQDISC, RTM_NEWQDISC
from pyroute2.netlink.rtnl.tcmsg import tcmsg

TIME_UNITS_PER_SEC = 1_000_000
LATENCY_USEC = 25_000.0  # the reference's latencyInMillis = 25
ROOT = 0xFFFFFFFF
INGRESS_PARENT = 0xFFFFFFF1
INGRESS_HANDLE = 0xFFFF0000  # ffff:
TBF_HANDLE = 0x00010000  # 1:
CLASS_1_1 = 0x00010001
ETH_P_ALL = 0x0003
_U32_MAX = 0xFFFFFFFF


@cache
def tick_in_usec() -> float:
    """Kernel ticks per microsecond, from /proc/net/psched (as iproute2 and netlink do)."""
    with open("/proc/net/psched") as fh:
        t2us, us2t, clock_res, _ = (int(x, 16) for x in fh.read().split())
    return t2us / us2t * (clock_res / TIME_UNITS_PER_SEC)


@dataclass(frozen=True)
class TbfParams:
    """What the kernel stores for a tbf: rate (bytes/s), buffer (ticks), limit (bytes)."""

    rate: int
    buffer: int
    limit: int

    @classmethod
    def from_bits(cls, rate_bits: int, burst_bits: int) -> TbfParams:
        """The reference's arithmetic; rate must be at least 8 bit/s and fit 32 bits in bytes."""
        rate = rate_bits // 8
        burst = burst_bits // 8
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate ({rate_bits} bit/s) and burst ({burst_bits} bit) too small")
        if rate > _U32_MAX:
            raise ValueError(f"rate {rate_bits} bit/s is above what a tbf without rate64 holds")
        usec = int(float(burst) * TIME_UNITS_PER_SEC / float(rate)) & _U32_MAX
        buffer = int(float(usec) * tick_in_usec()) & _U32_MAX
        limit = (int(float(rate) * LATENCY_USEC / TIME_UNITS_PER_SEC) + burst) & _U32_MAX
        return cls(rate=rate, buffer=buffer, limit=limit)


def _request(ipr: Any, msg: Any, msg_type: int, flags: int) -> None:
    # pyroute2 0.9's synchronous nlm_request reads this key without setting it.
    ipr.status["nlm_generator"] = False
    ipr.nlm_request(msg, msg_type=msg_type, msg_flags=flags)


def add_tbf(ipr: Any, index: int, params: TbfParams) -> None:
    """Root tbf (handle 1:) on the link; fails if the link already has a root qdisc of ours."""
    msg = tcmsg()
    msg["index"] = index
    msg["handle"] = TBF_HANDLE
    msg["parent"] = ROOT
    parms = {"rate": params.rate, "limit": params.limit, "buffer": params.buffer, "mtu": 0}
    msg["attrs"] = [
        ["TCA_KIND", "tbf"],
        ["TCA_OPTIONS", {"attrs": [["TCA_TBF_PARMS", parms]]}],
    ]
    _request(ipr, msg, RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)


def add_ingress(ipr: Any, index: int) -> None:
    """The ingress qdisc (ffff:) that lets filters see a link's incoming traffic."""
    ipr.tc("add", "ingress", index, INGRESS_HANDLE)


def redirect_ingress_to(ipr: Any, index: int, target_index: int) -> None:
    """u32 match-all filter (prio 1, every protocol, flowid 1:1) on the ingress qdisc whose
    mirred action egress-redirects each packet to ``target_index``."""
    ipr.tc(
        "add-filter",
        "u32",
        index,
        parent=INGRESS_HANDLE,
        prio=1,
        protocol=ETH_P_ALL,
        target=CLASS_1_1,
        keys=["0x0/0x0+0"],
        action=[
            {"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": target_index}
        ],
    )


def create_ifb(ipr: Any, name: str, mtu: int) -> int:
    """An ifb device, up, with ``mtu`` and a zero tx queue length (as the reference)."""
    ipr.link("add", ifname=name, kind="ifb", mtu=mtu, txqlen=0)
    index = int(ipr.link_lookup(ifname=name)[0])
    ipr.link("set", index=index, state="up")
    return index


def qdiscs(ipr: Any, index: int) -> list[tuple[str, Any]]:
    """(kind, message) of each qdisc on the link, pfifo_fast left out (the reference's view)."""
    out = []
    for msg in ipr.get_qdiscs(index=index):
        kind = str(msg.get_attr("TCA_KIND"))
        if kind != "pfifo_fast":
            out.append((kind, msg))
    return out


def tbf_params_of(msg: Any) -> TbfParams:
    """The rate/buffer/limit of a tbf qdisc message."""
    parms = msg.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")
    return TbfParams(
        rate=int(parms["rate"]), buffer=int(parms["buffer"]), limit=int(parms["limit"])
    )


def delete_root_qdisc(ipr: Any, index: int) -> None:
    """Remove the link's root qdisc (the kernel puts its default back)."""
    msg = tcmsg()
    msg["index"] = index
    msg["parent"] = ROOT
    _request(ipr, msg, RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK)


def delete_ingress(ipr: Any, index: int) -> None:
    """Remove the ingress qdisc and with it every filter attached to it."""
    msg = tcmsg()
    msg["index"] = index
    msg["parent"] = INGRESS_PARENT
    _request(ipr, msg, RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK)
