"""What the dummy and vrf lane tests share: plugin runs in both entry-point forms, and
snapshots of a namespace that ignore what differs by chance (MACs, indexes, random names)."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import harness

GO_DIR = Path("/usr/lib/cni")  # a fallback on CNI_PATH, after the plugin's own directory
# A key whose value is a MAC, an index or a counter: not part of what must match.
VOLATILE = {"ifindex", "address", "broadcast", "perm_address", "link_index", "link_netnsid"}


@pytest.fixture(scope="session")
def daemon_plugin_dir() -> Iterator[Path]:
    """pycni's entry points forwarding to one warm daemon for the session (the fast path)."""
    from pycni.entrypoints import install

    directory = Path(tempfile.mkdtemp(prefix="pycni-fk-"))
    sock = str(directory / "d.sock")
    install.install(directory / "bin", form="auto", socket_path=sock)
    with harness.running_daemon(sock, "WARNING"):
        yield directory / "bin"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["inprocess", "daemon"])
def pycni_dir(request: pytest.FixtureRequest, plugin_dir: Path) -> Path:
    """pycni's plugins, in-process entry points and then through the daemon."""
    if request.param == "daemon":
        return Path(request.getfixturevalue("daemon_plugin_dir"))
    return plugin_dir


def call(
    node: harness.Namespace,
    plugin: Path,
    command: str,
    conf: dict[str, Any],
    pod: harness.Namespace | str,
    ifname: str = "eth0",
    cid: str = "ctr1",
    env: dict[str, str] | None = None,
) -> harness.PluginRun:
    netns = pod if isinstance(pod, str) else pod.path
    with node.entered():
        return harness.exec_plugin(
            plugin,
            command,
            conf,
            container_id=cid,
            netns=netns,
            ifname=ifname,
            cni_path=f"{plugin.parent}:{GO_DIR}",
            extra_env=env,
        )


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _generated(text: str) -> str:
    """Random host-side names (``veth`` + 8 hex digits) made comparable."""
    return re.sub(r"veth[0-9a-f]{8}", "VETH", text)


def settle(ns: harness.Namespace, timeout: float = 20) -> None:
    """Wait until no IPv6 address is tentative (its local route appears when DAD is done)."""
    deadline = time.monotonic() + timeout
    while ns.run("ip", "-6", "addr", "show", "tentative").stdout.strip():
        assert time.monotonic() < deadline, ns.run("ip", "-6", "addr").stdout
        time.sleep(0.2)


def links(ns: harness.Namespace) -> dict[str, Any]:
    """``ip -d -j link`` by name, without MACs and indexes; masters by name; generated
    names replaced."""
    raw = json.loads(_generated(ns.run("ip", "-d", "-j", "link", "show").stdout))
    assert isinstance(raw, list)
    return {str(link["ifname"]): _scrub(link) for link in raw}


def routes(ns: harness.Namespace) -> list[str]:
    """Every route of every table, both families, one sorted line each, protocols included
    (both implementations add theirs as "proto boot", which `ip` does not print); host
    link-local addresses (MAC-derived) are left out."""
    out = []
    for family in ("-4", "-6"):
        for line in ns.run("ip", family, "route", "show", "table", "all").stdout.splitlines():
            line = _generated(line.strip())
            if re.match(r"(local|anycast|multicast)? ?fe80::[0-9a-f]", line):
                continue
            if line:
                out.append(line)
    return sorted(out)


def normalized_result(data: dict[str, Any]) -> dict[str, Any]:
    """A result without MACs, with generated host names replaced and an empty ``dns``
    dropped (Go 1.1.1 prints ``{}``, current libcni and pycni leave it out:
    docs/spec-results.md)."""
    if data.get("dns") == {}:
        data = {k: v for k, v in data.items() if k != "dns"}
    text = json.dumps(data, sort_keys=True)
    text = re.sub(r'"mac": "[0-9a-f:]+"', '"mac": "MAC"', text)
    return json.loads(_generated(text))  # type: ignore[no-any-return]
