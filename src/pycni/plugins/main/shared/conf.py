"""The config keys macvlan, tap and host-device read alike: ``ipam``, ``dns``, ``mac``."""

from __future__ import annotations

from pycni.record import record
from pycni.skel.base import Request
from pycni.skel.config import DNSConf, IPAMRef
from pycni.skel.mac import MacSource, requested_mac
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


def checked_mac(req: Request, order: tuple[MacSource, ...]) -> str:
    """The MAC asked for (``order``: the plugin's precedence), checked as macvlan and tap do."""
    mac = requested_mac(req, order, decode(CommonConf, req.config).mac)
    if mac and not is_mac(mac):
        raise InvalidConfig(
            f"invalid args {mac} for MAC addr: want six hex bytes (02:aa:bb:cc:dd:ee)"
        )
    return mac.replace("-", ":").lower()
