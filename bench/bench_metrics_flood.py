#!/usr/bin/env python3
"""ADD latency through the warm daemon, with and without processes scraping /metrics in a loop.

A scrape renders the whole registry on the daemon's metrics thread, which shares the
interpreter (and its lock) with the workers running calls: scrapers fetching as fast as they
can used to take CPU from every call. This measures what a runtime sees: each ADD is the
loopback then bridge (+ host-local) entry points exec'd under ``nsenter --net=NODE`` (as a
runtime calls plugins from the node's namespace), timed from the nsenter start to its exit;
each pod is deleted (untimed) before the next. The daemon runs with ``--metrics
127.0.0.1:PORT``; the scrapers are separate processes (HTTP GET /metrics, new connection each).

Usage: bench/bench_metrics_flood.py [--pods 10] [--blocks 8] [--scrapers 8]. Quiet and
flooded blocks alternate (the scrapers SIGSTOPped, then SIGCONTed). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.daemon import client  # noqa: E402
from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.playground import create_netns, delete_netns, netns_path  # noqa: E402

PREFIX = f"pbmf{os.getpid() % 10000}-"
BRIDGE = f"bmf{os.getpid() % 10000}"

SCRAPER = """
import socket, sys, time
port = int(sys.argv[1]); n = 0
while True:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.0\\r\\nHost: bench\\r\\n\\r\\n")
    while s.recv(65536):
        pass
    s.close(); n += 1
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (all threads), in seconds."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def config(data_dir: Path) -> dict[str, object]:
    return {
        "cniVersion": "1.0.0",
        "name": "benchmf",
        "plugins": [
            {"type": "loopback"},
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipam": {"type": "host-local", "subnet": "10.93.0.0/16", "dataDir": str(data_dir)},
            },
        ],
    }


def run_chain(
    bindir: Path, node: str, command: str, conf: dict[str, object], cid: str, pod: str
) -> None:
    """The chain as a runtime runs it: each plugin exec'd with the previous result."""
    plugins = conf["plugins"]
    assert isinstance(plugins, list)
    order = plugins if command == "ADD" else list(reversed(plugins))
    prev: object = None
    for plugin in order:
        net = {"cniVersion": conf["cniVersion"], "name": conf["name"], **plugin}
        if prev is not None and command == "ADD":
            net["prevResult"] = prev
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command,
            "CNI_CONTAINERID": cid, "CNI_NETNS": netns_path(pod), "CNI_IFNAME": "eth0",
            "CNI_PATH": str(bindir),
        }  # fmt: skip
        proc = subprocess.run(
            ["nsenter", f"--net={netns_path(node)}", "--", str(bindir / plugin["type"])],
            input=json.dumps(net).encode(), env=env, capture_output=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{plugin['type']} {command}: {proc.stdout!r} {proc.stderr!r}")
        if command == "ADD":
            prev = json.loads(proc.stdout)


def measure(bindir: Path, node: str, conf: dict[str, object], pods: int, tag: str) -> list[float]:
    times = []
    for i in range(pods):
        pod = f"{PREFIX}{tag}{i}"
        create_netns(pod)
        try:
            start = time.perf_counter()
            run_chain(bindir, node, "ADD", conf, f"{tag}{i}", pod)
            times.append((time.perf_counter() - start) * 1000)
            run_chain(bindir, node, "DEL", conf, f"{tag}{i}", pod)
        finally:
            delete_netns(pod)
    return times


def row(label: str, times: list[float]) -> str:
    q = statistics.quantiles(times, n=10)
    return f"| {label} | {len(times)} | {statistics.median(times):.1f} | {q[8]:.1f} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=10, help="ADDs per block")
    parser.add_argument("--blocks", type=int, default=8, help="quiet/flooded block pairs")
    parser.add_argument("--scrapers", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pycni-bmf"))
    node = f"{PREFIX}node"
    sock = str(work / "run" / "d.sock")
    bindir = work / "bin"
    names = ["loopback", "bridge", "host-local"]
    fast_install.install(bindir, socket_path=sock, form="c", names=names)
    port = free_port()
    create_netns(node)
    daemon = subprocess.Popen(
        ["nsenter", f"--net={netns_path(node)}", "--", sys.executable, "-m",
         "pycni.cli.daemon_cmd", "--socket", sock, "--workers", "4",
         "--metrics", f"127.0.0.1:{port}", "--log-level", "WARNING"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    scrapers: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client.ping(sock)
                break
            except (client.DaemonUnavailable, OSError):
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError("the daemon did not start") from None
                time.sleep(0.1)
        conf = config(work / "ipam")
        measure(bindir, node, conf, 5, "warm")  # first calls warm caches
        scrape = ["nsenter", f"--net={netns_path(node)}", "--", sys.executable, "-c", SCRAPER]
        scrapers = [subprocess.Popen([*scrape, str(port)]) for _ in range(args.scrapers)]
        quiet: list[float] = []
        flooded: list[float] = []
        cpu = {"quiet": [0.0, 0.0, 0.0], "flood": [0.0, 0.0, 0.0]}  # daemon, scrapers, wall
        everyone = [p.pid for p in scrapers]

        def timed(phase: str, tag: str) -> list[float]:
            before = (cpu_seconds([daemon.pid]), cpu_seconds(everyone), time.monotonic())
            times = measure(bindir, node, conf, args.pods, tag)
            after = (cpu_seconds([daemon.pid]), cpu_seconds(everyone), time.monotonic())
            for i in range(3):
                cpu[phase][i] += after[i] - before[i]
            return times

        # Interleaved blocks (the scrapers stopped, then let go) so that the load of whatever
        # else runs on the machine falls on both alike.
        for block in range(args.blocks):
            for proc in scrapers:
                proc.send_signal(signal.SIGSTOP)
            quiet += timed("quiet", f"q{block}-")
            for proc in scrapers:
                proc.send_signal(signal.SIGCONT)
            time.sleep(0.5)  # looping again
            flooded += timed("flood", f"f{block}-")
        print("| ADD (loopback + bridge/host-local) through the daemon | ADDs | p50 ms | p90 ms |")
        print("|---|---|---|---|")
        print(row("no scraper", quiet))
        print(row(f"{args.scrapers} processes scraping /metrics in a loop", flooded))
        for phase, (d, sc, wall) in cpu.items():
            share = f"daemon CPU {d / wall * 100:.0f} %, scrapers' CPU {sc / wall * 100:.0f} %"
            print(f"\n{phase}: {share}")
        p50 = statistics.median(flooded) / statistics.median(quiet) - 1
        print(f"\np50 change under the flood: {p50 * 100:+.0f} %")
    finally:
        for proc in scrapers:
            proc.kill()
            proc.wait()
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        subprocess.run(["ip", "-n", node, "link", "del", BRIDGE], capture_output=True, check=False)
        delete_netns(node)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
