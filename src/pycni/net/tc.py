"""Traffic control for the bandwidth plugin: tbf shapers, the ingress qdisc, ifb devices and
the u32 + mirred filter that sends a link's incoming traffic through an ifb.

The tbf parameters are computed exactly as the reference computes them (bytes from bits,
a 25 ms latency, buffer in kernel ticks), so CHECK can compare them with what the kernel
reports and a config gives the same qdisc under either implementation.
"""

from __future__ import annotations

from functools import cache

from pycni.net.netlink.kernel import TC_H_INGRESS, TC_H_ROOT, Kernel, Qdisc, Tbf
from pycni.record import record

TIME_UNITS_PER_SEC = 1_000_000
LATENCY_USEC = 25_000.0  # the reference's latencyInMillis = 25
TBF_HANDLE = 0x00010000  # 1:
PSCHED_SHIFT = 6  # a kernel tick is 2^6 ns (include/net/pkt_sched.h)
NSEC_PER_SEC = 1_000_000_000
_U32_MAX = 0xFFFFFFFF


@cache
def tick_in_usec() -> float:
    """Kernel ticks per microsecond, from /proc/net/psched (as iproute2 and netlink do)."""
    with open("/proc/net/psched") as fh:
        t2us, us2t, clock_res, _ = (int(x, 16) for x in fh.read().split())
    return t2us / us2t * (clock_res / TIME_UNITS_PER_SEC)


@record(frozen=True)
class TbfParams:
    """What the kernel stores for a tbf: rate (bytes/s), buffer (ticks), limit (bytes)."""

    rate: int
    buffer: int
    limit: int

    @classmethod
    def from_bits(cls, rate_bits: int, burst_bits: int) -> TbfParams:
        """The reference's arithmetic (rate at least 8 bit/s, burst under 2^32 bytes). A rate of
        2^32 bytes/s or more goes to the kernel as TCA_TBF_RATE64; buffer and limit stay the
        reference's 32-bit values, wrapped as its uint32 conversions wrap them."""
        rate = rate_bits // 8
        burst = burst_bits // 8
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate ({rate_bits} bit/s) and burst ({burst_bits} bit) too small")
        usec = int(float(burst) * TIME_UNITS_PER_SEC / float(rate)) & _U32_MAX
        buffer = int(float(usec) * tick_in_usec()) & _U32_MAX
        limit = (int(float(rate) * LATENCY_USEC / TIME_UNITS_PER_SEC) + burst) & _U32_MAX
        return cls(rate=rate, buffer=buffer, limit=limit)

    def max_packet(self) -> int:
        """The largest packet (bytes) the kernel's tbf lets through, its ``max_size``: what
        the rate sends in the buffer's time (ticks of 64 ns, at most 2^32-1 ns). tbf_change
        refuses a tbf whose max_size is 0 with EINVAL: a burst too small for the rate."""
        buffer_ns = min(self.buffer << PSCHED_SHIFT, _U32_MAX)
        return min((buffer_ns * self.rate) % 2**64 // NSEC_PER_SEC, _U32_MAX)


def add_tbf(kernel: Kernel, index: int, params: TbfParams) -> None:
    """Root tbf (handle 1:) on the link; fails if the link already has a root qdisc of ours."""
    kernel.add_tbf(index, TBF_HANDLE, Tbf(params.rate, params.buffer, params.limit))


def add_ingress(kernel: Kernel, index: int) -> None:
    """The ingress qdisc (ffff:) that lets filters see a link's incoming traffic."""
    kernel.add_ingress(index)


def redirect_ingress_to(kernel: Kernel, index: int, target_index: int) -> None:
    """u32 match-all filter (prio 1, every protocol, flowid 1:1) on the ingress qdisc whose
    mirred actions egress-redirect each packet to ``target_index`` (the first steals it)."""
    kernel.redirect_ingress(index, target_index)


def create_ifb(kernel: Kernel, name: str, mtu: int) -> int:
    """An ifb device, up, with ``mtu`` and a zero tx queue length (as the reference)."""
    kernel.add_ifb(name, mtu, 0)
    found = kernel.find_link(name)
    if found is None:
        raise LookupError(f"ifb {name} vanished after its creation")
    kernel.set_link(found.index, up=True)
    return found.index


def qdiscs(kernel: Kernel, index: int) -> list[Qdisc]:
    """Each qdisc on the link, pfifo_fast left out (the reference's view)."""
    return [q for q in kernel.qdiscs(index) if q.kind != "pfifo_fast"]


def tbf_params_of(qdisc: Qdisc) -> TbfParams:
    """The rate/buffer/limit of a tbf qdisc."""
    if qdisc.tbf is None:
        raise ValueError(f"qdisc {qdisc.kind} is not a tbf")
    return TbfParams(rate=qdisc.tbf.rate, buffer=qdisc.tbf.buffer, limit=qdisc.tbf.limit)


def delete_root_qdisc(kernel: Kernel, index: int) -> None:
    """Remove the link's root qdisc (the kernel puts its default back)."""
    kernel.delete_qdisc(index, TC_H_ROOT)


def delete_ingress(kernel: Kernel, index: int) -> None:
    """Remove the ingress qdisc and with it every filter attached to it."""
    kernel.delete_qdisc(index, TC_H_INGRESS)
