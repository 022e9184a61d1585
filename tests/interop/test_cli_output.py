"""`pycni add` prints what the Go cnitool prints, for every result version.

The Go plugins print their result with the same ``MarshalIndent(result, "", "    ")`` that
cnitool's ``result.Print()`` uses, from the same typed structs, so for 0.x results the last Go
plugin's own stdout is cnitool's output byte for byte. For 1.x results cnitool (libcni v1.2.0
and later, commit d1276f1 "Add Marshal function in Result/NetConf to omit empty value") marshals
through a map: every key sorted and an empty ``dns`` dropped, while the Go 1.1.1 plugins
(vendoring libcni v1.1) still print struct order with ``"dns": {}``.

Each case runs the real CLI (a subprocess, as a user would) in a private node namespace, with
``CNI_PATH`` pointing at wrappers that record each Go plugin's stdout.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Namespace

pytestmark = [pytest.mark.interop, pytest.mark.kernel]

WRAPPER = """#!/bin/sh
out=$({go}/{name}); rc=$?
printf '%s' "$out" > {record}/{name}.$CNI_COMMAND.out
printf '%s' "$out"
exit $rc
"""


def _wrappers(go_dir: Path, directory: Path, record: Path) -> None:
    directory.mkdir()
    for name in ("bridge", "host-local", "portmap"):
        path = directory / name
        path.write_text(WRAPPER.format(go=go_dir, name=name, record=record))
        path.chmod(0o755)


def _conf(version: str, ipam_dir: Path) -> dict[str, Any]:
    bridge = {
        "type": "bridge",
        "bridge": "clitest0",
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.79.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(ipam_dir),
        },
    }
    if version == "0.2.0":  # no chaining before 0.3.0: a single plugin
        return {"cniVersion": version, "name": "clitest", **bridge}
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    return {"cniVersion": version, "name": "clitest", "plugins": [bridge, portmap]}


def _cli(node: Namespace, verb: str, pod: Namespace, env: dict[str, str]) -> str:
    argv = [sys.executable, "-m", "pycni.cli.main", verb, "clitest", pod.path]
    return node.run(*argv, env=env).stdout


def _modern(raw: str) -> str:
    """cnitool ≥ v1.2 on a 1.x result: through a map, so sorted, and no empty dns."""
    data = json.loads(raw)
    if data.get("dns") == {}:
        del data["dns"]
    return json.dumps(data, indent=4, sort_keys=True)


@pytest.mark.parametrize("version", ["0.2.0", "0.3.1", "0.4.0", "1.0.0"])
def test_add_prints_what_cnitool_prints(
    version: str,
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    go_plugin_dir: Path,
    tmp_path: Path,
) -> None:
    pod = pod_factory()
    record = tmp_path / "record"
    record.mkdir()
    _wrappers(go_plugin_dir, tmp_path / "bin", record)
    confdir = tmp_path / "net.d"
    confdir.mkdir()
    suffix = "conf" if version == "0.2.0" else "conflist"
    (confdir / f"10-clitest.{suffix}").write_text(json.dumps(_conf(version, tmp_path / "ipam")))
    env = {
        **os.environ,
        "NETCONFPATH": str(confdir),
        "CNI_PATH": str(tmp_path / "bin"),
        "PYCNI_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.pop("CAP_ARGS", None)
    env.pop("CNI_ARGS", None)
    try:
        printed = _cli(node, "add", pod, env)
        last = "bridge" if version == "0.2.0" else "portmap"
        raw = (record / f"{last}.ADD.out").read_text()
        assert json.loads(raw)["cniVersion"] == version
        if version.startswith("0."):
            assert printed == raw  # byte for byte: order, "dns": {}, indent, no newline
            assert '"dns": {}' in printed
        else:
            assert printed == _modern(raw)
            assert '"dns"' not in printed
        assert not printed.endswith("\n")
    finally:
        assert _cli(node, "del", pod, env) == ""
