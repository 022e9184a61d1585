"""tuning's configuration: the keys, where each value may come from, and the sysctl key rule.

Pure logic (no kernel access), so every rule here is unit-tested on its own.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from pycni.plugin.base import Request
from pycni.plugin.config import field as config_field
from pycni.plugin.config import lookup, section
from pycni.spec.args import load_args
from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError

DEFAULT_DATA_DIR = "/run/cni/tuning"
DATA_DIR_ENV = "PYCNI_TUNING_DATA_DIR"
DEFAULT_ALLOWLIST = "/etc/cni/tuning/allowlist.conf"
ALLOWLIST_ENV = "PYCNI_TUNING_ALLOWLIST"

_MAC_PATTERNS = (
    re.compile(r"^([0-9a-fA-F]{2})(?:[:-]([0-9a-fA-F]{2})){5}$"),
    re.compile(r"^[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}$"),
)


@dataclass
class TuningConf:
    """What to change in the pod; ``None`` means "leave it alone"."""

    data_dir: str
    sysctl: dict[str, str] = field(default_factory=dict)
    mac: str = ""
    promisc: bool = False
    mtu: int = 0
    allmulti: bool | None = None
    txqlen: int | None = None
    alias: str | None = None

    def changes_link(self) -> bool:
        return bool(
            self.mac
            or self.mtu
            or self.promisc
            or self.allmulti is not None
            or self.txqlen is not None
            or self.alias is not None
        )


def invalid(msg: str) -> CNIError:
    return CNIError(INVALID_NETWORK_CONFIG, msg)


def normalize_mac(text: str) -> str:
    """A 6-byte MAC in the kernel's lower-case colon form; anything else is a config error."""
    if not any(p.match(text) for p in _MAC_PATTERNS):
        raise invalid(f"invalid args {text} for MAC addr: not a 6-byte Ethernet address")
    digits = re.sub(r"[^0-9a-fA-F]", "", text).lower()
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def duplicate_sysctl_keys(stdin: bytes) -> list[str]:
    """Keys that appear twice in the top-level ``sysctl`` object (the reference refuses them)."""
    try:
        raw = json.loads(stdin, object_pairs_hook=_Pairs)
    except ValueError:
        return []
    dups: list[str] = []
    if isinstance(raw, _Pairs):
        for key, value in raw:
            if key.lower() == "sysctl" and isinstance(value, _Pairs):
                seen: set[str] = set()
                for name, _ in value:
                    if name in seen:
                        dups.append(name)
                    seen.add(name)
    return dups


class _Pairs(list[tuple[str, Any]]):
    """A JSON object kept as its (key, value) list, so repeated keys stay visible."""


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise invalid(f"invalid config: {where} must be an object of string values")
    return dict(value)


