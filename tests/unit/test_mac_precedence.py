"""Each plugin takes a MAC request from the same places, in the same order, as its reference.

REFERENCE is the order the v1.9.1 plugins assign their MAC field in (lowest precedence first,
read off their loadConf), and whether a present-but-empty value still counts (tuning's
``args.cni.mac`` is a ``*string``). For every combination of the four sources, the plugin's
own config loading must give what that Go assignment sequence gives; when the v1.9.1 source
archive is present, the table itself is checked against the Go code (differential).
"""

from __future__ import annotations

import itertools
import re
import tarfile
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

from pycni.plugins.main.bridge import plugin as bridge
from pycni.plugins.main.macvlan import plugin as macvlan
from pycni.plugins.main.tap import plugin as tap
from pycni.plugins.meta.tuning import conf as tuning
from pycni.skel import mac
from pycni.skel.base import Request
from tests import references

CONFIG, CNI_ARGS, ARGS, ARGS_EVEN_EMPTY, RUNTIME = (
    "config",
    "CNI_ARGS",
    "args.cni",
    "args.cni even empty",
    "runtimeConfig",
)

# plugin: (its sources in the reference's assignment order, the Go file)
REFERENCE: dict[str, tuple[tuple[str, ...], str]] = {
    "bridge": ((CNI_ARGS, ARGS, RUNTIME), "plugins/main/bridge/bridge.go"),
    "macvlan": ((CONFIG, CNI_ARGS, RUNTIME), "plugins/main/macvlan/macvlan.go"),
    "tap": ((CONFIG, CNI_ARGS, RUNTIME), "plugins/main/tap/tap.go"),
    "tuning": ((CONFIG, CNI_ARGS, RUNTIME, ARGS_EVEN_EMPTY), "plugins/meta/tuning/tuning.go"),
}

# what each source asks for when a case sets it (distinct, so the winner is visible)
VALUE = {
    CONFIG: "02:00:00:00:00:01",
    CNI_ARGS: "02:00:00:00:00:02",
    ARGS: "02:00:00:00:00:03",
    RUNTIME: "02:00:00:00:00:04",
}

NAMED = {
    mac.CONFIG: CONFIG,
    mac.CNI_ARGS: CNI_ARGS,
    mac.ARGS: ARGS,
    mac.ARGS_EVEN_EMPTY: ARGS_EVEN_EMPTY,
    mac.RUNTIME_CONFIG: RUNTIME,
}


def _tap_mac(req: Request) -> str:
    return tap.load_conf(req).mac


LOADERS: dict[str, tuple[Callable[[Request], str], tuple[mac.MacSource, ...], dict[str, Any]]] = {
    "bridge": (lambda r: bridge.load_conf(r).mac, bridge.MAC_ORDER, {}),
    "macvlan": (lambda r: macvlan.load_conf(r).mac, macvlan.MAC_ORDER, {"master": "eth0"}),
    "tap": (_tap_mac, tap.MAC_ORDER, {}),
    "tuning": (lambda r: tuning.parse(r).mac, tuning.MAC_ORDER, {}),
}


def _request(plugin: str, given: dict[str, str]) -> Request:
    """A request setting each source of ``given`` to its value (``""`` kept: present, empty)."""
    config: dict[str, Any] = {"cniVersion": "1.0.0", "name": "n", "type": plugin}
    config.update(LOADERS[plugin][2])
    if CONFIG in given:
        config["mac"] = given[CONFIG]
    if ARGS in given:
        config["args"] = {"cni": {"mac": given[ARGS]}}
    if RUNTIME in given:
        config["runtimeConfig"] = {"mac": given[RUNTIME]}
    env = f"IgnoreUnknown=1;MAC={given[CNI_ARGS]}" if CNI_ARGS in given else ""
    return Request("ADD", "c1", "/run/netns/x", "eth0", env, [], config, b"", {})


