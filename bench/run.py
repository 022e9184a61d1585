#!/usr/bin/env python3
"""`make bench`: pycni vs the Go reference plugins, measured in the same run, interleaved.

Each implementation gets its own fresh node namespace; a pod is a namespace attached by exec'ing
loopback, then bridge (+ host-local) and portmap, the way a runtime does. Rows:
  1. ADD and DEL p50/p90 over N sequential pods, with and without one port mapping
  2. ADD p50 at pods 1-10 vs 490-500 (one port mapping each)
  3. wall time of 50 pods, 10 in parallel, ADD and DEL
  4. peak RSS of one entry-point process and of the daemon; the cost of one VERSION exec
The table (with pycni / reference ratios) is printed and written to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import scale_curve  # noqa: E402

from pycni.daemon import client as fast_client  # noqa: E402
from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402

GO_DIR = Path("/usr/lib/cni")
PREFIX = f"pbench{os.getpid() % 10000}-"


@contextmanager
def inside(path: str) -> Iterator[None]:
    with NetNS.open(path) as ns, ns.entered():
        yield


@dataclass
class Impl:
    """One implementation under test: where its plugins are and its node namespace."""

    label: str
    plugin_dir: Path
    node: str = ""
    data_dir: Path = Path()
    pods: dict[str, str] = field(default_factory=dict)
    results: dict[str, dict[str, object]] = field(default_factory=dict)


def exec_plugin(
    impl: Impl,
    plugin: str,
    command: str,
    conf: dict[str, object],
    cid: str,
    netns: str,
    ifname: str,
) -> dict[str, object] | None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": str(impl.plugin_dir),
        "CNI_ARGS": "",
    }
    proc = subprocess.run(
        [str(impl.plugin_dir / plugin)],
        input=json.dumps(conf).encode(),
        env=env,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{impl.label} {plugin} {command} failed: {proc.stdout!r} {proc.stderr!r}"
        )
    if command == "ADD":
        data = json.loads(proc.stdout)
        assert isinstance(data, dict)
        return data
    return None


def confs(
    impl: Impl, mapping_port: int | None, masq: bool = False
) -> tuple[dict[str, object], ...]:
    base = {"cniVersion": "1.0.0", "name": "benchnet"}
    lo = {**base, "name": "benchlo", "type": "loopback"}
    bridge = {
        **base,
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": masq,
        "ipam": {
            "type": "host-local",
            "dataDir": str(impl.data_dir),
            "ranges": [[{"subnet": "10.99.0.0/16"}]],
        },
    }
    portmap: dict[str, object] = {**base, "type": "portmap", "capabilities": {"portMappings": True}}
    if mapping_port is not None:
        portmap["runtimeConfig"] = {
            "portMappings": [{"hostPort": mapping_port, "containerPort": 80, "protocol": "tcp"}]
        }
    return lo, bridge, portmap


def pod_add(impl: Impl, cid: str, netns: str, port: int | None, masq: bool = False) -> float:
    lo, bridge, portmap = confs(impl, port, masq)
    start = time.perf_counter()
    exec_plugin(impl, "loopback", "ADD", lo, cid, netns, "lo")
    result = exec_plugin(impl, "bridge", "ADD", bridge, cid, netns, "eth0")
    if port is not None:
        exec_plugin(impl, "portmap", "ADD", {**portmap, "prevResult": result}, cid, netns, "eth0")
    elapsed = time.perf_counter() - start
    assert result is not None
    impl.results[cid] = result
    return elapsed


def pod_del(impl: Impl, cid: str, netns: str, port: int | None, masq: bool = False) -> float:
    lo, bridge, portmap = confs(impl, port, masq)
    prev = impl.results.pop(cid)
    start = time.perf_counter()
    if port is not None:
        exec_plugin(impl, "portmap", "DEL", {**portmap, "prevResult": prev}, cid, netns, "eth0")
    exec_plugin(impl, "bridge", "DEL", {**bridge, "prevResult": prev}, cid, netns, "eth0")
    exec_plugin(impl, "loopback", "DEL", lo, cid, netns, "lo")
    return time.perf_counter() - start


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


class DaemonProc:
    """The bench's pycni daemon: started, restarted (as after an upgrade or a crash), stopped.
    BENCH_SETTLE=seconds waits that long after it answers (default 0: the first call comes at
    once, as a runtime's would)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it; the seconds until its socket answers."""
        argv = [str(ROOT / ".venv/bin/pycni"), "daemon", "--socket", self.socket_path]
        start = time.perf_counter()
        self.proc = subprocess.Popen([*argv, "--log-level", "WARNING"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                fast_client.stats(self.socket_path)
                break
            except (OSError, fast_client.DaemonUnavailable):
                time.sleep(0.01)
        took = time.perf_counter() - start
        time.sleep(float(os.environ.get("BENCH_SETTLE", "0")))
        return took

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.proc = None

    def restart(self) -> float:
        self.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        return self.start()


def load_average() -> str:
    return "{} {} {}".format(*(f"{x:.2f}" for x in os.getloadavg()))


class Bench:
    def __init__(self, impls: list[Impl], work: Path, daemon: DaemonProc | None = None) -> None:
        self.impls = impls
        self.work = work
        self.daemon = daemon
        self.rows: list[tuple[str, dict[str, float]]] = []
        self.counter = 0
        self.notes: list[str] = []  # what the scale run measured beside the curve, and the load

    def fresh_nodes(self) -> None:
        for impl in self.impls:
            if impl.node:
                delete_netns(impl.node)
            self.counter += 1
            impl.node = f"{PREFIX}n{self.counter}"
            create_netns(impl.node)
            impl.data_dir = self.work / impl.node
            impl.data_dir.mkdir()

    def new_pod(self, impl: Impl) -> tuple[str, str]:
        self.counter += 1
        name = f"{PREFIX}p{self.counter}"
        path = create_netns(name)
        cid = f"bench{self.counter}"
        impl.pods[cid] = name
        return cid, path

    def drop_pods(self, impl: Impl) -> None:
        for name in impl.pods.values():
            delete_netns(name)
        impl.pods.clear()

    def warm_up(self) -> None:
        """Two pods per implementation, not measured: page cache, daemon caches, first nft use."""
        self.fresh_nodes()
        for impl in self.impls:
            for k in range(2):
                cid, path = self.new_pod(impl)
                with inside(f"/run/netns/{impl.node}"):
                    pod_add(impl, cid, path, 50000 + k)
                    pod_del(impl, cid, path, 50000 + k)
            self.drop_pods(impl)

    def sequential(self, n: int, with_port: bool) -> None:
        self.fresh_nodes()
        adds: dict[str, list[float]] = {i.label: [] for i in self.impls}
        dels: dict[str, list[float]] = {i.label: [] for i in self.impls}
        pods: dict[str, list[tuple[str, str, int | None]]] = {i.label: [] for i in self.impls}
        for k in range(n):
            for impl in self.impls:
                cid, path = self.new_pod(impl)
                port = 20000 + k if with_port else None
                with inside(f"/run/netns/{impl.node}"):
                    adds[impl.label].append(pod_add(impl, cid, path, port))
                pods[impl.label].append((cid, path, port))
        for k in range(n):
            for impl in self.impls:
                cid, path, port = pods[impl.label][k]
                with inside(f"/run/netns/{impl.node}"):
                    dels[impl.label].append(pod_del(impl, cid, path, port))
        for impl in self.impls:
            self.drop_pods(impl)
        tag = "1 port mapping" if with_port else "no port mapping"
        for q, name in ((0.5, "p50"), (0.9, "p90")):
            self.rows.append(
                (f"ADD {name}, {tag} (ms)", {i.label: p(adds[i.label], q) for i in self.impls})
            )
        for q, name in ((0.5, "p50"), (0.9, "p90")):
            self.rows.append(
                (f"DEL {name}, {tag} (ms)", {i.label: p(dels[i.label], q) for i in self.impls})
            )

    def scale(self, total: int, total_go: int, plot_path: Path, burst: int = 100) -> str:
        """ADD/DEL latency against the pod count (see scale_curve.py): pycni with the daemon
        and the kernel floors to ``total`` pods, the Go chain to ``total_go``. The daemon is
        restarted before the last 10 ADDs (the first call after it is timed), and before the
        DEL curve reaches ``total - burst`` pods, ``burst`` ADDs arrive at once and are then
        deleted at once (p99 and the daemon's peak RSS). Adds the table rows, writes the plot
        and returns the scale section's table."""
        self.fresh_nodes()
        floors: list[tuple[scale_curve.KernelFloor, str, dict[int, str]]] = []
        for pycni_port in (False, True):
            self.counter += 1
            node = f"{PREFIX}floor{self.counter}"
            create_netns(node)
            floor = scale_curve.KernelFloor(f"/run/netns/{node}", pycni_port=pycni_port)
            floor.setup()
            floors.append((floor, node, {}))
        runners: list[scale_curve.Runner] = []
        curves: list[scale_curve.Curve] = []
        for impl in self.impls:
            limit = total_go if impl.label == "go" else total
            if limit <= 0:
                continue
            curve = scale_curve.Curve(impl.label)
            cids: dict[int, tuple[str, str]] = {}

            def add(k: int, impl: Impl = impl, cids: dict[int, tuple[str, str]] = cids) -> float:
                cid, path = self.new_pod(impl)
                cids[k] = (cid, path)
                with inside(f"/run/netns/{impl.node}"):
                    return pod_add(impl, cid, path, 30000 + k, masq=True) * 1000

            def delete(k: int, impl: Impl = impl, cids: dict[int, tuple[str, str]] = cids) -> float:
                cid, path = cids.pop(k)
                with inside(f"/run/netns/{impl.node}"):
                    ms = pod_del(impl, cid, path, 30000 + k, masq=True) * 1000
                delete_netns(impl.pods.pop(cid))
                return ms

            cpu = self._daemon_cpu_ns if impl.label == "pycni-daemon" else children_cpu_ns
            runners.append(scale_curve.Runner(curve, limit, add, delete, cpu))
            curves.append(curve)

        for floor, _node, floor_pods in floors:

            def floor_add(
                k: int, floor: scale_curve.KernelFloor = floor, pods: dict[int, str] = floor_pods
            ) -> float:
                self.counter += 1
                name = f"{PREFIX}f{self.counter}"
                pods[k] = name
                return floor.add(k, create_netns(name))

            def floor_del(
                k: int, floor: scale_curve.KernelFloor = floor, pods: dict[int, str] = floor_pods
            ) -> float:
                name = pods.pop(k)
                ms = floor.delete(f"/run/netns/{name}")
                delete_netns(name)
                return ms

            label = scale_curve.FLOOR_PYCNI if floor.pycni_port else scale_curve.FLOOR
            floor_curve = scale_curve.Curve(label)
            runners.append(
                scale_curve.Runner(floor_curve, total, floor_add, floor_del, time.thread_time_ns)
            )
            curves.append(floor_curve)
        pycni = next((i for i in self.impls if i.label == "pycni-daemon"), None)
        before_add: dict[int, Callable[[], None]] = {}
        before_del: dict[int, Callable[[], None]] = {}
        restart_at = total - scale_curve.BUCKET
        if pycni is not None and self.daemon is not None and restart_at >= scale_curve.BUCKET:
            before_add[restart_at] = lambda: self._restart(restart_at)
        if pycni is not None and self.daemon is not None and burst and total >= 2 * burst:
            before_del[total - burst - 1] = lambda: self.burst(pycni, burst, total - burst)
        self.notes.append(f"load average at the start of the scale run: {load_average()}")
        try:
            scale_curve.measure(
                runners, lambda line: print(line, file=sys.stderr), before_add, before_del
            )
        finally:
            for _floor, node, floor_pods in floors:
                for name in floor_pods.values():
                    delete_netns(name)
                delete_netns(node)
        self.notes.append(f"load average at the end of the scale run: {load_average()}")
        for impl in self.impls:
            self.drop_pods(impl)
            impl.results.clear()
        by_label = {c.label: c for c in curves}
        if pycni is not None and restart_at in range(len(by_label["pycni-daemon"].adds)):
            adds = by_label["pycni-daemon"].adds
            before = scale_curve.statistics.median(
                adds[restart_at - scale_curve.BUCKET : restart_at]
            )
            after = scale_curve.statistics.median(
                adds[restart_at + 1 : restart_at + scale_curve.BUCKET]
            )
            first = adds[restart_at]
            self._put(
                f"first pod ADD after a daemon restart at {restart_at} pods (ms)",
                "pycni-daemon",
                first,
            )
            cpu = by_label["pycni-daemon"].cpu_adds
            cpu_before = scale_curve.statistics.median(
                cpu[restart_at - scale_curve.BUCKET : restart_at]
            )
            self.notes.append(
                f"daemon restarted at {restart_at} pods: first pod ADD {first:.1f} ms "
                f"({cpu[restart_at]:.1f} ms CPU), the 10 before the restart p50 {before:.1f} ms "
                f"({cpu_before:.1f} ms CPU), the 9 after it p50 {after:.1f} ms "
                f"({first / before:.2f}x of the p50 before, "
                f"CPU {cpu[restart_at] / cpu_before:.2f}x)"
            )
        first, last_go, last = 0, total_go - scale_curve.BUCKET, total - scale_curve.BUCKET
        for op in ("ADD", "DEL"):
            for start in sorted({first, last_go, last} - {-scale_curve.BUCKET}):
                row: dict[str, float] = {}
                for impl in self.impls:
                    c = by_label.get(impl.label, scale_curve.Curve(impl.label))
                    if start + scale_curve.BUCKET <= len(c.adds):
                        row[impl.label] = (
                            c.add_bucket(start) if op == "ADD" else c.del_bucket(start)
                        )
                pods = f"{start + 1}-{start + scale_curve.BUCKET}"
                name = f"{op} p50 at pods {pods}, 1 mapping + ipMasq (ms)"
                self.rows.append((name, row))
        scale_curve.plot(
            curves,
            plot_path,
            f"pods on one bridge: pycni (daemon) to {total}, Go chain to {total_go}, "
            f"kernel floors to {total}",
        )
        return (
            scale_curve.table(curves, total)
            + "\n\n"
            + _growth_line(curves)
            + "\n\nCPU ms per call (median of 10 pods): the Go chain's and pycni's entry-point "
            "processes (user + kernel), plus the daemon's threads for pycni; the floors: the "
            "bench thread doing them. The kernel's workers and softirqs outside these are not "
            "counted.\n\n" + scale_curve.cpu_table(curves, total)
        )

    def _daemon_cpu_ns(self) -> int:
        """The daemon's threads' CPU time (schedstat, ns) plus the exec'd entry points'."""
        assert self.daemon is not None
        total = 0
        base = f"/proc/{self.daemon.pid}/task"
        for task in os.listdir(base):
            with contextlib.suppress(OSError, ValueError):
                total += int(Path(f"{base}/{task}/schedstat").read_text().split()[0])
        return total + children_cpu_ns()

    def _restart(self, pods: int) -> None:
        assert self.daemon is not None
        seconds = self.daemon.restart()
        self.notes.append(
            f"daemon restart with {pods} pods on the node: its socket answered after "
            f"{seconds * 1000:.0f} ms (load {load_average()})"
        )

    def burst(self, impl: Impl, n: int, present: int) -> None:
        """``n`` pod ADDs at once (one thread each) onto ``present`` pods, then their DELs at
        once: p50/p99 of each and the daemon's peak RSS (VmHWM, reset before each burst)."""
        assert self.daemon is not None
        pods = [self.new_pod(impl) for _ in range(n)]
        node = f"/run/netns/{impl.node}"

        def add(item: tuple[int, tuple[str, str]]) -> float:
            k, (cid, path) = item
            with inside(node):
                return pod_add(impl, cid, path, 40000 + k, masq=True)

        def delete(item: tuple[int, tuple[str, str]]) -> float:
            k, (cid, path) = item
            with inside(node):
                return pod_del(impl, cid, path, 40000 + k, masq=True)

        load = load_average()
        rss: dict[str, float] = {}
        times: dict[str, list[float]] = {}
        with ThreadPoolExecutor(n) as pool:
            for op, fn in (("ADD", add), ("DEL", delete)):
                reset_hwm(self.daemon.pid)
                rss_before = daemon_rss_kib(self.daemon.pid)
                times[op] = list(pool.map(fn, enumerate(pods)))
                rss[op] = daemon_hwm_kib(self.daemon.pid) / 1024
                self.notes.append(
                    f"{n} concurrent {op}s onto {present} pods: p50 {p(times[op], 0.5):.0f} ms, "
                    f"p99 {p(times[op], 0.99):.0f} ms, max {p(times[op], 1.0):.0f} ms; daemon RSS "
                    f"{rss_before / 1024:.1f} MiB before, peak {rss[op]:.1f} MiB (load {load})"
                )
        for cid, _path in pods:
            delete_netns(impl.pods.pop(cid))
        for op in ("ADD", "DEL"):
            row = f"{n} concurrent {op}s onto {present} pods, p99 (ms)"
            self._put(row, impl.label, p(times[op], 0.99))
        self._put(
            f"daemon peak RSS, {n} concurrent ADDs onto {present} pods (MiB)",
            impl.label,
            max(rss.values()),
        )

    def parallel(self, n: int, width: int) -> None:
        self.fresh_nodes()
        for impl in self.impls:
            pods = [self.new_pod(impl) for _ in range(n)]

            def add(item: tuple[int, tuple[str, str]], impl: Impl = impl) -> None:
                k, (cid, path) = item
                with inside(f"/run/netns/{impl.node}"):
                    pod_add(impl, cid, path, 40000 + k)

            def delete(item: tuple[int, tuple[str, str]], impl: Impl = impl) -> None:
                k, (cid, path) = item
                with inside(f"/run/netns/{impl.node}"):
                    pod_del(impl, cid, path, 40000 + k)

            with ThreadPoolExecutor(width) as pool:
                start = time.perf_counter()
                list(pool.map(add, enumerate(pods)))
                add_wall = time.perf_counter() - start
                start = time.perf_counter()
                list(pool.map(delete, enumerate(pods)))
                del_wall = time.perf_counter() - start
            self.drop_pods(impl)
            self._put(f"{n} pods, {width} in parallel, ADD wall (s)", impl.label, add_wall)
            self._put(f"{n} pods, {width} in parallel, DEL wall (s)", impl.label, del_wall)

    def _put(self, row: str, label: str, value: float) -> None:
        for name, values in self.rows:
            if name == row:
                values[label] = value
                return
        self.rows.append((row, {label: value}))

    def version_exec(self, runs: int = 50) -> None:
        for impl in self.impls:
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                proc = subprocess.Popen(
                    [str(impl.plugin_dir / "bridge")],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env={"CNI_COMMAND": "VERSION"},
                )
                proc.communicate(b'{"cniVersion":"1.0.0"}')
                times.append(time.perf_counter() - start)
            self._put("VERSION exec, p50 (ms)", impl.label, p(times, 0.5))

    def cleanup(self) -> None:
        for impl in self.impls:
            self.drop_pods(impl)
            if impl.node:
                delete_netns(impl.node)


SCALE_TEXT = (
    "Pods are added one after another on one bridge (one port mapping each, `ipMasq` on) and "
    "then deleted newest first; each point is the median of 10 consecutive pods, against the "
    "number of pods already on the node. pycni runs with the daemon (the fast forwarders); the "
    "Go chain is /usr/lib/cni's loopback, bridge + host-local and portmap exec'd the same way "
    "(Go 1.1.1 masquerades with iptables); the kernel floor does the kernel's part of the same "
    "pod in-process and nothing else: a veth with its peer created in the pod, the host end on "
    "the bridge and up, the pod's address, link up and default route, then the wait until the "
    "bridge port is operationally up, which the bridge plugin must see too (DEL: the pod's link "
    "removed); once the reference's way, once with the host end made as pycni's bridge makes it "
    "(enslaved at creation, IPv6 off before up). The daemon is restarted before the last 10 "
    "ADDs, and 100 ADDs then 100 DELs arrive at once near the top (the notes below the tables). "
    "The floors' growth is the kernel's own; the machine is shared with other work, so single "
    "points are noisy. See bench/scale_curve.py, bench/profile_scale.py (where an ADD's time "
    "goes at 10, 300 and 1000 pods) and bench/profile_primitives.py (each node-side call of an "
    "ADD/DEL timed alone at 10 and 1000 pods: flat, portmap's map elements included, but for "
    "procfs sysctl access, which is the kernel's; what still grows end to end is the kernel's "
    "own work, which the floor shows growing too, and the load of a shared 2-CPU machine)."
)


def _growth_line(curves: list[scale_curve.Curve]) -> str:
    parts = []
    for c in curves:
        add, dele = scale_curve.growth(c)
        parts.append(f"{c.label}: ADD {add:.2f}x, DEL {dele:.2f}x")
    return "Last 10 pods over the first 10 (ADD, DEL): " + "; ".join(parts) + "."


def peak_rss_kib(argv: list[str], stdin: bytes, env: dict[str, str]) -> int:
    """Peak RSS of one process, measured by GNU time (a child forked from this Python would
    report this Python's RSS: the kernel carries the pre-exec high-water mark over)."""
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *argv],
        input=stdin,
        capture_output=True,
        env=env,
        check=False,
    )
    return int(proc.stderr.decode().strip().splitlines()[-1])


def children_cpu_ns() -> int:
    """User + system CPU of every waited-for child process so far (the exec'd plugins)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def daemon_hwm_kib(pid: int) -> int:
    """Peak RSS since start or since :func:`reset_hwm`."""
    return _status_kib(pid, "VmHWM:")


def daemon_rss_kib(pid: int) -> int:
    return _status_kib(pid, "VmRSS:")


def reset_hwm(pid: int) -> None:
    """Reset the process's peak RSS to its current RSS (proc(5): clear_refs, value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def render(rows: list[tuple[str, dict[str, float]]], labels: list[str], ref: str) -> str:
    head = ["measurement", *labels] + [f"{label} / {ref}" for label in labels if label != ref]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, values in rows:
        cells = [name] + [f"{values[label]:.1f}" if label in values else "-" for label in labels]
        for label in labels:
            if label == ref:
                continue
            if label in values and ref in values and values[ref] > 0:
                cells.append(f"{values[label] / values[ref]:.2f}x")
            else:
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=30, help="sequential pods per row (30)")
    parser.add_argument(
        "--scale", type=int, default=1000, help="pods for pycni and the kernel floor (1000)"
    )
    parser.add_argument("--scale-go", type=int, default=500, help="pods for the Go chain (500)")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "benchmarks-scale.png"))
    parser.add_argument(
        "--only-scale", action="store_true", help="only the scale curve (and its plot)"
    )
    parser.add_argument(
        "--burst", type=int, default=100, help="concurrent ADDs near the top of the scale run"
    )
    parser.add_argument("--parallel", type=int, default=50)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="small numbers, to try the bench")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if args.quick:
        args.pods, args.scale, args.scale_go, args.parallel, args.width = 5, 40, 20, 10, 5
        args.burst = 10
    if os.geteuid() != 0:
        print("bench: must run as root", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="pycni-bench-"))
    socket_path = str(work / "pycni.sock")
    inproc_dir, daemon_dir = work / "inprocess", work / "daemon"
    fast_install.install(inproc_dir, form="inprocess")
    report = fast_install.install(daemon_dir, form="auto", socket_path=socket_path)
    daemon = DaemonProc(socket_path)
    try:
        daemon.start()
    except BaseException:
        daemon.stop()
        raise
    impls = [
        Impl("go", GO_DIR),
        Impl("pycni-daemon", daemon_dir),
        Impl("pycni-inprocess", inproc_dir),
    ]
    bench = Bench(impls, work, daemon)
    scale_table = ""
    try:
        print(
            f"bench: entry point form {report.form}; {args.pods} sequential pods", file=sys.stderr
        )
        bench.warm_up()
        if not args.only_scale:
            bench.sequential(args.pods, with_port=False)
            bench.sequential(args.pods, with_port=True)
            print(f"bench: {args.parallel} pods, {args.width} in parallel", file=sys.stderr)
            bench.parallel(args.parallel, args.width)
            bench.version_exec()
        print(f"bench: scale to {args.scale} pods (Go: {args.scale_go})", file=sys.stderr)
        bench.impls = [i for i in impls if i.label != "pycni-inprocess"]
        scale_table = bench.scale(args.scale, args.scale_go, Path(args.plot), args.burst)
        scale_table += "\n\n" + "\n".join(f"- {note}" for note in bench.notes)
        bench.impls = impls
        env = {"CNI_COMMAND": "VERSION"}
        stdin = b'{"cniVersion":"1.0.0"}'
        for impl in impls:
            bench._put(
                "entry-point peak RSS, VERSION (MiB)",
                impl.label,
                peak_rss_kib([str(impl.plugin_dir / "bridge")], stdin, env) / 1024,
            )
        bench._put("daemon peak RSS (MiB)", "pycni-daemon", daemon_hwm_kib(daemon.pid) / 1024)
    finally:
        bench.cleanup()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    labels = [i.label for i in impls]
    table = render(bench.rows, labels, "go")
    print(table)
    go_version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "containernetworking-plugins"],
        capture_output=True,
        text=True,
    ).stdout
    machine = (
        f"{platform.node()}: {os.cpu_count()} CPUs, kernel {platform.release()}, "
        f"Python {platform.python_version()}, Go plugins {GO_DIR} "
        f"({go_version})"
    )
    text = (
        f"# Benchmarks\n\nMeasured by `make bench` ({' '.join(sys.argv[1:]) or 'defaults'}) on "
        f"{time.strftime('%Y-%m-%d')}.\n\nMachine: {machine}; entry-point form: {report.form}.\n\n"
        "Each pod: loopback, then bridge + host-local, then portmap (when mapped), each exec'd "
        "as a runtime does, inside a fresh node namespace per implementation, interleaved. "
        "Times in ms unless noted; ratios are pycni / Go reference (lower is better).\n\n"
        f"{table}\n\n"
        "## Latency against the number of pods\n\n"
        f"![ADD and DEL latency against the pod count]({Path(args.plot).name})\n\n"
        f"{SCALE_TEXT}\n\n{scale_table}\n"
    )
    if args.only_scale:
        print(scale_table)
        print(f"bench: plot written to {args.plot} (--only-scale: {args.out} untouched)")
        return 0
    Path(args.out).write_text(text)
    print(f"bench: written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
