"""firewall: allow forwarded traffic to and from the pod's IPs, optionally isolate bridges.

Backends, one module each behind backend.Backend: ``iptables`` (iptables_backend.py: the
reference's CNI-FORWARD / CNI-ADMIN chains, one iptables-restore per family per call) and
``nftables`` (nft_backend.py: pycni's own ``inet pycni_firewall`` table, one transaction per
call). ``firewalld`` is not supported by pycni. See docs/plugins/firewall.md.
"""

from __future__ import annotations

import os

from pycni.net.netfilter import rule_tokens
from pycni.net.netfilter.nft_records import NftError
from pycni.plugins.meta.firewall import iptables_backend, nft_backend
from pycni.plugins.meta.firewall.backend import (
    DEFAULT_ADMIN_CHAIN,
    POLICIES,
    Attachment,
    Backend,
    FirewallError,
    IPAddress,
)
from pycni.plugins.meta.firewall.records import Records
from pycni.record import record, replace
from pycni.skel.base import Plugin, Request
from pycni.skel.rollback import Rollback
from pycni.spec.decode import Str, decode, option
from pycni.spec.errors import (
    CNIError,
    InternalError,
    InvalidConfig,
    PluginNotAvailable,
    UnsupportedField,
)
from pycni.spec.result import Result

BACKENDS = ("iptables", "nftables", "firewalld")
ALL: tuple[Backend, ...] = (nft_backend.BACKEND, iptables_backend.BACKEND)
BACKENDS_BY_NAME: dict[str, Backend] = {each.name: each for each in ALL}
DEFAULT_DATA_DIR = "/run/pycni/firewall"
DATA_DIR_ENV = "PYCNI_FIREWALL_DATA_DIR"


@record(frozen=True)
class FirewallConf:
    """The plugin's keys as declared; ``parse`` fills the defaults and resolves the backend."""

    backend: str = option(
        "backend",
        Str(
            choices=("", *BACKENDS),
            message="invalid config: unknown firewall backend {value} "
            '(use "iptables", "nftables" or leave it empty)',
        ),
        "",
    )
    ingress_policy: str = option(
        "ingressPolicy",
        Str(
            choices=("", *POLICIES),
            message="unknown ingress policy: {value} "
            '(ingressPolicy: use "open", "same-bridge" or "isolated")',
        ),
        "",
    )
    admin_chain: str = option("iptablesAdminChainName", Str(), "")
    data_dir: str = option("dataDir", Str(), "")


def parse(req: Request) -> FirewallConf:
    """The config, every value that reaches a rule checked by netfilter/rule_tokens.py (code 7)."""
    conf = decode(FirewallConf, req.config)
    admin = conf.admin_chain or DEFAULT_ADMIN_CHAIN
    rule_tokens.chain_name("iptablesAdminChainName", admin)
    if admin in nft_backend.CHAINS:
        raise rule_tokens.refuse(
            "iptablesAdminChainName",
            f'"{admin}" is a chain of the nftables backend',
            "use another name",
        )
    resolved = _resolve_backend(conf.backend)
    if resolved in BACKENDS_BY_NAME:  # firewalld is refused by the verbs that need it
        BACKENDS_BY_NAME[resolved].check_admin_chain(admin)
    data_dir = conf.data_dir or req.env.get(DATA_DIR_ENV, "") or DEFAULT_DATA_DIR
    if (
        rule_tokens.control_character(data_dir) is not None
        or not os.path.isabs(data_dir)
        or ".." in data_dir.split("/")
    ):
        raise rule_tokens.refuse(
            "dataDir",
            f'"{rule_tokens.shown(data_dir)}" is not a clean absolute path',
            "use an absolute directory path without '..' or control characters",
        )
    return replace(
        conf,
        backend=resolved,
        ingress_policy=conf.ingress_policy or "open",
        admin_chain=admin,
        data_dir=data_dir,
    )


def _resolve_backend(backend: str) -> str:
    """The reference's default is firewalld when it runs; pycni has no firewalld backend, so
    an empty backend means iptables when its tools exist, else nftables."""
    if backend:
        return backend
    if iptables_backend.tools_present():
        return iptables_backend.BACKEND.name
    return nft_backend.BACKEND.name


