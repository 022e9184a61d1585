"""The result cache, in libcni's own format and place (``<cache_dir>/results/<net>-<cid>-<if>``).

Files are JSON objects of kind ``cniCacheV1`` holding the attachment's identity, the conflist
bytes (base64, as Go encodes ``[]byte``), CNI_ARGS, capability args and the final ADD result,
so a Go runtime and pycni can read each other's cache.  Unlike libcni, files are written to a
temporary file, fsynced, renamed into place and the directory fsynced, so a crash never
leaves a 0-byte cache and a finished ADD's entry survives a power cut.

Readers never trust a file: one that is truncated, not JSON or of the wrong shape is skipped
with a warning on the ``pycni.runtime.cache`` logger by everything that lists the cache (GC,
cleanup, inspect); a DEL drops it and goes on, a CHECK reports it.
"""

from __future__ import annotations

import binascii
import os

from pycni.fsutil import write_atomic
from pycni.record import field, record, replace
from pycni.spec.conf import go_field, go_marshal, go_unmarshal
from pycni.spec.errors import DECODING_FAILURE, UNKNOWN, CNIError, InternalError
from pycni.spec.result import Result

from .types import NetworkAttachment, RuntimeConf

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and logging cost a one-shot `pycni add` more than its cache write
    from typing import Any

__all__ = [
    "CACHE_KIND",
    "DEFAULT_CACHE_DIR",
    "CachedInfo",
    "cache_file_path",
    "delete_cache",
    "encode_cache",
    "list_attachments",
    "read_cached_config",
    "read_cached_result",
    "read_entry",
    "write_cache",
]

CACHE_KIND = "cniCacheV1"
DEFAULT_CACHE_DIR = "/var/lib/cni"
_TEMP_PREFIX = ".pycni-tmp-"
_READ_MAX = 16 << 20  # a cache entry is a config and a result; anything bigger is not one


def _warn(message: str, *args: object) -> None:
    """A warning on the ``pycni.runtime.cache`` logger (imported only when there is one)."""
    import logging

    logging.getLogger(__name__).warning(message, *args)


@record
class CachedInfo:
    kind: str = ""
    container_id: str = ""
    config: bytes | None = None
    ifname: str = ""
    network_name: str = ""
    netns: str = ""
    cni_args: list[tuple[str, str]] | None = None
    capability_args: dict[str, Any] | None = None
    result: dict[str, Any] | None = field(default=None)


def _results_dir(cache_dir: str) -> str:
    return os.path.join(cache_dir, "results")


def cache_file_path(cache_dir: str, net_name: str, rt: RuntimeConf) -> str:
    if net_name == "" or rt.container_id == "" or rt.ifname == "":
        raise InternalError(
            f'cache file path requires network name ("{net_name}"), container ID '
            f'("{rt.container_id}"), and interface name ("{rt.ifname}")',
        )
    name = f"{net_name}-{rt.container_id}-{rt.ifname}"
    return os.path.join(_results_dir(cache_dir), name)


def encode_cache(result: Result, config: bytes, net_name: str, rt: RuntimeConf) -> bytes:
    """The bytes Go's ``json.Marshal(cachedInfo)`` produces, fields in struct order."""
    parts: list[tuple[str, Any]] = [
        ("kind", CACHE_KIND),
        ("containerId", rt.container_id),
        ("config", binascii.b2a_base64(config, newline=False).decode()),
        ("ifName", rt.ifname),
        ("networkName", net_name),
    ]
    if rt.netns:
        parts.append(("netns", rt.netns))
    if rt.args:
        parts.append(("cniArgs", [list(pair) for pair in rt.args]))
    if rt.capability_args:
        parts.append(("capabilityArgs", rt.capability_args))
    parts.append(("result", result.to_dict()))
    body = ",".join(go_marshal(k).decode() + ":" + go_marshal(v).decode() for k, v in parts)
    return ("{" + body + "}").encode()


def write_cache(
    cache_dir: str, result: Result, config: bytes, net_name: str, rt: RuntimeConf
) -> None:
    """Persist the final ADD result atomically (dir 0700, file 0600)."""
    path = cache_file_path(cache_dir, net_name, rt)
    data = encode_cache(result, config, net_name, rt)
    write_atomic(path, data, mode=0o600, dir_mode=0o700, fsync=True, prefix=_TEMP_PREFIX)


def delete_cache(cache_dir: str, net_name: str, rt: RuntimeConf) -> None:
    """Remove the cache file; errors are ignored, as libcni does."""
    try:  # noqa: SIM105 (contextlib is not loaded on the CLI's path)
        os.remove(cache_file_path(cache_dir, net_name, rt))
    except (OSError, CNIError):
        pass


def _b64decode(text: str) -> bytes:
    """``base64.b64decode(text, validate=True)`` (Go's StdEncoding is as strict) without
    base64, which imports re: a DEL reads the cache on every call."""
    return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)


def _str_field(obj: dict[str, Any], name: str) -> str:
    value = go_field(obj, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"json: cannot unmarshal into Go struct field cachedInfo.{name}")
    return value


