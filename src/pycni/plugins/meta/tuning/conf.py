"""tuning's configuration: the keys, where each value may come from, and the sysctl key rule.

Pure logic (no kernel access), so every rule here is unit-tested on its own.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from pycni.record import fields, record, replace
from pycni.skel.base import Request
from pycni.skel.mac import ARGS_EVEN_EMPTY, CNI_ARGS, CONFIG, RUNTIME_CONFIG, requested_mac
from pycni.spec.decode import UINT32_MAX, Bool, FilePath, Int, MapOf, Str, decode, option
from pycni.spec.errors import InvalidConfig

DEFAULT_DATA_DIR = "/run/cni/tuning"
DATA_DIR_ENV = "PYCNI_TUNING_DATA_DIR"
DEFAULT_ALLOWLIST = "/etc/cni/tuning/allowlist.conf"
ALLOWLIST_ENV = "PYCNI_TUNING_ALLOWLIST"

_MAC_PATTERNS = (
    re.compile(r"^([0-9a-fA-F]{2})(?:[:-]([0-9a-fA-F]{2})){5}$"),
    re.compile(r"^[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}$"),
)


def normalize_mac(text: str) -> str:
    """A 6-byte MAC in the kernel's lower-case colon form; anything else is a config error."""
    if not any(p.match(text) for p in _MAC_PATTERNS):
        raise InvalidConfig(f"invalid args {text} for MAC addr: not a 6-byte Ethernet address")
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


_SYSCTLS = MapOf(Str(max_len=4096))
_MTU = Int(0, 2**31 - 1, "invalid config: {path} must be in [0, 2147483647], got {value}")
_TXQLEN = Int(0, UINT32_MAX, "invalid config: {path} must be in [0, 4294967295], got {value}")
_MAC_TEXT = Str(max_len=64)


@record(frozen=True)
class TuningConf:
    """What to change in the pod, as the config declares it (None: "leave it alone");
    ``parse`` lays CNI_ARGS, runtimeConfig and args.cni over it."""

    data_dir: str = option("dataDir", FilePath(), "")
    sysctl: dict[str, str] = option("sysctl", _SYSCTLS, factory=dict)
    mac: str = option("mac", _MAC_TEXT, "")
    promisc: bool = option("promisc", Bool(), False)
    mtu: int = option("mtu", _MTU, 0)
    allmulti: bool | None = option("allmulti", Bool())
    txqlen: int | None = option("txQLen", _TXQLEN)
    alias: str | None = option("alias", Str(max_len=255, no_control=True))

    def changes_link(self) -> bool:
        return bool(
            self.mac
            or self.mtu
            or self.promisc
            or self.allmulti is not None
            or self.txqlen is not None
            or self.alias is not None
        )


@record(frozen=True)
class TuningArgs:
    """``args.cni`` keys that override the config when given (same names as TuningConf)."""

    sysctl: dict[str, str] | None = option("sysctl", _SYSCTLS)
    mac: str | None = option("mac", _MAC_TEXT)
    promisc: bool | None = option("promisc", Bool())
    mtu: int | None = option("mtu", _MTU)
    allmulti: bool | None = option("allmulti", Bool())
    txqlen: int | None = option("txQLen", _TXQLEN)


# tuning.go loadTuningConf: CNI_ARGS MAC, then runtimeConfig.mac, then args.cni.mac override the
# config's "mac"; args.cni.mac is a *string, so a given "" wins too.
MAC_ORDER = (ARGS_EVEN_EMPTY, RUNTIME_CONFIG, CNI_ARGS, CONFIG)


def parse(req: Request) -> TuningConf:
    """The effective settings: config, then CNI_ARGS MAC, runtimeConfig.mac, then args.cni."""
    conf = decode(TuningConf, req.config)
    args = decode(TuningArgs, req.cni_args, "args.cni")
    given = {f.name: v for f in fields(TuningArgs) if (v := getattr(args, f.name)) is not None}
    given["sysctl"] = {**conf.sysctl, **given.get("sysctl", {})}
    given["mac"] = requested_mac(req, MAC_ORDER, conf.mac)
    if given["mac"]:
        given["mac"] = normalize_mac(given["mac"])
    data_dir = conf.data_dir or req.env.get(DATA_DIR_ENV, "") or DEFAULT_DATA_DIR
    return replace(conf, data_dir=data_dir, **given)


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
        raise InvalidConfig(f"invalid net sysctl key: {key!r}")
    slash, dot = key.find("/"), key.find(".")
    path = key
    if dot != -1 and (slash == -1 or dot < slash):
        path = key.translate(str.maketrans("./", "/."))
    path = path.replace("IFNAME", ifname, 1)
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != "net" or any(p in ("", ".", "..") for p in parts):
        raise InvalidConfig(
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
        raise InvalidConfig(f"failed to read sysctl allowlist {path}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def check_allowlist(keys: list[str], allowlist: list[str] | None) -> None:
    if allowlist is None:
        return
    for key in keys:
        try:
            ok = any(re.search(pattern, key) for pattern in allowlist)
        except re.error as exc:
            raise InvalidConfig(f"invalid regexp in sysctl allowlist: {exc}") from None
        if not ok:
            raise InvalidConfig(
                f"Sysctl {key} is not allowed. Only the following sysctls are allowed: {allowlist}"
            )


def backup_path(data_dir: str, container_id: str, ifname: str) -> str:
    """``<dataDir>/<containerID>_<ifname>.json``, the reference's file name."""
    return os.path.join(data_dir, f"{container_id}_{ifname}.json")
