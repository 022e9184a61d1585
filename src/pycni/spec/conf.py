"""Network configuration parsing, as libcni's conf.go does it (pure: bytes in, objects out).

A conflist is kept as the raw bytes it came from plus the few fields the runtime reads; every
plugin object is kept as a plain dict so unknown keys reach the plugin unchanged.  Error texts
follow libcni's so that messages users search for still match.
"""

from __future__ import annotations

from pycni.record import field, record, replace
from pycni.spec import jsoncodec, version
from pycni.spec.errors import InvalidConfig

# Their home is gojson.py (no config types to import with them); named here for callers.
from pycni.spec.gojson import go_unmarshal as go_unmarshal
from pycni.spec.gojson import shape_problem as shape_problem

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a one-shot CLI call or plugin more than parsing its config
    from typing import Any

__all__ = [
    "ConfError",
    "NetworkConfigList",
    "PluginConfig",
    "conf_list_from_bytes",
    "conf_list_from_conf",
    "go_field",
    "go_marshal",
    "go_unmarshal",
    "inject_conf",
    "plugin_conf_from_bytes",
]

_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


class ConfError(InvalidConfig):
    """A configuration that libcni would refuse (code 7, invalid network config)."""


# --- JSON the way Go's encoding/json reads and writes it ------------------------------------


