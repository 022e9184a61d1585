#!/usr/bin/env python3
"""Two of issue #37's targets without the whole of ``make bench``: the port-mapping chain's
ADD/DEL against Go, and 100 concurrent ADDs (then DELs) through the daemon.

bench/run.py measures both inside its full run (sequential rows with one port mapping, and a
burst near the top of its 1000-pod scale curve), which takes a long while; this runs the same
Bench steps on their own: ``--pods`` sequential loopback + bridge/host-local + portmap pods,
Go v1.1.1 and pycni through the C entry points and the daemon interleaved, then ``--burst``
pods ADDed at once onto ``--present`` pods and DELeted at once (pycni only; bench/run.py's
burst). Prints the rows as a markdown table; writes nothing else.

    .venv/bin/python bench/portmap_burst.py [--pods 30] [--burst 100] [--present 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from run import GO_DIR, Bench, DaemonProc, Impl, inside, pod_add, render  # noqa: E402

from pycni.entrypoints import install as fast_install  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--present", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pycni-pmb-"))
    socket_path = str(work / "pycni.sock")
    daemon_dir = work / "daemon"
    fast_install.install(daemon_dir, form="auto", socket_path=socket_path)
    daemon = DaemonProc(socket_path)
    daemon.start()
    go, ours = Impl("go", GO_DIR), Impl("pycni-daemon", daemon_dir)
    bench = Bench([go, ours], work, daemon)
    started = time.strftime("%H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    try:
        bench.warm_up()
        bench.sequential(args.pods, with_port=True)
        bench.impls = [ours]
        bench.fresh_nodes()
        for k in range(args.present):
            cid, path = bench.new_pod(ours)
            with inside(f"/run/netns/{ours.node}"):
                pod_add(ours, cid, path, 30000 + k, masq=True)
        bench.burst(ours, args.burst, args.present)
        bench.drop_pods(ours)
    finally:
        bench.impls = [go, ours]
        bench.cleanup()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"run {started}, load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print(render(bench.rows, ["go", "pycni-daemon"], "go"))
    print("\n".join(f"- {note}" for note in bench.notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
