"""The in-process path imports only what a call needs (issue 15, item 3).

Without a daemon every plugin call is a Python start-up, and what it imports is most of its
cost: loopback + bridge/host-local ADD and DEL must not load pyroute2 (the core plugins use
the native rtnetlink client) nor the standard-library modules that only an error, a tool run
or another plugin needs. Each call runs as a runtime runs it (an installed in-process entry
point, real namespaces), under ``python -X importtime``, whose report names every module the
process imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from pycni.entrypoints import install
from tests import harness

pytestmark = pytest.mark.kernel

# Loaded by none of these calls; each was on the path once and costs ms per call.
NOT_ON_THE_PATH = (
    "pyroute2",  # the core plugins talk rtnetlink natively
    "subprocess",  # only an exec'd delegate or an iptables/nft command run needs it
    "logging",  # only a failed undo logs
    "traceback",  # only an internal error formats one
    "hashlib",  # loads OpenSSL; only chain and rule names hash
    "tempfile",  # fsutil creates its temporary files itself
    "shutil",  # only a tool lookup (which) needs it
    "ctypes.util",  # find_library runs ldconfig in a child process
    "decimal",  # only a float in a config is formatted with it
    "pathlib",
    "socket",  # socket.py builds its enums at import; the netlink code uses _socket
    "pycni.spec.conf",  # the runtime's config-list types; a plugin needs only spec.gojson
    "pycni.runtime.exec",  # exec's a delegate; host-local runs in the bridge's process
    "pycni.net.netfilter.nftnl",  # only masquerading (ipMasq) talks to nftables
    "bz2",
    "lzma",
    "dataclasses",  # pycni.record: its classes cost ~25 us to create, a dataclass ~450 us
    "inspect",  # (imported by dataclasses)
    "typing",  # annotations only: TYPE_CHECKING blocks
    "json",  # pycni.spec.jsoncodec uses the C codec; json's package imports re and enum
    "re",  # names and MACs are checked with character sets
    "enum",  # (imported by re)
    "threading",  # locks come from _thread
    "nftables",  # libnftables' binding: only a masquerade scaffold or a tool listing needs it
)

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)


def run_traced(
    entry: Path, command: str, config: dict[str, object], env: dict[str, str]
) -> set[str]:
    """Run ``entry`` (an in-process entry point script) as a runtime would, under -X importtime;
    the modules it imported."""
    proc = subprocess.run(
        [install.interpreter(), "-X", "importtime", "-IS", str(entry)],
        input=json.dumps(config).encode(),
        env={**env, "CNI_COMMAND": command},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"{entry.name} {command}: {proc.stdout!r} {proc.stderr[-3000:]!r}"
    modules = set(_IMPORTED.findall(proc.stderr.decode()))
    assert "pycni.skel.main" in modules  # the report is there: the check below means something
    return modules


def test_loopback_and_bridge_host_local_import_only_what_they_use(
    node: harness.Namespace, pod_factory: object, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    install.install(bindir, form="inprocess", names=["loopback", "bridge", "host-local"])
    pod = pod_factory()  # type: ignore[operator]
    base = {"cniVersion": "1.0.0", "name": "coldnet"}
    loopback = {**base, "type": "loopback"}
    bridge = {
        **base, "type": "bridge", "bridge": "cold0", "isGateway": True, "hairpinMode": True,
        "ipam": {"type": "host-local", "dataDir": str(tmp_path / "ipam"),
                 "ranges": [[{"subnet": "10.97.0.0/24"}]]},
    }  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_CONTAINERID": "cold1", "CNI_NETNS": pod.path, "CNI_PATH": str(bindir),
        "CNI_ARGS": "",
    }  # fmt: skip
    seen: dict[str, set[str]] = {}
    with node.entered():
        seen["loopback ADD"] = run_traced(
            bindir / "loopback", "ADD", loopback, {**env, "CNI_IFNAME": "lo"}
        )
        seen["bridge ADD"] = run_traced(
            bindir / "bridge", "ADD", bridge, {**env, "CNI_IFNAME": "eth0"}
        )
        assert "10.97.0.2/24" in pod.addresses("eth0")  # the calls did their work
        seen["bridge DEL"] = run_traced(
            bindir / "bridge", "DEL", bridge, {**env, "CNI_IFNAME": "eth0"}
        )
        seen["loopback DEL"] = run_traced(
            bindir / "loopback", "DEL", loopback, {**env, "CNI_IFNAME": "lo"}
        )
    assert "eth0" not in pod.links()
    # host-local ran inside bridge's process (delegation to a pycni entry point), not exec'd
    # (the registry's import_module of a plugin.py is not in -X importtime's report; what
    # plugin.py imports with an import statement is)
    assert "pycni.plugins.ipam.host_local.store" in seen["bridge ADD"]
    assert not list((tmp_path / "ipam" / "coldnet").glob("10.97.*"))  # released by the DEL
    for call, modules in seen.items():
        loaded = sorted(
            name for name in modules for heavy in NOT_ON_THE_PATH
            if name == heavy or name.startswith(heavy + ".")
        )  # fmt: skip
        assert not loaded, f"{call} imported {loaded}"
