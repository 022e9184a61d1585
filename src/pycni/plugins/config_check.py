"""What `pycni validate` and `pycni doctor` find wrong in a network config, before any ADD.

ADD ignores unknown keys, as the reference does (encoding/json), so a typo such as
``"isGatway"`` silently builds a node without a gateway. This check runs each plugin's and its
IPAM's config loader, the very functions ADD calls first, on the config as libcni would hand it
over, and records every config record those loaders decode and at which JSON path
(:func:`pycni.spec.decode.observe`). So:

- a value ADD would refuse is an error, with ADD's own message;
- a key at a path some loader decodes that no decoded record declares is a warning, with the
  closest known key (``did you mean``);
- a capability no runtime supplies, or one the plugin never reads, is a warning;
- a chain that cannot work (a meta plugin with nothing before it to make the interface, a
  port mapping with no address to map to) is an error or a warning.

Nothing here touches the machine: the loaders only decode (no kernel, no files, no processes).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pycni.plugins.ipam.dhcp import config as dhcp_config
from pycni.plugins.ipam.host_local import config as host_local_config
from pycni.plugins.ipam.static import plugin as static
from pycni.plugins.main.bridge import plugin as bridge
from pycni.plugins.main.dummy import plugin as dummy
from pycni.plugins.main.host_device import plugin as host_device
from pycni.plugins.main.ipvlan import plugin as ipvlan
from pycni.plugins.main.macvlan import plugin as macvlan
from pycni.plugins.main.ptp import plugin as ptp
from pycni.plugins.main.tap import plugin as tap
from pycni.plugins.main.vlan import plugin as vlan
from pycni.plugins.meta.bandwidth import plugin as bandwidth
from pycni.plugins.meta.dnsname import config as dnsname_config
from pycni.plugins.meta.firewall.plugin import parse as firewall_parse
from pycni.plugins.meta.portmap import config as portmap_config
from pycni.plugins.meta.tuning import conf as tuning_conf
from pycni.plugins.meta.vrf import plugin as vrf
from pycni.skel.base import Request
from pycni.skel.registry import PLUGIN_TYPES
from pycni.spec import decode as decoder
from pycni.spec.conf import NetworkConfigList
from pycni.spec.errors import CNIError

ERROR = "error"
WARNING = "warning"

# Keys every plugin object may carry: the spec's, and what runtimes inject.
_COMMON_KEYS = ("cniVersion", "name", "type", "capabilities", "runtimeConfig", "args", "prevResult")
# Sections the runtime fills in per call; a conflist may carry defaults there, unchecked.
_RUNTIME_SECTIONS = ("runtimeConfig", "args", "prevResult")
# Meta plugins that work on the interface an earlier plugin made (they need a prevResult).
_NEEDS_PREV = ("portmap", "bandwidth", "tuning", "sbr", "firewall", "vrf", "dnsname")
_IPAM_TYPES = ("host-local", "static", "dhcp")
# The capabilities runtimes supply (CONVENTIONS.md), and the plugin types that read each.
_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "portMappings": ("portmap",),
    "ipRanges": ("host-local",),
    "bandwidth": ("bandwidth",),
    "dns": (),
    "ips": ("static", "host-local"),
    "mac": ("tuning", "bridge", "macvlan", "tap", "host-device"),
    "infinibandGUID": (),
    "deviceID": ("host-device",),
    "aliases": ("dnsname",),
    "cgroupPath": (),
    "io.kubernetes.cri.pod-annotations": (),
}


@dataclass(frozen=True)
class Finding:
    """One problem: where (file, JSON path), how bad, and what to do."""

    source: str
    path: str
    severity: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.severity}: {self.path}: {self.message}"


_MAX_SHOWN = 300


def _printable(text: str) -> str:
    """Config keys and values end up in a terminal: control characters (newlines, escape
    sequences) are shown escaped and a huge key is cut, so no config can fake report lines."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return out if len(out) <= _MAX_SHOWN else out[: _MAX_SHOWN - 3] + "..."


def exit_code(findings: list[Finding]) -> int:
    """0 clean, 1 when any error, 2 for warnings only."""
    if any(f.severity == ERROR for f in findings):
        return 1
    return 2 if findings else 0


