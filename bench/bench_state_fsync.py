#!/usr/bin/env python3
"""What crash-safe state costs per ADD: host-local ADD+DEL and one result-cache write.

Runs host-local in-process (``pycni.skel.run.run``, no namespace needed: IPAM only touches
its store) with the store on a disk-backed directory and on tmpfs, then times the runtime's
cache write (``pycni.runtime.cache.write_cache``) on both.  Prints p50/p90 in milliseconds.

    .venv/bin/python bench/bench_state_fsync.py [--n 300] [--disk-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.runtime import cache  # noqa: E402
from pycni.runtime.types import RuntimeConf  # noqa: E402
from pycni.skel import run as skel  # noqa: E402
from pycni.spec.result import Result  # noqa: E402


def _pct(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return f"p50 {statistics.median(ordered) * 1000:6.2f} ms  p90 {p90 * 1000:6.2f} ms"


def host_local(base: str, n: int) -> tuple[list[float], list[float]]:
    conf = json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "fsbench",
            "type": "bridge",
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.250.0.0/16"}]],
                "dataDir": base,
            },
        }
    ).encode()
    adds: list[float] = []
    dels: list[float] = []
    for i in range(n):
        env = {
            "CNI_CONTAINERID": f"c{i}",
            "CNI_NETNS": "/run/netns/pycni-fsbench-none",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": "/nonexistent",
        }
        start = time.perf_counter()
        out = skel.run("host-local", {**env, "CNI_COMMAND": "ADD"}, conf)
        adds.append(time.perf_counter() - start)
        assert out.exit_code == 0, out.stdout
        start = time.perf_counter()
        out = skel.run("host-local", {**env, "CNI_COMMAND": "DEL"}, conf)
        dels.append(time.perf_counter() - start)
        assert out.exit_code == 0, out.stdout
    return adds, dels


def cache_writes(base: str, n: int) -> list[float]:
    result = Result.from_dict(
        {"cniVersion": "1.0.0", "ips": [{"address": "10.250.0.2/16", "gateway": "10.250.0.1"}]}
    )
    samples: list[float] = []
    for i in range(n):
        rt = RuntimeConf(container_id=f"c{i}", netns="/run/netns/x", ifname="eth0")
        start = time.perf_counter()
        cache.write_cache(base, result, b'{"name":"fsbench"}', "fsbench", rt)
        samples.append(time.perf_counter() - start)
        cache.delete_cache(base, "fsbench", rt)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--disk-dir", default="/var/tmp", help="a directory on a real disk")
    parser.add_argument("--tmpfs-dir", default="/dev/shm", help="a directory on tmpfs")
    args = parser.parse_args()
    for label, parent in (("disk", args.disk_dir), ("tmpfs", args.tmpfs_dir)):
        with tempfile.TemporaryDirectory(prefix="pycni-fsbench-", dir=parent) as base:
            adds, dels = host_local(base, args.n)
            writes = cache_writes(base, args.n)
        print(f"{label:5}  host-local ADD  {_pct(adds)}")
        print(f"{label:5}  host-local DEL  {_pct(dels)}")
        print(f"{label:5}  cache write     {_pct(writes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
