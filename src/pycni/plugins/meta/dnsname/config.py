"""The dnsname config (``domainName``, ``runtimeConfig.aliases``), the container name from
CNI_ARGS and what is taken from prevResult, every string validated before use."""

from __future__ import annotations

from typing import Any

from pycni.plugins.meta.dnsname import names
from pycni.record import field, record
from pycni.skel.base import Request
from pycni.spec.args import load_args
from pycni.spec.decode import Raw, Str, decode, option
from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError, InternalError
from pycni.spec.result import Result

POD_NAME_ARG = "K8S_POD_NAME"


@record(frozen=True)
class DnsnameKeys:
    """The plugin's own key; its value is checked again as a DNS name by ``names``."""

    domain_name: str = option("domainName", Str(), "")


@record(frozen=True)
class RuntimeAliases:
    """``runtimeConfig.aliases``: network name -> list of names (checked by ``_aliases``)."""

    aliases: dict[str, Any] = option("aliases", Raw((dict,), "an object"), factory=dict)


@record
class DnsnameConfig:
    network: str
    domain: str
    aliases: list[str] = field(default_factory=list)
    pod_name: str | None = None


def parse(req: Request) -> DnsnameConfig:
    network = names.network_name(req.name)
    domain = names.domain_name(decode(DnsnameKeys, req.config).domain_name)
    aliases = _aliases(req, network)
    return DnsnameConfig(network, domain, aliases, pod_name(req))


def pod_name(req: Request) -> str | None:
    """``K8S_POD_NAME`` from CNI_ARGS (podman passes the container's name there)."""
    value = load_args(req.args, [POD_NAME_ARG]).get(POD_NAME_ARG, "")
    if value == "":
        return None
    return names.host_name(value, f"CNI_ARGS {POD_NAME_ARG}")


def require_pod_name(cfg: DnsnameConfig) -> str:
    if cfg.pod_name is None:
        raise CNIError(
            INVALID_NETWORK_CONFIG,
            f"dnsname: CNI_ARGS {POD_NAME_ARG} (the container's name) is missing: "
            "there is no name to publish",
        )
    return cfg.pod_name


def _aliases(req: Request, network: str) -> list[str]:
    """``runtimeConfig.aliases``: network name -> list of names; only ours are used."""
    raw = decode(RuntimeAliases, req.runtime_config, "runtimeConfig").aliases
    out: list[str] = []
    for net, entries in raw.items():
        where = f"runtimeConfig.aliases[{net!r}]"
        if entries is None:
            continue
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise CNIError(INVALID_NETWORK_CONFIG, f"dnsname: {where} must be a list of strings")
        if net == network:
            out = [names.host_name(alias, where) for alias in entries]
    return out


def bridge_name(prev: Result) -> str:
    """The reference serves DNS on the first interface of prevResult (the bridge)."""
    if not prev.interfaces:
        raise CNIError(INVALID_NETWORK_CONFIG, "dnsname: prevResult has no interfaces")
    first = prev.interfaces[0]
    if first.sandbox:
        # e.g. macvlan's result: the reference would bind dnsmasq to the node's interface of
        # the same name (say eth0) and open it to DNS queries from outside
        raise CNIError(
            INVALID_NETWORK_CONFIG,
            f"dnsname: prevResult.interfaces[0] ({first.name}) is inside the container "
            "(it has a sandbox); dnsname needs a host-side bridge there",
        )
    return names.interface_name(first.name, "prevResult.interfaces[0].name")


def container_ips(prev: Result) -> list[str]:
    """The reference's choice: the only IP, or every IP on an interface with a sandbox."""
    if not prev.ips:
        raise InternalError("no ip address was found in the network")
    if len(prev.ips) == 1:
        return [str(prev.ips[0].address.ip)]
    out = []
    for ipc in prev.ips:
        if ipc.interface is None:
            continue
        idx = ipc.interface
        if not (0 <= idx < len(prev.interfaces) and prev.interfaces[idx].sandbox):
            raise InternalError(
                "unable to check if interface has a sandbox due to index being out of range",
            )
        out.append(str(ipc.address.ip))
    if not out:
        raise InternalError("no ip address was found in the network")
    return out