def _loaders() -> dict[str, Callable[[Request], object]]:
    """Per plugin type, the config loading ADD does before it touches anything."""

    def bridge_check(req: Request) -> object:
        conf = bridge.load_conf(req)
        bridge.validate_for_add(conf)
        return conf

    def host_local(req: Request) -> object:
        return host_local_config.load(req.config, req.args)

    def dhcp(req: Request) -> object:
        found, ipam = decoder.lookup(req.config, "ipam")
        return dhcp_config.load(ipam if found and isinstance(ipam, dict) else None)

    def static_check(req: Request) -> object:
        return static.load_addresses(req, static.load_ipam(req))

    return {
        "bridge": bridge_check,
        "ptp": ptp.load_conf,
        "macvlan": macvlan.load_conf,
        "ipvlan": ipvlan.load_conf,
        "vlan": vlan.load_conf,
        "host-device": host_device.load_conf,
        "tap": tap.load_conf,
        "dummy": dummy.required_ipam,
        "tuning": tuning_conf.parse,
        "bandwidth": bandwidth.load_limits,
        "firewall": firewall_parse,
        "dnsname": dnsname_config.parse,
        "vrf": vrf.load_conf,
        "portmap": lambda req: portmap_config.parse(req, need_prev=False),
        "host-local": host_local,
        "static": static_check,
        "dhcp": dhcp,
    }


def _request(config: dict[str, Any]) -> Request:
    return Request(
        command="ADD",
        container_id="pycni-validate",
        netns="/var/run/netns/pycni-validate",
        ifname="eth0",
        args="",
        path=[],
        config=config,
        stdin=b"",
        env={},
    )


class _Schema:
    """The keys each JSON path may hold, from the records the loaders decoded there."""

    def __init__(self) -> None:
        self.keys: dict[str, set[str]] = {"": set(_COMMON_KEYS)}

    def saw(self, cls: type[Any], path: str) -> None:
        known = self.keys.setdefault(path, set())
        known.update(spec.key for _attr, spec in decoder.specs(cls))


def _run(
    loader: Callable[[Request], object], config: dict[str, Any], schema: _Schema
) -> CNIError | None:
    with decoder.observe(schema.saw):
        try:
            loader(_request(config))
        except CNIError as err:
            return err
    return None