def _go(plugin: str, given: dict[str, str]) -> str:
    """What the reference's assignment sequence leaves in its MAC field."""
    found = ""
    for source in REFERENCE[plugin][0]:
        if source == ARGS_EVEN_EMPTY:
            if ARGS in given:
                found = given[ARGS]
        elif given.get(ARGS if source == ARGS else source, ""):
            found = given[ARGS if source == ARGS else source]
    return found


def _cases() -> list[tuple[str, dict[str, str]]]:
    out = []
    for plugin in REFERENCE:
        for n in range(len(VALUE) + 1):
            for chosen in itertools.combinations(VALUE, n):
                out.append((plugin, {s: VALUE[s] for s in chosen}))
                # the same with args.cni present but empty: only a *string field tells
                if ARGS not in chosen:
                    out.append((plugin, {**{s: VALUE[s] for s in chosen}, ARGS: ""}))
    return out


@pytest.mark.parametrize(("plugin", "given"), _cases(), ids=lambda v: str(v))
def test_the_plugin_takes_the_mac_its_reference_takes(plugin: str, given: dict[str, str]) -> None:
    load = LOADERS[plugin][0]
    assert load(_request(plugin, given)) == _go(plugin, given)


@pytest.mark.parametrize("plugin", sorted(REFERENCE))
def test_the_order_named_at_the_call_site_is_the_reference_order(plugin: str) -> None:
    named = tuple(NAMED[s] for s in reversed(LOADERS[plugin][1]))
    assert named == REFERENCE[plugin][0]


def test_a_malformed_lower_source_is_an_error_even_when_a_higher_one_is_set() -> None:
    req = _request("bridge", {RUNTIME: VALUE[RUNTIME]})
    req = Request(req.command, "c1", req.netns, "eth0", "MAC", [], req.config, b"", {})
    with pytest.raises(Exception, match='ARGS: invalid pair "MAC"'):
        bridge.load_conf(req)


def test_no_source_set_is_no_mac() -> None:
    req = _request("tuning", {})
    assert mac.requested_mac(req, tuning.MAC_ORDER) == ""


# --- the table against the Go code (v1.9.1 source archive) ---------------------------------------

_ASSIGNMENTS = (  # a MAC assignment in loadConf and the source it takes
    (re.compile(r"= string\(e\.MAC\)"), CNI_ARGS),
    (re.compile(r"if mac := n\.Args\.Cni\.Mac; mac != \"\""), ARGS),
    (re.compile(r"= \*conf\.Args\.A\.Mac"), ARGS_EVEN_EMPTY),
    (re.compile(r"= (?:n|conf)\.RuntimeConfig\.Mac"), RUNTIME),
)
# an exported top-level field with the "mac" JSON key: the config's own key is read
_CONFIG_FIELD = re.compile(r"^\tMac\s+string\s+`json:\"mac,omitempty\"`", re.M)


@cache
def _go_sources() -> dict[str, str]:
    folder = references.upstream_source()
    if folder is None:
        pytest.skip("v1.9.1 reference not present (../shared/upstream or PYCNI_UPSTREAM)")
    wanted = {path for _, path in REFERENCE.values()}
    out: dict[str, str] = {}
    with tarfile.open(folder / "plugins-v1.9.1-src.tar.xz", "r:xz") as archive:
        for member in archive:
            tail = member.name.split("/", 1)[-1]
            if tail in wanted and (handle := archive.extractfile(member)) is not None:
                out[tail] = handle.read().decode()
    assert set(out) == wanted
    return out


@pytest.mark.parametrize("plugin", sorted(REFERENCE))
def test_the_reference_table_is_the_go_code(plugin: str) -> None:
    order, path = REFERENCE[plugin]
    source = _go_sources()[path]
    runtime_config = re.search(r"RuntimeConfig\s+struct", source)
    assert runtime_config is not None
    struct = source[source.index(" struct {") : runtime_config.start()]
    found = [CONFIG] if _CONFIG_FIELD.search(struct) else []
    hits = sorted(
        (m.start(), name) for pattern, name in _ASSIGNMENTS for m in pattern.finditer(source)
    )
    found += [name for _, name in hits]
    assert tuple(found) == order
