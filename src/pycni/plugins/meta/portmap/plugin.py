"""portmap: forward host ports to a pod's ports (a chained plugin after bridge/ptp).

ADD installs the mappings of ``runtimeConfig.portMappings`` with the chosen backend, flushes
stale UDP conntrack entries for the host ports, enables route_localnet on the device that
leads to the pod (for localhost access over IPv4 with snat) and passes prevResult through.
DEL removes this attachment's rules by network name, container ID and ifname, so it works
without runtimeConfig (the reference does nothing then), in every layout (also the
reference's, for pods it set up before pycni took over), then the pod's UDP conntrack
entries. GC removes the rules of attachments not listed in ``cni.dev/valid-attachments``;
STATUS reports code 50 when the backend cannot be used.
"""

from __future__ import annotations

import ipaddress

from pycni.plugins.meta.portmap import nft_backend, reference_state
from pycni.plugins.meta.portmap.backend import Backend
from pycni.plugins.meta.portmap.config import IPTABLES, NFTABLES, PortMapConfig, parse
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.errors import PLUGIN_NOT_AVAILABLE, CNIError, InternalError
from pycni.spec.result import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.seam import Netfilter


def _route_device(req: Request, address: ipaddress.IPv4Address) -> str:
    """The device this host routes ``address`` through (the bridge or the host veth)."""
    with req.host.node() as node_kernel:
        routes = node_kernel.route_to(address)
        if not routes:
            raise InternalError(f"portmap: no route to container IP {address}")
        return node_kernel.link(routes[0].oif).name


def _flush_udp_conntrack(req: Request, nf: Netfilter, cfg: PortMapConfig) -> None:
    """Drop UDP conntrack entries that would bypass the new DNAT rules (failures logged)."""
    for family in cfg.container_ips:
        ports = [m.host_port for m in cfg.mappings_for(family) if m.protocol == "udp"]
        if not ports:
            continue
        try:
            nf.conntrack.delete_by_dst_port(ports, "udp", family)
        except Exception as exc:  # the reference only logs this
            req.log(f"portmap: could not flush UDP conntrack entries (IPv{family}): {exc}")


def _conntrack_empty(req: Request) -> bool:
    """Whether the node's namespace tracks no connection (or conntrack is not loaded)."""
    try:
        with req.host.node() as node_kernel:
            return req.host.sysctl(node_kernel).read("net/netfilter/nf_conntrack_count") == "0"
    except FileNotFoundError:
        return True
    except Exception:  # unreadable: look in the table
        return False


def _forget_udp_flows(req: Request, nf: Netfilter, cfg: PortMapConfig) -> None:
    """DEL: drop the UDP conntrack entries of the pod's addresses (upstream #1190), so flows
    to its host ports do not stay pinned to an address a later pod may get. Skipped when
    the mappings are known and none is UDP; failures logged, as at ADD."""
    if cfg.mappings_given and not any(m.protocol == "udp" for m in cfg.mappings):
        return
    if not cfg.container_ips or _conntrack_empty(req):
        return  # a dump walks the kernel's whole conntrack hash (docs/benchmarks.md)
    for family, cip in sorted(cfg.container_ips.items()):
        try:
            nf.conntrack.delete_by_address(cip.ip.packed, "udp")
        except Exception as exc:  # the pod is gone either way: never fail its DEL for this
            req.log(
                f"portmap: could not flush UDP conntrack entries of {cip.ip} (IPv{family}): {exc}"
            )


def backend_of(cfg: PortMapConfig) -> Backend:
    """The backend the config selects (picked once per call). The iptables one is imported
    only when chosen: it brings subprocess and the iptables-save parser."""
    if cfg.backend == IPTABLES:
        from pycni.plugins.meta.portmap import iptables_backend

        return iptables_backend.BACKEND
    assert cfg.backend == NFTABLES
    return nft_backend.BACKEND