def _walk(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in ``value`` with its JSON path (``ipam.ranges[0][1]``)."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            if isinstance(key, str) and key not in _RUNTIME_SECTIONS:
                yield from _walk(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")


def _unknown_keys(
    config: dict[str, Any], schema: _Schema, where: str, source: str
) -> Iterator[Finding]:
    for path, obj in _walk(config, ""):
        known = schema.keys.get(path)
        if known is None:
            continue  # no loader reads this object: nothing to say about its keys
        lowered = {k.lower() for k in known}
        for key in obj:
            if not isinstance(key, str) or key.lower() in lowered:
                continue
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else " (ADD ignores it)"
            full = f"{where}.{path}.{key}" if path else f"{where}.{key}"
            yield Finding(source, full, WARNING, f"unknown key `{key}`{hint}")


def _capabilities(
    config: dict[str, Any], plugin_type: str, ipam_type: str, where: str, source: str
) -> Iterator[Finding]:
    caps = config.get("capabilities")
    if not isinstance(caps, dict):
        return
    for name, enabled in caps.items():
        if enabled is not True:
            continue
        path = f"{where}.capabilities.{name}"
        readers = _CAPABILITIES.get(name)
        if readers is None:
            close = difflib.get_close_matches(name, sorted(_CAPABILITIES), n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            yield Finding(source, path, WARNING, f"no runtime supplies capability `{name}`{hint}")
        elif readers and plugin_type not in readers and ipam_type not in readers:
            yield Finding(
                source,
                path,
                WARNING,
                f"{plugin_type} never reads runtimeConfig.{name}: the runtime's value would be "
                f"ignored (read by {', '.join(readers)})",
            )


def _chain(conf: NetworkConfigList, source: str) -> Iterator[Finding]:
    makers = 0  # plugins before this one that make an interface
    addressed = False  # ... and one of them has IPAM
    for index, plugin in enumerate(conf.plugins):
        where = f"plugins[{index}]"
        kind = plugin.type
        if kind in _IPAM_TYPES:
            yield Finding(
                source,
                f"{where}.type",
                WARNING,
                f"{kind} is an IPAM plugin: give it as the `ipam` of an interface plugin "
                "instead of as a step of the chain",
            )
            continue
        if kind in _NEEDS_PREV:
            if makers == 0:
                yield Finding(
                    source,
                    f"{where}.type",
                    ERROR,
                    f"{kind} works on the interface an earlier plugin made, and nothing before "
                    f"it does: put it after the interface plugin (bridge, ptp, macvlan, ...)",
                )
            elif kind == "portmap" and not addressed:
                yield Finding(
                    source,
                    f"{where}.type",
                    WARNING,
                    "portmap maps to the pod's address, and no plugin before it has an `ipam` "
                    "section to give one",
                )
            continue
        makers += 1
        ipam = plugin.network.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type"):
            addressed = True


# What a runtime may supply through a capability the plugin enables, so that a config leaving
# it to the runtime (host-local with ipRanges, static with ips) is not called broken.
_SUPPLIED: dict[str, Any] = {
    "ipRanges": [[{"subnet": "198.51.100.0/24"}]],
    "ips": ["198.51.100.7/24"],
}


def _plugin_config(conf: NetworkConfigList, network: Mapping[str, Any]) -> dict[str, Any]:
    """The object libcni hands a plugin: its own keys plus the list's name and version, and
    a stand-in value (from TEST-NET-2) for each capability above that the plugin enables."""
    config = dict(network)
    config["name"] = conf.name
    config["cniVersion"] = conf.cni_version
    caps = network.get("capabilities")
    if isinstance(caps, dict):
        supplied = {k: v for k, v in _SUPPLIED.items() if caps.get(k) is True}
        if supplied and not isinstance(config.get("runtimeConfig"), dict):
            config["runtimeConfig"] = supplied
    return config


def check_network(
    conf: NetworkConfigList, source: str, *, plugin_found: Callable[[str], bool] | None = None
) -> list[Finding]:
    """Every finding for one network config read from ``source`` (a file name).

    ``plugin_found(type)`` says whether a plugin pycni does not ship exists in CNI_PATH; an
    unknown type that is not found there is an error.
    """
    loaders = _loaders()
    findings: list[Finding] = list(_chain(conf, source))
    for index, plugin in enumerate(conf.plugins):
        where = f"plugins[{index}]"
        kind = plugin.type
        config = _plugin_config(conf, plugin.network)
        ipam = config.get("ipam")
        ipam_type = str(ipam.get("type", "")) if isinstance(ipam, dict) else ""
        if kind not in PLUGIN_TYPES:
            if plugin_found is None or not plugin_found(kind):
                close = difflib.get_close_matches(kind, sorted(PLUGIN_TYPES), n=1, cutoff=0.6)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                findings.append(
                    Finding(source, f"{where}.type", ERROR, f"no plugin `{kind}`{hint}")
                )
            continue  # a plugin pycni does not ship: its keys are its own
        schema = _Schema()
        schema.keys["ipam"] = {"type"}  # libcni and skel read it whatever the loaders reach
        loader = loaders.get(kind)
        if loader is not None:
            err = _run(loader, config, schema)
            if err is not None:
                findings.append(Finding(source, where, ERROR, f"ADD would fail: {err.msg}"))
        if ipam_type in loaders and ipam_type in _IPAM_TYPES:
            err = _run(loaders[ipam_type], config, schema)
            if err is not None:
                findings.append(
                    Finding(source, f"{where}.ipam", ERROR, f"ADD would fail: {err.msg}")
                )
        elif ipam_type and ipam_type not in PLUGIN_TYPES:
            if plugin_found is None or not plugin_found(ipam_type):
                findings.append(
                    Finding(source, f"{where}.ipam.type", ERROR, f"no IPAM plugin `{ipam_type}`")
                )
            schema.keys.pop("ipam", None)  # its keys are that plugin's own
        findings.extend(_unknown_keys(config, schema, where, source))
        findings.extend(_capabilities(config, kind, ipam_type, where, source))
    return [
        Finding(f.source, _printable(f.path), f.severity, _printable(f.message)) for f in findings
    ]
