#!/usr/bin/env python3
"""`pycni add`+`del` against cnitool v1.3.0, both driving the same Go v1.9.1 plugins.

The CLI's reference is cnitool v1.3.0 (libcni v1.3.0), from the v1.9.1 archive in
../shared/upstream (or PYCNI_UPSTREAM). Each side is its whole process as a user types it
(`pycni add NET NETNS`: the installed script, its interpreter's start, imports, the chain) in
the same node namespace (entered by this process, so no nsenter is timed), with the CNI netns
path as a runtime passes it. The conflist is bridge (+ host-local) then loopback, cniVersion
1.0.0; each pod is ADDed then DELeted, cnitool and pycni alternating which goes first.

cnitool has no cache-dir option, so the whole run is in a private mount namespace whose /var/lib
is a scratch directory: both sides use the default /var/lib/cni there, and the machine's own is
never touched. ``--pycni`` times another installed `pycni` (e.g. main's venv) for a before/after
in the same run. Prints the medians and their ratio as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests import references  # noqa: E402

from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402

PREFIX = f"pbcli{os.getpid() % 10000}-"
PYCNI = Path(sys.executable).with_name("pycni")
MOUNTED = "PYCNI_BENCH_CLI_MOUNTNS"


@contextmanager
def inside(path: str) -> Iterator[None]:
    with NetNS.open(path) as ns, ns.entered():
        yield


def conflist(data_dir: Path) -> bytes:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "benchcli",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "bcli0",
                    "isGateway": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.66.0.0/16"}]],
                        "dataDir": str(data_dir),
                    },
                },
                {"type": "loopback"},
            ],
        }
    ).encode()


def private_var_lib(work: Path) -> None:
    """Re-exec in a private mount namespace (once) and put a scratch dir over /var/lib."""
    if os.environ.get(MOUNTED) != str(work):
        os.environ[MOUNTED] = str(work)
        os.execvp("unshare", ["unshare", "-m", sys.executable, *sys.argv])
    varlib = work / "varlib"
    (varlib / "cni").mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(varlib), "/var/lib"], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=20, help="ADD+DEL rounds per side")
    parser.add_argument(
        "--pycni", action="append", default=[], help="another pycni script to time as well"
    )
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.stderr.write("needs root\n")
        return 2
    ref = references.reference("v1.9.1")
    if ref is None or ref.cnitool is None:  # not an error: `make bench` runs the rest
        print("skipped: the v1.9.1 reference (cnitool v1.3.0; ../shared/upstream or")
        print("PYCNI_UPSTREAM) is not present")
        return 0
    if args.work is None:
        work = Path(tempfile.mkdtemp(prefix="pycni-bench-cli-"))
        sys.argv += ["--work", str(work)]
    else:
        work = Path(args.work)
    private_var_lib(work)
    drivers = {"cnitool v1.3.0": [str(ref.cnitool)], "pycni": [str(PYCNI)]}
    for other in args.pycni:
        drivers[f"pycni ({other})"] = [other]
    node = create_netns(PREFIX + "node")
    pods = [create_netns(f"{PREFIX}pod{i}") for i in range(args.pods)]
    try:
        (work / "net.d").mkdir()
        (work / "net.d" / "10-benchcli.conflist").write_bytes(conflist(work / "ipam"))
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "NETCONFPATH": str(work / "net.d"),
            "CNI_PATH": str(ref.plugin_dir),
        }

        cpu: dict[str, list[float]] = {name: [] for name in drivers}

        def call(name: str, verb: str, pod: str) -> float:
            argv = drivers[name]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run([*argv, verb, "benchcli", pod], env=env, capture_output=True)
            elapsed = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                raise RuntimeError(f"{argv[0]} {verb}: {proc.stderr.decode()}")
            used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            cpu[name].append(used)
            return elapsed

        times: dict[str, dict[str, list[float]]] = {
            name: {"add": [], "del": [], "add+del": []} for name in drivers
        }
        names = list(drivers)
        with inside(node):
            for name in names:  # warm-up: page cache, the bridge, first imports
                call(name, "add", pods[0])
                call(name, "del", pods[0])
            for i, pod in enumerate(pods):
                order = names[i % len(names) :] + names[: i % len(names)]
                for name in order:
                    add = call(name, "add", pod)
                    delete = call(name, "del", pod)
                    times[name]["add"].append(add)
                    times[name]["del"].append(delete)
                    times[name]["add+del"].append(add + delete)
        by_name = cpu
        base = {k: statistics.median(v) * 1000 for k, v in times["cnitool v1.3.0"].items()}
        base_cpu = statistics.median(by_name["cnitool v1.3.0"]) * 1000
        load = os.getloadavg()[0]
        print(f"Go v1.9.1 plugins ({ref.plugin_dir}), {args.pods} pods, medians, load {load:.1f}")
        print("(CPU: user+sys of the call and the plugins it ran, per call)\n")
        print("| driver | add | del | add+del | ratio (add+del) | CPU per call | CPU ratio |")
        print("|---|---|---|---|---|---|---|")
        for name in names:
            ms = {k: statistics.median(v) * 1000 for k, v in times[name].items()}
            cpu_ms = statistics.median(by_name[name]) * 1000
            print(
                f"| {name} | {ms['add']:.1f} ms | {ms['del']:.1f} ms | {ms['add+del']:.1f} ms "
                f"| {ms['add+del'] / base['add+del']:.2f}x | {cpu_ms:.1f} ms "
                f"| {cpu_ms / base_cpu:.2f}x |"
            )
    finally:
        for name in [PREFIX + "node"] + [f"{PREFIX}pod{i}" for i in range(args.pods)]:
            delete_netns(name)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