def parse(req: Request) -> TuningConf:
    """The effective settings: config, then CNI_ARGS MAC, runtimeConfig.mac, then args.cni."""
    cfg = req.config
    data_dir = config_field(cfg, "dataDir", str, "") or req.env.get(DATA_DIR_ENV, "")
    conf = TuningConf(data_dir=data_dir or DEFAULT_DATA_DIR)
    found, raw_sysctl = lookup(cfg, "sysctl")
    conf.sysctl = _string_map(raw_sysctl if found else None, "sysctl")
    conf.mac = config_field(cfg, "mac", str, "")
    conf.promisc = config_field(cfg, "promisc", bool, False)
    conf.mtu = config_field(cfg, "mtu", int, 0)
    found, value = lookup(cfg, "allmulti")
    conf.allmulti = (
        config_field(cfg, "allmulti", bool, False) if found and value is not None else None
    )
    found, value = lookup(cfg, "txQLen")
    conf.txqlen = config_field(cfg, "txQLen", int, 0) if found and value is not None else None
    found, value = lookup(cfg, "alias")
    conf.alias = config_field(cfg, "alias", str, "") if found and value is not None else None

    env_mac = load_args(req.args, known=["MAC"]).get("MAC", "")
    if env_mac:
        conf.mac = env_mac
    runtime_mac = config_field(req.runtime_config, "mac", str, "", "runtimeConfig")
    if runtime_mac:
        conf.mac = runtime_mac

    cni = section(section(cfg, "args"), "cni")
    found, value = lookup(cni, "sysctl")
    if found and value is not None:
        conf.sysctl.update(_string_map(value, "args.cni.sysctl"))
    found, value = lookup(cni, "mac")
    if found and value is not None:
        conf.mac = config_field(cni, "mac", str, "", "args.cni")
    found, value = lookup(cni, "promisc")
    if found and value is not None:
        conf.promisc = config_field(cni, "promisc", bool, False, "args.cni")
    found, value = lookup(cni, "mtu")
    if found and value is not None:
        conf.mtu = config_field(cni, "mtu", int, 0, "args.cni")
    found, value = lookup(cni, "allmulti")
    if found and value is not None:
        conf.allmulti = config_field(cni, "allmulti", bool, False, "args.cni")
    found, value = lookup(cni, "txQLen")
    if found and value is not None:
        conf.txqlen = config_field(cni, "txQLen", int, 0, "args.cni")

    if conf.mac:
        conf.mac = normalize_mac(conf.mac)
    if conf.mtu < 0:
        raise invalid(f"invalid config: mtu must not be negative, got {conf.mtu}")
    if conf.txqlen is not None and conf.txqlen < 0:
        raise invalid(f"invalid config: txQLen must not be negative, got {conf.txqlen}")
    return conf


def sysctl_path(key: str, ifname: str) -> str:
    """The sysctl ``key`` as a path relative to /proc/sys, or a config error.

    Rule: ``key`` is in dotted form (``net.ipv4.conf.IFNAME.rp_filter``) or slash form
    (``net/ipv4/conf/eth0.100/rp_filter``; a dot before the first slash means dotted form,
    whose dots and slashes are swapped). The first ``IFNAME`` becomes the interface name.
    The result must be ``net/<a>/<b>...``: first component ``net``, at least one more, none
    empty, ``.`` or ``..``, no NUL. Under /proc/sys/net every entry belongs to the network
    namespace it is opened from, so the write only ever reaches the pod's own values.
    """
    if not key or "\x00" in key:
        raise invalid(f"invalid net sysctl key: {key!r}")
    slash, dot = key.find("/"), key.find(".")
    path = key
    if dot != -1 and (slash == -1 or dot < slash):
        path = key.translate(str.maketrans("./", "/."))
    path = path.replace("IFNAME", ifname, 1)
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != "net" or any(p in ("", ".", "..") for p in parts):
        raise invalid(
            f'invalid net sysctl key: "{key}" (only keys under net. are allowed, '
            "without empty, '.' or '..' parts)"
        )
    return path


def read_allowlist(env: dict[str, str] | None = None) -> list[str] | None:
    """The admin's allowlist of sysctl regexps, or None when there is no file (no restriction)."""
    path = (env or {}).get(ALLOWLIST_ENV) or DEFAULT_ALLOWLIST
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise invalid(f"failed to read sysctl allowlist {path}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def check_allowlist(keys: list[str], allowlist: list[str] | None) -> None:
    if allowlist is None:
        return
    for key in keys:
        try:
            ok = any(re.search(pattern, key) for pattern in allowlist)
        except re.error as exc:
            raise invalid(f"invalid regexp in sysctl allowlist: {exc}") from None
        if not ok:
            raise invalid(
                f"Sysctl {key} is not allowed. Only the following sysctls are allowed: {allowlist}"
            )


def backup_path(data_dir: str, container_id: str, ifname: str) -> str:
    """``<dataDir>/<containerID>_<ifname>.json``, the reference's file name."""
    return os.path.join(data_dir, f"{container_id}_{ifname}.json")