def _decode_cached_info(data: bytes) -> CachedInfo:
    """Decode a cache file into the ``cachedInfo`` struct; ValueError when Go's would fail."""
    try:
        obj = go_unmarshal(data)
    except RecursionError:
        raise ValueError("json: exceeded max depth") from None
    if obj is None:
        return CachedInfo()
    if not isinstance(obj, dict):
        raise ValueError("json: cannot unmarshal into Go value of type libcni.cachedInfo")
    info = CachedInfo(
        kind=_str_field(obj, "kind"),
        container_id=_str_field(obj, "containerId"),
        ifname=_str_field(obj, "ifName"),
        network_name=_str_field(obj, "networkName"),
        netns=_str_field(obj, "netns"),
    )
    config = go_field(obj, "config")
    if config is not None:
        if not isinstance(config, str):
            raise ValueError("json: cannot unmarshal into Go struct field cachedInfo.config")
        try:
            info.config = _b64decode(config)
        except (binascii.Error, ValueError) as err:
            raise ValueError(f"illegal base64 data: {err}") from None
    args = go_field(obj, "cniArgs")
    if args is not None:
        if not isinstance(args, list):
            raise ValueError("json: cannot unmarshal into Go struct field cachedInfo.cniArgs")
        pairs: list[tuple[str, str]] = []
        for pair in args:
            if not isinstance(pair, list) or not all(isinstance(p, str) for p in pair):
                raise ValueError("json: cannot unmarshal into Go struct field cachedInfo.cniArgs")
            padded = [*pair[:2], "", ""]
            pairs.append((padded[0], padded[1]))
        info.cni_args = pairs
    for key, attr in (("capabilityArgs", "capability_args"), ("result", "result")):
        value = go_field(obj, key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ValueError(f"json: cannot unmarshal into Go struct field cachedInfo.{key}")
        setattr(info, attr, value)
    return info


def _read_cache_file(cache_dir: str, net_name: str, rt: RuntimeConf) -> bytes | None:
    """The raw cache file; None when it cannot be read (no cache is not an error)."""
    try:
        with open(cache_file_path(cache_dir, net_name, rt), "rb") as handle:
            return handle.read(_READ_MAX)
    except OSError:
        return None


def _create_from_bytes(data: bytes) -> Result:
    """libcni ``create.CreateFromBytes``: decode the version, then the result."""
    try:
        obj = go_unmarshal(data)
    except ValueError as err:
        raise CNIError(DECODING_FAILURE, f"decoding version from network config: {err}") from None
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise CNIError(
            DECODING_FAILURE,
            "decoding version from network config: json: cannot unmarshal into Go value",
        )
    return Result.from_dict(obj)


def read_cached_result(
    cache_dir: str, net_name: str, cni_version: str, rt: RuntimeConf
) -> Result | None:
    """The cached ADD result converted to ``cni_version``; None when there is no file.

    A file that is not a V1 cache is read as a bare (legacy) result; a 0-byte or corrupt file
    is an error here (DEL tolerates it, CHECK reports it).
    """
    data = _read_cache_file(cache_dir, net_name, rt)
    if data is None:
        return None
    try:
        info = _decode_cached_info(data)
    except ValueError:
        info = None
    if info is None or info.kind != CACHE_KIND:
        result = _create_from_bytes(data)
    else:
        result = Result.from_dict(info.result or {})
    try:
        return result.as_version(cni_version)
    except CNIError as err:
        raise CNIError(
            err.code or UNKNOWN,
            f'failed to convert cached result to config version "{cni_version}": {err.msg}',
            err.details,
        ) from None


def read_cached_config(
    cache_dir: str, net_name: str, rt: RuntimeConf
) -> tuple[bytes, RuntimeConf] | None:
    """The cached conflist bytes and ``rt`` with the cached args; None when there is no file."""
    data = _read_cache_file(cache_dir, net_name, rt)
    if data is None:
        return None
    try:
        info = _decode_cached_info(data)
    except ValueError as err:
        raise CNIError(
            DECODING_FAILURE, f'failed to unmarshal cached network "{net_name}" config: {err}'
        ) from None
    if info.kind != CACHE_KIND:
        raise CNIError(
            DECODING_FAILURE,
            f'read cached network "{net_name}" config has wrong kind: {info.kind}',
        )
    new_rt = replace(rt, capability_args=dict(info.capability_args or {}))
    if info.cni_args is not None:
        new_rt = replace(new_rt, args=tuple(info.cni_args))
    return (info.config or b""), new_rt


def _is_entry_name(name: str) -> bool:
    """A writer's temp file (ours, or any dot file) is never an entry."""
    return not name.startswith(".")


def read_entry(path: str) -> CachedInfo:
    """One cache file decoded; ValueError (with the reason) when it is not a usable V1 entry."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_READ_MAX + 1)
    except OSError as err:
        raise ValueError(err.strerror or str(err)) from None
    if len(data) > _READ_MAX:
        raise ValueError(f"larger than {_READ_MAX} bytes")
    info = _decode_cached_info(data)
    if info.kind != CACHE_KIND:
        raise ValueError(f"kind is {info.kind!r}, not {CACHE_KIND!r}")
    if info.ifname == "" or info.network_name == "" or info.container_id == "":
        raise ValueError("containerId, ifName or networkName is missing")
    return info


def list_attachments(cache_dir: str, container_id: str = "") -> list[NetworkAttachment]:
    """Every readable V1 cache entry, sorted by file name, optionally for one container.

    A file that cannot be read or decoded is skipped with a warning: one corrupt file must
    not stop a GC from seeing the others.
    """
    directory = _results_dir(cache_dir)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    attachments: list[NetworkAttachment] = []
    for name in names:
        if not _is_entry_name(name):
            continue
        if container_id:
            part = f"-{container_id}-"
            pos = name.find(part)
            if pos <= 0 or pos + len(part) >= len(name):
                continue
        path = os.path.join(directory, name)
        try:
            info = read_entry(path)
        except ValueError as err:
            _warn("skipping cache file %s: %s", path, err)
            continue
        if container_id and info.container_id != container_id:
            continue
        attachments.append(
            NetworkAttachment(
                container_id=info.container_id,
                network=info.network_name,
                ifname=info.ifname,
                config=info.config or b"",
                netns=info.netns,
                cni_args=tuple(info.cni_args or ()),
                capability_args=dict(info.capability_args or {}),
            )
        )
    return attachments
