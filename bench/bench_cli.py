#!/usr/bin/env python3
"""`pycni add`/`del` from the command line against the Go plugins run like cnitool would.

There is no Go cnitool to be had here (Debian ships none; building one needs Go and libcni's
source, neither installed), so the Go side is the Go reference plugins (/usr/lib/cni) exec'd
by a minimal runtime: pycni's libcni (CNIConfig) inside this already-running process, which
does what cnitool's libcni does (find, exec in order with prevResult, cache the result) without
a process start of its own. A real cnitool adds one Go process start on top; the row "Go
process start" measures that (a Go plugin's VERSION exec), and the last column adds it.

pycni's side is the whole CLI process, `pycni add NET NETNS` as a user types it (console script,
interpreter start, imports, parsing, and the chain through the warm daemon's forwarders).

Chain: bridge (+ host-local, ipMasq) then portmap, cniVersion 1.0.0, with and without one port
mapping. Each in its own node namespace, interleaved, medians. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
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

from pycni.fast import client  # noqa: E402
from pycni.fast import install as fast_install  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402
from pycni.runtime import CNIConfig, RuntimeConf, conf_list_from_bytes  # noqa: E402

GO_DIR = Path("/usr/lib/cni")
PREFIX = f"pbcli{os.getpid() % 10000}-"
PYCNI = Path(sys.executable).with_name("pycni")


@contextmanager
def inside(path: str) -> Iterator[None]:
    with NetNS.open(path) as ns, ns.entered():
        yield


def conflist(bridge: str, subnet: str, data_dir: Path) -> bytes:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "benchcli",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": True,
                    "ipMasq": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "dataDir": str(data_dir),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
    ).encode()


def mapping(port: int | None) -> dict[str, object]:
    if port is None:
        return {}
    return {"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]}


def go_start_ms(samples: int) -> float:
    """One Go process start and exit: what a cnitool process costs beyond its plugins."""
    times = []
    env = {"CNI_COMMAND": "VERSION"}
    for _ in range(samples):
        start = time.perf_counter()
        subprocess.run([str(GO_DIR / "loopback")], input=b"{}", env=env, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=15, help="pods per row and side")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.stderr.write("needs root\n")
        return 2
    work = Path(tempfile.mkdtemp(prefix="pycni-bench-cli-"))
    go_node = create_netns(PREFIX + "go")
    py_node = create_netns(PREFIX + "py")
    pods = [create_netns(f"{PREFIX}pod{i}") for i in range(args.pods)]
    go_pods = [create_netns(f"{PREFIX}gopod{i}") for i in range(args.pods)]
    sock = str(work / "pycni.sock")
    daemon = None
    try:
        with inside(py_node):
            daemon = subprocess.Popen(
                [sys.executable, "-m", "pycni.cli.main", "daemon", "--socket", sock],
                stderr=subprocess.DEVNULL,
            )
        fast_install.install(work / "bin", form="auto", socket_path=sock, autostart=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client.ping(sock, timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        (work / "net.d").mkdir()
        (work / "net.d" / "10-benchcli.conflist").write_bytes(
            conflist("bcli0", "10.66.0.0/16", work / "ipam")
        )
        go_conf = conf_list_from_bytes(conflist("bcligo0", "10.67.0.0/16", work / "goipam"))
        go = CNIConfig([str(GO_DIR)], cache_dir=str(work / "gocache"))
        env = {
            **os.environ,
            "NETCONFPATH": str(work / "net.d"),
            "CNI_PATH": str(work / "bin"),
            "PYCNI_CACHE_DIR": str(work / "cache"),
        }

        def py_call(verb: str, pod: str, port: int | None) -> float:
            call_env = {**env, "CAP_ARGS": json.dumps(mapping(port))}
            with inside(py_node):
                start = time.perf_counter()
                proc = subprocess.run(
                    [str(PYCNI), verb, "benchcli", pod],
                    env=call_env,
                    capture_output=True,
                )
                elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                raise RuntimeError(f"pycni {verb}: {proc.stderr.decode()}")
            return elapsed

        def go_call(verb: str, pod: str, port: int | None) -> float:
            cid = "cnitool-" + str(abs(hash(pod)))[:20]
            rt = RuntimeConf(cid, pod, "eth0", capability_args=mapping(port))
            with inside(go_node):
                start = time.perf_counter()
                if verb == "add":
                    go.add_network_list(go_conf, rt)
                else:
                    go.del_network_list(go_conf, rt)
                return time.perf_counter() - start

        rows: list[tuple[str, float, float]] = []
        for label, port in (("no port mapping", None), ("1 port mapping", 18080)):
            times: dict[str, list[float]] = {"py add": [], "py del": [], "go add": [], "go del": []}
            for i, (pod, go_pod) in enumerate(zip(pods, go_pods, strict=True)):
                p = None if port is None else port + i
                order = ("py", "go") if i % 2 == 0 else ("go", "py")
                for verb in ("add", "del"):
                    for side in order:
                        if side == "py":
                            times[f"py {verb}"].append(py_call(verb, pod, p))
                        else:
                            times[f"go {verb}"].append(go_call(verb, go_pod, p))
            for verb in ("add", "del"):
                rows.append(
                    (
                        f"`pycni {verb}`, {label}",
                        statistics.median(times[f"go {verb}"]) * 1000,
                        statistics.median(times[f"py {verb}"]) * 1000,
                    )
                )
        start_ms = go_start_ms(20)
        print(f"Go process start (a Go plugin's VERSION exec): {start_ms:.1f} ms\n")
        print("| | Go chain (minimal runtime) | + cnitool start | pycni CLI | ratio |")
        print("|---|---|---|---|---|")
        for name, go_ms, py_ms in rows:
            cnitool_ms = go_ms + start_ms
            print(
                f"| {name} | {go_ms:.1f} ms | {cnitool_ms:.1f} ms | {py_ms:.1f} ms "
                f"| {py_ms / cnitool_ms:.2f}x |"
            )
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(30)
        names = [PREFIX + "go", PREFIX + "py"]
        names += [f"{PREFIX}{kind}{i}" for kind in ("pod", "gopod") for i in range(args.pods)]
        for name in names:
            delete_netns(name)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
