#!/usr/bin/env python3
"""GC from each view a node can be seen from: does it keep the live pod, free the stale ones,
and with what exit code?  Prints the Markdown table of docs/security.md (issue #32).

Views: plain root; under `ip netns exec`; inside a privileged podman container that is the
node; with user nobody holding a mount namespace (no process in it), a user namespace, or a
non-dumpable process of its own.  Per view, two GCs with a zero grace period:

- the GC verb (host-local's, exec'd with ``cni.dev/valid-attachments`` = the live pod; the
  stale pod keeps no cache, so only the verb can free it);
- the node-wide `pycni gc` (the stale pod is cached, its namespace gone).

``--python`` picks the pycni to measure (a venv's interpreter: /work/main/.venv/bin/python
for main); namespaces and pods are made with this tree's test harness.  Run as root.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import harness
from tests.integration.netns_holders import NobodyHolder
from tests.integration.test_gc_container_node import Node

from pycni.cli.cnitool import container_id_for

SUBNET = "10.213.95.0/24"


def _install(python: str, directory: Path) -> None:
    code = (
        f"from pycni.daemon import install; install.install({str(directory)!r}, form='inprocess')"
    )
    subprocess.run([python, "-c", code], check=True)


def _owners(data_dir: Path) -> set[str]:
    store = data_dir / "gcviews"
    return {p.name for p in store.iterdir() if p.name[0].isdigit()} if store.is_dir() else set()


def host_view(python: str, wrapper: list[str], holder: str | None) -> tuple[str, str]:
    """(verb cell, pycni gc cell) for a view on this machine."""
    work = Path(tempfile.mkdtemp(prefix="gcviews-"))
    cni_path, state = work / "bin", harness.State.make(work / "state")
    _install(python, cni_path)
    ipam = {"type": "host-local", "ranges": [[{"subnet": SUBNET}]], "dataDir": str(state.data_dir)}
    plugin = {"type": "bridge", "bridge": "gcviews0", "isGateway": True, "ipam": ipam}
    raw = {"cniVersion": "1.1.0", "name": "gcviews", "plugins": [plugin]}
    (state.conf_dir / "10-gcviews.conflist").write_text(json.dumps(raw))
    node = harness.create_namespace("gcvnode")
    pods = {name: harness.create_namespace(name) for name in ("live", "stale1", "stale2")}
    nobody = NobodyHolder(holder, "10.213.95.250") if holder else None
    env = {"CNI_PATH": str(cni_path), "NETCONFPATH": str(state.conf_dir)}
    pycni = str(Path(python).parent / "pycni")
    try:
        ip = {}
        for name, pod in pods.items():
            argv = [pycni, "add", "--cache-dir", str(state.cache_dir), "gcviews", pod.path]
            out = node.run(*argv, env=env, timeout=120)
            ip[name] = json.loads(out.stdout)["ips"][0]["address"].split("/")[0]
        for cached in state.cache_dir.rglob(f"*{container_id_for(pods['stale2'].path)}*"):
            cached.unlink()  # stale2: a runtime with no cache; only the verb can free it
        pods["stale1"].delete()
        pods["stale2"].delete()
        deadline = time.monotonic() + 30
        while len([n for n in node.links() if n.startswith("veth")]) != 1:
            assert time.monotonic() < deadline, "the stale pods' veths never went"
            time.sleep(0.05)
        conf = {
            "cniVersion": "1.1.0",
            "name": "gcviews",
            "ipam": ipam,
            "cni.dev/valid-attachments": [
                {"containerID": container_id_for(pods["live"].path), "ifname": "eth0"}
            ],
        }
        verb_env = {"CNI_COMMAND": "GC", "CNI_PATH": str(cni_path)}
        view = [part.format(node=node.name) for part in wrapper]
        verb = node.run(
            *view,
            str(cni_path / "host-local"),
            input=json.dumps(conf).encode(),
            env=verb_env,
            check=False,
            timeout=300,
        )
        owners = _owners(state.data_dir)
        verb_cell = _cell(ip["live"] in owners, ip["stale2"] not in owners, _code(verb))
        gc = node.run(
            *view,
            pycni,
            "gc",
            "--cache-dir",
            str(state.cache_dir),
            "--grace-period",
            "0",
            env=env,
            check=False,
            timeout=300,
        )
        owners = _owners(state.data_dir)
        gc_cell = _cell(ip["live"] in owners, ip["stale1"] not in owners, gc.returncode)
        return verb_cell, gc_cell
    finally:
        if nobody:
            nobody.stop()
        for pod in pods.values():
            pod.delete()
        node.delete()


def podman_view(python: str) -> tuple[str, str]:
    """(verb cell, pycni gc cell) inside a privileged podman container node (the scenario
    of tests/integration/test_gc_container_node.py)."""
    node = Node(Path(tempfile.mkdtemp(prefix="gcviews-podman-")) / "podman", python)
    try:
        node.script("setup")
        ip = {pod: node.script("add", pod).stdout.strip() for pod in ("live", "stale2")}
        node.script("forget", "stale2")
        node.run("ip", "netns", "del", "stale2")
        verb = node.script("verb", "live", check=False)
        owners = node.owners()
        verb_cell = _cell(ip["live"] in owners, ip["stale2"] not in owners, _code(verb))
        ip["stale1"] = node.script("add", "stale1").stdout.strip()
        node.run("ip", "netns", "del", "stale1")
        deadline = time.monotonic() + 30
        while len([n for n in node.links() if n.startswith("veth")]) != 1:
            assert time.monotonic() < deadline, "the stale pod's veth never went"
            time.sleep(0.05)
        pycni = str(Path(python).parent / "pycni")
        gc = node.run(
            pycni, "gc", "--cache-dir", "/var/lib/cni", "--grace-period", "0", check=False
        )
        owners = node.owners()
        gc_cell = _cell(ip["live"] in owners, ip["stale1"] not in owners, gc.returncode)
        return verb_cell, gc_cell
    finally:
        node.close()


def _code(proc: subprocess.CompletedProcess[str]) -> str:
    """The exit code, with the CNI error code when there is one on stdout."""
    if proc.returncode == 0:
        return "0"
    try:
        return f"{proc.returncode} (CNI {json.loads(proc.stdout)['code']})"
    except (ValueError, KeyError, TypeError):
        return str(proc.returncode)


def _cell(kept: bool, freed: bool, code: int | str) -> str:
    return f"{'yes' if kept else 'NO'} / {'yes' if freed else 'no'} / {code}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the venv python to measure")
    args = parser.parse_args()
    print("| view | GC verb: live kept / stale freed / exit | `pycni gc`: same |")
    print("|---|---|---|")
    views: list[tuple[str, list[str], str | None]] = [
        ("plain root", [], None),
        ("under `ip netns exec`", ["ip", "netns", "exec", "{node}"], None),
        ("nobody holds a mount ns (no process in it)", [], "mnt"),
        ("nobody holds a user ns", [], "user"),
        ("nobody's non-dumpable process; pid 1 opaque", [], "opaque"),
        ("nobody binds its netns on a path > PATH_MAX", [], "deep"),
    ]
    for label, wrapper, holder in views:
        verb, gc = host_view(args.python, wrapper, holder)
        print(f"| {label} | {verb} | {gc} |", flush=True)
        if label == "under `ip netns exec`":
            verb, gc = podman_view(args.python)
            print(f"| inside a privileged podman container node | {verb} | {gc} |", flush=True)


if __name__ == "__main__":
    main()