def _firewalld_refused() -> CNIError:
    return UnsupportedField(
        'firewall backend "firewalld" is not supported by pycni',
        'use "backend": "iptables" or "nftables" (firewalld zones are not managed)',
    )


def _by_family(result: Result) -> dict[int, list[IPAddress]]:
    out: dict[int, list[IPAddress]] = {}
    for ip in result.ips:
        out.setdefault(ip.address.version, []).append(ip.address.ip)
    return out


def _bridge_of(result: Result, policy: str) -> str:
    if policy == "open":
        return ""
    if not result.interfaces or not result.interfaces[0].name:
        raise InvalidConfig(
            f'interface needs to be set for ingress policy "{policy}", make sure to chain '
            '"firewall" plugin with "bridge"',
        )
    return rule_tokens.interface_name("prevResult.interfaces[0].name", result.interfaces[0].name)


def _fail(exc: Exception) -> CNIError:
    return InternalError(f"firewall: {exc}")


def _conf_and_prev(req: Request) -> tuple[FirewallConf, Result]:
    """What ADD and CHECK start from: the config and the required prevResult (no firewalld)."""
    conf = parse(req)
    prev = req.prev_result()
    if prev is None:
        raise InvalidConfig("missing prevResult from earlier plugin")
    if conf.backend == "firewalld":
        raise _firewalld_refused()
    return conf, prev


def _backend(conf: FirewallConf) -> Backend:
    return BACKENDS_BY_NAME[conf.backend]


def _records(req: Request, conf: FirewallConf) -> Records:
    return Records(req.host.state(), conf.data_dir, req.name)


def _attachment(req: Request, conf: FirewallConf, result: Result | None, bridge: str) -> Attachment:
    records = _records(req, conf)
    families = (
        _by_family(result) if result is not None else records.load(req.container_id, req.ifname)
    )
    return Attachment(
        req.name,
        req.container_id,
        req.ifname,
        families,
        conf.admin_chain,
        bridge,
        conf.ingress_policy,
        records,
        req.log,
        tuple(ip.address.ip for ip in result.ips) if result is not None else (),
    )


class Firewall(Plugin):
    about = "pycni firewall: allow forwarded traffic of a pod, optionally isolate its bridge"
    supported_versions = ("0.4.0", "1.0.0", "1.1.0")

    def add(self, req: Request) -> Result:
        conf, prev = _conf_and_prev(req)
        att = _attachment(req, conf, prev, _bridge_of(prev, conf.ingress_policy))
        with Rollback(req.env) as rb:
            try:
                _backend(conf).add(req.host.node_netfilter(), att, rb)
            except (FirewallError, NftError, OSError) as exc:
                raise _fail(exc) from None
        return prev

    def delete(self, req: Request) -> None:
        """The chosen backend's DEL, then every other backend that ``cleans_others`` (each
        when usable here), then the attachment's record."""
        conf = parse(req)
        if conf.backend == "firewalld":
            return  # nothing can have been added
        att = _attachment(req, conf, req.prev_result(), "")
        chosen = _backend(conf)
        nf = req.host.node_netfilter()
        for each in (chosen, *[b for b in ALL if b is not chosen and b.cleans_others]):
            if each.usable(nf):
                try:
                    each.delete(nf, att)
                except FirewallError as exc:
                    raise _fail(exc) from None
        _records(req, conf).remove(req.container_id, req.ifname)

    def check(self, req: Request) -> None:
        conf, prev = _conf_and_prev(req)
        try:
            _backend(conf).check(req.host.node_netfilter(), _attachment(req, conf, prev, ""))
        except FirewallError as exc:
            raise _fail(exc) from None

    def gc(self, req: Request) -> None:
        conf = parse(req)
        valid = req.valid_attachments() or []
        nf = req.host.node_netfilter()
        try:
            for each in ALL:
                if each.usable(nf):
                    each.gc(nf, req.name, _records(req, conf), valid)
        except (FirewallError, OSError) as exc:
            raise _fail(exc) from None

    def status(self, req: Request) -> None:
        conf = parse(req)
        if conf.backend == "firewalld":
            raise PluginNotAvailable('firewall backend "firewalld" is not supported')
        chosen = _backend(conf)
        if not chosen.usable(req.host.node_netfilter()):
            raise PluginNotAvailable(chosen.unavailable)


PLUGIN = Firewall()