def _go_float(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"json: unsupported value: {value}")
    magnitude = abs(value)
    if magnitude == 0 or 1e-6 <= magnitude < 1e21:
        from decimal import Decimal  # floats in configs are rare: not loaded for every call

        text = format(Decimal(repr(value)), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    return repr(value)


def _encode(obj: Any) -> str:
    if isinstance(obj, dict):
        items = sorted((str(k), v) for k, v in obj.items())
        return "{" + ",".join(_encode(k) + ":" + _encode(v) for k, v in items) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(_encode(v) for v in obj) + "]"
    if isinstance(obj, float):
        return _go_float(obj)
    return jsoncodec.dumps(obj, ensure_ascii=False)


def go_marshal(obj: Any) -> bytes:
    """Compact JSON with sorted object keys and Go's HTML-safe escapes (json.Marshal of a map)."""
    text = _encode(obj)
    if any(ch in text for ch in _GO_ESCAPES):
        text = "".join(_GO_ESCAPES.get(ch, ch) for ch in text)
    return text.encode()


def _go_type_name(value: Any) -> str:
    """The Go type ``%T`` prints for a value decoded into ``interface{}``."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# --- plugin objects ---------------------------------------------------------------------------


def go_field(obj: dict[str, Any], name: str) -> Any:
    """Go matches struct fields case-insensitively; the last matching key wins."""
    found: Any = None
    folded = name.lower()
    for key, value in obj.items():
        if key == name or key.lower() == folded:
            found = value
    return found


def _decode_object(data: bytes, prefix: str, go_type: str) -> dict[str, Any]:
    """Decode a JSON object as Go's json.Unmarshal into ``go_type`` would (``null`` is empty);
    errors carry ``prefix`` and Go's wording."""
    try:
        obj = go_unmarshal(data)
    except ValueError as err:
        raise ConfError(f"{prefix}: {err}") from None
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ConfError(
            f"{prefix}: json: cannot unmarshal {_json_kind(obj)} into Go value of type {go_type}"
        )
    return obj


def _type_error(json_value: Any, path: str, go_type: str) -> ConfError:
    return ConfError(
        f"error parsing configuration: json: cannot unmarshal {_json_kind(json_value)} "
        f"into Go struct field PluginConf.{path} of type {go_type}"
    )


def _check_plugin_fields(obj: dict[str, Any]) -> None:
    """The typed fields of Go's ``types.PluginConf`` must decode; others are free-form."""
    for name in ("cniVersion", "name", "type"):
        value = go_field(obj, name)
        if value is not None and not isinstance(value, str):
            raise _type_error(value, name, "string")
    caps = go_field(obj, "capabilities")
    if caps is not None:
        if not isinstance(caps, dict):
            raise _type_error(caps, "capabilities", "map[string]bool")
        for value in caps.values():
            if value is not None and not isinstance(value, bool):
                raise _type_error(value, "capabilities", "bool")
    ipam = go_field(obj, "ipam")
    if ipam is not None:
        if not isinstance(ipam, dict):
            raise _type_error(ipam, "ipam", "types.IPAM")
        ipam_type = go_field(ipam, "type")
        if ipam_type is not None and not isinstance(ipam_type, str):
            raise _type_error(ipam_type, "ipam.type", "string")
    dns = go_field(obj, "dns")
    if dns is not None:
        if not isinstance(dns, dict):
            raise _type_error(dns, "dns", "types.DNS")
        for key in ("nameservers", "search", "options"):
            items = go_field(dns, key)
            if items is None:
                continue
            if not isinstance(items, list):
                raise _type_error(items, f"dns.{key}", "[]string")
            for item in items:
                if item is not None and not isinstance(item, str):
                    raise _type_error(item, f"dns.{key}", "string")
        domain = go_field(dns, "domain")
        if domain is not None and not isinstance(domain, str):
            raise _type_error(domain, "dns.domain", "string")
    prev = go_field(obj, "prevResult")
    if prev is not None and not isinstance(prev, dict):
        raise _type_error(prev, "prevResult", "map[string]interface {}")


@record(frozen=True)
class PluginConfig:
    """One plugin object: the decoded dict and the exact bytes it was read from."""

    network: dict[str, Any]
    raw: bytes

    @property
    def type(self) -> str:
        return str(go_field(self.network, "type") or "")

    @property
    def name(self) -> str:
        return str(go_field(self.network, "name") or "")

    @property
    def cni_version(self) -> str:
        return str(go_field(self.network, "cniVersion") or "")

    @property
    def capabilities(self) -> dict[str, bool]:
        caps = go_field(self.network, "capabilities")
        if not isinstance(caps, dict):
            return {}
        return {str(k): bool(v) for k, v in caps.items()}

    def description(self) -> str:
        """libcni's ``pluginDescription``: ``type="T"`` plus ``name="N"`` when set."""
        text = f'type="{self.type}"'
        if self.name:
            text += f' name="{self.name}"'
        return text


def plugin_conf_from_bytes(data: bytes) -> PluginConfig:
    """Parse one plugin object (libcni ``NetworkPluginConfFromBytes`` / ``ConfFromBytes``)."""
    obj = _decode_object(data, "error parsing configuration", "types.PluginConf")
    _check_plugin_fields(obj)
    if not go_field(obj, "type"):
        raise ConfError("error parsing configuration: missing 'type'")
    return PluginConfig(network=obj, raw=bytes(data))


def inject_conf(original: PluginConfig, values: dict[str, Any]) -> PluginConfig:
    """libcni ``InjectConf``: set top-level keys, re-encode, and re-parse the plugin object."""
    try:
        config = go_unmarshal(original.raw)
    except ValueError as err:
        raise ConfError(f"unmarshal existing network bytes: {err}") from None
    if not isinstance(config, dict):
        config = {}
    for key, value in values.items():
        if key == "":
            raise ConfError("keys cannot be empty")
        if value is None:
            raise ConfError(f"key '{key}' value must not be nil")
        config[key] = value
    return plugin_conf_from_bytes(go_marshal(config))


# --- network configuration lists ---------------------------------------------------------------


@record(frozen=True)
class NetworkConfigList:
    """A conflist: the fields the runtime acts on, the plugin objects, and the source bytes."""

    name: str
    cni_version: str
    plugins: tuple[PluginConfig, ...] = ()
    disable_check: bool = False
    disable_gc: bool = False
    load_only_inlined_plugins: bool = False
    raw: bytes = field(default=b"", repr=False)

    def with_plugins(self, extra: tuple[PluginConfig, ...]) -> NetworkConfigList:
        return replace(self, plugins=self.plugins + extra)


_LIST_PREFIX = "error parsing configuration list"


def _read_bool(raw: dict[str, Any], key: str) -> bool:
    if key not in raw:
        return False
    value = raw[key]
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ConfError(f"{_LIST_PREFIX}: invalid type {_go_type_name(value)} for {key}")
    lowered = value.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ConfError(f'{_LIST_PREFIX}: invalid value "{lowered}" for {key}')


def _greater_than_current(text: str) -> bool:
    return version.parse(text) > version.parse(version.CURRENT)


def _select_version(raw: dict[str, Any], cni_version: str) -> str:
    """The highest of ``cniVersion`` and ``cniVersions`` not newer than what we implement."""
    listed = raw["cniVersions"]
    if not isinstance(listed, list):
        raise ConfError(f"{_LIST_PREFIX}: invalid type for cniVersions: []interface {{}}")
    candidates: list[str] = []
    for index, entry in enumerate(listed):
        if not isinstance(entry, str):
            raise ConfError(
                f"{_LIST_PREFIX}: invalid type for cniVersions index {index}: "
                f"{_go_type_name(entry)}"
            )
        try:
            too_new = _greater_than_current(entry)
        except ValueError as err:
            raise ConfError(
                f"{_LIST_PREFIX}: invalid cniVersions entry {entry} at index {index}: {err}"
            ) from None
        if not too_new:
            candidates.append(entry)
    if cni_version != "":
        try:
            too_new = _greater_than_current(cni_version)
        except ValueError as err:
            raise ConfError(f"{_LIST_PREFIX}: invalid cniVersion {cni_version}: {err}") from None
        if not too_new:
            candidates.append(cni_version)
    if not candidates:
        return cni_version
    return max(candidates, key=version.parse)


def conf_list_from_bytes(data: bytes) -> NetworkConfigList:
    """Parse a conflist (libcni ``NetworkConfFromBytes`` / ``ConfListFromBytes``).

    A list without a ``plugins`` key is valid here (its plugins may come from a sibling
    folder); the file loader refuses a list that ends up with none.
    """
    raw = _decode_object(data, _LIST_PREFIX, "map[string]interface {}")
    if "name" not in raw:
        raise ConfError(f"{_LIST_PREFIX}: no name")
    name = raw["name"]
    if not isinstance(name, str):
        raise ConfError(f"{_LIST_PREFIX}: invalid name type {_go_type_name(name)}")
    cni_version = ""
    if "cniVersion" in raw:
        cni_version = raw["cniVersion"]
        if not isinstance(cni_version, str):
            raise ConfError(
                f"{_LIST_PREFIX}: invalid cniVersion type {_go_type_name(raw['cniVersion'])}"
            )
    if "cniVersions" in raw:
        cni_version = _select_version(raw, cni_version)
    disable_check = _read_bool(raw, "disableCheck")
    disable_gc = _read_bool(raw, "disableGC")
    inline_only = _read_bool(raw, "loadOnlyInlinedPlugins")
    conf = NetworkConfigList(
        name=name,
        cni_version=cni_version,
        disable_check=disable_check,
        disable_gc=disable_gc,
        load_only_inlined_plugins=inline_only,
        raw=bytes(data),
    )
    if "plugins" not in raw:
        if inline_only:
            raise ConfError(
                f"{_LIST_PREFIX}: `loadOnlyInlinedPlugins` is true, and no 'plugins' key"
            )
        return conf
    plugins = raw["plugins"]
    if not isinstance(plugins, list):
        raise ConfError(f"{_LIST_PREFIX}: invalid 'plugins' type {_go_type_name(plugins)}")
    if not plugins:
        raise ConfError(f"{_LIST_PREFIX}: no plugins in list")
    parsed: list[PluginConfig] = []
    for index, plugin in enumerate(plugins):
        try:
            parsed.append(plugin_conf_from_bytes(go_marshal(plugin)))
        except ConfError as err:
            raise ConfError(f"failed to parse plugin config {index}: {err}") from None
    return replace(conf, plugins=tuple(parsed))


def conf_list_from_conf(original: PluginConfig) -> NetworkConfigList:
    """Wrap a single-plugin config as a one-plugin list (libcni ``ConfListFromConf``)."""
    try:
        plugin = go_unmarshal(original.raw)
    except ValueError as err:
        raise ConfError(str(err)) from None
    wrapped = {"name": original.name, "cniVersion": original.cni_version, "plugins": [plugin]}
    return conf_list_from_bytes(go_marshal(wrapped))
