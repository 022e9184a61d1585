#!/usr/bin/env python3
"""Node-wide GC cost with many live pods: `pycni gc --dry-run`, `pycni gc`, host-local's GC.

Not a test. In a private node namespace with a bridge network (bridge + host-local), PODS
pods are ADDed through the runtime (cached); a third of them are then held only by a
process (their /run/netns path removed), as runtimes that keep no named path do.  Nothing
is leaked, so every GC has the whole scan to do and nothing to free.  Timed (median of
ROUNDS, wall clock, each a fresh `pycni` process run in the node namespace):

- ``gc --dry-run``: inspect the node and judge (scan /proc, look into every namespace);
- ``gc``: the same, as it runs for real (it frees nothing here);
- ``host-local GC``: the GC verb with an empty valid list, so every reservation is stale by
  the list and host-local reads every live namespace's addresses before keeping them all.

``--src DIR`` runs the `pycni` commands from another checkout's src/ (e.g. main's), for a
before/after comparison.

    sudo .venv/bin/python bench/bench_gc_scale.py 300
    sudo .venv/bin/python bench/bench_gc_scale.py --src /work/main/src 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns, netns_path  # noqa: E402
from pycni.runtime.api import CNIConfig  # noqa: E402
from pycni.runtime.types import RuntimeConf  # noqa: E402
from pycni.spec.conf import conf_list_from_bytes  # noqa: E402

PREFIX = f"bgcs{os.getpid() % 100000}-"
NET = "bgcs-net"
HOLDER = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def _timed(argv: list[str], env: dict[str, str], node: str, rounds: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(rounds):
        start = time.perf_counter()
        proc = subprocess.run(
            ["nsenter", f"--net={netns_path(node)}", "--", *argv],
            capture_output=True,
            text=True,
            env=env,
            input=None,
            check=False,
        )
        times.append(time.perf_counter() - start)
        out = proc.stdout + proc.stderr
    return statistics.median(times), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pods", type=int, nargs="?", default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", help="run the pycni commands from this src/ dir")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-gc-"))
    plugins, conf_dir, cache, data = (work / d for d in ("bin", "conf", "cache", "data"))
    for d in (plugins, conf_dir, cache, data):
        d.mkdir()
    fast_install.install(plugins, form="inprocess")
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.251.0.0/16"}]], "dataDir": str(data)}
    bridge = {"type": "bridge", "bridge": "bgcs0", "isGateway": True, "ipam": ipam}
    raw = json.dumps({"cniVersion": "1.0.0", "name": NET, "plugins": [bridge]}).encode()
    (conf_dir / "10-bgcs.conflist").write_bytes(raw)
    cni = CNIConfig([str(plugins)], cache_dir=str(cache))
    node = f"{PREFIX}node"
    pods = [f"{PREFIX}pod{i}" for i in range(args.pods)]
    holders: list[subprocess.Popen[str]] = []
    create_netns(node)
    try:
        start = time.perf_counter()
        with NetNS.open(netns_path(node)) as handle, handle.entered():
            for name in pods:
                create_netns(name)
                cni.add_network_list(
                    conf_list_from_bytes(raw),
                    RuntimeConf(container_id=name, netns=netns_path(name), ifname="eth0"),
                )
        print(f"{args.pods} pods added in {time.perf_counter() - start:.1f} s", flush=True)
        for name in pods[::3]:  # held by a process only: found through /proc, not a path
            proc = subprocess.Popen(
                ["nsenter", f"--net={netns_path(name)}", "--", sys.executable, "-c", HOLDER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            holders.append(proc)
            delete_netns(name)

        env = {**os.environ, "NETCONFPATH": str(conf_dir), "CNI_PATH": str(plugins)}
        pycni = [sys.executable, "-m", "pycni.cli.main"]
        if args.src:
            env["PYTHONPATH"] = args.src
        gc = [*pycni, "gc", "--cache-dir", str(cache), "--grace-period", "0"]
        host_local = [
            sys.executable,
            "-c",
            "import sys; from pycni.skel.main import main; sys.exit(main('host-local'))",
        ]
        rows = []
        for label, argv in (("gc --dry-run", [*gc, "--dry-run"]), ("gc", gc)):
            seconds, out = _timed(argv, env, node, args.rounds)
            rows.append((label, seconds, out.strip().splitlines()[-1:] or [""]))
        gc_conf = json.dumps(
            {"cniVersion": "1.1.0", "name": NET, "ipam": ipam, "cni.dev/valid-attachments": []}
        )
        hl_env = {**env, "CNI_COMMAND": "GC", "CNI_PATH": str(plugins)}
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            proc = subprocess.run(
                ["nsenter", f"--net={netns_path(node)}", "--", *host_local],
                input=gc_conf,
                capture_output=True,
                text=True,
                env=hl_env,
                check=False,
            )
            times.append(time.perf_counter() - start)
        kept = len([n for n in os.listdir(data / NET) if n[0].isdigit()])
        rows.append(("host-local GC", statistics.median(times), [f"kept {kept}/{args.pods}"]))
        print(f"{'command':<16} {'median s':>9}  last line")
        for label, seconds, last in rows:
            print(f"{label:<16} {seconds:9.2f}  {last[0][:90]}")
    finally:
        for proc in holders:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        for name in pods:
            delete_netns(name)
        delete_netns(node)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