def _route_localnet(req: Request, device: str) -> None:
    """route_localnet on ``device``, so 127.0.0.1:<hostPort> reaches the pod (IPv4 snat);
    written only when it is not already on."""
    name = f"net/ipv4/conf/{device}/route_localnet"
    with req.host.node() as node_kernel:
        sysctl = req.host.sysctl(node_kernel)
        if sysctl.read(name) != "1":
            sysctl.write(name, "1")


def _install(nf: Netfilter, cfg: PortMapConfig, rb: Rollback) -> None:
    """Install the rules; register on ``rb`` what removes everything the install added."""
    backend = backend_of(cfg)
    rb.push(backend.name, backend.add(nf, cfg, rb.step))


def _remove(nf: Netfilter, cfg: PortMapConfig) -> None:
    """The attachment's state in every layout: the selected backend's, the nftables one of a
    config that changed backend, and what the reference plugin wrote for it."""
    backend = backend_of(cfg)
    backend.delete(nf, cfg)
    if backend is not nft_backend.BACKEND:  # nftables state of a config that changed backend
        nft_backend.BACKEND.delete(nf, cfg)
    reference_state.delete(nf, cfg, skip_iptables=backend is not nft_backend.BACKEND)


class PortMap(Plugin):
    about = "pycni portmap: host port forwarding with nftables or iptables"

    def add(self, req: Request) -> Result:
        cfg = parse(req, need_prev=True)
        prev = req.prev_result()
        assert prev is not None  # parse() insists on it
        if not cfg.mappings or not cfg.container_ips:
            return prev
        # What can fail is looked up before anything changes; after that, any failure
        # removes this attachment's rules in every family (the scaffolding is shared).
        device = ""
        v4 = cfg.container_ips.get(4)
        if cfg.snat and v4 is not None and cfg.mappings_for(4):
            assert isinstance(v4.ip, ipaddress.IPv4Address)
            device = _route_device(req, v4.ip)
        with req.host.node() as node_kernel, Rollback(req.env) as rb:
            nf = req.host.netfilter(node_kernel)
            try:
                _install(nf, cfg, rb)
                rb.step("conntrack")
                _flush_udp_conntrack(req, nf, cfg)
                rb.step("route_localnet")
                if device:
                    _route_localnet(req, device)
            except BaseException:
                rb.run()
                for error in rb.errors:  # report the original failure, log these
                    req.log(f"portmap: rollback of a failed ADD: {error}")
                raise
        return prev

    def delete(self, req: Request) -> None:
        cfg = parse(req, need_prev=False)
        with req.host.node() as node_kernel:
            nf = req.host.netfilter(node_kernel)
            _remove(nf, cfg)
            _forget_udp_flows(req, nf, cfg)

    def check(self, req: Request) -> None:
        cfg = parse(req, need_prev=True)
        if not cfg.mappings:
            return
        with req.host.node() as node_kernel:
            nf = req.host.netfilter(node_kernel)
            try:
                backend_of(cfg).check(nf, cfg)
            except CNIError:
                # a pod the reference plugin set up, in its own layout, before pycni took over
                if not reference_state.check(nf, cfg):
                    raise

    def gc(self, req: Request) -> None:
        cfg = parse(req, need_prev=False)
        valid = req.valid_attachments() or []
        backend = backend_of(cfg)
        with req.host.node() as node_kernel:
            nf = req.host.netfilter(node_kernel)
            backend.gc(nf, cfg, valid)
            if backend is not nft_backend.BACKEND:
                nft_backend.BACKEND.gc(nf, cfg, valid)
            skip = backend is not nft_backend.BACKEND
            reference_state.gc(nf, cfg, {cid for cid, _ in valid}, skip_iptables=skip)

    def status(self, req: Request) -> None:
        cfg = parse(req, need_prev=False)
        with req.host.node() as node_kernel:
            usable = backend_of(cfg).usable(req.host.netfilter(node_kernel), cfg)
        if not usable:
            raise CNIError(
                PLUGIN_NOT_AVAILABLE, f"portmap: the {cfg.backend} backend is not usable here"
            )


PLUGIN = PortMap()
