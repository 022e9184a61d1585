"""The config keys macvlan, tap and host-device read alike: ``ipam``, ``dns``, ``mac``."""

from __future__ import annotations

from pycni.record import record
from pycni.skel.base import Request
from pycni.skel.config import DNSConf, IPAMRef, MacArg
from pycni.spec.args import load_args
from pycni.spec.decode import Obj, Str, decode, option
from pycni.spec.errors import InvalidConfig
from pycni.spec.result import DNS
from pycni.spec.validate import is_mac


@record(frozen=True)
class CommonConf:
    """The keys macvlan, tap and host-device read alike."""

    ipam: IPAMRef = option("ipam", Obj(IPAMRef), factory=IPAMRef)
    dns: DNSConf = option("dns", Obj(DNSConf), factory=DNSConf)
    mac: str = option("mac", Str(max_len=64), "")


def ipam_type(req: Request) -> str:
    return decode(CommonConf, req.config).ipam.type


def config_dns(req: Request) -> DNS:
    """The config's ``dns`` section."""
    return decode(CommonConf, req.config).dns.to_dns()


def requested_mac(req: Request) -> str:
    """runtimeConfig.mac wins, then CNI_ARGS MAC, then the config's ``mac``; validated."""
    mac = decode(CommonConf, req.config).mac
    env_mac = load_args(req.args, known=["MAC"]).get("MAC", "")
    if env_mac:
        mac = env_mac
    rt_mac = decode(MacArg, req.runtime_config, "runtimeConfig").mac
    if rt_mac:
        mac = rt_mac
    if mac and not is_mac(mac):
        raise InvalidConfig(
            f"invalid args {mac} for MAC addr: want six hex bytes (02:aa:bb:cc:dd:ee)"
        )
    return mac.replace("-", ":").lower()
