"""Traffic-control messages (rtnetlink's tcmsg family) to and from the Kernel's records.

Only what the bandwidth plugin needs: a tbf qdisc at the root, the ingress qdisc, a u32
match-all filter on it whose mirred action redirects every packet to another link, the dump
of a link's qdiscs and their removal. The layouts are the kernel's (include/uapi/linux/
pkt_sched.h, pkt_cls.h, tc_act/tc_mirred.h); attributes are encoded as iproute2's ``tc``
encodes them, without the nested flag, which these tc attributes do not need.
"""

from __future__ import annotations

import struct

from pycni.net.netlink.kernel import Qdisc, Tbf
from pycni.net.netlink.rtnl.wire import attr, attr_str, attr_u32, parse_attrs

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC, RTM_NEWTFILTER = 36, 37, 38, 44
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_RATE64 = 1, 4
TCA_U32_CLASSID, TCA_U32_SEL, TCA_U32_ACT = 1, 5, 7
TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_MIRRED_PARMS = 1, 2, 2
TC_ACT_OK, TC_ACT_STOLEN, TCA_EGRESS_REDIR, TC_U32_TERMINAL = 0, 4, 1, 1

TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate
TBF_QOPT = struct.Struct("=12s12sIII")  # rate, peakrate, limit, buffer, mtu
U32_SEL = struct.Struct("=BBBxHHhhI")  # flags, offshift, nkeys, offmask, off, offoff, hoff, hmask
U32_KEY = struct.Struct("=IIii")  # mask, value, off, offmask (one match-all key: all zero)
MIRRED = struct.Struct(
    "=IIiiiiI"
)  # tc_gen (index, capab, action, refcnt, bindcnt), eaction, ifindex
U32_MAX = 0xFFFFFFFF


def tcmsg(index: int, handle: int = 0, parent: int = 0, info: int = 0) -> bytes:
    return TCMSG.pack(0, index, handle, parent, info)


def tbf(index: int, handle: int, parent: int, params: Tbf) -> bytes:
    """RTM_NEWQDISC body of a tbf: rate (bytes/s), buffer (ticks), limit (bytes)."""
    rate = RATESPEC.pack(0, 0, 0, 0, 0, min(params.rate, U32_MAX))
    options = attr(TCA_TBF_PARMS, TBF_QOPT.pack(rate, bytes(12), params.limit, params.buffer, 0))
    if params.rate > U32_MAX:
        options += attr(TCA_TBF_RATE64, struct.pack("=Q", params.rate))
    return tcmsg(index, handle, parent) + attr_str(TCA_KIND, "tbf") + attr(TCA_OPTIONS, options)


def ingress(index: int, handle: int, parent: int) -> bytes:
    """RTM_NEWQDISC body of the ingress qdisc (``tc qdisc add dev X ingress``)."""
    return tcmsg(index, handle, parent) + attr_str(TCA_KIND, "ingress") + attr(TCA_OPTIONS, b"")


def _mirred(control: int, target_index: int) -> bytes:
    """One ``mirred egress redirect`` action to ``target_index`` with a control verdict."""
    mirred = MIRRED.pack(0, 0, control, 0, 0, TCA_EGRESS_REDIR, target_index)
    return attr_str(TCA_ACT_KIND, "mirred") + attr(TCA_ACT_OPTIONS, attr(TCA_MIRRED_PARMS, mirred))


def redirect_filter(
    index: int, parent: int, priority: int, protocol: int, classid: int, target_index: int
) -> bytes:
    """RTM_NEWTFILTER body: a u32 filter matching every packet (one all-zero key) whose
    actions redirect it to ``target_index``'s egress: the reference's two, ``stolen`` then
    ``pass`` (its netlink library adds one for the filter's RedirIndex ahead of the one in its
    own action list). The second is never reached, a redirect that steals ends the list; it is
    there so ``tc filter show`` reads as under the reference."""
    actions = attr(1, _mirred(TC_ACT_STOLEN, target_index)) + attr(
        2, _mirred(TC_ACT_OK, target_index)
    )
    selector = U32_SEL.pack(TC_U32_TERMINAL, 0, 1, 0, 0, 0, 0, 0) + U32_KEY.pack(0, 0, 0, 0)
    options = (
        attr(TCA_U32_ACT, actions)  # the action list, by priority
        + attr_u32(TCA_U32_CLASSID, classid)
        + attr(TCA_U32_SEL, selector)
    )
    info = (priority << 16) | int.from_bytes(protocol.to_bytes(2, "big"), "little")
    return tcmsg(index, 0, parent, info) + attr_str(TCA_KIND, "u32") + attr(TCA_OPTIONS, options)


def decode_qdisc(payload: bytes) -> Qdisc:
    _family, index, handle, parent, _info = TCMSG.unpack_from(payload)
    raw = parse_attrs(payload, TCMSG.size, len(payload))
    kind = raw.get(TCA_KIND, b"").split(b"\0", 1)[0].decode(errors="replace")
    params = None
    if kind == "tbf" and TCA_OPTIONS in raw:
        options = raw[TCA_OPTIONS]
        nested = parse_attrs(options, 0, len(options))
        parms = nested.get(TCA_TBF_PARMS, b"")
        if len(parms) >= TBF_QOPT.size:
            rate_spec, _peak, limit, buffer, _mtu = TBF_QOPT.unpack_from(parms)
            rate = RATESPEC.unpack(rate_spec)[5]
            rate64 = nested.get(TCA_TBF_RATE64)
            if rate64 is not None and len(rate64) == 8:
                rate = struct.unpack("=Q", rate64)[0]
            params = Tbf(rate, buffer, limit)
    return Qdisc(index, kind, handle, parent, params)
