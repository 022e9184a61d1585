#!/usr/bin/env python3
"""dnsname ADD and DEL latency: the Go dnsname 1.3.1 vs pycni (exec'd in-process entry point and
the daemon's fast forwarder), interleaved in one run.

A node namespace gets a bridge from the Go bridge plugin and N pods; each implementation then
adds all N names (the first ADD starts dnsmasq, later ones SIGHUP it) and deletes them (the
last DEL stops it), with its own XDG_RUNTIME_DIR. Prints p50/p90 in ms of the dnsname call alone.

    sudo .venv/bin/python bench/bench_dnsname.py [--pods 20] [--rounds 3]
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

from pycni.entrypoints import install  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402

GO = Path("/usr/lib/cni")
PREFIX = f"pbdns{os.getpid() % 10000}-"
NET = "benchdns"


def sh(*argv: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv}: {proc.stdout!r} {proc.stderr!r}")
    return proc.stdout


def plugin(node: str, binary: Path, command: str, conf: dict[str, object], cid: str,
           pod: str, extra: dict[str, str]) -> tuple[float, bytes]:  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": f"/run/netns/{pod}",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(binary.parent),
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAME={cid}",
        **extra,
    }
    start = time.perf_counter()
    out = sh("ip", "netns", "exec", node, str(binary), stdin=json.dumps(conf).encode(), env=env)
    return (time.perf_counter() - start) * 1000, out


def kill_dnsmasq(marker: str) -> None:
    """dnsmasq processes this run started (their --conf-file is under ``marker``)."""
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.isdigit() and argv[0].endswith(b"dnsmasq") and marker.encode() in b" ".join(argv):
            os.kill(int(entry), 9)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pycni-bench-dns-"))
    node, pods = f"{PREFIX}node", [f"{PREFIX}pod{i}" for i in range(args.pods)]
    daemon = None
    try:
        for ns in [node, *pods]:
            create_netns(ns)
        install.install(work / "inprocess", form="inprocess")
        sock = str(work / "pycni.sock")
        install.install(work / "daemon", form="auto", socket_path=sock)
        daemon = subprocess.Popen(
            [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", sock,
             "--log-level", "WARNING"]
        )  # fmt: skip
        while not os.path.exists(sock):
            time.sleep(0.05)
        bridge = {
            "cniVersion": "0.4.0", "name": NET, "type": "bridge", "bridge": "pbdns0",
            "isGateway": True,
            "ipam": {"type": "host-local", "dataDir": str(work / "ipam"),
                     "ranges": [[{"subnet": "10.96.0.0/24"}]]},
        }  # fmt: skip
        prev = {}
        for pod in pods:
            _, out = plugin(node, GO / "bridge", "ADD", bridge, pod, pod, {})
            prev[pod] = json.loads(out)
        impls = {
            "Go dnsname": GO / "dnsname",
            "pycni in-process": work / "inprocess" / "dnsname",
            "pycni daemon": work / "daemon" / "dnsname",
        }
        times: dict[str, dict[str, list[float]]] = {k: {"ADD": [], "DEL": []} for k in impls}
        for r in range(args.rounds):
            for label, binary in impls.items():
                extra = {"XDG_RUNTIME_DIR": str(work / f"xdg{r}-{binary.parent.name}")}
                for command in ("ADD", "DEL"):
                    for pod in pods:
                        conf = {"cniVersion": "0.4.0", "name": NET, "type": "dnsname",
                                "domainName": "dns.podman", "prevResult": prev[pod]}  # fmt: skip
                        ms, _ = plugin(node, binary, command, conf, pod, pod, extra)
                        times[label][command].append(ms)
        print(f"dnsname, {args.pods} pods x {args.rounds} rounds (ms)")
        for label, by_cmd in times.items():
            row = "  ".join(
                f"{cmd} p50 {statistics.median(v):6.1f} p90 "
                f"{statistics.quantiles(v, n=10)[-1]:6.1f}"
                for cmd, v in by_cmd.items()
            )
            print(f"  {label:18} {row}")
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=30)
        kill_dnsmasq(str(work))
        for ns in [node, *pods]:
            delete_netns(ns)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
