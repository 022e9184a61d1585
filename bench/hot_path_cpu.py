#!/usr/bin/env python3
"""CPU time of bridge + host-local ADD and DEL, in-process (skel.run), in a private node namespace.

Not a test. Wall time on a shared 2-CPU machine mostly measures the other work on it; the
CPU time this process spends per ADD/DEL (Python plus the kernel work done in its syscalls)
is what a change to pycni's own code moves. Compare two trees by running it with each on
PYTHONPATH, interleaved, several rounds:

    sudo PYTHONPATH=src .venv/bin/python bench/hot_path_cpu.py 40 new
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pycni.entrypoints import install as fast_install
from pycni.net.ns import NetNS
from pycni.skel import run as skel


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    tag = sys.argv[2] if len(sys.argv) > 2 else "pycni"
    node = f"hotcpu-{os.getpid()}"
    data = tempfile.mkdtemp(prefix="hotcpu-data-")
    bindir = Path(tempfile.mkdtemp(prefix="hotcpu-bin-"))
    fast_install.install(bindir, form="inprocess")
    subprocess.run(["ip", "netns", "add", node], check=True)
    pods = [f"{node}-p{i}" for i in range(count)]
    adds: list[float] = []
    dels: list[float] = []
    conf = json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "hotcpu",
            "type": "bridge",
            "bridge": "cnihot0",
            "isGateway": True,
            "ipam": {"type": "host-local", "subnet": "10.123.0.0/16", "dataDir": data},
        }
    ).encode()
    try:
        for pod in pods:
            subprocess.run(["ip", "netns", "add", pod], check=True)
        with NetNS.open(f"/run/netns/{node}") as ns, ns.entered():
            for command, times in (("ADD", adds), ("DEL", dels)):
                for i, pod in enumerate(pods):
                    env = {
                        "CNI_COMMAND": command,
                        "CNI_CONTAINERID": f"c{i}",
                        "CNI_NETNS": f"/run/netns/{pod}",
                        "CNI_IFNAME": "eth0",
                        "CNI_PATH": str(bindir),
                    }
                    start = time.process_time()
                    out = skel.run("bridge", env, conf)
                    times.append(time.process_time() - start)
                    if out.exit_code != 0:
                        raise SystemExit(out.stdout.decode())
    finally:
        for name in [*pods, node]:
            subprocess.run(["ip", "netns", "delete", name], check=False)
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(bindir, ignore_errors=True)
    add_ms, del_ms = statistics.median(adds) * 1000, statistics.median(dels) * 1000
    print(f"{tag}: CPU per ADD p50 {add_ms:.2f} ms, per DEL p50 {del_ms:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
