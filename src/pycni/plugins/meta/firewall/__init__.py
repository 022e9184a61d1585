"""firewall: allow forwarded traffic to and from the pod's IPs, optionally isolate bridges.

Backends: ``iptables`` (the reference's CNI-FORWARD / CNI-ADMIN chains, one iptables-restore
per family per call) and ``nftables`` (pycni's own ``inet pycni_firewall`` table, one
transaction per call). ``firewalld`` is not supported by pycni. See docs/plugins/firewall.md.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from functools import partial

from pycni.fsutil import write_atomic
from pycni.net import tools
from pycni.net.netfilter import nft, rule_tokens
from pycni.plugin.base import Plugin, Request
from pycni.plugin.rollback import Rollback
from pycni.plugins.meta.firewall import rules
from pycni.record import record, replace
from pycni.spec import validate
from pycni.spec.decode import Str, decode, option
from pycni.spec.errors import (
    CNIError,
    InternalError,
    InvalidConfig,
    PluginNotAvailable,
    UnsupportedField,
)
from pycni.spec.result import Result

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
BACKENDS = ("iptables", "nftables", "firewalld")
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
            choices=("", *rules.POLICIES),
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
    admin = conf.admin_chain or rules.DEFAULT_ADMIN_CHAIN
    rule_tokens.chain_name("iptablesAdminChainName", admin)
    if admin in rules.NFT_CHAINS:
        raise rule_tokens.refuse(
            "iptablesAdminChainName",
            f'"{admin}" is a chain of the nftables backend',
            "use another name",
        )
    resolved = _resolve_backend(conf.backend)
    if resolved == "nftables" and not admin[0].isalpha():
        raise rule_tokens.refuse(
            "iptablesAdminChainName",
            f'"{admin}" is not an nftables identifier',
            "with the nftables backend the name must start with a letter",
        )
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
    if _iptables_tools():
        return "iptables"
    return "nftables"


def _iptables_tools() -> bool:
    return all(tools.which(t) for t in ("iptables-restore", "ip6tables-restore"))


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


class Firewall(Plugin):
    about = "pycni firewall: allow forwarded traffic of a pod, optionally isolate its bridge"
    supported_versions = ("0.4.0", "1.0.0", "1.1.0")

    def add(self, req: Request) -> Result:
        conf, prev = _conf_and_prev(req)
        families = _by_family(prev)
        bridge = _bridge_of(prev, conf.ingress_policy)
        with Rollback(req.env) as rb:
            try:
                if conf.backend == "iptables":
                    for family, ips in sorted(families.items()):
                        rb.step(f"iptables{family}")
                        undo = rules.ipt_add(
                            family, ips, conf.admin_chain, bridge, conf.ingress_policy
                        )
                        rb.push(f"iptables{family}", partial(rules.ipt_undo, family, undo, ips))
                    rb.step("record")
                    _Records(conf.data_dir, req.name).save(req.container_id, req.ifname, prev)
                    rb.push(
                        "record",
                        partial(
                            _Records(conf.data_dir, req.name).remove, req.container_id, req.ifname
                        ),
                    )
                else:
                    rb.step("nftables")
                    ips = [ip for group in families.values() for ip in group]
                    rules.nft_add(
                        ips,
                        req.name,
                        req.ifname,
                        req.container_id,
                        conf.admin_chain,
                        bridge,
                        conf.ingress_policy,
                    )
            except (rules.FirewallError, nft.NftError, OSError) as exc:
                raise _fail(exc) from None
        return prev

    def delete(self, req: Request) -> None:
        conf = parse(req)
        if conf.backend == "firewalld":
            return  # nothing can have been added
        prev = req.prev_result()
        records = _Records(conf.data_dir, req.name)
        families = (
            _by_family(prev) if prev is not None else records.load(req.container_id, req.ifname)
        )
        if conf.backend == "iptables" and _iptables_tools():
            for family, ips in sorted(families.items()):
                try:
                    rules.ipt_delete(family, ips)
                except rules.FirewallError as exc:
                    req.log(f"firewall DEL: {exc}")  # the reference ignores these too
        if nft.available():
            try:
                rules.nft_delete(req.name, req.ifname, req.container_id)
            except rules.FirewallError as exc:
                raise _fail(exc) from None
        records.remove(req.container_id, req.ifname)

    def check(self, req: Request) -> None:
        conf, prev = _conf_and_prev(req)
        families = _by_family(prev)
        try:
            if conf.backend == "iptables":
                for family, ips in sorted(families.items()):
                    rules.ipt_check(family, ips, conf.admin_chain)
            else:
                ips = [ip for group in families.values() for ip in group]
                rules.nft_check(ips, req.name, req.ifname, req.container_id)
        except rules.FirewallError as exc:
            raise _fail(exc) from None

    def gc(self, req: Request) -> None:
        conf = parse(req)
        valid = req.valid_attachments() or []
        try:
            if nft.available():
                rules.nft_gc(req.name, valid)
            records = _Records(conf.data_dir, req.name)
            stale = records.stale(valid)
            if stale and _iptables_tools():
                kept: dict[int, set[IPAddress]] = {}
                for cid, ifname in valid:
                    for family, ips in records.load(cid, ifname).items():
                        kept.setdefault(family, set()).update(ips)
                for cid, ifname in stale:
                    for family, ips in records.load(cid, ifname).items():
                        gone = [ip for ip in ips if ip not in kept.get(family, set())]
                        if gone:
                            rules.ipt_delete(family, gone)
                    records.remove(cid, ifname)
        except (rules.FirewallError, OSError) as exc:
            raise _fail(exc) from None

    def status(self, req: Request) -> None:
        conf = parse(req)
        if conf.backend == "firewalld":
            raise PluginNotAvailable('firewall backend "firewalld" is not supported')
        if conf.backend == "iptables" and not _iptables_tools():
            raise PluginNotAvailable("iptables-restore / ip6tables-restore not found")
        if conf.backend == "nftables" and not nft.available():
            raise PluginNotAvailable("nftables is not usable here")


class _Records:
    """Which IPs each attachment got (iptables only): GC has no prevResult to go by."""

    def __init__(self, data_dir: str, network: str) -> None:
        self.directory = os.path.join(data_dir, network)

    def _path(self, cid: str, ifname: str) -> str:
        """The record's file; IDs from a GC request or a record's contents are checked like
        CNI_CONTAINERID and CNI_IFNAME, so no value can name a file elsewhere."""
        try:
            validate.container_id(cid)
            validate.interface_name(ifname)
        except CNIError:
            raise ValueError(f"not an attachment: {cid!r} {ifname!r}") from None
        return os.path.join(self.directory, f"{cid}_{ifname}")

    def save(self, cid: str, ifname: str, result: Result) -> None:
        body = json.dumps(
            {"containerID": cid, "ifname": ifname, "ips": [str(ip.address.ip) for ip in result.ips]}
        )
        write_atomic(self._path(cid, ifname), body, mode=0o600, dir_mode=0o700, fsync=False)

    def load(self, cid: str, ifname: str) -> dict[int, list[IPAddress]]:
        try:
            with open(self._path(cid, ifname)) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return {}
        out: dict[int, list[IPAddress]] = {}
        for text in data.get("ips", []) if isinstance(data, dict) else []:
            with contextlib.suppress(ValueError):
                ip = ipaddress.ip_address(text)
                out.setdefault(ip.version, []).append(ip)
        return out

    def remove(self, cid: str, ifname: str) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            os.unlink(self._path(cid, ifname))
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)  # only when empty

    def stale(self, valid: list[tuple[str, str]]) -> list[tuple[str, str]]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        keep = {f"{cid}_{ifname}" for cid, ifname in valid}
        out = []
        for name in names:
            if name.startswith(".") or name in keep:
                continue
            try:
                with open(os.path.join(self.directory, name)) as fh:
                    data = json.load(fh)
                out.append((str(data["containerID"]), str(data["ifname"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out


PLUGIN = Firewall()
